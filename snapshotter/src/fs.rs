//! The FUSE filesystem: thin adapters from `fuser` callbacks to the inode
//! table and the file reader. Metadata is answered at once from memory;
//! a read is handed to a task on the async runtime, which replies when its
//! bytes are there and verified, so a read waiting on the network never
//! holds up the session loop or other reads.
//!
//! The mount is read-only (the kernel answers writes with `EROFS`), names
//! and attributes carry long TTLs, and files open with `FOPEN_KEEP_CACHE`:
//! a version never changes, so the kernel's page cache stays valid across
//! opens and a warm re-read never reaches this process. A root mount
//! keeps what it reads in local files, and hands a file wholly filled to
//! the kernel instead ([`crate::filled`]).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyXattr,
    Request,
};

use crate::filled::FilledFiles;
use crate::inodes::{Inodes, TTL};
use crate::prefetch::Prefetcher;
use crate::reader::{touched, ReadAhead, ReadError};
use crate::verify::{FileReader, PIECES_AHEAD};
use sealvol_spec::chain::{pieces_of, PIECE};

pub(crate) struct VolumeFs {
    pub inodes: Arc<Inodes>,
    pub reader: Arc<FileReader>,
    pub prefetch: Option<Arc<Prefetcher>>,
    pub rt: tokio::runtime::Handle,
    /// Each open file served by this process.
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    /// The backing files of open files the kernel serves (passthrough),
    /// registered until they are closed.
    backings: Mutex<HashMap<u64, fuser::BackingId>>,
    /// The local copy reads fill, and passthrough hands to the kernel
    /// (root mounts of format 2 trees).
    filled: Option<Arc<FilledFiles>>,
    next_fh: AtomicU64,
    pub read_errors: Arc<AtomicU64>,
}

/// An open file: its read-ahead state.
#[derive(Default)]
struct Handle {
    ahead: Mutex<ReadAhead>,
}

impl VolumeFs {
    pub fn new(
        inodes: Arc<Inodes>,
        reader: Arc<FileReader>,
        prefetch: Option<Arc<Prefetcher>>,
        filled: Option<Arc<FilledFiles>>,
        rt: tokio::runtime::Handle,
    ) -> VolumeFs {
        VolumeFs {
            inodes,
            reader,
            prefetch,
            rt,
            handles: Mutex::new(HashMap::new()),
            backings: Mutex::new(HashMap::new()),
            filled,
            next_fh: AtomicU64::new(1),
            read_errors: Arc::default(),
        }
    }

    fn handles(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Handle>>> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn backings(&self) -> std::sync::MutexGuard<'_, HashMap<u64, fuser::BackingId>> {
        self.backings.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        self.inodes.attr(ino).ok_or(Errno::ENOENT)
    }

    /// The entries of directory `ino` from position `offset`: `.`, `..`,
    /// then its children, each with the offset of the one after it.
    fn dir_entries(&self, ino: u64, offset: u64) -> Result<Vec<(u64, u64, String)>, Errno> {
        let children = self
            .inodes
            .children(ino)
            .ok_or(if self.inodes.contains(ino) {
                Errno::ENOTDIR
            } else {
                Errno::ENOENT
            })?;
        let parent = self.inodes.parent(ino).ok_or(Errno::ENOENT)?;
        let all = [(ino, ".".to_string()), (parent, "..".to_string())]
            .into_iter()
            .chain(
                children
                    .iter()
                    .map(|&c| (c, self.inodes.name(c).to_string())),
            );
        Ok(all
            .enumerate()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
            .map(|(i, (ino, name))| (ino, i as u64 + 1, name))
            .collect())
    }

    fn kind(&self, ino: u64) -> FileType {
        self.inodes
            .attr(ino)
            .map_or(FileType::RegularFile, |a| a.kind)
    }
}

/// An attribute for "no such name", which the kernel caches for the TTL
/// (inode 0 means a negative entry).
fn negative() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: std::time::UNIX_EPOCH,
        mtime: std::time::UNIX_EPOCH,
        ctime: std::time::UNIX_EPOCH,
        crtime: std::time::UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

