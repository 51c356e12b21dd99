//! A root FUSE mount's one local copy of what it reads: the same layout
//! the fanotify engine fills (`fanotify::layout`, sparse files under
//! `<cache>/fanotify/<version>`), instead of chunks in the chunk cache and
//! then a whole-file copy built from them. Each byte read is written once.
//!
//! A read whose pieces are filled is served from the layout file; one
//! that lacks pieces reads them through the verified reader
//! ([`FileReader::read`], the chain of SPEC.md §2.5), writes them into the
//! file, and then serves it. The pieces are recorded in the file's fill
//! bitmap once durable, so a later mount of either engine reuses them.
//!
//! Once a file is wholly filled, opening it hands the layout file to the
//! kernel (FUSE passthrough, Linux 6.9 and later), which then serves its
//! reads at local-disk speed without asking this process. The kernel
//! serves those bytes unseen, so only files nobody but root could have
//! changed since they were checked qualify: the layout folder is root's,
//! mode 0700, and a piece counts once this mount verified and wrote it, or
//! an earlier mount recorded it (only after it was verified, written and
//! fsynced). Registering a backing file needs CAP_SYS_ADMIN anyway, so
//! only mounts run as root keep a layout; others keep chunks in the chunk
//! cache as before, and serve every read themselves.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, StreamExt as _};
use sealvol_spec::chain::PIECE;

use crate::fanotify::layout::Layout;
use crate::inodes::Inodes;
use crate::reader::ReadError;
use crate::verify::FileReader;

/// Pieces of one read fetched at once.
const JOBS: usize = 8;

pub(crate) struct FilledFiles {
    layout: Layout,
    /// The version's inode number to the index in `layout.files`.
    by_ino: HashMap<u64, usize>,
    /// Descriptors reads of filled pieces are served through.
    readers: Mutex<HashMap<usize, Arc<File>>>,
    /// Pieces written and not yet recorded: an unmount waits for them.
    commits: AtomicUsize,
    /// Written pieces waiting for the committer, by file index.
    pending: Mutex<HashMap<usize, Vec<u64>>>,
    /// Whether a committer runs ([`FilledFiles::record_later`]).
    committing: AtomicBool,
    /// Set once the kernel accepted `FUSE_PASSTHROUGH`; cleared if
    /// registering a backing file fails.
    passthrough: AtomicBool,
}

