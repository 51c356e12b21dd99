//! Online garbage collection (SPEC.md §7.4): expiry (of tags, volumes,
//! versions and abandoned upload sessions), purge, then mark-and-sweep of
//! manifests, repository links and blob bytes while the registry keeps
//! serving.
//!
//! One pass runs at a time among all replicas sharing the metadata store
//! (the GC lease, [`crate::store::meta::sweeps`]). Marking reads a snapshot and parses
//! manifests without any lock. The sweep re-checks each candidate in one
//! transaction before it goes: a link renewed since (by an upload, or a
//! blob `HEAD` on any replica, `service::links::check_blob`) stays, and so does all
//! of a repository whose manifests or tags changed since the snapshot,
//! since a new manifest may reference what marking found unreferenced
//! (the next pass sees it). Bytes go last, those nothing links any more;
//! requests on other replicas that relied on bytes meanwhile check
//! afterwards (`service::links::settle`), and this replica's own requests wait on
//! [`App::sweep`] while it sweeps. So
//! nothing a client has just seen or stored can disappear under it, and
//! the grace period covers what a push uploads before its manifests.
//!
//! Marking fails closed: a manifest it cannot read or parse stops the
//! pass before anything is swept, since what it references is unknown.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sealvol_spec::api::GcReport;
use sealvol_spec::Sha256Digest;
use sha2::{Digest as _, Sha256};

use crate::error::{Code, RegistryError, Result};
use crate::service::links::{end_dead_pass, replica, HELD_HERE};
use crate::service::manifests::parse_manifest;
use crate::state::app::App;
use crate::store::meta::claims::SameHolder;
use crate::store::meta::gc::{Doomed, RepoModel};
use crate::store::meta::sweeps::{GC_CLAIM, GC_LEASE_SECONDS};

/// What a stored manifest references, from its bytes.
#[derive(Debug, Default, Clone)]
struct Refs {
    blobs: Vec<String>,
    children: Vec<String>,
    /// A view, tree or chunk-shard manifest of a version: kept only while
    /// an index or a tag reaches it. Other untagged manifests are kept, as
    /// distribution keeps them.
    version_part: bool,
}

/// Reads and parses a stored manifest. Marking fails closed: a manifest
/// it cannot read might reference anything, so the pass stops instead of
/// sweeping what it might reference.
async fn refs_of(app: &App, digest: &str, media_type: Option<&str>) -> Result<Refs> {
    let stop = |why: String| {
        RegistryError::internal(format!(
            "garbage collection stopped, nothing was swept: manifest {digest} {why}; \
             restore its bytes or delete the manifest, then collect again"
        ))
    };
    let d: Sha256Digest = digest
        .parse()
        .map_err(|_| stop("has no sha256 digest".into()))?;
    let bytes = match app.blobs.get(&d).await {
        Ok(Some(b)) => b,
        Ok(None) => return Err(stop("is recorded but its bytes are not stored".into())),
        Err(e) => return Err(stop(format!("cannot be read: {e}"))),
    };
    if Sha256Digest(Sha256::digest(&bytes).into()) != d {
        return Err(stop("is stored with bytes of another digest".into()));
    }
    let p = parse_manifest(&bytes, media_type).map_err(|e| stop(format!("does not parse: {e}")))?;
    let version_part = p.children.is_empty()
        && p.annotations
            .as_ref()
            .and_then(|a| a.get(sealvol_spec::oci::ANN_VERSION))
            .is_some();
    Ok(Refs {
        blobs: p.blobs.iter().map(|b| b.to_string()).collect(),
        children: p.children.iter().map(|c| c.to_string()).collect(),
        version_part,
    })
}

/// One pass; only one runs at a time, among all replicas sharing the
/// metadata store (`TOOMANYREQUESTS` while another replica's runs).
pub async fn collect(app: &App, dry_run: bool) -> Result<GcReport> {
    let _one = app.gc_running.lock().await;
    let marked = mark(app, dry_run).await?;
    sweep(app, marked).await
}

