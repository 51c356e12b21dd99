//! The registry's state: what every request handler, background job
//! (garbage collection, sync workers) and the auth layer share.

use std::sync::{Arc, Mutex};

use crate::clock::Clock;
use crate::error::{RegistryError, Result};
use crate::service::uploads::Uploads;
use crate::store::meta::MetaStore;
use crate::store::BlobStore;

/// How long deleted versions, unreferenced blobs, push claims and idle
/// upload sessions last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub retention_seconds: u64,
    pub gc_grace_seconds: u64,
    pub claim_ttl_seconds: u64,
    /// An upload session nobody has written to for this long is abandoned.
    pub upload_ttl_seconds: u64,
}

/// One day, as distribution's default `purgeuploads` age is a week: long
/// enough for a slow resumable upload, short enough that an abandoned one
/// stops holding disk and garbage collection.
pub const DEFAULT_UPLOAD_TTL_SECONDS: u64 = 86_400;

impl Default for Policy {
    fn default() -> Self {
        Policy {
            retention_seconds: sealvol_spec::api::DEFAULT_RETENTION_SECONDS,
            gc_grace_seconds: sealvol_spec::api::DEFAULT_GC_GRACE_SECONDS,
            claim_ttl_seconds: sealvol_spec::api::DEFAULT_CLAIM_TTL_SECONDS,
            upload_ttl_seconds: DEFAULT_UPLOAD_TTL_SECONDS,
        }
    }
}

/// Everything a request may touch.
pub struct App {
    pub blobs: Arc<dyn BlobStore>,
    pub meta: Arc<MetaStore>,
    pub uploads: Uploads,
    pub clock: Clock,
    pub policy: Policy,
    /// Held shared by every handler that relies on a blob or manifest
    /// existing until it has recorded that reliance, and exclusively by
    /// garbage collection's sweep (see `gc`).
    pub sweep: tokio::sync::RwLock<()>,
    /// One garbage collection at a time.
    pub gc_running: tokio::sync::Mutex<()>,
    /// Sync job workers' shared state.
    pub syncs: crate::service::syncs::runner::SyncControl,
    /// The registry this one caches, in pull-through mode.
    pub upstream: Option<Arc<crate::service::pull_through::Upstream>>,
    /// Blob checks (`HEAD`) waiting to renew their links' times, written
    /// together (see [`App::check_blob`]).
    checks: Mutex<Vec<(String, tokio::sync::oneshot::Sender<bool>)>>,
    /// Held by the request writing the waiting checks.
    checks_writer: tokio::sync::Mutex<()>,
    /// Trees the API read lately (`crate::service::trees`).
    pub(crate) trees: crate::service::trees::TreeCache,
}

impl App {
    pub fn new(
        blobs: Arc<dyn BlobStore>,
        meta: Arc<MetaStore>,
        uploads: Uploads,
        policy: Policy,
    ) -> App {
        App {
            blobs,
            meta,
            uploads,
            // The system's; `serve` may put a test clock in its place.
            clock: Clock::default(),
            policy,
            sweep: tokio::sync::RwLock::new(()),
            gc_running: tokio::sync::Mutex::new(()),
            syncs: Default::default(),
            upstream: None,
            trees: Default::default(),
            checks: Mutex::new(Vec::new()),
            checks_writer: tokio::sync::Mutex::new(()),
        }
    }

    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// A client checks blob `digest` of `repo` with `HEAD`: its size if
    /// the repository links it. A push that finds a blob this way skips
    /// uploading it and references it later, so the check renews the
    /// link's time, in the metadata store where garbage collection on any
    /// replica sees it, before it is answered. Only a link older than a
    /// tenth of the grace period is renewed (so a check keeps a link at
    /// least nine tenths of it), and the renewals of concurrent checks
    /// share one transaction: a push of a new version checks every chunk
    /// of the last one.
    pub(crate) async fn check_blob(&self, repo: &str, digest: &str) -> Result<Option<u64>> {
        let (k, now) = (crate::store::meta::key(&[repo, digest]), self.now());
        let k2 = k.clone();
        let Some((size, linked_at)) = self.meta(move |m| m.link(&k2)).await? else {
            return Ok(None);
        };
        if linked_at >= now.saturating_sub(self.policy.gc_grace_seconds / 10) {
            return Ok(Some(size));
        }
        let (tell, told) = tokio::sync::oneshot::channel();
        self.checks.lock().expect("checks lock").push((k, tell));
        {
            // Whoever holds the writer writes every check waiting then,
            // ours included unless an earlier writer took it.
            let _writer = self.checks_writer.lock().await;
            let batch = std::mem::take(&mut *self.checks.lock().expect("checks lock"));
            if !batch.is_empty() {
                let keys: Vec<String> = batch.iter().map(|(k, _)| k.clone()).collect();
                let now = self.now();
                let linked = self.meta(move |m| m.renew_links(&keys, now)).await?;
                for ((_, tell), linked) in batch.into_iter().zip(linked) {
                    let _ = tell.send(linked);
                }
            }
        }
        match told.await {
            // Unlinked meanwhile (a delete, or a sweep that came first).
            Ok(linked) => Ok(linked.then_some(size)),
            Err(_) => Err(RegistryError::internal(
                "the blob check could not be recorded",
            )),
        }
    }

    /// Runs a metadata operation off the async threads (redb commits fsync).
    pub(crate) async fn meta<T: Send + 'static>(
        &self,
        f: impl FnOnce(&MetaStore) -> crate::store::meta::Result<T> + Send + 'static,
    ) -> Result<T> {
        self.lifecycle(f).await
    }

    /// [`App::meta`] for an operation with an error of its own (volumes,
    /// keys), answered as that error maps.
    pub(crate) async fn lifecycle<T: Send + 'static, E: Into<RegistryError> + Send + 'static>(
        &self,
        f: impl FnOnce(&MetaStore) -> std::result::Result<T, E> + Send + 'static,
    ) -> Result<T> {
        let m = Arc::clone(&self.meta);
        tokio::task::spawn_blocking(move || f(&m))
            .await
            .map_err(RegistryError::internal)?
            .map_err(Into::into)
    }
}
