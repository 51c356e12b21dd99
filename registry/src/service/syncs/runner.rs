//! Runs sync jobs (SPEC.md §8.2): a pool of workers takes queued jobs
//! oldest first; each job holds its volume's push claim, streams every
//! selected object of its source through `sealvol-sync`'s sealer into the
//! blob store, records each finished file, and seals the version and moves
//! the tags only once every file is stored and verified. The API handlers
//! are in [`crate::http::api::syncs`].

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::{stream, StreamExt, TryStreamExt};
use sealvol_spec::filter::Filter;
use sealvol_spec::oci::{self, VersionIndex, VersionMeta};
use sealvol_spec::{ChunkingParams, Entry, EntryData, Sha256Digest, Tag, TreeIndex};
use sealvol_sync::{ChunkSink, ErrorKind, Object, SourceOptions, SyncError};

use crate::state::app::App;
use crate::state::syncs::Running;
use crate::store::meta::secrets;
use crate::store::meta::syncs::{
    FileDone, JobError, ReuseKey, SyncDest, SyncJob, SyncProgress, SyncState, SyncedVersion,
};

/// Objects of one job read at once: enough to keep a slow source's
/// connections busy while the CPU hashes, bounded so memory stays small
/// (each object holds at most a few chunks in flight).
const FILES_AT_ONCE: usize = 4;
/// Tries per request or object before a transient error fails the job.
const TRIES: u32 = 6;
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Starts `workers` workers, after queuing again the jobs a stopped
/// registry left running.
pub fn spawn_workers(app: Arc<App>, workers: usize) -> Vec<tokio::task::JoinHandle<()>> {
    if workers == 0 {
        return Vec::new();
    }
    // The first worker queues them again; the others wait for that.
    let requeued = Arc::new(tokio::sync::OnceCell::new());
    (0..workers)
        .map(|_| {
            let (app, requeued) = (Arc::clone(&app), Arc::clone(&requeued));
            tokio::spawn(async move {
                requeued.get_or_init(|| requeue(&app)).await;
                worker(app).await
            })
        })
        .collect()
}

async fn requeue(app: &Arc<App>) {
    let (holder, now) = (app.syncs.replica().to_string(), app.now());
    match app.meta(move |m| m.requeue_syncs(&holder, now)).await {
        Ok(0) => {}
        Ok(n) => {
            tracing::info!("resuming {n} sync job(s) the registry was running when it stopped")
        }
        Err(e) => tracing::error!("cannot resume sync jobs: {e}"),
    }
}