/// What marking found, for the sweep.
pub(crate) struct Marked {
    /// Taken by [`mark`], released by [`sweep`].
    lease: Option<HeldLease>,
    started: Instant,
    dry_run: bool,
    old_before: u64,
    report: GcReport,
    model: HashMap<String, RepoModel>,
    doomed: Doomed,
    doomed_hidden: HashSet<(String, String)>,
}

/// Expiry, then marking, with no lock held: what is unreachable and
/// older than the grace period becomes a candidate for the sweep.
pub(crate) async fn mark(app: &App, dry_run: bool) -> Result<Marked> {
    let lease = match HeldLease::take(app).await? {
        Ok(l) => l,
        Err(holder) => {
            return Err(RegistryError::new(
                Code::TooManyRequests,
                format!("garbage collection is running on {holder}; collect again when it ends"),
            ))
        }
    };
    match mark_holding(app, dry_run, &lease).await {
        Ok(m) => Ok(Marked {
            lease: Some(lease),
            ..m
        }),
        Err(e) => {
            lease.release(app).await;
            Err(e)
        }
    }
}

async fn mark_holding(app: &App, dry_run: bool, lease: &HeldLease) -> Result<Marked> {
    let started = Instant::now();
    let now = app.clock.now();
    let (retention, grace) = (
        app.lifetimes.retention_seconds,
        app.lifetimes.gc_grace_seconds,
    );
    let old_before = now.saturating_sub(grace);
    let expired = app.meta(move |m| m.expire(now, retention, dry_run)).await?;
    let report = GcReport {
        dry_run,
        versions_purged: expired.versions,
        tags_expired: expired.tags,
        volumes_expired: expired.volumes,
        ..GcReport::default()
    };

    if !dry_run {
        crate::service::uploads::expire(app).await?;
    }

    // Mark.
    let upload_ttl = app.lifetimes.upload_ttl_seconds;
    let model = app.meta(move |m| m.gc_model(now, upload_ttl)).await?;
    let claimed = app.meta(move |m| m.claimed(now)).await?;
    let mut parsed: HashMap<String, Refs> = HashMap::new();
    for repo in model.values() {
        for d in repo.manifests.keys().chain(repo.hidden.iter()) {
            if !parsed.contains_key(d) {
                if !lease.still_held(app).await? {
                    return Err(lease_lost());
                }
                let media_type = repo.media_types.get(d).map(String::as_str);
                let r = refs_of(app, d, media_type).await?;
                parsed.insert(d.clone(), r);
            }
        }
    }
    let mut doomed = Doomed::default();
    let mut doomed_hidden: HashSet<(String, String)> = HashSet::new();
    for (name, repo) in &model {
        let protected = repo.uploading || claimed.contains(name);
        let mut reachable: HashSet<&String> = HashSet::new();
        let mut stack: Vec<&String> = Vec::new();
        for (d, stored_at) in &repo.manifests {
            let refs = parsed.get(d);
            let root = protected
                || repo.tagged.contains(d)
                || repo.version_indexes.contains(d)
                || *stored_at >= old_before
                || refs.is_none_or(|r| !r.version_part);
            if root {
                stack.push(d);
            }
        }
        for d in &repo.hidden {
            if dry_run && expired.indexes.contains(&(name.clone(), d.clone())) {
                doomed_hidden.insert((name.clone(), d.clone()));
            } else {
                stack.push(d);
            }
        }
        while let Some(d) = stack.pop() {
            if !reachable.insert(d) {
                continue;
            }
            if let Some(r) = parsed.get(d) {
                for c in &r.children {
                    if let Some((k, _)) = repo.manifests.get_key_value(c) {
                        stack.push(k);
                    }
                }
            }
        }
        let mut blobs: HashSet<&String> = HashSet::new();
        for d in &reachable {
            if let Some(r) = parsed.get(*d) {
                blobs.extend(r.blobs.iter());
            }
        }
        for (d, stored_at) in &repo.manifests {
            if !reachable.contains(d) {
                doomed.manifests.push((name.clone(), d.clone(), *stored_at));
            }
        }
        if !protected {
            for (d, linked_at) in &repo.links {
                if !blobs.contains(d) && *linked_at < old_before {
                    doomed.links.push((name.clone(), d.clone()));
                }
            }
        }
    }

    Ok(Marked {
        lease: None,
        started,
        dry_run,
        old_before,
        report,
        model,
        doomed,
        doomed_hidden,
    })
}