impl FilledFiles {
    /// The layout of `inodes` in `folder`, for a mount run as root (see
    /// the module documentation); `None` otherwise, or when the folder
    /// cannot be laid out (the mount then keeps chunks as a user's does).
    pub fn for_root(
        folder: &Path,
        inodes: &Inodes,
        owner: crate::inodes::Owner,
        reference: &str,
    ) -> Option<Arc<FilledFiles>> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let layout = match Layout::prepare(folder, inodes, owner, reference) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "no local copy of what is read: keeping chunks instead");
                return None;
            }
        };
        let by_ino = layout
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.ino, i))
            .collect();
        Some(Arc::new(FilledFiles {
            layout,
            by_ino,
            readers: Mutex::default(),
            commits: AtomicUsize::new(0),
            pending: Mutex::default(),
            committing: AtomicBool::new(false),
            passthrough: AtomicBool::new(false),
        }))
    }

    pub fn enable_passthrough(&self) {
        self.passthrough.store(true, Ordering::Relaxed);
    }

    pub fn disable_passthrough(&self) {
        self.passthrough.store(false, Ordering::Relaxed);
    }

    /// File `ino`, open read-only to hand to the kernel, when passthrough
    /// is on and every piece of it is written. Written is enough for this
    /// mount: the verified bytes are in the page cache, where the kernel
    /// reads them; only later mounts need them durable (recorded), and on
    /// a disk slower than the network that can be seconds later.
    pub fn whole(&self, ino: u64) -> Option<File> {
        if !self.passthrough.load(Ordering::Relaxed) {
            return None;
        }
        let f = &self.layout.files[*self.by_ino.get(&ino)?];
        if f.size == 0 || !f.missing(0, f.size).is_empty() {
            return None;
        }
        File::open(&f.path).ok()
    }

    /// Whether every piece under bytes `offset..end` of file `ino` is
    /// written (read-ahead has nothing to fetch there).
    pub fn has(&self, ino: u64, offset: u64, end: u64) -> bool {
        self.by_ino
            .get(&ino)
            .is_some_and(|&i| self.layout.files[i].missing(offset, end).is_empty())
    }

    /// Bytes `offset..offset + len` of file `ino` (fewer at its end),
    /// filling the pieces they need first.
    pub async fn read(
        self: &Arc<Self>,
        reader: &Arc<FileReader>,
        ino: u64,
        offset: u64,
        len: u32,
    ) -> Result<Bytes, ReadError> {
        let Some(&index) = self.by_ino.get(&ino) else {
            return reader.read(ino, offset, len).await;
        };
        let file = &self.layout.files[index];
        let end = offset.saturating_add(u64::from(len)).min(file.size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        let missing = file.missing(offset, end);
        if !missing.is_empty() {
            self.fill(reader, index, missing).await?;
        }
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || me.pread(index, offset, end))
            .await
            .map_err(|e| ReadError::Stopped(e.to_string()))?
    }

    /// Reads verified `pieces` of file `index` and writes them in; records
    /// them in the background once durable.
    async fn fill(
        self: &Arc<Self>,
        reader: &Arc<FileReader>,
        index: usize,
        pieces: Vec<u64>,
    ) -> Result<(), ReadError> {
        let file = &self.layout.files[index];
        let ino = file.ino;
        let written: Vec<Result<(), ReadError>> = stream::iter(pieces.iter().copied())
            .map(|p| {
                let (me, reader) = (Arc::clone(self), Arc::clone(reader));
                async move {
                    let bytes = reader.read(ino, p * PIECE, PIECE as u32).await?;
                    tokio::task::spawn_blocking(move || {
                        let f = &me.layout.files[index];
                        let open = |rel: &str| {
                            OpenOptions::new()
                                .write(true)
                                .open(me.layout.tree.join(rel))
                        };
                        f.write(p * PIECE, &bytes, &open)
                            .map_err(|e| local(&f.path, e))
                    })
                    .await
                    .map_err(|e| ReadError::Stopped(e.to_string()))?
                }
            })
            .buffer_unordered(JOBS)
            .collect()
            .await;
        written.into_iter().collect::<Result<Vec<()>, _>>()?;
        file.written(&pieces);
        self.record_later(index, pieces);
        Ok(())
    }

    /// Records `pieces` of file `index` once durable, in the background.
    /// One committer takes everything written meanwhile: one fsync per
    /// file per round, not one per read (a cold read of a GiB is about a
    /// thousand reads).
    fn record_later(self: &Arc<Self>, index: usize, pieces: Vec<u64>) {
        self.commits.fetch_add(pieces.len(), Ordering::AcqRel);
        lock(&self.pending).entry(index).or_default().extend(pieces);
        if self.committing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || loop {
            let round = std::mem::take(&mut *lock(&me.pending));
            if round.is_empty() {
                me.committing.store(false, Ordering::Release);
                // Written after the take, before the flag went down: this
                // committer goes on unless another one took over.
                if lock(&me.pending).is_empty() || me.committing.swap(true, Ordering::AcqRel) {
                    return;
                }
                continue;
            }
            for (index, pieces) in round {
                if let Err(e) = me.layout.files[index].commit(&pieces) {
                    tracing::warn!(error = %e, "filled pieces not recorded");
                }
                me.commits.fetch_sub(pieces.len(), Ordering::AcqRel);
            }
        });
    }

    fn pread(&self, index: usize, offset: u64, end: u64) -> Result<Bytes, ReadError> {
        let file = {
            let mut readers = self.readers.lock().unwrap_or_else(|e| e.into_inner());
            match readers.get(&index) {
                Some(f) => Arc::clone(f),
                None => {
                    let path = &self.layout.files[index].path;
                    let f = Arc::new(File::open(path).map_err(|e| local(path, e))?);
                    readers.insert(index, Arc::clone(&f));
                    f
                }
            }
        };
        let mut buf = vec![0u8; (end - offset) as usize];
        file.read_exact_at(&mut buf, offset)
            .map_err(|e| local(&self.layout.files[index].path, e))?;
        Ok(buf.into())
    }

    /// Waits (at most 30 s) until what was written is recorded, so that
    /// the next mount finds it.
    pub fn settle(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.commits.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Where this mount's prefetch puts a chunk: the pieces it completes
    /// (`layout::completed_by`), filled through `reader`, so prefetched
    /// bytes are written once too.
    pub fn prefetch_sink(
        self: &Arc<Self>,
        inodes: &Inodes,
        reader: Arc<FileReader>,
    ) -> crate::prefetch::Sink {
        crate::fanotify::layout::prefetch_sink(
            self,
            inodes,
            |f| &f.layout,
            move |me, index, pieces| {
                let reader = Arc::clone(&reader);
                Box::pin(async move {
                    me.fill(&reader, index, pieces)
                        .await
                        .map_err(|e| e.to_string())
                })
            },
        )
    }
}

/// A local file that failed: the read gets `EIO`.
fn local(path: &Path, e: std::io::Error) -> ReadError {
    ReadError::Local {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