async fn worker(app: Arc<App>) {
    loop {
        // Registered before looking, so a job queued meanwhile still wakes us.
        let woken = app.syncs.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let (now, holder, lease) = (
            app.now(),
            app.syncs.replica().to_string(),
            app.syncs.lease(),
        );
        match app.meta(move |m| m.next_sync(now, &holder, lease)).await {
            Ok(Some(job)) => {
                // Its own task: a panic fails the job, not the worker.
                let (a, id) = (Arc::clone(&app), job.id.clone());
                if let Err(e) = tokio::spawn(async move { run(&a, job).await }).await {
                    app.syncs.running.lock().expect("running lock").remove(&id);
                    let err = SyncError::new(ErrorKind::Internal, format!("the job stopped: {e}"));
                    fail(&app, &id, &err, 0).await;
                }
            }
            Ok(None) => {
                // Looking again within a lease finds a dead replica's job.
                let idle = Duration::from_secs(app.syncs.lease().min(30));
                tokio::select! {
                    _ = woken => {}
                    _ = tokio::time::sleep(idle) => {}
                }
            }
            Err(e) => {
                tracing::error!("sync worker: {e}");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }
}

async fn run(app: &Arc<App>, job: SyncJob) {
    let id = job.id.clone();
    let running = Arc::new(Running {
        bytes_done: AtomicU64::new(job.progress.bytes_done),
        bytes_stored: AtomicU64::new(job.progress.bytes_stored),
        ..Default::default()
    });
    app.syncs
        .running
        .lock()
        .expect("running lock")
        .insert(id.clone(), Arc::clone(&running));
    // A cancel between taking the job and registering it found no flag to
    // set; it did change the stored state, so look again now.
    let i = id.clone();
    let state = app
        .meta(move |m| m.sync(&i))
        .await
        .ok()
        .flatten()
        .map(|j| j.state);
    let result = if state == Some(SyncState::Running) {
        tracing::info!(sync = %id, source = %job.source, dest = %job.dest.name, "sync started");
        let lease = renew_lease(app, &id);
        let result = execute(app, &job, &running).await;
        lease.abort();
        result
    } else {
        Err(SyncError::new(ErrorKind::Canceled, "canceled"))
    };
    app.syncs.running.lock().expect("running lock").remove(&id);
    match result {
        Ok(()) => tracing::info!(sync = %id, "sync ready"),
        Err(e) if e.kind == ErrorKind::Canceled => {
            tracing::info!(sync = %id, "sync canceled");
        }
        Err(mut e) => {
            e.message = running.scrub(&e.message);
            // Every message names the source (SPEC.md §8.2).
            if !e.message.starts_with(&job.source) {
                e.message = format!("{}: {}", job.source, e.message);
            }
            let stored = running.bytes_stored.load(Ordering::Relaxed);
            fail(app, &id, &e, stored).await;
        }
    }
}

/// Renews this replica's lease on job `id` a few times per lease, until
/// aborted, so other replicas leave the job alone while it runs.
fn renew_lease(app: &Arc<App>, id: &str) -> tokio::task::JoinHandle<()> {
    let (app, id) = (Arc::clone(app), id.to_string());
    tokio::spawn(async move {
        let lease = app.syncs.lease();
        let every = Duration::from_millis(lease * 1000 / 3);
        loop {
            tokio::time::sleep(every).await;
            let (i, holder, until) = (
                id.clone(),
                app.syncs.replica().to_string(),
                app.now() + lease,
            );
            match app
                .meta(move |m| m.renew_sync_lease(&i, &holder, until))
                .await
            {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => tracing::warn!(sync = %id, error = %e, "could not renew the job's lease"),
            }
        }
    })
}

/// Records a job as failed (unless it finished meanwhile).
async fn fail(app: &Arc<App>, id: &str, e: &SyncError, bytes_stored: u64) {
    tracing::warn!(sync = %id, code = e.kind.code(), "sync failed: {}", e.message);
    let (i, e, now) = (id.to_string(), e.clone(), app.now());
    let recorded = app
        .meta(move |m| {
            m.update_sync(&i, |j| {
                if j.state.is_finished() {
                    return false;
                }
                j.state = SyncState::Failed;
                j.finished_at = Some(now);
                j.retrying = None;
                j.progress.bytes_stored = j.progress.bytes_stored.max(bytes_stored);
                j.error = Some(JobError {
                    code: e.kind.code().to_string(),
                    message: e.message.clone(),
                });
                true
            })
        })
        .await;
    if let Err(e) = recorded {
        tracing::error!(sync = %id, "cannot record the failure: {e}");
    }
}

fn internal(e: impl std::fmt::Display) -> SyncError {
    SyncError::new(
        ErrorKind::Internal,
        format!("the registry could not store what it read: {e}"),
    )
}

/// Runs `attempt` until it succeeds, fails for good, or transient errors
/// outlast [`TRIES`]; each retry is counted on the job and shown.
async fn with_retries<T, F, Fut>(
    app: &Arc<App>,
    job: &SyncJob,
    running: &Running,
    mut attempt: F,
) -> std::result::Result<T, SyncError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, SyncError>>,
{
    let mut pause = FIRST_BACKOFF;
    let mut tries = 0;
    loop {
        tries += 1;
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_transient() && tries < TRIES => {
                tracing::info!(sync = %job.id, "retrying in {pause:?}: {}", running.scrub(&e.message));
                let (id, msg) = (job.id.clone(), running.scrub(&e.message));
                app.meta(move |m| {
                    m.update_sync(&id, |j| {
                        j.retries += 1;
                        j.retrying = Some(msg);
                        !j.state.is_finished()
                    })
                })
                .await
                .map_err(internal)?;
                sleep_unless_canceled(running, pause).await?;
                pause = (pause * 2).min(MAX_BACKOFF);
            }
            Err(e) => return Err(e),
        }
    }
}

async fn sleep_unless_canceled(
    running: &Running,
    d: Duration,
) -> std::result::Result<(), SyncError> {
    let step = Duration::from_millis(200);
    let mut left = d;
    while !left.is_zero() {
        if running.cancel.load(Ordering::Relaxed) {
            return Err(SyncError::new(ErrorKind::Canceled, "canceled"));
        }
        let s = left.min(step);
        tokio::time::sleep(s).await;
        left -= s;
    }
    Ok(())
}

/// The volume's push claim, renewed in the background while held.
struct HeldClaim {
    app: Arc<App>,
    repo: String,
    token: String,
    renew: tokio::task::JoinHandle<()>,
}

impl HeldClaim {
    /// Renews the claim now; an error when it lapsed (the renewing task
    /// was starved for a whole TTL) and someone else may publish.
    async fn still_held(&self) -> std::result::Result<(), SyncError> {
        let ttl = self.app.lifetimes.claim_ttl_seconds;
        let (repo, token, now) = (self.repo.clone(), self.token.clone(), self.app.now());
        let renewed = (self.app)
            .meta(move |m| m.renew_claim(&repo, &token, now, ttl))
            .await
            .map_err(internal)?;
        match renewed {
            Some(_) => Ok(()),
            None => Err(SyncError::new(
                ErrorKind::Internal,
                format!(
                    "lost the push claim on {} before sealing; start the sync again",
                    self.repo
                ),
            )),
        }
    }
}

impl Drop for HeldClaim {
    fn drop(&mut self) {
        self.renew.abort();
        // Released in the background; were it lost, the claim would lapse.
        let (app, repo, token) = (Arc::clone(&self.app), self.repo.clone(), self.token.clone());
        tokio::spawn(async move {
            if let Err(e) = app.meta(move |m| m.release_claim(&repo, &token)).await {
                tracing::warn!(error = %e, "could not release a sync's push claim");
            }
        });
    }
}

async fn hold_claim(
    app: &Arc<App>,
    job: &SyncJob,
    running: &Running,
) -> std::result::Result<HeldClaim, SyncError> {
    let repo = job.dest.name.clone();
    let ttl = app.lifetimes.claim_ttl_seconds;
    // One attempt, not the job: a claim is given back to its own holder
    // (SPEC.md §7.4), and an attempt that another replica took over after
    // this one's lease lapsed must not share this one's claim.
    let holder = format!("sync {} attempt {}", job.id, job.attempts);
    let mut waiting = false;
    loop {
        let (r, h, now) = (repo.clone(), holder.clone(), app.now());
        let taken = app
            .meta(move |m| m.acquire_claim(&r, &h, now, ttl))
            .await
            .map_err(internal)?;
        match taken {
            Ok(c) => {
                if waiting {
                    let id = job.id.clone();
                    app.meta(move |m| {
                        m.update_sync(&id, |j| {
                            j.retrying = None;
                            !j.state.is_finished()
                        })
                    })
                    .await
                    .map_err(internal)?;
                }
                let (a, r, t) = (Arc::clone(app), repo.clone(), c.token.clone());
                let renew = tokio::spawn(async move {
                    // A third of the TTL, in milliseconds: claims expire on
                    // whole seconds, so a renewal can buy as little as
                    // `ttl - 1` s, and a short TTL renewed every whole second
                    // would lapse on the first late tick.
                    let every = Duration::from_millis((ttl * 1000 / 3).max(200));
                    loop {
                        tokio::time::sleep(every).await;
                        let (r, t, now) = (r.clone(), t.clone(), a.now());
                        if let Err(e) = a.meta(move |m| m.renew_claim(&r, &t, now, ttl)).await {
                            tracing::warn!(error = %e, "could not renew a sync's push claim");
                        }
                    }
                });
                return Ok(HeldClaim {
                    app: Arc::clone(app),
                    repo,
                    token: c.token,
                    renew,
                });
            }
            Err(held) => {
                if !waiting {
                    waiting = true;
                    let (id, msg) = (
                        job.id.clone(),
                        format!("waiting for {repo}: {} is publishing to it", held.holder),
                    );
                    app.meta(move |m| {
                        m.update_sync(&id, |j| {
                            j.retrying = Some(msg);
                            !j.state.is_finished()
                        })
                    })
                    .await
                    .map_err(internal)?;
                }
                sleep_unless_canceled(running, Duration::from_secs(1)).await?;
            }
        }
    }
}

/// Chunks go straight into the blob store. Each chunk found or stored is
/// pinned for the job (see [`Running::pinned`]) until the file's links are
/// recorded: a link per chunk would cost a database commit per chunk.
struct StoreSink {
    app: Arc<App>,
    running: Arc<Running>,
}

impl StoreSink {
    fn pin(&self, digest: &Sha256Digest) {
        self.running
            .pinned
            .lock()
            .expect("pins lock")
            .insert(digest.to_string());
    }
}

#[async_trait]
impl ChunkSink for StoreSink {
    async fn has(&self, digest: &Sha256Digest) -> std::result::Result<bool, SyncError> {
        let _sweep = self.app.sweep.read().await;
        let found = self
            .app
            .blobs
            .size(digest)
            .await
            .map_err(internal)?
            .is_some();
        if found {
            self.pin(digest);
        }
        Ok(found)
    }

    async fn put(&self, digest: &Sha256Digest, bytes: Bytes) -> std::result::Result<(), SyncError> {
        let n = bytes.len() as u64;
        let _sweep = self.app.sweep.read().await;
        self.app.blobs.put(digest, bytes).await.map_err(internal)?;
        self.pin(digest);
        self.running.bytes_stored.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }
}

/// Whether `path` is selected: included, and neither it nor a folder
/// above it excluded (an excluded folder is skipped whole, as in `push`).
fn selected(filter: &Filter, path: &str) -> bool {
    let mut p = path;
    while let Some((parent, _)) = p.rsplit_once('/') {
        if filter.excluded(parent) {
            return false;
        }
        p = parent;
    }
    filter.included(path)
}

async fn execute(
    app: &Arc<App>,
    job: &SyncJob,
    running: &Arc<Running>,
) -> std::result::Result<(), SyncError> {
    let uri = &job.source;
    let net = app.syncs.net.read().expect("net lock").clone();
    // The binding is checked again here: it may have changed since the
    // job was created, and a job queued by an older release was never
    // checked at all.
    let stored = match &job.secret {
        None => None,
        Some(name) => {
            let n = name.clone();
            let s = app.meta(move |m| m.secret(&n)).await.map_err(internal)?;
            Some(s.ok_or_else(|| {
                SyncError::new(
                    ErrorKind::SecretUnknown,
                    format!("{uri}: secret {name} is not on this registry; store it with `sealvol secret set {name}`"),
                )
            })?)
        }
    };
    if let Some(why) = secrets::endpoint_refusal(uri, stored.as_ref(), &net) {
        return Err(SyncError::new(ErrorKind::Denied, why));
    }
    let secret = match (&job.secret, stored) {
        (Some(name), Some(s)) => {
            if let Some(why) = s.refusal(name, uri, &job.dest.name, job.by_admin, &net) {
                return Err(SyncError::new(ErrorKind::Denied, why));
            }
            let key = app
                .syncs
                .key
                .get()
                .ok_or_else(|| internal("no secrets key"))?;
            let v = s.value(key, name).map_err(internal)?;
            let v = String::from_utf8(v).map_err(|_| {
                SyncError::new(
                    ErrorKind::InvalidSource,
                    format!("secret {name} is not UTF-8 text"),
                )
            })?;
            let _ = running.secret.set(v.clone());
            Some(v)
        }
        _ => None,
    };
    if let Some(why) = app.syncs.dirs.read().expect("dirs lock").refuse(uri) {
        return Err(SyncError::new(ErrorKind::Denied, why));
    }
    // A job that listed before reads what it listed then.
    let read_from = job.pinned_source.as_deref().unwrap_or(uri);
    let source: Arc<dyn sealvol_sync::Source> = Arc::from(sealvol_sync::open(
        read_from,
        &SourceOptions {
            secret: secret.clone(),
            net,
        },
    )?);
    let filter = Filter::new(&job.include, &job.exclude)
        .map_err(|e| SyncError::new(ErrorKind::InvalidSource, e.to_string()))?;
    let claim = hold_claim(app, job, running).await?;

    let listed = with_retries(app, job, running, || source.list()).await?;
    let pinned = job.pinned_source.clone().or_else(|| source.pinned(&listed));
    if job.pinned_source.is_none() && pinned.is_some() {
        let (id, p) = (job.id.clone(), pinned.clone());
        app.meta(move |m| {
            m.update_sync(&id, |j| {
                j.pinned_source = p;
                !j.state.is_finished()
            })
        })
        .await
        .map_err(internal)?;
    }
    let objects: Vec<Object> = listed
        .into_iter()
        .filter(|o| selected(&filter, &o.path))
        .collect();
    if objects.is_empty() {
        return Err(SyncError::new(
            ErrorKind::Empty,
            format!("{uri}: no file matches the include/exclude filters"),
        ));
    }
    check_listing(uri, &objects)?;
    let mut progress = SyncProgress {
        files_total: objects.len() as u64,
        // Sizes come from the source: saturate rather than overflow.
        bytes_total: objects.iter().fold(0u64, |t, o| t.saturating_add(o.size)),
        ..Default::default()
    };

    // The destination's chunking, so that the new version shares its
    // head's chunks where the bytes did not change.
    let params = chunking_for(app, &job.dest.name).await;

    // Files a previous run of this job finished, still whole in the store
    // and cut within this tree's sizes (a run before an upgrade may have
    // cut them with the earlier default).
    // Their links may have aged past garbage collection's grace while the
    // registry was down: they are checked and renewed with the sweep held
    // off, so no chunk can go between the check and the link.
    let id = job.id.clone();
    let mut done = app
        .meta(move |m| m.sync_files(&id))
        .await
        .map_err(internal)?;
    let mut results: HashMap<String, FileDone> = HashMap::new();
    let mut todo = Vec::new();
    // Paths taken from an earlier job's records, not this job's.
    let mut reused: HashSet<String> = HashSet::new();
    let scope = source.reuse_scope();
    {
        let _sweep = app.sweep.read().await;
        let mark = crate::service::links::sweep_mark(app)
            .await
            .map_err(internal)?;
        for o in objects.iter() {
            match done.remove(&o.path) {
                Some(f)
                    if f.size == o.size
                        && f.version == o.version
                        && f.chunks.iter().all(|c| c.length <= params.max)
                        && all_stored(app, &f).await? =>
                {
                    progress.files_done += 1;
                    progress.bytes_done += f.size;
                    results.insert(o.path.clone(), f);
                }
                _ => todo.push(o.clone()),
            }
        }
        // Files an earlier job sealed, listed again with the same
        // identity (SPEC.md §8.5): taken without reading them.
        let wanted: Vec<(usize, ReuseKey)> = todo
            .iter()
            .enumerate()
            .filter_map(|(i, o)| Some((i, reuse_key(&scope, o, params)?)))
            .collect();
        if !wanted.is_empty() {
            let keys: Vec<ReuseKey> = wanted.iter().map(|(_, k)| k.clone()).collect();
            let found = app
                .meta(move |m| m.reusable_files(&keys))
                .await
                .map_err(internal)?;
            let mut taken = HashSet::new();
            for (at, (i, k)) in wanted.iter().enumerate() {
                let (Some(f), o) = (found.get(&at), &todo[*i]) else {
                    continue;
                };
                if f.size != o.size || f.chunks.iter().any(|c| c.length > params.max) {
                    continue;
                }
                if !all_stored(app, f).await? {
                    // Its chunks were collected: read the file again.
                    let k = k.clone();
                    app.meta(move |m| m.forget_reusable(&k))
                        .await
                        .map_err(internal)?;
                    continue;
                }
                let f = FileDone {
                    version: o.version.clone(),
                    mode: o.mode,
                    ..f.clone()
                };
                progress.files_done += 1;
                progress.bytes_done += f.size;
                progress.files_reused += 1;
                progress.bytes_reused += f.size;
                reused.insert(o.path.clone());
                results.insert(o.path.clone(), f);
                taken.insert(*i);
            }
            todo = (todo.into_iter().enumerate())
                .filter(|(i, _)| !taken.contains(i))
                .map(|(_, o)| o)
                .collect();
        }
        let linked: BTreeSet<(String, u64)> = results
            .values()
            .flat_map(|f| f.chunks.iter())
            .map(|c| (c.sha256.to_string(), u64::from(c.length)))
            .collect();
        if !linked.is_empty() {
            let digests: Vec<Sha256Digest> = results
                .values()
                .flat_map(|f| f.chunks.iter().map(|c| c.sha256))
                .collect();
            let (repo, now) = (job.dest.name.clone(), app.now());
            app.meta(move |m| m.link_blobs(&repo, &linked.into_iter().collect::<Vec<_>>(), now))
                .await
                .map_err(internal)?;
            // A sweep on another replica may have taken some meanwhile:
            // the files with a chunk gone are copied again.
            let gone: HashSet<Sha256Digest> = crate::service::links::settle(app, mark, &digests)
                .await
                .map_err(internal)?
                .into_iter()
                .collect();
            if !gone.is_empty() {
                for o in objects.iter() {
                    let lost = results
                        .get(&o.path)
                        .is_some_and(|f| f.chunks.iter().any(|c| gone.contains(&c.sha256)));
                    if lost {
                        let f = results.remove(&o.path).expect("a result");
                        progress.files_done -= 1;
                        progress.bytes_done -= f.size;
                        if reused.remove(&o.path) {
                            progress.files_reused -= 1;
                            progress.bytes_reused -= f.size;
                        }
                        todo.push(o.clone());
                    }
                }
            }
        }
    }
    running
        .bytes_done
        .store(progress.bytes_done, Ordering::Relaxed);
    let stored_before = running.bytes_stored.load(Ordering::Relaxed);
    progress.bytes_stored = stored_before;
    {
        let (id, p) = (job.id.clone(), progress);
        app.meta(move |m| {
            m.update_sync(&id, |j| {
                j.progress = p;
                !j.state.is_finished()
            })
        })
        .await
        .map_err(internal)?;
    }

    let cutter = params
        .cutter()
        .map_err(|e| SyncError::new(ErrorKind::Internal, e.to_string()))?;
    let sink: Arc<dyn ChunkSink> = Arc::new(StoreSink {
        app: Arc::clone(app),
        running: Arc::clone(running),
    });
    let shared = Mutex::new((progress, results));
    stream::iter(todo)
        .map(|o| {
            let (source, sink, shared, scope) = (Arc::clone(&source), Arc::clone(&sink), &shared, &scope);
            async move {
                let mut copies = 0;
                let (file, digests) = loop {
                    copies += 1;
                    let mark = crate::service::links::sweep_mark(app).await.map_err(internal)?;
                    let file = with_retries(app, job, running, || {
                        copy_object(&*source, &o, cutter, Arc::clone(&sink), running)
                    })
                    .await?;
                    let chunks: BTreeSet<(String, u64)> = file
                        .chunks
                        .iter()
                        .map(|c| (c.sha256.to_string(), u64::from(c.length)))
                        .collect();
                    let (repo, now) = (job.dest.name.clone(), app.now());
                    let digests: Vec<String> = chunks.iter().map(|(d, _)| d.clone()).collect();
                    app.meta(move |m| {
                        m.link_blobs(&repo, &chunks.into_iter().collect::<Vec<_>>(), now)
                    })
                    .await
                    .map_err(internal)?;
                    let found: Vec<Sha256Digest> = file.chunks.iter().map(|c| c.sha256).collect();
                    let gone = crate::service::links::settle(app, mark, &found).await.map_err(internal)?;
                    if gone.is_empty() {
                        break (file, digests);
                    }
                    // A sweep on another replica deleted chunks this copy
                    // found in the store before they were linked.
                    if copies == 3 {
                        return Err(SyncError::new(
                            ErrorKind::Internal,
                            format!(
                                "{}: garbage collection kept deleting its chunks; start the sync again",
                                o.path
                            ),
                        ));
                    }
                };
                // Linked now, and the claim keeps the volume's links.
                {
                    let mut pins = running.pinned.lock().expect("pins lock");
                    for d in &digests {
                        pins.remove(d);
                    }
                }
                let p = {
                    let mut s = shared.lock().expect("progress lock");
                    s.0.files_done += 1;
                    s.0.bytes_done = running.bytes_done.load(Ordering::Relaxed);
                    s.0.bytes_stored = running.bytes_stored.load(Ordering::Relaxed);
                    s.1.insert(o.path.clone(), file.clone());
                    s.0
                };
                let (id, path) = (job.id.clone(), o.path.clone());
                let reuse = reuse_key(scope, &o, params);
                app.meta(move |m| m.sync_file_done(&id, &path, &file, &p, reuse.as_ref()))
                    .await
                    .map_err(internal)?;
                Ok::<_, SyncError>(())
            }
        })
        .buffer_unordered(FILES_AT_ONCE)
        .try_collect::<()>()
        .await?;
    let (mut progress, results) = shared.into_inner().expect("progress lock");
    progress.bytes_stored = running.bytes_stored.load(Ordering::Relaxed);

    let tree = build_tree(&objects, &results, params)?;
    let provenance = pinned.as_deref().unwrap_or(uri);
    commit(app, job, &claim, &tree, provenance, progress).await
}

/// The chunking parameters of the volume `repo`'s head (SPEC.md §4.1),
/// read from its tree index's header; the default for a new volume, or
/// when the head is not a readable version.
async fn chunking_for(app: &Arc<App>, repo: &str) -> ChunkingParams {
    let of_head = async {
        let r = repo.to_string();
        let head = app
            .meta(move |m| Ok::<_, crate::error::RegistryError>(m.volume(&r).ok()))
            .await
            .ok()??
            .head?;
        let index = app.blobs.get(&head.index_digest).await.ok()??;
        let ix = VersionIndex::parse(&index).ok()?;
        let manifest = app
            .blobs
            .get(&oci::sha256_of(&ix.tree_manifest)?)
            .await
            .ok()??;
        let layers = oci::artifact_layers(&manifest, oci::MT_TREE_MANIFEST).ok()?;
        let tree = oci::sha256_of(layers.first()?)?;
        let header = sealvol_spec::tree::HEADER_BYTES as u64;
        match app.blobs.body(&tree, 0, header).await.ok()?? {
            crate::store::BlobBody::Bytes(b) => TreeIndex::params_of(&b),
            crate::store::BlobBody::Stream(_) => None,
        }
    };
    of_head.await.unwrap_or_default()
}

/// Where a file of a source in `scope` is recorded for later jobs (SPEC.md
/// §8.5), when the source names its content.
fn reuse_key(scope: &Option<String>, o: &Object, chunking: ChunkingParams) -> Option<ReuseKey> {
    Some(ReuseKey {
        chunking,
        scope: scope.clone()?,
        identity: o.identity.clone()?,
    })
}

/// Whether every chunk of a file recorded as done is still stored.
async fn all_stored(app: &Arc<App>, f: &FileDone) -> std::result::Result<bool, SyncError> {
    for c in &f.chunks {
        if app.blobs.size(&c.sha256).await.map_err(internal)?.is_none() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// One try at one object: read it whole through the sealer.
async fn copy_object(
    source: &dyn sealvol_sync::Source,
    o: &Object,
    cutter: sealvol_spec::Cutter,
    sink: Arc<dyn ChunkSink>,
    running: &Running,
) -> std::result::Result<FileDone, SyncError> {
    let read = AtomicU64::new(0);
    let result = async {
        let bytes = source.open(o).await?;
        sealvol_sync::seal_object(
            o,
            bytes,
            cutter,
            sink,
            &|n| {
                read.fetch_add(n, Ordering::Relaxed);
                running.bytes_done.fetch_add(n, Ordering::Relaxed);
            },
            &running.cancel,
        )
        .await
    }
    .await;
    // Every message names the source (SPEC.md §8.2).
    let result = result.map_err(|mut e| {
        if !e.message.starts_with(source.uri()) {
            e.message = format!("{}: {}", source.uri(), e.message);
        }
        e
    });
    match result {
        Ok(s) => Ok(FileDone {
            size: s.size,
            version: o.version.clone(),
            mode: o.mode,
            blake3: s.blake3,
            chunks: s.chunks,
            pieces: s.pieces,
        }),
        Err(e) => {
            // A retry reads the object again from its start.
            running
                .bytes_done
                .fetch_sub(read.load(Ordering::Relaxed), Ordering::Relaxed);
            Err(e)
        }
    }
}

/// The folders the files' paths imply.
fn folders_of(objects: &[Object]) -> BTreeSet<String> {
    let mut dirs = BTreeSet::new();
    for o in objects {
        let mut p = o.path.as_str();
        while let Some((parent, _)) = p.rsplit_once('/') {
            dirs.insert(parent.to_string());
            p = parent;
        }
    }
    dirs
}

/// A listing whose files can make a tree: no path is both a file and a
/// folder of other files (object stores allow `a` beside `a/b`). Checked
/// before anything is copied.
fn check_listing(uri: &str, objects: &[Object]) -> std::result::Result<(), SyncError> {
    let dirs = folders_of(objects);
    match objects.iter().find(|o| dirs.contains(&o.path)) {
        Some(o) => Err(SyncError::new(
            ErrorKind::InvalidSource,
            format!(
                "{uri}: {} is both a file and a folder of other files; exclude one of them",
                o.path
            ),
        )),
        None => Ok(()),
    }
}

/// The tree of the version: every file, and the folders their paths imply.
fn build_tree(
    objects: &[Object],
    results: &HashMap<String, FileDone>,
    params: ChunkingParams,
) -> std::result::Result<TreeIndex, SyncError> {
    let mut entries = Vec::with_capacity(objects.len());
    for o in objects {
        let f = results
            .get(&o.path)
            .ok_or_else(|| internal(format!("{} was not copied", o.path)))?;
        entries.push(Entry {
            path: o.path.clone(),
            mode: f.mode,
            data: EntryData::File {
                size: f.size,
                blake3: f.blake3,
                chunks: f.chunks.clone(),
                pieces: f.pieces.clone(),
            },
        });
    }
    for d in folders_of(objects) {
        entries.push(Entry {
            path: d,
            mode: sealvol_sync::DIR_MODE,
            data: EntryData::Dir,
        });
    }
    TreeIndex::new(params, entries).map_err(internal)
}

/// Seals the version and moves the tags, unless the job was canceled.
async fn commit(
    app: &Arc<App>,
    job: &SyncJob,
    claim: &HeldClaim,
    tree: &TreeIndex,
    provenance: &str,
    mut progress: SyncProgress,
) -> std::result::Result<(), SyncError> {
    let _commit = app.syncs.commit.lock().await;
    let id = job.id.clone();
    let state = app
        .meta(move |m| m.sync(&id))
        .await
        .map_err(internal)?
        .map(|j| j.state);
    if state != Some(SyncState::Running) {
        return Err(SyncError::new(ErrorKind::Canceled, "canceled"));
    }
    claim.still_held().await?;
    let version = publish(app, &job.dest, tree, provenance).await?;
    progress.files_done = progress.files_total;
    progress.bytes_done = progress.bytes_total;
    let (id, now) = (job.id.clone(), app.now());
    app.meta(move |m| {
        m.update_sync(&id, |j| {
            j.state = SyncState::Ready;
            j.finished_at = Some(now);
            j.progress = progress;
            j.retrying = None;
            j.version = Some(version);
            true
        })
    })
    .await
    .map_err(internal)?;
    Ok(())
}

/// Stores the version's manifests bottom-up, the index (which seals it:
/// `head` and `b3-<hex>` move), then the destination tag. A version the
/// volume already holds keeps its index and only the tag moves, unless that
/// index carries a format 1 tree: the version is then re-published with
/// this job's format 2 tree (SPEC.md §7.1), which changes no sequence.
async fn publish(
    app: &Arc<App>,
    dest: &SyncDest,
    tree: &TreeIndex,
    source: &str,
) -> std::result::Result<SyncedVersion, SyncError> {
    let repo = dest.name.as_str();
    let digest = tree.version_digest();
    let digest_tag = Tag::for_digest(&digest);
    let store = |reference: String, bytes: Bytes, media_type: String| async move {
        crate::service::manifests::store_manifest(app, repo, &reference, bytes, Some(&media_type))
            .await
            .map(|(d, _)| d)
            .map_err(|e| internal(e.to_string()))
    };

    let (r, t) = (repo.to_string(), digest_tag.as_str().to_string());
    let existing = match app
        .meta(move |m| m.resolve_tag(&r, &t))
        .await
        .map_err(internal)?
    {
        Some(index) => {
            let d: Sha256Digest = index.parse().map_err(internal)?;
            match app.blobs.get(&d).await.map_err(internal)? {
                Some(bytes) => match VersionIndex::parse(&bytes) {
                    Ok(ix)
                        if ix.digest == digest
                            && crate::service::manifests::tree_format(app, &ix).await
                                != Some(sealvol_spec::TreeFormat::V1) =>
                    {
                        Some((bytes, d))
                    }
                    _ => None,
                },
                None => None,
            }
        }
        None => None,
    };
    let (index_bytes, index_digest) = match existing {
        Some(found) => found,
        None => {
            let built = oci::build_version(
                tree,
                &VersionMeta {
                    created: humantime::format_rfc3339_millis(
                        std::time::UNIX_EPOCH + Duration::from_secs(app.now()),
                    )
                    .to_string(),
                    source: Some(source.to_string()),
                },
            )
            .map_err(|e| internal(e.to_string()))?;
            for c in &built.blobs {
                let d = c.digest();
                let _sweep = app.sweep.read().await;
                let mark = crate::service::links::sweep_mark(app)
                    .await
                    .map_err(internal)?;
                app.blobs
                    .put(&d, Bytes::from(c.bytes.clone()))
                    .await
                    .map_err(internal)?;
                let (r, ds, n, now) = (
                    repo.to_string(),
                    d.to_string(),
                    c.bytes.len() as u64,
                    app.now(),
                );
                app.meta(move |m| m.link_blob(&r, &ds, n, now))
                    .await
                    .map_err(internal)?;
                if !crate::service::links::settle(app, mark, &[d])
                    .await
                    .map_err(internal)?
                    .is_empty()
                {
                    // A sweep on another replica took them as they were stored.
                    app.blobs
                        .put(&d, Bytes::from(c.bytes.clone()))
                        .await
                        .map_err(internal)?;
                }
            }
            for m in &built.manifests {
                store(
                    m.digest().to_string(),
                    Bytes::from(m.bytes.clone()),
                    m.descriptor.media_type().to_string(),
                )
                .await?;
            }
            // Stored under the destination tag when there is one: sealing
            // (head, b3-) and the tag then move in one transaction.
            let bytes = Bytes::from(built.index.bytes.clone());
            let reference = dest
                .tag
                .clone()
                .unwrap_or_else(|| built.index.digest().to_string());
            let d = store(
                reference,
                bytes.clone(),
                crate::service::manifests::OCI_INDEX.into(),
            )
            .await?;
            return Ok(SyncedVersion {
                digest,
                index_digest: d,
            });
        }
    };
    if let Some(tag) = &dest.tag {
        store(
            tag.clone(),
            index_bytes,
            crate::service::manifests::OCI_INDEX.into(),
        )
        .await?;
    }
    Ok(SyncedVersion {
        digest,
        index_digest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_is_file_and_folder_is_refused_before_copying() {
        let o = |p: &str| Object {
            path: p.into(),
            key: p.into(),
            size: 1,
            checksum: None,
            version: None,
            identity: None,
            mode: 0o644,
            mismatch_hint: None,
        };
        assert!(check_listing("s3://b", &[o("a/b"), o("c")]).is_ok());
        let e = check_listing("s3://b", &[o("a"), o("a/b")]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidSource);
        assert!(e.message.starts_with("s3://b: a "), "{}", e.message);
    }

    #[test]
    fn excluded_folders_drop_everything_under_them() {
        let f = Filter::new(&[], &["logs".to_string()]).unwrap();
        assert!(!selected(&f, "logs/a.txt"));
        assert!(!selected(&f, "logs/deep/b.txt"));
        assert!(selected(&f, "model.safetensors"));
        let f = Filter::new(&["*.json".to_string()], &[]).unwrap();
        assert!(selected(&f, "sub/config.json"));
        assert!(!selected(&f, "sub/model.bin"));
    }
}