/// Removes the candidates that are still unreferenced, under the sweep
/// lock, then the blob bytes nothing links any more; ends the sweep and
/// releases the GC lease however it went.
pub(crate) async fn sweep(app: &App, mut marked: Marked) -> Result<GcReport> {
    let Some(lease) = marked.lease.take() else {
        return Err(RegistryError::internal(
            "garbage collection swept without its lease; collect again",
        ));
    };
    let result = sweep_holding(app, marked, &lease).await;
    if result.is_ok() || matches!(&result, Err((_, true))) {
        // Were this to fail, the lapsing lease ends the sweep for others.
        let token = lease.token().to_string();
        if let Err(e) = app.meta(move |m| m.end_sweep(&token)).await {
            tracing::warn!(error = %e, "could not end the sweep");
        }
    }
    lease.release(app).await;
    result.map_err(|(e, _)| e)
}

/// The sweep; an error says whether the sweep sequence was begun.
async fn sweep_holding(
    app: &App,
    marked: Marked,
    lease: &HeldLease,
) -> std::result::Result<GcReport, (RegistryError, bool)> {
    let Marked {
        lease: _,
        started,
        dry_run,
        old_before,
        mut report,
        model,
        mut doomed,
        doomed_hidden,
    } = marked;
    // Listed before the sweep: bytes stored since are not candidates, or
    // were stored again under a digest listed, which `App::settle` catches.
    let stored = app.blobs.list().await.map_err(|e| (e.into(), false))?;
    let _exclusive = app.sweep.write().await;
    let live = if dry_run {
        // What would be left: everything marked, minus the doomed.
        let dead_links: HashSet<(&String, &String)> =
            doomed.links.iter().map(|(r, d)| (r, d)).collect();
        let dead_manifests: HashSet<(&String, &String)> =
            doomed.manifests.iter().map(|(r, d, _)| (r, d)).collect();
        let mut live = HashSet::new();
        for (name, repo) in &model {
            for d in repo.links.keys() {
                if !dead_links.contains(&(name, d)) {
                    live.insert(d.clone());
                }
            }
            for d in repo.manifests.keys() {
                if !dead_manifests.contains(&(name, d)) {
                    live.insert(d.clone());
                }
            }
            for d in &repo.hidden {
                if !doomed_hidden.contains(&(name.clone(), d.clone())) {
                    live.insert(d.clone());
                }
            }
        }
        report.manifests_deleted = doomed.manifests.len() as u64;
        report.links_removed = doomed.links.len() as u64;
        live
    } else {
        let doomed_for_sweep = std::mem::take(&mut doomed);
        let (token, now) = (lease.token().to_string(), app.now());
        let (m, l) = app
            .meta(move |m| m.sweep(&doomed_for_sweep, &model, old_before, &token, now))
            .await
            .map_err(|e| (e, false))?
            .ok_or((lease_lost(), false))?;
        report.manifests_deleted = m;
        report.links_removed = l;
        app.meta(|m| m.live_digests())
            .await
            .map_err(|e| (e, true))?
    };
    // Chunks running sync jobs of this replica stored or found and will
    // link (pinned under the sweep's read lock, so the set is complete
    // now); other replicas' jobs check theirs afterwards (`App::settle`).
    let pinned = app.syncs.pinned();
    let mut deleted = HashSet::new();
    for b in stored {
        let digest = b.digest.to_string();
        if live.contains(&digest) || pinned.contains(&digest) {
            continue;
        }
        if b.modified >= old_before {
            report.blobs_in_grace += 1;
            continue;
        }
        if !dry_run {
            if !lease.still_held(app).await.map_err(|e| (e, true))? {
                return Err((lease_lost(), true));
            }
            app.blobs
                .delete(&b.digest)
                .await
                .map_err(|e| (e.into(), true))?;
            deleted.insert(digest);
        }
        report.blobs_deleted += 1;
        report.bytes_reclaimed += b.size;
    }
    drop(_exclusive);
    // Sync records naming deleted chunks could never be taken again
    // (SPEC.md §8.5): they go with the chunks.
    if !deleted.is_empty() {
        app.meta(move |m| m.forget_reusable_naming(&deleted))
            .await
            .map_err(|e| (e, true))?;
    }
    tracing::info!(
        dry_run,
        versions_purged = report.versions_purged,
        manifests_deleted = report.manifests_deleted,
        links_removed = report.links_removed,
        blobs_deleted = report.blobs_deleted,
        bytes_reclaimed = report.bytes_reclaimed,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "garbage collection"
    );
    Ok(report)
}

