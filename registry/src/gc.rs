//! Online garbage collection (SPEC.md §7.4): expiry, purge, then
//! mark-and-sweep of manifests, repository links and blob bytes while the
//! registry keeps serving.
//!
//! Marking reads a snapshot and parses manifests without any lock. The
//! sweep then takes the write side of [`App::sweep`], which every handler
//! that relies on something existing (a manifest PUT checking references,
//! an upload or mount linking a blob, a blob `HEAD`) holds the read side
//! of, and re-checks each candidate in one transaction before it goes. So
//! nothing a client has just seen or stored can disappear under it, and
//! the grace period covers what a push uploads before its manifests.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use redb::{ReadableDatabase, ReadableTable};

use sealvol_spec::api::GcReport;

use crate::app::App;
use crate::error::Result;
use crate::manifests::parse_manifest;
use crate::meta::{
    drop_manifest, key, prefix, MetaError, MetaStore, BLOB_LINKS, LINK_TIMES, MANIFESTS, TAGS,
    UPLOADS,
};
use crate::volumes::{self, HIDDEN, TAG_EXPIRY, VERSIONS, VERSION_OF_INDEX, VOLUMES};

/// Expiry and retention, applied (or, dry, counted) before marking.
#[derive(Debug, Default)]
pub(crate) struct Expired {
    tags: u64,
    volumes: u64,
    versions: u64,
    /// `(repo, index digest)` of every purged (or purgeable) index.
    indexes: HashSet<(String, String)>,
}

/// One repository as marking sees it.
#[derive(Debug, Default)]
pub(crate) struct RepoModel {
    /// Digest -> stored_at, for manifests in the OCI view.
    manifests: HashMap<String, u64>,
    /// Indexes of tombstoned versions still within retention.
    hidden: HashSet<String>,
    tagged: HashSet<String>,
    version_indexes: HashSet<String>,
    /// Digest -> linked_at.
    links: HashMap<String, u64>,
    uploading: bool,
}

/// What the sweep may remove, each re-checked under the lock.
#[derive(Debug, Default)]
pub(crate) struct Doomed {
    /// `(repo, digest, stored_at)`.
    manifests: Vec<(String, String, u64)>,
    /// `(repo, digest)`.
    links: Vec<(String, String)>,
}

impl MetaStore {
    /// Removes expired tags, deletes expired volumes and purges versions
    /// tombstoned longer than `retention` ago; dry, only counts them.
    pub(crate) fn expire(
        &self,
        now: u64,
        retention: u64,
        dry_run: bool,
    ) -> std::result::Result<Expired, MetaError> {
        let mut out = Expired::default();
        let rtx = self.db.begin_read()?;
        let expired_tags: Vec<String> = {
            let mut v = Vec::new();
            for row in rtx.open_table(TAG_EXPIRY)?.range::<&str>(..)? {
                let (k, e) = row?;
                if e.value() <= now {
                    v.push(k.value().to_string());
                }
            }
            v
        };
        let expired_volumes: Vec<String> = {
            let mut v = Vec::new();
            for row in rtx.open_table(VOLUMES)?.range::<&str>(..)? {
                let (k, r) = row?;
                let r: volumes::VolumeRecord = serde_json::from_slice(r.value())?;
                if r.expires_at.is_some_and(|e| e <= now) {
                    v.push(k.value().to_string());
                }
            }
            v
        };
        let purgeable: Vec<(String, String, Vec<String>)> = {
            let mut v = Vec::new();
            for row in rtx.open_table(VERSIONS)?.range::<&str>(..)? {
                let (k, r) = row?;
                let r: volumes::VersionRecord = serde_json::from_slice(r.value())?;
                if r.lifecycle == volumes::Lifecycle::Tombstoned
                    && r.tombstoned_at
                        .is_some_and(|t| t.saturating_add(retention) <= now)
                {
                    let (repo, version) = k.value().split_once('\0').unwrap_or_default();
                    v.push((repo.to_string(), version.to_string(), r.indexes));
                }
            }
            v
        };
        drop(rtx);
        if dry_run {
            out.tags = expired_tags.len() as u64;
            out.volumes = expired_volumes.len() as u64;
            out.versions = purgeable.len() as u64;
            for (repo, _, indexes) in purgeable {
                out.indexes
                    .extend(indexes.into_iter().map(|i| (repo.clone(), i)));
            }
            return Ok(out);
        }
        let tx = self.db.begin_write()?;
        for k in &expired_tags {
            let (repo, tag) = k.split_once('\0').unwrap_or_default();
            // Re-check: the tag may have been set again without expiry.
            let still = tx
                .open_table(TAG_EXPIRY)?
                .get(k.as_str())?
                .is_some_and(|e| e.value() <= now);
            if still && volumes::remove_tag(&tx, repo, tag, now)? {
                out.tags += 1;
            }
        }
        for repo in &expired_volumes {
            volumes::delete_all(&tx, repo, now).map_err(|e| MetaError(e.to_string()))?;
            let mut t = tx.open_table(VOLUMES)?;
            let row = t.get(repo.as_str())?.map(|v| v.value().to_vec());
            if let Some(bytes) = row {
                let mut r: volumes::VolumeRecord = serde_json::from_slice(&bytes)?;
                r.expires_at = None;
                t.insert(repo.as_str(), serde_json::to_vec(&r)?.as_slice())?;
            }
            out.volumes += 1;
        }
        for (repo, version, _) in &purgeable {
            if let Some(indexes) = volumes::purge(&tx, repo, version, now, retention)? {
                out.versions += 1;
                out.indexes
                    .extend(indexes.into_iter().map(|i| (repo.clone(), i)));
            }
        }
        tx.commit()?;
        Ok(out)
    }