impl Filesystem for VolumeFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Each is optional: an older kernel without one still mounts.
        for cap in [
            InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_CACHE_SYMLINKS,
            InitFlags::FUSE_PARALLEL_DIROPS,
        ] {
            let _ = config.add_capabilities(cap);
        }
        // As much read-ahead as the kernel allows, and many reads in flight.
        if let Err(max) = config.set_max_readahead(u32::MAX) {
            let _ = config.set_max_readahead(max);
        }
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        if let Some(filled) = &self.filled {
            // Backing files live on a regular file system: one level of
            // stacking.
            if config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(1).is_ok()
            {
                filled.enable_passthrough();
            }
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self
            .inodes
            .lookup(parent.0, name.as_bytes())
            .and_then(|ino| self.attr(ino))
        {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(Errno::ENOENT) if self.inodes.contains(parent.0) => {
                reply.entry(&TTL, &negative(), Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino.0) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.inodes.target(ino.0) {
            Some(t) => reply.data(t.as_bytes()),
            None => reply.error(Errno::EINVAL),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        if self.inodes.file(ino.0).is_none() {
            return reply.error(if self.inodes.contains(ino.0) {
                Errno::EISDIR
            } else {
                Errno::ENOENT
            });
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        if let Some(filled) = &self.filled {
            if let Some(copy) = filled.whole(ino.0) {
                match reply.open_backing(&copy) {
                    Ok(id) => {
                        // Recorded before the reply, so a release that
                        // follows at once finds it to close.
                        let mut backings = self.backings();
                        let id = backings.entry(fh).or_insert(id);
                        reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), id);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the kernel refused a backing file: passthrough off for this mount");
                        filled.disable_passthrough();
                    }
                }
            }
        }
        self.handles().insert(fh, Arc::default());
        if let Some(p) = &self.prefetch {
            p.opened(ino.0);
        }
        reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(file) = self.inodes.file(ino.0) else {
            return reply.error(Errno::EISDIR);
        };
        tracing::trace!(path = file.path, offset, size, "read");
        // Read-ahead is decided here, in the order the kernel sent the
        // reads, and started before this read's own bytes are awaited:
        // chunks far ahead, and a few pieces verified just ahead.
        let end = offset.saturating_add(u64::from(size)).min(file.size);
        if offset < end {
            let handle = self.handles().get(&fh.0).cloned();
            if let Some(handle) = handle {
                let (range, sequential) = {
                    let mut ra = handle.ahead.lock().unwrap_or_else(|e| e.into_inner());
                    let range =
                        ra.next(file.chunks, touched(file.chunks, offset, end), offset, end);
                    (range, ra.sequential())
                };
                // Nothing ahead to fetch where the local copy has it all.
                let local = |from: u64, to: u64| {
                    self.filled.as_ref().is_some_and(|f| f.has(ino.0, from, to))
                };
                if let (Some(first), Some(last)) = (
                    file.chunks.get(range.start),
                    range.end.checked_sub(1).and_then(|l| file.chunks.get(l)),
                ) {
                    if !local(first.offset, last.offset + u64::from(last.length)) {
                        self.reader
                            .chunks()
                            .fetch_ahead(file.chunks[range].to_vec());
                    }
                }
                if sequential {
                    let next = pieces_of(offset, end).end;
                    let ahead = next..next + PIECES_AHEAD;
                    if !local(ahead.start * PIECE, ahead.end * PIECE) {
                        self.reader.verify_ahead(ino.0, ahead);
                    }
                }
            }
        }
        let (inodes, reader, errors, filled) = (
            Arc::clone(&self.inodes),
            Arc::clone(&self.reader),
            Arc::clone(&self.read_errors),
            self.filled.clone(),
        );
        self.rt.spawn(async move {
            let Some(file) = inodes.file(ino.0) else {
                return reply.error(Errno::EIO);
            };
            let read = match &filled {
                Some(f) => f.read(&reader, ino.0, offset, size).await,
                None => reader.read(ino.0, offset, size).await,
            };
            match read {
                Ok(bytes) => reply.data(&bytes),
                Err(e) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                    match &e {
                        // The error names the file and the piece.
                        ReadError::Forged { .. } => tracing::error!(
                            path = file.path, offset, size,
                            "read failed with EIO: {e}"
                        ),
                        ReadError::Corrupt { .. } => tracing::error!(
                            path = file.path, offset, size, error = %e,
                            "read failed with EIO: the registry holds damaged data or a proxy altered it"
                        ),
                        _ => tracing::warn!(
                            path = file.path, offset, size, error = %e,
                            "read failed with EIO"
                        ),
                    }
                    reply.error(Errno::EIO)
                }
            }
        });
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // A passthrough file: its backing file is closed with it.
        self.backings().remove(&fh.0);
        self.handles().remove(&fh.0);
        reply.ok();
    }

    fn destroy(&mut self) {
        // What was filled is recorded before the session ends, so that the
        // next mount finds it.
        if let Some(f) = &self.filled {
            f.settle();
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.inodes.is_dir(ino.0) {
            reply.opened(
                FileHandle(0),
                FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR,
            );
        } else {
            reply.error(Errno::ENOTDIR);
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.dir_entries(ino.0, offset) {
            Ok(entries) => {
                for (child, next, name) in entries {
                    if reply.add(INodeNo(child), next, self.kind(child), name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        match self.dir_entries(ino.0, offset) {
            Ok(entries) => {
                for (child, next, name) in entries {
                    let Ok(attr) = self.attr(child) else { continue };
                    if reply.add(INodeNo(child), next, name, &TTL, &attr, Generation(0)) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    // A version has no extended attributes, and nothing to flush or seek
    // specially: ENOSYS tells the kernel once, and it stops asking (xattr
    // calls then fail with EOPNOTSUPP, flush and lseek are handled by the
    // kernel). The trait's defaults would say the same, with a warning.
    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: i64,
        _whence: i32,
        reply: ReplyLseek,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        const BLOCK: u32 = 4096;
        reply.statfs(
            self.inodes.bytes().div_ceil(u64::from(BLOCK)),
            0,
            0,
            self.inodes.len(),
            0,
            BLOCK,
            255,
            BLOCK,
        );
    }
}