/// A pass that stalled past its lease stops: another may be running.
fn lease_lost() -> RegistryError {
    RegistryError::internal(
        "garbage collection stopped: it held its lease too long and another pass may be running; collect again",
    )
}

/// The GC lease a pass holds. It is renewed at each step of the pass
/// ([`HeldLease::still_held`]: between manifests read while marking, and
/// between deletions), and released by [`HeldLease::release`]; a pass that
/// fails or panics leaves it to lapse, or to its replica to end
/// ([`App::end_dead_pass`]) once the pass is dropped.
pub(crate) struct HeldLease {
    token: String,
    renewed_at: Mutex<std::time::Instant>,
}

impl HeldLease {
    /// Takes the lease, or answers who holds it. A lease this replica's
    /// earlier process left is ended first, so a restarted registry can
    /// collect at once.
    pub(crate) async fn take(app: &App) -> Result<std::result::Result<Self, String>> {
        end_dead_pass(app).await?;
        let holder = replica(app);
        let token = uuid::Uuid::new_v4().to_string();
        // Known here before it is written (see `HELD_HERE`); forgotten when
        // `lease` drops, taken or not.
        HELD_HERE
            .lock()
            .expect("held leases lock")
            .insert(token.clone());
        let lease = HeldLease {
            token: token.clone(),
            renewed_at: Mutex::new(std::time::Instant::now()),
        };
        let now = app.now();
        let taken = app
            .meta(move |m| {
                m.take_claim(
                    GC_CLAIM,
                    &holder,
                    &token,
                    now,
                    GC_LEASE_SECONDS,
                    SameHolder::Refuse,
                )
            })
            .await?;
        Ok(taken.map(|_| lease).map_err(|held| held.holder))
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Whether the lease is still this pass's, renewing it when a tenth
    /// of it went by: checked before each deletion, so a pass stalled past
    /// its lease stops instead of racing the next.
    pub(crate) async fn still_held(&self, app: &App) -> Result<bool> {
        let due = Duration::from_secs(GC_LEASE_SECONDS / 10);
        if self.renewed_at.lock().expect("lease lock").elapsed() < due {
            return Ok(true);
        }
        let (t, now) = (self.token.clone(), app.now());
        let held = app
            .meta(move |m| m.renew_claim(GC_CLAIM, &t, now, GC_LEASE_SECONDS))
            .await?
            .is_some();
        if held {
            *self.renewed_at.lock().expect("lease lock") = std::time::Instant::now();
        }
        Ok(held)
    }

    pub(crate) async fn release(self, app: &App) {
        let token = self.token.clone();
        if let Err(e) = app.meta(move |m| m.release_claim(GC_CLAIM, &token)).await {
            tracing::warn!(error = %e, "could not release the GC lease");
        }
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        HELD_HERE
            .lock()
            .expect("held leases lock")
            .remove(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::app::Lifetimes;
    use crate::store::meta::key;
    use bytes::Bytes;
    use std::time::Duration;

    const REPO: &str = "ns/vol";
    const GRACE: u64 = 3600;

    async fn open(policy: Lifetimes) -> (tempfile::TempDir, App) {
        let dir = tempfile::tempdir().unwrap();
        let app = crate::server::open_app(dir.path(), policy).await.unwrap();
        (dir, app)
    }

    fn policy() -> Lifetimes {
        Lifetimes {
            gc_grace_seconds: GRACE,
            upload_ttl_seconds: 10 * GRACE,
            ..Lifetimes::default()
        }
    }

    fn digest(bytes: &[u8]) -> Sha256Digest {
        Sha256Digest(Sha256::digest(bytes).into())
    }

    /// Stores `bytes` as a blob linked in `REPO` now, as a finished upload.
    async fn push_blob(app: &App, bytes: &'static [u8]) -> Sha256Digest {
        let d = digest(bytes);
        app.blobs.put(&d, Bytes::from_static(bytes)).await.unwrap();
        let (ds, now, n) = (d.to_string(), app.now(), bytes.len() as u64);
        app.meta(move |m| m.link_blob(REPO, &ds, n, now))
            .await
            .unwrap();
        d
    }

    /// An image manifest of `config` and `layer`.
    fn image(config: &Sha256Digest, layer: &Sha256Digest) -> Bytes {
        Bytes::from(
            serde_json::json!({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": config.to_string(), "size": 2},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                            "digest": layer.to_string(), "size": 5}],
            })
            .to_string(),
        )
    }

    async fn linked(app: &App, d: &Sha256Digest) -> bool {
        let d = d.to_string();
        app.meta(move |m| m.blob_size(REPO, &d))
            .await
            .unwrap()
            .is_some()
    }

    async fn stored(app: &App, d: &Sha256Digest) -> bool {
        app.blobs.size(d).await.unwrap().is_some()
    }

    /// A client pushes blobs, waits longer than the grace period, then
    /// stores a manifest without checking them with HEAD first; the
    /// manifest lands after marking and before the sweep.
    #[tokio::test]
    async fn a_manifest_stored_between_mark_and_sweep_keeps_its_blobs() {
        let (_dir, app) = open(policy()).await;
        let config = push_blob(&app, b"{}").await;
        let layer = push_blob(&app, b"layer").await;
        app.clock.advance(2 * GRACE as i64);

        let marked = mark(&app, false).await.unwrap();
        let m = image(&config, &layer);
        crate::service::manifests::store_manifest(&app, REPO, "v1", m, None)
            .await
            .unwrap();
        sweep(&app, marked).await.unwrap();

        for d in [&config, &layer] {
            assert!(linked(&app, d).await, "{d} unlinked under a new manifest");
            assert!(stored(&app, d).await, "{d} deleted under a new manifest");
        }
        // And the next pass, with the manifest marked, keeps them too.
        collect(&app, false).await.unwrap();
        assert!(stored(&app, &layer).await);
    }

    /// A push that finds a blob with `HEAD` references it later: the
    /// check renews the link in the store, where a pass on any replica
    /// sees it, and concurrent checks share one transaction.
    #[tokio::test]
    async fn a_blob_checked_with_head_outlives_the_grace_period() {
        let (_dir, app) = open(policy()).await;
        let checked = push_blob(&app, b"checked").await;
        let unchecked = push_blob(&app, b"unchecked").await;
        app.clock.advance(2 * GRACE as i64);
        let (a, b) = (checked.to_string(), checked.to_string());
        let (x, y) = tokio::join!(
            crate::service::links::check_blob(&app, REPO, &a),
            crate::service::links::check_blob(&app, REPO, &b)
        );
        assert_eq!((x.unwrap(), y.unwrap()), (Some(7), Some(7)));
        let k = key(&[REPO, &checked.to_string()]);
        let (_, at) = app.meta(move |m| m.link(&k)).await.unwrap().unwrap();
        assert_eq!(at, app.now(), "the check did not renew the link");
        assert_eq!(
            crate::service::links::check_blob(&app, REPO, &unchecked.to_string().replace('a', "b"))
                .await
                .unwrap(),
            None
        );

        collect(&app, false).await.unwrap();
        assert!(linked(&app, &checked).await && stored(&app, &checked).await);
        assert!(!linked(&app, &unchecked).await && !stored(&app, &unchecked).await);
    }

    /// A pass takes the store-wide lease; another replica's pass is
    /// refused while it runs, and the lease goes with the pass.
    #[tokio::test]
    async fn one_pass_at_a_time_across_replicas() {
        let (_dir, app) = open(policy()).await;
        let now = app.now();
        let other = app
            .meta(move |m| {
                m.acquire_claim(crate::store::meta::sweeps::GC_CLAIM, "replica-b", now, 60)
            })
            .await
            .unwrap()
            .unwrap()
            .token;
        let refused = collect(&app, false).await.unwrap_err();
        assert!(
            refused.is(Code::TooManyRequests) && refused.to_string().contains("replica-b"),
            "{refused}"
        );
        app.meta(move |m| m.release_claim(crate::store::meta::sweeps::GC_CLAIM, &other))
            .await
            .unwrap();
        collect(&app, false).await.unwrap();
        collect(&app, false).await.unwrap();
        assert_eq!(app.meta.sweeps_begun(), 2);
        let now = app.now();
        let after = app.meta(move |m| m.sweep_mark()).await.unwrap();
        let since = app.meta(move |m| m.since_mark(after, now)).await.unwrap();
        assert_eq!(
            since,
            crate::store::meta::sweeps::SinceMark::Untouched,
            "a sweep left open"
        );
    }

    /// A write that relied on bytes while another replica's pass, dead
    /// mid-sweep, left the sweep sequence odd waits for that pass's lease.
    /// Once it lapses and a new pass takes the lease (a dry run here, which
    /// then waits for the sweep lock the writes hold), writes go on and the
    /// pass finishes: neither waits on the other until the new lease lapses
    /// (issue 28: 119 s, when any live lease counted as sweeping).
    #[tokio::test]
    async fn writes_and_a_new_pass_do_not_wait_on_each_other_after_a_dead_sweep() {
        let (_dir, app) = open(policy()).await;
        let app = std::sync::Arc::new(app);
        let config = push_blob(&app, b"{}").await;
        let layer = push_blob(&app, b"layer").await;
        let now = app.now();
        app.meta(move |m| {
            crate::store::meta::sweeps::plant_dead_sweep(m, "replica-b", now);
            Ok::<_, crate::error::RegistryError>(())
        })
        .await
        .unwrap();
        let write = |tag: &'static str| {
            let (app, m) = (std::sync::Arc::clone(&app), image(&config, &layer));
            tokio::spawn(async move {
                crate::service::manifests::store_manifest(&app, REPO, tag, m, None)
                    .await
                    .map(|_| ())
            })
        };
        let first = write("v1");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !first.is_finished(),
            "a write went on during another replica's sweep, its lease live"
        );

        app.clock
            .advance(crate::store::meta::sweeps::GC_LEASE_SECONDS as i64 + 1);
        let marked = mark(&app, true).await.unwrap();
        let second = write("v2");
        for w in [first, second] {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("a write waited on a pass that was not sweeping")
                .unwrap()
                .unwrap();
        }
        tokio::time::timeout(Duration::from_secs(5), sweep(&app, marked))
            .await
            .expect("the pass waited on the writes for the sweep lock")
            .unwrap();
        // The next pass sweeps, and leaves no sweep open.
        collect(&app, false).await.unwrap();
        let (after, now) = (app.meta(|m| m.sweep_mark()).await.unwrap(), app.now());
        let since = app.meta(move |m| m.since_mark(after, now)).await.unwrap();
        assert_eq!(since, crate::store::meta::sweeps::SinceMark::Untouched);
    }

    /// A pass this replica's earlier process left mid-sweep (killed) is
    /// ended as soon as a pass or a write meets it, lease and odd
    /// sequence, instead of blocking both until its lease lapses.
    #[tokio::test]
    async fn a_dead_pass_of_this_replica_is_ended_at_once() {
        let (_dir, app) = open(policy()).await;
        let config = push_blob(&app, b"{}").await;
        let layer = push_blob(&app, b"layer").await;
        let plant = || {
            let (replica, now) = (crate::service::links::replica(&app), app.now());
            app.meta(move |m| {
                crate::store::meta::sweeps::plant_dead_sweep(m, &replica, now);
                Ok::<_, crate::error::RegistryError>(())
            })
        };

        plant().await.unwrap();
        let pass = tokio::time::timeout(Duration::from_secs(2), collect(&app, true)).await;
        assert!(
            matches!(pass, Ok(Ok(_))),
            "a pass waited on this replica's dead one: {pass:?}"
        );

        plant().await.unwrap();
        let m = image(&config, &layer);
        let stored = tokio::time::timeout(
            Duration::from_secs(2),
            crate::service::manifests::store_manifest(&app, REPO, "v1", m, None),
        )
        .await;
        assert!(
            matches!(stored, Ok(Ok(_))),
            "a write waited on this replica's dead pass"
        );
        let (after, now) = (app.meta(|m| m.sweep_mark()).await.unwrap(), app.now());
        let since = app.meta(move |m| m.since_mark(after, now)).await.unwrap();
        assert_eq!(since, crate::store::meta::sweeps::SinceMark::Untouched);
        collect(&app, false).await.unwrap();
    }

    /// A manifest garbage collection cannot read must stop the pass, not
    /// count as referencing nothing.
    #[tokio::test]
    async fn an_unreadable_manifest_stops_the_sweep() {
        for damage in ["missing", "garbage"] {
            let (dir, app) = open(policy()).await;
            let config = push_blob(&app, b"{}").await;
            let layer = push_blob(&app, b"layer").await;
            let (m, _) = crate::service::manifests::store_manifest(
                &app,
                REPO,
                "v1",
                image(&config, &layer),
                None,
            )
            .await
            .unwrap();
            app.clock.advance(2 * GRACE as i64);
            let hex = m.to_string()["sha256:".len()..].to_string();
            let file = dir.path().join("blobs/sha256").join(&hex[..2]).join(&hex);
            match damage {
                "missing" => std::fs::remove_file(&file).unwrap(),
                _ => std::fs::write(&file, b"not a manifest").unwrap(),
            }
            let pass = collect(&app, false).await;
            assert!(pass.is_err(), "{damage}: the pass went on: {pass:?}");
            for d in [&config, &layer] {
                assert!(linked(&app, d).await, "{damage}: {d} unlinked");
                assert!(stored(&app, d).await, "{damage}: {d} deleted");
            }
        }
    }

    /// An abandoned session goes after the upload TTL: its row, its data
    /// file and its in-memory state; and its repository is no longer busy.
    #[tokio::test]
    async fn abandoned_uploads_expire_and_stop_protecting_their_repository() {
        let (dir, app) = open(policy()).await;
        let stray = push_blob(&app, b"stray").await;
        let id = crate::service::uploads::start(&app, REPO).await.unwrap();
        let file = dir.path().join("uploads").join(&id);
        assert!(file.exists());

        // Within the TTL the session stays, and protects the repository.
        app.clock.advance(2 * GRACE as i64);
        collect(&app, false).await.unwrap();
        assert!(file.exists() && app.uploads.is_loaded(&id));
        assert!(linked(&app, &stray).await);

        app.clock.advance(10 * GRACE as i64);
        let report = collect(&app, false).await.unwrap();
        let i = id.clone();
        assert_eq!(app.meta(move |m| m.upload_repo(&i)).await.unwrap(), None);
        assert!(!file.exists(), "the data file of an expired session stays");
        assert!(!app.uploads.is_loaded(&id));
        assert_eq!(report.links_removed, 1);
        assert!(!linked(&app, &stray).await);
        assert!(!stored(&app, &stray).await);
    }
}
