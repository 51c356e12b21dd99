//! The registry's state: what every request handler, background job
//! (garbage collection, sync workers) and the auth layer share.

use std::sync::{Arc, Mutex};

use crate::clock::Clock;
use crate::error::{RegistryError, Result};
use crate::state::uploads::Uploads;
use crate::store::meta::MetaStore;
use crate::store::BlobStore;

/// How long deleted versions, unreferenced blobs, push claims and idle
/// upload sessions last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
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

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes {
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
    pub lifetimes: Lifetimes,
    /// Held shared by every handler that relies on a blob or manifest
    /// existing until it has recorded that reliance, and exclusively by
    /// garbage collection's sweep (see `gc`).
    pub sweep: tokio::sync::RwLock<()>,
    /// One garbage collection at a time.
    pub gc_running: tokio::sync::Mutex<()>,
    /// Sync job workers' shared state.
    pub syncs: crate::state::syncs::SyncControl,
    /// The registry this one caches, in pull-through mode.
    pub upstream: Option<Arc<crate::state::upstream::Upstream>>,
    /// Blob checks (`HEAD`) waiting to renew their links' times, written
    /// together (see `service::links::check_blob`).
    pub(crate) checks: Mutex<Vec<(String, tokio::sync::oneshot::Sender<bool>)>>,
    /// Held by the request writing the waiting checks.
    pub(crate) checks_writer: tokio::sync::Mutex<()>,
    /// Trees the API read lately (`service::trees`).
    pub(crate) trees: crate::state::trees::TreeCache,
}

impl App {
    pub fn new(
        blobs: Arc<dyn BlobStore>,
        meta: Arc<MetaStore>,
        uploads: Uploads,
        lifetimes: Lifetimes,
    ) -> App {
        App {
            blobs,
            meta,
            uploads,
            // The system's; `serve` may put a test clock in its place.
            clock: Clock::default(),
            lifetimes,
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

    /// Runs a metadata operation off the async threads (redb commits
    /// fsync), answered as its error maps: the store's own, or a
    /// volume's or key's.
    pub(crate) async fn meta<T: Send + 'static, E: Into<RegistryError> + Send + 'static>(
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