    /// Every repository's manifests, tags, versions and links.
    pub(crate) fn gc_model(&self) -> std::result::Result<HashMap<String, RepoModel>, MetaError> {
        let tx = self.db.begin_read()?;
        let mut repos: HashMap<String, RepoModel> = HashMap::new();
        for repo in volumes::repo_names(&tx)? {
            repos.insert(repo, RepoModel::default());
        }
        let split = |k: &str| -> (String, String) {
            let (r, d) = k.rsplit_once('\0').unwrap_or((k, ""));
            (r.to_string(), d.to_string())
        };
        for row in tx.open_table(MANIFESTS)?.range::<&str>(..)? {
            let (k, v) = row?;
            let (repo, d) = split(k.value());
            let rec: crate::meta::ManifestRecord = serde_json::from_slice(v.value())?;
            repos
                .entry(repo)
                .or_default()
                .manifests
                .insert(d, rec.stored_at);
        }
        for row in tx.open_table(HIDDEN)?.range::<&str>(..)? {
            let (repo, d) = split(row?.0.value());
            repos.entry(repo).or_default().hidden.insert(d);
        }
        for row in tx.open_table(TAGS)?.range::<&str>(..)? {
            let (k, v) = row?;
            let (repo, _) = split(k.value());
            repos
                .entry(repo)
                .or_default()
                .tagged
                .insert(v.value().to_string());
        }
        for row in tx.open_table(VERSION_OF_INDEX)?.range::<&str>(..)? {
            let (repo, d) = split(row?.0.value());
            repos.entry(repo).or_default().version_indexes.insert(d);
        }
        let times = tx.open_table(LINK_TIMES)?;
        for row in tx.open_table(BLOB_LINKS)?.range::<&str>(..)? {
            let (k, _) = row?;
            let t = times.get(k.value())?.map_or(0, |t| t.value());
            let (repo, d) = split(k.value());
            repos.entry(repo).or_default().links.insert(d, t);
        }
        for row in tx.open_table(UPLOADS)?.range::<&str>(..)? {
            let (_, repo) = row?;
            repos.entry(repo.value().to_string()).or_default().uploading = true;
        }
        Ok(repos)
    }

    /// Removes the doomed manifests and links that are still unreferenced
    /// and as old as when they were marked; `touched` holds the links a
    /// client checked within the grace period. Returns the counts.
    pub(crate) fn sweep(
        &self,
        doomed: &Doomed,
        touched: &HashSet<String>,
        old_before: u64,
    ) -> std::result::Result<(u64, u64), MetaError> {
        let tx = self.db.begin_write()?;
        let mut manifests = 0;
        let mut links = 0;
        for (repo, digest, stored_at) in &doomed.manifests {
            let k = key(&[repo, digest]);
            let same = match tx.open_table(MANIFESTS)?.get(k.as_str())? {
                Some(v) => {
                    serde_json::from_slice::<crate::meta::ManifestRecord>(v.value())?.stored_at
                        == *stored_at
                }
                None => false,
            };
            let tagged = {
                let tags = tx.open_table(TAGS)?;
                let (lo, hi) = prefix(&[repo]);
                let mut found = false;
                for row in tags.range(lo.as_str()..hi.as_str())? {
                    if row?.1.value() == digest.as_str() {
                        found = true;
                        break;
                    }
                }
                found
            };
            let version = volumes::version_of_index(&tx, repo, digest)?.is_some();
            if same && !tagged && !version {
                drop_manifest(&tx, repo, digest)?;
                manifests += 1;
            }
        }
        for (repo, digest) in &doomed.links {
            let k = key(&[repo, digest]);
            let linked_at = tx
                .open_table(LINK_TIMES)?
                .get(k.as_str())?
                .map_or(0, |t| t.value());
            if linked_at < old_before && !touched.contains(&k) {
                if tx.open_table(BLOB_LINKS)?.remove(k.as_str())?.is_some() {
                    links += 1;
                }
                tx.open_table(LINK_TIMES)?.remove(k.as_str())?;
            }
        }
        tx.commit()?;
        Ok((manifests, links))
    }

