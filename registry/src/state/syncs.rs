//! What the sync workers and the API share about running jobs, in memory:
//! the policies set at startup, each running job's cancel flag, byte
//! counts and pinned chunks, and the commit lock.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sealvol_sync::NetPolicy;
use tokio::sync::Notify;

use crate::store::meta::secrets::{self, SecretKey};

/// Which folders `dir://` sources may read (SPEC.md §8.1): only under
/// `roots`, none when there are none, and never the registry's own data
/// folder (its database and secrets key) nor a folder that holds it.
#[derive(Clone, Debug, Default)]
pub struct DirPolicy {
    pub data_root: Option<PathBuf>,
    pub roots: Vec<PathBuf>,
}

impl DirPolicy {
    /// Why `uri` (a `dir://` source) may not be read, if it may not.
    pub fn refuse(&self, uri: &str) -> Option<String> {
        let path = Path::new(uri.strip_prefix("dir://")?);
        if self.roots.is_empty() {
            return Some(format!(
                "{uri}: dir:// sources are off on this registry; an admin lists the folders they may read in registry.toml sync_dir_roots"
            ));
        }
        // A folder that does not exist yet cannot leak anything; the job
        // checks again when it runs.
        let real = std::fs::canonicalize(path).ok()?;
        if let Some(data) = self
            .data_root
            .as_ref()
            .and_then(|d| std::fs::canonicalize(d).ok())
        {
            if real.starts_with(&data) || data.starts_with(&real) {
                return Some(format!(
                    "{uri}: a dir:// source cannot include the registry's data folder {}",
                    data.display()
                ));
            }
        }
        let allowed = self
            .roots
            .iter()
            .filter_map(|r| std::fs::canonicalize(r).ok())
            .any(|r| real.starts_with(r));
        (!allowed).then(|| format!("{uri}: not under a folder of registry.toml sync_dir_roots"))
    }
}

/// What the workers and the API share about running jobs.
#[derive(Default)]
pub struct SyncControl {
    /// Set once at startup, before any request.
    pub dirs: std::sync::RwLock<DirPolicy>,
    /// Where sources may connect (SPEC.md §8.4); set once at startup. The
    /// default refuses loopback too.
    pub net: std::sync::RwLock<NetPolicy>,
    /// Seals and opens secret values; set when the data folder is opened.
    pub key: std::sync::OnceLock<SecretKey>,
    /// Wakes an idle worker when a job is queued.
    pub(crate) wake: Notify,
    /// Wakes the schedule loop when a schedule is made or resumed.
    pub(crate) schedules_changed: Notify,
    /// The shortest interval a new schedule may have, in seconds; 0 means
    /// the default (SPEC.md §8.6).
    pub schedule_min_seconds: AtomicU64,
    pub(crate) running: Mutex<HashMap<String, Arc<Running>>>,
    /// Held while a job seals its version and while a cancel decides, so
    /// that a canceled job never seals and a sealed job is never canceled.
    pub(crate) commit: tokio::sync::Mutex<()>,
    /// This registry process among the replicas sharing a metadata store:
    /// the holder of its workers' job leases; set once at startup.
    pub replica: std::sync::OnceLock<String>,
    /// How long a job's lease lasts unless renewed; 0 means the default.
    pub lease_seconds: AtomicU64,
}

/// How long a job's lease lasts unless renewed, by default: a replica that
/// dies leaves its jobs to the others after this.
pub const DEFAULT_LEASE_SECONDS: u64 = 60;

impl SyncControl {
    pub(crate) fn replica(&self) -> &str {
        self.replica.get().map_or("this registry", String::as_str)
    }

    pub(crate) fn schedule_min_every(&self) -> u64 {
        match self.schedule_min_seconds.load(Ordering::Relaxed) {
            0 => sealvol_spec::api::ScheduleRequest::MIN_EVERY,
            n => n,
        }
    }

    pub(crate) fn lease(&self) -> u64 {
        match self.lease_seconds.load(Ordering::Relaxed) {
            0 => DEFAULT_LEASE_SECONDS,
            n => n,
        }
    }
}

/// A running job's cancel flag and live byte counts (the stored progress
/// changes once per file).
#[derive(Default)]
pub(crate) struct Running {
    pub(crate) cancel: AtomicBool,
    pub(crate) bytes_done: AtomicU64,
    pub(crate) bytes_stored: AtomicU64,
    /// Chunks this job stored or found but has not linked yet (a file's
    /// chunks are linked when the whole file is done): garbage collection
    /// keeps their bytes however long the file takes.
    pub(crate) pinned: Mutex<HashSet<String>>,
    /// The value of the job's secret, scrubbed from every message recorded
    /// on the job (a source may echo what it was sent).
    pub(crate) secret: std::sync::OnceLock<String>,
}

impl Running {
    pub(crate) fn scrub(&self, message: &str) -> String {
        secrets::scrub(message, self.secret.get().map(String::as_str))
    }
}

impl SyncControl {
    pub(crate) fn running(&self, id: &str) -> Option<Arc<Running>> {
        self.running.lock().expect("running lock").get(id).cloned()
    }

    /// Every chunk a running job relies on before it links it. Read by
    /// garbage collection under the sweep's write lock; jobs pin under its
    /// read lock, so a chunk found or stored is pinned before any sweep.
    pub fn pinned(&self) -> HashSet<String> {
        let running = self.running.lock().expect("running lock");
        running
            .values()
            .flat_map(|r| r.pinned.lock().expect("pins lock").clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_sources_stay_out_of_the_data_folder_and_inside_the_roots() {
        let top = tempfile::tempdir().unwrap();
        let data = top.path().join("data");
        let models = top.path().join("models");
        let other = top.path().join("other");
        for d in [&data, &models, &other] {
            std::fs::create_dir_all(d.join("sub")).unwrap();
        }
        let uri = |p: &Path| format!("dir://{}", p.display());
        let off = DirPolicy {
            data_root: Some(data.clone()),
            roots: Vec::new(),
        };
        assert!(off
            .refuse(&uri(&models))
            .unwrap()
            .contains("sync_dir_roots"));
        assert_eq!(off.refuse("s3://bucket/x"), None);
        let rooted = DirPolicy {
            roots: vec![models.clone(), top.path().to_path_buf()],
            ..off
        };
        assert!(rooted.refuse(&uri(&data.join("sub"))).is_some());
        assert!(
            rooted.refuse(&uri(top.path())).is_some(),
            "holds the data folder"
        );
        let rooted = DirPolicy {
            roots: vec![models.clone()],
            ..rooted
        };
        assert_eq!(rooted.refuse(&uri(&models.join("sub"))), None);
        assert!(rooted.refuse(&uri(&other)).is_some());
        // A symlink out of a root is judged by where it leads.
        let link = models.join("escape");
        std::os::unix::fs::symlink(&other, &link).unwrap();
        assert!(rooted.refuse(&uri(&link)).is_some());
    }
}
