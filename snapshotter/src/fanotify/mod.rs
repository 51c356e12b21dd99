//! The fanotify engine: a mounted version served by the kernel from local
//! files, with this process asked only for bytes that are not there yet.
//!
//! # Design
//!
//! The version (or the directory a ref names) is laid out once under the
//! cache folder, in `fanotify/<version hex>[-<path hash>]/tree`, as sparse
//! files of the right sizes plus the directories, symlinks, modes and
//! mtimes of the tree index (`layout.rs`). That folder is bind-mounted,
//! read-only, at the mountpoint (see `events.rs` for how it is marked
//! before it is attached). A fanotify group
//! of class `FAN_CLASS_PRE_CONTENT` marks **the bind mount only**
//! (`FAN_MARK_MOUNT`) for `FAN_PRE_ACCESS`: a read or an `mmap` through the
//! mountpoint first asks the group for its range; the daemon fetches the
//! 1 MiB pieces that cover it through `verify::FileReader::read`
//! (the chain of SPEC.md §2.5; verification is not repeated here), writes
//! them into the layout file through the cache folder's own path (another
//! mount, which no mark watches, so the write raises no event), and answers
//! `FAN_ALLOW`: the bytes are in the page cache every reader of the inode
//! shares. In the background it then fsyncs and records the pieces in the
//! file's fill bitmap; only recorded pieces count for a later mount, and
//! an unmount waits for the records.
//! A failure answers `FAN_DENY_ERRNO(EIO)`. A file whose pieces are all
//! filled gets an ignore mark (`FAN_MARK_IGNORE`), so its reads stop at the
//! mark check in the kernel; once every file is filled, the mount mark
//! itself is removed and the kernel serves the mount as a plain read-only
//! bind mount of local files. The fill bitmaps (`fill/<inode>`) persist, so
//! a later mount of the same version, or a restarted daemon, refetches
//! nothing it filled before (`layout::Fill`).
//!
//! Why sparse files under a bind mount and not a file-backed EROFS image
//! (Nydus's choice): the EROFS image needs an image builder (metadata
//! blocks, inode layout, chunk indexes) that this crate does not have, and
//! with data blobs filled on demand it still needs the same pre-content
//! events on the blob files, now addressed by blob offset instead of by
//! file. Sparse files reuse the host file system as is, a file's offset is
//! the tree's offset, and the layout is a few hundred lines. What EROFS
//! would give in exchange, one image file instead of one inode per file of
//! the version and deduplication of shared chunks on disk, matters for
//! versions of very many small files; model volumes have few large ones.
//!
//! # Kernel facts this rests on (Linux 6.18, checked on this machine with
//! small C programs; see the issue 32 closing note)
//!
//! - `fanotify_init(FAN_CLASS_PRE_CONTENT, O_RDONLY)` and a
//!   `FAN_PRE_ACCESS` mark are accepted as root on ext4, as an inode, a
//!   mount (`FAN_MARK_MOUNT`, on a bind mount too) or a file-system mark.
//! - Every event carries a `FAN_EVENT_INFO_TYPE_RANGE` (6) record:
//!   `{offset, count}` of the access. A `pread` of 4 KiB at 3 MiB reports
//!   `3145728 / 4096`. A second read of the same range raises the event
//!   again: the kernel keeps no memory of what was allowed.
//! - Page faults raise no event. `mmap()` itself raises one event for the
//!   whole mapped range (offset 0, count 8 MiB for an 8 MiB mapping): the
//!   daemon must fill all of it before answering, or faults later read the
//!   holes' zeros. This engine therefore fills every byte of every event's
//!   range, never just the first piece.
//! - The event's descriptor is opened with the group's `event_f_flags` on
//!   the path of the access, i.e. on the read-only bind mount. With
//!   `O_RDWR` the open fails: the reader gets `EPERM` and the listener's
//!   `read` returns `EROFS`. So the event's descriptor cannot be written
//!   through; this engine opens the layout file through the cache folder's
//!   path, on a mount no mark watches, which raises no event (and cannot
//!   deadlock against its own group).
//! - `FAN_DENY` alone gives the reader `EPERM`; `FAN_DENY | (EIO << 24)`
//!   (`FAN_DENY_ERRNO(EIO)`, 6.14+) gives `EIO`.
//! - `FAN_MARK_ADD | FAN_MARK_IGNORE | FAN_MARK_IGNORED_SURV_MODIFY` of
//!   `FAN_PRE_ACCESS` on a file under a marked mount stops its events: reads
//!   of it no longer reach the listener. They still pay the kernel's mark
//!   walk: a 4 KiB `pread` from the page cache took 900–980 ns against
//!   655–730 ns with no mark (about a third more). Removing the mount mark
//!   alone does not win it back while the ignore marks exist (a file opened
//!   later is still watched: its inode has a mark); `FAN_MARK_REMOVE |
//!   FAN_MARK_MOUNT` plus `FAN_MARK_FLUSH` of the inode marks does (680 ns,
//!   the same as closing the group). This engine does both once every file
//!   is filled.
//! - A mount mark can be put on a detached mount: `open_tree(OPEN_TREE_CLONE)`
//!   gives an `O_PATH` descriptor, which `fanotify_mark` refuses as a bare
//!   descriptor (`EBADF` with a null path) but accepts as the directory of
//!   the path `"."`; `mount_setattr(MOUNT_ATTR_RDONLY…)` (the atime mode
//!   needs `MOUNT_ATTR__ATIME` in `attr_clr`, else `EINVAL`) and
//!   `move_mount` then attach it, marked, so no read can ever meet the
//!   mount unwatched. (A file opened on a mount with no pre-content mark at
//!   open time is never asked about while it stays open.)
//! - `FAN_REPORT_TID` makes the event's `pid` the reading thread, which
//!   this engine uses to keep one read-ahead state per reader.
//! - **When the last descriptor of the group is closed** (the listener
//!   exits or is killed), the kernel answers every pending permission
//!   event with `FAN_ALLOW` and destroys the group's marks: the pending
//!   read returns the hole's zeros, and so does every later read, through a
//!   held descriptor or a new one. A daemon that owns its group alone
//!   therefore turns a crash into wrong bytes. As long as another process
//!   holds the group, a pending event simply waits for an answer.
//!
//! Hence the keeper (`keeper.rs`): a small process forked before the mount is shown,
//! which owns the group descriptor, reads the events and forwards each one
//! (its descriptor by `SCM_RIGHTS`) to this process over a socket pair,
//! and writes this process's answers back. When this process dies the
//! keeper answers every pending and later event with `EIO`, detaches the
//! bind mount (new opens find an empty directory), truncates every file
//! that is not wholly filled to length zero through the cache folder's
//! path (a held descriptor then reads end of file and an `mmap` of it
//! faults with `SIGBUS`, never zeros; the next mount lays the file out
//! again and refetches it), and only then exits, releasing the group. If
//! the keeper is the one killed, this process does the same from its side
//! (it holds the group too, for its marks): it denies the events the keeper
//! had forwarded (a response names an event by the keeper's descriptor
//! number, which each forward carries), stops every fill, settles the
//! files, and holds its own exit until that is done.
//!
//! # Cache bound
//!
//! Filled bytes are what the layout files hold on disk (their allocated
//! blocks). When a mount starts with a bounded cache (`--cache-size`), the
//! chunk cache and the version folders are counted together; past the
//! bound, whole version folders that no mount holds (each mount holds its
//! folder's `lock` with `flock`) are removed, least recently mounted
//! first. The chunk cache keeps its own bound as before. A folder in use
//! is never trimmed: its filled bytes are what make reads local.
//!
//! # Not done yet
//!
//! - A restarted daemon does not take the keeper's group back: after a
//!   crash the mount fails closed (reads fail with `EIO`, held descriptors
//!   read end of file) and a new `sealvol mount` lays out and refills only
//!   what was not recorded as filled.
//! - Fetched chunks still also go to the chunk cache (`reader.rs`), so a
//!   cold read writes its bytes twice (as chunks, then into the layout).
//! - Folders are trimmed when a mount starts, not while one fills past the
//!   bound.
//! - The containerd snapshotter still mounts with FUSE only.
//! - The kernel's source was not read here (its snapshot is larger than
//!   this workspace may fetch); the facts above are what the programs
//!   showed.

