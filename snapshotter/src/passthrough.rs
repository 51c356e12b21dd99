//! FUSE passthrough (Linux 6.9 and later): once a file of a mounted
//! version has been read whole, a whole-file copy is kept in the chunk
//! cache, checked against the file's BLAKE3 as it is written
//! ([`ChunkCache::put_whole_file`]); later opens of that file, in this
//! mount or a later one, hand the copy to the kernel, which serves reads
//! from it at local-disk speed without asking this process.
//!
//! The kernel serves those bytes unseen, so only a copy nobody but root
//! could have changed since it was checked is used: root-owned and
//! read-only ([`ChunkCache::whole_file`]). Registering a backing file needs
//! CAP_SYS_ADMIN anyway, so only mounts run as root pass through; others,
//! and kernels without `FUSE_PASSTHROUGH`, serve every read themselves.

use std::collections::HashSet;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use sealvol_client::cache::ChunkCache;
use sealvol_spec::B3Digest;

use crate::inodes::Inodes;
use crate::verify::FileReader;

/// Bytes read per step while a copy is built.
const STEP: u32 = 1 << 20;

pub(crate) struct WholeFiles {
    cache: ChunkCache,
    /// Set once the kernel accepted `FUSE_PASSTHROUGH`; cleared if
    /// registering a backing file fails.
    enabled: AtomicBool,
    /// Files whose copy is being built.
    building: Mutex<HashSet<u64>>,
}

impl WholeFiles {
    /// Whole-file copies in `cache`, for a mount that may pass through:
    /// one run as root (see the module documentation).
    pub fn for_root(cache: ChunkCache) -> Option<Arc<WholeFiles>> {
        // SAFETY: geteuid has no preconditions.
        (unsafe { libc::geteuid() } == 0).then(|| {
            Arc::new(WholeFiles {
                cache,
                enabled: AtomicBool::new(false),
                building: Mutex::default(),
            })
        })
    }

    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    pub fn disable(&self) {
        self.enabled.store(false, Ordering::Relaxed);
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The checked copy of file `ino`, when there is one to pass through.
    pub fn open(&self, inodes: &Inodes, ino: u64) -> Option<std::fs::File> {
        let file = inodes.file(ino)?;
        self.cache.whole_file(file.blake3, file.size)
    }

    /// After a handle of file `ino` that read `read` bytes is closed:
    /// builds the copy in the background when the handle read as much as
    /// the file holds and there is no copy yet.
    pub fn closed(
        self: &Arc<Self>,
        ino: u64,
        read: u64,
        inodes: &Arc<Inodes>,
        reader: &Arc<FileReader>,
        rt: &tokio::runtime::Handle,
    ) {
        let Some(file) = inodes.file(ino) else { return };
        if !self.enabled() || file.size == 0 || read < file.size {
            return;
        }
        if self.cache.whole_file(file.blake3, file.size).is_some() {
            return;
        }
        if !self.building.lock().expect("building lock").insert(ino) {
            return;
        }
        let (me, inodes, reader) = (Arc::clone(self), Arc::clone(inodes), Arc::clone(reader));
        rt.spawn(async move {
            if let Err(e) = me.build(&inodes, &reader, ino).await {
                tracing::warn!(ino, error = %e, "no whole-file copy for passthrough");
            }
            me.building.lock().expect("building lock").remove(&ino);
        });
    }

    /// Reads the file through the mount's reader (every piece checked
    /// through the chain) into a new copy.
    async fn build(
        &self,
        inodes: &Inodes,
        reader: &Arc<FileReader>,
        ino: u64,
    ) -> std::io::Result<()> {
        let Some(file) = inodes.file(ino) else {
            return Ok(());
        };
        let (size, blake3) = (file.size, *file.blake3);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let cache = self.cache.clone();
        let writer = tokio::task::spawn_blocking(move || {
            cache.put_whole_file(&blake3, size, |f| {
                let mut hasher = blake3::Hasher::new();
                while let Some(bytes) = rx.blocking_recv() {
                    hasher.update(&bytes);
                    f.write_all(&bytes)?;
                }
                Ok(B3Digest(*hasher.finalize().as_bytes()))
            })
        });
        let mut offset = 0u64;
        while offset < size {
            // A failed read ends the stream short: the writer's check then
            // refuses the copy.
            let Ok(bytes) = reader.read(ino, offset, STEP).await else {
                break;
            };
            if bytes.is_empty() {
                break;
            }
            offset += bytes.len() as u64;
            if tx.send(bytes).await.is_err() {
                break;
            }
        }
        drop(tx);
        writer.await.map_err(std::io::Error::other)?
    }
}
