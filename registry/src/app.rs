//! The registry's state: what every request handler, background job
//! (garbage collection, sync workers) and the auth layer share.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::blobs::BlobStore;
use crate::claims::Claims;
use crate::clock::Clock;
use crate::error::{RegistryError, Result};
use crate::meta::MetaStore;
use crate::uploads::Uploads;

/// How long deleted versions, unreferenced blobs and push claims last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub retention_seconds: u64,
    pub gc_grace_seconds: u64,
    pub claim_ttl_seconds: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            retention_seconds: sealvol_spec::api::DEFAULT_RETENTION_SECONDS,
            gc_grace_seconds: sealvol_spec::api::DEFAULT_GC_GRACE_SECONDS,
            claim_ttl_seconds: sealvol_spec::api::DEFAULT_CLAIM_TTL_SECONDS,
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
    pub claims: Claims,
    /// Held shared by every handler that relies on a blob or manifest
    /// existing until it has recorded that reliance, and exclusively by
    /// garbage collection's sweep (see `gc`).
    pub sweep: tokio::sync::RwLock<()>,
    /// One garbage collection at a time.
    pub gc_running: tokio::sync::Mutex<()>,
    /// Sync job workers' shared state.
    pub syncs: crate::sync_runner::SyncControl,
    /// `repo NUL digest` -> when a client last checked the blob with HEAD:
    /// a push that finds a blob skips uploading it and references it later.
    touched: Mutex<HashMap<String, u64>>,
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
            clock: Clock::from_env(),
            policy,
            claims: Claims::default(),
            sweep: tokio::sync::RwLock::new(()),
            gc_running: tokio::sync::Mutex::new(()),
            syncs: Default::default(),
            touched: Mutex::new(HashMap::new()),
        }
    }

    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    pub(crate) fn touch(&self, repo: &str, digest: &str) {
        let now = self.now();
        self.touched
            .lock()
            .expect("touched lock")
            .insert(crate::meta::key(&[repo, digest]), now);
    }

    pub(crate) fn touched_since(&self, t: u64) -> HashSet<String> {
        let touched = self.touched.lock().expect("touched lock");
        touched
            .iter()
            .filter(|(_, at)| **at >= t)
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub(crate) fn forget_touches_before(&self, t: u64) {
        self.touched
            .lock()
            .expect("touched lock")
            .retain(|_, at| *at >= t);
    }

    /// Runs a metadata operation off the async threads (redb commits fsync).
    pub(crate) async fn meta<T: Send + 'static>(
        &self,
        f: impl FnOnce(&MetaStore) -> crate::meta::Result<T> + Send + 'static,
    ) -> Result<T> {
        let m = Arc::clone(&self.meta);
        tokio::task::spawn_blocking(move || f(&m))
            .await
            .map_err(RegistryError::internal)?
            .map_err(RegistryError::from)
    }
}