mod events;
mod keeper;
pub(crate) mod layout;
mod sys;

pub(crate) use events::{start, Session};

/// Why the fanotify engine cannot serve a mount here.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the fanotify engine needs root (CAP_SYS_ADMIN)")]
    NotRoot,
    #[error("the kernel refuses fanotify pre-content events ({0}); Linux 6.14 or later with CONFIG_FANOTIFY_ACCESS_PERMISSIONS is needed")]
    NoPreContent(String),
    #[error("{}: {message}", path.display())]
    Layout {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("cannot mount at {}: {message}", path.display())]
    Mount {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("cannot start the fanotify keeper: {0}")]
    Keeper(String),
}

/// Whether the kernel accepts a pre-content group and a `FAN_PRE_ACCESS`
/// mark on the file system of `dir` (the cache folder, where the layout
/// lives), as this user. The mark is put on a private probe file's inode,
/// so no other process's reads can meet the group while it lives.
pub fn probe(dir: &std::path::Path) -> Result<(), EngineError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(EngineError::NotRoot);
    }
    let base = dir.join("fanotify");
    std::fs::create_dir_all(&base).map_err(|e| EngineError::Layout {
        path: base.clone(),
        message: e.to_string(),
    })?;
    // The layout's files read as zeros where they are not filled: only
    // root may look at them other than through a mount.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
        EngineError::Layout {
            path: base.clone(),
            message: e.to_string(),
        }
    })?;
    let file = base.join(".probe");
    std::fs::write(&file, b"").map_err(|e| EngineError::Layout {
        path: file.clone(),
        message: e.to_string(),
    })?;
    let group = sys::Group::init().map_err(|e| EngineError::NoPreContent(e.to_string()))?;
    group
        .mark_inode(&file, sys::FAN_PRE_ACCESS)
        .map_err(|e| EngineError::NoPreContent(format!("FAN_PRE_ACCESS mark: {e}")))?;
    Ok(())
}

