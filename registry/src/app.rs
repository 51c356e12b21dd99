//! The registry's state: what every request handler, background job
//! (garbage collection, sync workers) and the auth layer share.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::clock::Clock;
use crate::error::{RegistryError, Result};
use crate::meta::MetaStore;
use crate::store::BlobStore;
use crate::uploads::Uploads;

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

/// Most blob checks remembered at once (about 100 bytes each).
const MAX_TOUCHED: usize = 1 << 20;

/// Records a check at `now` in `touched`, keeping it under `cap`. Only a
/// check since `old_before` (the grace period) can still spare a blob, so
/// older ones are dropped first; past the cap even then, the oldest go.
/// Dropping a recent one is safe for data already referenced, and a push
/// that loses the race gets `MANIFEST_BLOB_UNKNOWN` and uploads again.
fn remember_touch(
    touched: &mut HashMap<String, u64>,
    key: String,
    now: u64,
    old_before: u64,
    cap: usize,
) {
    touched.insert(key, now);
    if touched.len() <= cap {
        return;
    }
    touched.retain(|_, at| *at >= old_before);
    if touched.len() > cap {
        let mut times: Vec<u64> = touched.values().copied().collect();
        let keep = cap - cap / 10;
        let (_, cut, _) = times.select_nth_unstable_by(keep, |a, b| b.cmp(a));
        let cut = *cut;
        touched.retain(|_, at| *at > cut);
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
    pub syncs: crate::sync_runner::SyncControl,
    /// The registry this one caches, in pull-through mode.
    pub upstream: Option<Arc<crate::pull_through::Upstream>>,
    /// `repo NUL digest` -> when a client last checked the blob with HEAD:
    /// a push that finds a blob skips uploading it and references it later.
    touched: Mutex<HashMap<String, u64>>,
    /// While garbage collection marks: the repositories a manifest was
    /// stored in since its snapshot (see [`App::manifest_stored`]).
    stored_while_marking: Mutex<Option<HashSet<String>>>,
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
            touched: Mutex::new(HashMap::new()),
            stored_while_marking: Mutex::new(None),
        }
    }

    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    pub(crate) fn touch(&self, repo: &str, digest: &str) {
        let now = self.now();
        let mut touched = self.touched.lock().expect("touched lock");
        remember_touch(
            &mut touched,
            crate::meta::key(&[repo, digest]),
            now,
            now.saturating_sub(self.policy.gc_grace_seconds),
            MAX_TOUCHED,
        );
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

    /// Garbage collection is about to take its snapshot.
    pub(crate) fn begin_marking(&self) {
        *self.stored_while_marking.lock().expect("marking lock") = Some(HashSet::new());
    }

    /// Records, with the sweep's read side held, that a manifest was just
    /// stored in `repo`.
    ///
    /// Marking works on a snapshot, so a manifest stored after it can
    /// reference blobs and child manifests that marking found unreferenced
    /// and old; `put_manifest` saw them still linked and accepted it. The
    /// sweep therefore leaves alone every repository named here. Touching
    /// the referenced blobs' link times instead would not be enough: a
    /// child manifest kept that way would still lose its own blobs, which
    /// marking doomed with it. A repository spared once is collected by
    /// the next pass, which sees the new manifest.
    pub(crate) fn manifest_stored(&self, repo: &str) {
        if let Some(repos) = self
            .stored_while_marking
            .lock()
            .expect("marking lock")
            .as_mut()
        {
            repos.insert(repo.to_string());
        }
    }

    /// The repositories [`App::manifest_stored`] named since
    /// [`App::begin_marking`]; called by the sweep under its write lock,
    /// so the set is complete.
    pub(crate) fn end_marking(&self) -> HashSet<String> {
        self.stored_while_marking
            .lock()
            .expect("marking lock")
            .take()
            .unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_checks_are_bounded() {
        let mut t = HashMap::new();
        for i in 0..10u64 {
            remember_touch(&mut t, format!("old{i}"), i, 0, 10);
        }
        assert_eq!(t.len(), 10);
        // Past the cap: the checks older than the grace period go.
        remember_touch(&mut t, "new".into(), 100, 50, 10);
        assert_eq!(t.keys().collect::<Vec<_>>(), ["new"]);
        // All within the grace period: the oldest go.
        for i in 0..20u64 {
            remember_touch(&mut t, format!("k{i}"), 100 + i, 50, 10);
            assert!(t.len() <= 10);
        }
        assert!(t.contains_key("k19") && !t.contains_key("k0"));
    }
}