    /// Every digest some repository still links or stores a manifest under.
    pub(crate) fn live_digests(&self) -> std::result::Result<HashSet<String>, MetaError> {
        let tx = self.db.begin_read()?;
        let mut live = HashSet::new();
        let tail = |k: &str| k.rsplit_once('\0').map_or(k, |(_, d)| d).to_string();
        for row in tx.open_table(BLOB_LINKS)?.range::<&str>(..)? {
            live.insert(tail(row?.0.value()));
        }
        for row in tx.open_table(MANIFESTS)?.range::<&str>(..)? {
            live.insert(tail(row?.0.value()));
        }
        for row in tx.open_table(HIDDEN)?.range::<&str>(..)? {
            live.insert(tail(row?.0.value()));
        }
        Ok(live)
    }
}

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

async fn refs_of(app: &App, digest: &str) -> Option<Refs> {
    let d = digest.parse().ok()?;
    let bytes = app.blobs.get(&d).await.ok()??;
    let p = parse_manifest(&bytes, None).ok()?;
    let version_part = p.children.is_empty()
        && p.annotations
            .as_ref()
            .and_then(|a| a.get(sealvol_spec::oci::ANN_VERSION))
            .is_some();
    Some(Refs {
        blobs: p.blobs.iter().map(|b| b.to_string()).collect(),
        children: p.children.iter().map(|c| c.to_string()).collect(),
        version_part,
    })
}

/// One pass; only one runs at a time.
pub async fn collect(app: &App, dry_run: bool) -> Result<GcReport> {
    let _one = app.gc_running.lock().await;
    let started = Instant::now();
    let now = app.clock.now();
    let (retention, grace) = (app.policy.retention_seconds, app.policy.gc_grace_seconds);
    let old_before = now.saturating_sub(grace);
    let expired = app.meta(move |m| m.expire(now, retention, dry_run)).await?;
    let mut report = GcReport {
        dry_run,
        versions_purged: expired.versions,
        tags_expired: expired.tags,
        volumes_expired: expired.volumes,
        ..GcReport::default()
    };

    // Mark.
    let model = app.meta(|m| m.gc_model()).await?;
    let mut parsed: HashMap<String, Option<Refs>> = HashMap::new();
    for repo in model.values() {
        for d in repo.manifests.keys().chain(repo.hidden.iter()) {
            if !parsed.contains_key(d) {
                let r = refs_of(app, d).await;
                parsed.insert(d.clone(), r);
            }
        }
    }
    let mut doomed = Doomed::default();
    let mut doomed_hidden: HashSet<(String, String)> = HashSet::new();
    for (name, repo) in &model {
        let protected = repo.uploading || app.claims.is_claimed(name, now);
        let mut reachable: HashSet<&String> = HashSet::new();
        let mut stack: Vec<&String> = Vec::new();
        for (d, stored_at) in &repo.manifests {
            let refs = parsed.get(d).and_then(Option::as_ref);
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
            if let Some(Some(r)) = parsed.get(d) {
                for c in &r.children {
                    if let Some((k, _)) = repo.manifests.get_key_value(c) {
                        stack.push(k);
                    }
                }
            }
        }
        let mut blobs: HashSet<&String> = HashSet::new();
        for d in &reachable {
            if let Some(Some(r)) = parsed.get(*d) {
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

    // Sweep.
    let stored = app.blobs.list().await?;
    let _exclusive = app.sweep.write().await;
    let touched = app.touched_since(old_before);
    let live = if dry_run {
        // What would be left: everything marked, minus the doomed.
        let dead_links: HashSet<(&String, &String)> =
            doomed.links.iter().map(|(r, d)| (r, d)).collect();
        let dead_manifests: HashSet<(&String, &String)> =
            doomed.manifests.iter().map(|(r, d, _)| (r, d)).collect();
        let mut live = HashSet::new();
        for (name, repo) in &model {
            for d in repo.links.keys() {
                if !dead_links.contains(&(name, d)) || touched.contains(&key(&[name, d])) {
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
        report.links_removed = doomed
            .links
            .iter()
            .filter(|(r, d)| !touched.contains(&key(&[r, d])))
            .count() as u64;
        live
    } else {
        let doomed_for_sweep = std::mem::take(&mut doomed);
        let touched_for_sweep = touched.clone();
        let (m, l) = app
            .meta(move |m| m.sweep(&doomed_for_sweep, &touched_for_sweep, old_before))
            .await?;
        report.manifests_deleted = m;
        report.links_removed = l;
        app.meta(|m| m.live_digests()).await?
    };
    // Chunks running sync jobs stored or found and will link (pinned under
    // the sweep's read lock, so the set is complete now).
    let pinned = app.syncs.pinned();
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
            app.blobs.delete(&b.digest).await?;
        }
        report.blobs_deleted += 1;
        report.bytes_reclaimed += b.size;
    }
    drop(_exclusive);
    app.forget_touches_before(old_before);
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