/// What [`mount`] needs from `crate::mount::mount_loaded`.
pub(crate) struct Request {
    pub cache_dir: std::path::PathBuf,
    /// The bound to keep the cache within, when this mount owns its cache.
    pub cache_size: Option<u64>,
    pub chunk_cache: sealvol_client::cache::ChunkCache,
    pub version: sealvol_spec::B3Digest,
    pub base: Option<String>,
    pub inodes: std::sync::Arc<crate::inodes::Inodes>,
    pub owner: crate::inodes::Owner,
    pub reference: String,
    pub reader: std::sync::Arc<crate::verify::FileReader>,
    pub prefetch: Option<std::sync::Arc<crate::prefetch::Prefetcher>>,
    pub mountpoint: std::path::PathBuf,
    pub rt: tokio::runtime::Handle,
}

/// Lays the version out (or finds it laid out), trims the cache, and
/// serves it at the mountpoint. Returns the session and its count of reads
/// answered with `EIO`.
pub(crate) async fn mount(
    req: Request,
) -> Result<(Session, std::sync::Arc<std::sync::atomic::AtomicU64>), crate::MountError> {
    probe(&req.cache_dir)?;
    let read_errors = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let errors = std::sync::Arc::clone(&read_errors);
    let session = tokio::task::spawn_blocking(move || {
        let folder = layout::folder(&req.cache_dir, &req.version, req.base.as_deref());
        if let Some(bound) = req.cache_size {
            let chunks = req.chunk_cache.size().unwrap_or(0);
            let t = layout::trim(&req.cache_dir, bound, chunks);
            if t.removed > 0 {
                tracing::info!(
                    removed = t.removed,
                    before = t.before,
                    after = t.after,
                    "version folders trimmed to the cache bound"
                );
            }
        }
        let laid = layout::Layout::prepare(&folder, &req.inodes, req.owner, &req.reference)?;
        start(
            laid,
            req.inodes,
            req.reader,
            req.prefetch,
            &req.mountpoint,
            req.rt,
            errors,
        )
    })
    .await
    .map_err(|e| EngineError::Keeper(format!("the mount task stopped: {e}")))??;
    Ok((session, read_errors))
}
