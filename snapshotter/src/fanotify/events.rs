//! The daemon's side: mark the layout's unfilled files, expose the layout
//! at the mountpoint, start the [`keeper`], and answer the events it
//! forwards by filling the pieces they need.
//!
//! Every file not wholly filled carries an inode mark before the mount is
//! attached, so no read can meet it unwatched (a file opened while no
//! pre-content mark applies to it is never asked about, for as long as it
//! stays open). The bind mount is made with the new mount API:
//! `open_tree(OPEN_TREE_CLONE)` makes a detached copy of the layout's tree,
//! `mount_setattr` makes it read-only, and `move_mount` attaches it at the
//! mountpoint.

use std::collections::HashMap;
use std::ffi::CString;
use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::FutureExt as _;
use futures_util::stream::{self, StreamExt as _};
use sealvol_spec::chain::PIECE;

use super::keeper::{self, Forward, Keeper, Reply, ANSWER, BYE, FULL, NO_ANSWER};
use super::layout::Layout;
use super::sys::{self, Group};
use super::EngineError;
use crate::inodes::Inodes;
use crate::prefetch::Prefetcher;
use crate::reader::touched;
use crate::verify::{FileReader, PIECES_AHEAD};
use crate::Unmounted;

/// Pieces of one event fetched at once.
const FILL_JOBS: usize = 8;

/// A mount served by the fanotify engine.
pub(crate) struct Session {
    mountpoint: PathBuf,
    sock: Arc<OwnedFd>,
    shared: Arc<Shared>,
    ended: tokio::sync::watch::Receiver<bool>,
    /// Set once the keeper was told goodbye or the mount is gone.
    done: Arc<AtomicBool>,
}

struct Shared {
    /// Events received and not answered: slot to the keeper's descriptor
    /// number, so that they can be denied here if the keeper dies.
    pending: std::sync::Mutex<HashMap<u32, RawFd>>,
    /// Fills written and not yet durable and recorded: an unmount waits
    /// for them, so that the next mount finds them.
    commits: AtomicUsize,
    /// Set before the goodbye: the keeper's exit is then expected.
    said_bye: AtomicBool,
    /// Set (under the write lock) once the keeper died and the files are
    /// being settled: no fill may write after that.
    failed: std::sync::RwLock<bool>,
    /// Whether the keeper died, and whether this process has settled the
    /// files since; waited on before the process may exit.
    settled: (std::sync::Mutex<(bool, bool)>, std::sync::Condvar),
    layout: Layout,
    inodes: Arc<Inodes>,
    prefetch: Option<Arc<Prefetcher>>,
    reader: Arc<FileReader>,
    group: Group,
    /// What each unfilled file's inode mark asks for.
    mask: u64,
    /// Opens layout files for filling; dropped (and its group with its
    /// mark) once every file is filled.
    writers: std::sync::Mutex<Option<sys::Unwatched>>,
    /// Files not yet wholly filled.
    unfilled: AtomicUsize,
    sock: Arc<OwnedFd>,
    mountpoint: PathBuf,
    read_errors: Arc<AtomicU64>,
}

fn io_err(what: &str) -> impl Fn(std::io::Error) -> EngineError + '_ {
    move |e| EngineError::Keeper(format!("{what}: {e}"))
}

fn cstring(p: &Path) -> Result<CString, EngineError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|e| EngineError::Mount {
        path: p.to_path_buf(),
        message: e.to_string(),
    })
}

fn move_mount(tree: &OwnedFd, to: &CString) -> std::io::Result<()> {
    // SAFETY: move_mount of our detached tree to a valid path.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Mounts `layout` at `mountpoint` and starts serving its events on `rt`.
pub(crate) fn start(
    layout: Layout,
    inodes: Arc<Inodes>,
    reader: Arc<FileReader>,
    prefetch: Option<Arc<Prefetcher>>,
    mountpoint: &Path,
    rt: tokio::runtime::Handle,
    read_errors: Arc<AtomicU64>,
) -> Result<Session, EngineError> {
    let mount_err = |message: String| EngineError::Mount {
        path: mountpoint.to_path_buf(),
        message,
    };
    let mask = match prefetch {
        Some(_) => sys::FAN_PRE_ACCESS | libc::FAN_OPEN,
        None => sys::FAN_PRE_ACCESS,
    };
    let group = Group::init().map_err(|e| EngineError::NoPreContent(e.to_string()))?;
    let tree = sys::clone_tree(&layout.tree, true)
        .map_err(|e| mount_err(format!("cannot bind {}: {e}", layout.tree.display())))?;
    // Every file not wholly filled is marked on its inode, before anything
    // can open it: the mark then holds on every path to the file, the
    // mountpoint, a bind mount of it (a container's volume, a subPath), an
    // overlay whose lower layer it is. (A mount mark would not: each of
    // those is another mount, and reads through it would see the holes.)
    let unfilled = layout.files.iter().filter(|f| !f.full()).count();
    for f in layout.files.iter().filter(|f| !f.full()) {
        group
            .mark_inode(&f.path, mask)
            .map_err(|e| EngineError::NoPreContent(format!("FAN_PRE_ACCESS mark: {e}")))?;
    }
    let writers = match unfilled {
        0 => None,
        _ => Some(sys::Unwatched::new(&layout.tree).map_err(|e| {
            mount_err(format!(
                "cannot open {} for filling: {e}",
                layout.tree.display()
            ))
        })?),
    };

    // The keeper, before anyone can read through the mount.
    let mut pair = [0 as RawFd; 2];
    // SAFETY: socketpair fills two descriptors.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io_err("socketpair")(std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors were just made and are ours.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    let to = cstring(mountpoint)?;
    let k = Keeper {
        group: group.raw(),
        sock: theirs.as_raw_fd(),
        lock: layout.lock_fd(),
        lock_path: cstring(&layout.folder.join("lock"))?,
        mountpoint: to.clone(),
        files: layout
            .files
            .iter()
            .map(|f| cstring(&f.path))
            .collect::<Result<_, _>>()?,
        full: layout.files.iter().map(|f| f.full()).collect(),
    };
    let keep = [k.group, k.sock, k.lock];
    // SAFETY: the child runs only system calls over memory prepared above
    // (see keeper's module docs) and never returns from this block.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io_err("fork")(std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: in the child: drop every inherited descriptor but ours,
        // ignore the terminal's signals (the daemon decides when to go),
        // name the process, and run.
        unsafe {
            close_all_but(&keep);
            // Its own session: a signal to the daemon's process group (a
            // terminal's, `kill -9 -PGID`) must not take both down at once.
            libc::setsid();
            for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
                libc::signal(s, libc::SIG_IGN);
            }
            libc::prctl(libc::PR_SET_NAME, c"sealvol-keeper".as_ptr());
        }
        keeper::run(k);
    }
    drop(theirs);
    let sock = Arc::new(ours);
    if let Err(e) = move_mount(&tree, &to) {
        bye(&sock);
        // SAFETY: reap the keeper we just started.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        return Err(mount_err(format!("cannot attach the bind mount: {e}")));
    }
    drop(tree);
    reap_later(pid);

    let shared = Arc::new(Shared {
        pending: Default::default(),
        said_bye: AtomicBool::new(false),
        commits: AtomicUsize::new(0),
        failed: std::sync::RwLock::new(false),
        settled: Default::default(),
        layout,
        inodes,
        prefetch,
        reader,
        group,
        mask,
        writers: std::sync::Mutex::new(writers),
        unfilled: AtomicUsize::new(unfilled),
        sock: Arc::clone(&sock),
        mountpoint: mountpoint.to_path_buf(),
        read_errors,
    });
    if let Some(p) = &shared.prefetch {
        p.fill_into(prefetch_sink(&shared));
    }
    let (ended_tx, ended) = tokio::sync::watch::channel(false);
    let done = Arc::new(AtomicBool::new(false));
    let mnt_id = mount_id(mountpoint);
    std::thread::Builder::new()
        .name("sealvol-fanotify".into())
        .spawn({
            let shared = Arc::clone(&shared);
            let rt = rt.clone();
            move || {
                // Read-ahead spawns its fills from here.
                let _rt = rt.enter();
                while let Some((ev, fd)) = recv_event(shared.sock.as_raw_fd()) {
                    if ev.slot == NO_ANSWER {
                        opened(&shared, &fd);
                        continue;
                    }
                    lock(&shared.pending).insert(ev.slot, ev.kfd);
                    let planned = plan(&shared, &ev, &fd);
                    drop(fd);
                    match planned {
                        // Written already: allowed here, without a task.
                        Ok(None) => reply(&shared, ev.slot, 0),
                        planned => {
                            let shared = Arc::clone(&shared);
                            rt.spawn(async move { finish(shared, ev.slot, planned).await });
                        }
                    }
                }
                if !shared.said_bye.load(Ordering::Acquire) {
                    keeper_died(&shared);
                }
            }
        })
        .map_err(io_err("thread"))?;
    std::thread::Builder::new()
        .name("sealvol-mountwatch".into())
        .spawn({
            let done = Arc::clone(&done);
            move || {
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(250));
                    if !mounted(mnt_id) {
                        break;
                    }
                }
                let _ = ended_tx.send(true);
            }
        })
        .map_err(io_err("thread"))?;
    Ok(Session {
        mountpoint: mountpoint.to_path_buf(),
        sock,
        shared: Arc::clone(&shared),
        ended,
        done,
    })
}

/// Closes every descriptor of this (forked) process but `keep`.
///
/// # Safety
/// Only in the keeper, right after the fork.
unsafe fn close_all_but(keep: &[RawFd]) {
    let mut sorted = [keep[0], keep[1], keep[2]];
    sorted.sort_unstable();
    let mut lo: u32 = 0;
    for &fd in &sorted {
        if fd as u32 > lo {
            libc::syscall(libc::SYS_close_range, lo, fd as u32 - 1, 0);
        }
        lo = fd as u32 + 1;
    }
    libc::syscall(libc::SYS_close_range, lo, u32::MAX, 0);
    // Standard descriptors point at /dev/null, not at a closed slot that a
    // later open would take.
    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
    if null >= 0 {
        for std in 0..3 {
            if !keep.contains(&std) {
                libc::dup2(null, std);
            }
        }
        if null > 2 {
            libc::close(null);
        }
    }
}

/// Waits for the keeper in the background, so that it leaves no zombie.
fn reap_later(pid: libc::pid_t) {
    let _ = std::thread::Builder::new()
        .name("sealvol-keeper-wait".into())
        .spawn(move || {
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        });
}

/// The mount id of `path` (statx `STATX_MNT_ID`), to see it go.
fn mount_id(path: &Path) -> Option<u64> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statx into a zeroed struct we own.
    unsafe {
        let mut st: libc::statx = std::mem::zeroed();
        (libc::statx(libc::AT_FDCWD, c.as_ptr(), 0, libc::STATX_MNT_ID, &mut st) == 0)
            .then_some(st.stx_mnt_id)
    }
}

fn mounted(id: Option<u64>) -> bool {
    let Some(id) = id else {
        return false;
    };
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return true;
    };
    let want = id.to_string();
    text.lines()
        .any(|l| l.split(' ').next() == Some(want.as_str()))
}

fn send_reply(sock: RawFd, r: Reply) -> bool {
    // SAFETY: sends a plain struct.
    unsafe {
        libc::send(
            sock,
            (&raw const r).cast(),
            std::mem::size_of::<Reply>(),
            libc::MSG_NOSIGNAL,
        ) == std::mem::size_of::<Reply>() as isize
    }
}

fn bye(sock: &OwnedFd) {
    send_reply(
        sock.as_raw_fd(),
        Reply {
            kind: BYE,
            ..Reply::default()
        },
    );
}

/// The next event from the keeper; `None` once it is gone.
fn recv_event(sock: RawFd) -> Option<(Forward, OwnedFd)> {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    // SAFETY: the socket is this session's, open while it runs.
    let sock = unsafe { BorrowedFd::borrow_raw(sock) };
    loop {
        let mut msg = Forward::default();
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let n = match recvmsg(
            sock,
            &mut [IoSliceMut::new(msg.as_bytes_mut())],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) | Ok(rustix::net::RecvMsg { bytes: 0, .. }) => return None,
            Ok(r) => r.bytes,
        };
        // Descriptors not taken here are closed when dropped.
        let fd = control.drain().find_map(|m| match m {
            RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
            _ => None,
        });
        match fd {
            Some(fd) if n == std::mem::size_of::<Forward>() => return Some((msg, fd)),
            _ => continue,
        }
    }
}

/// The host inode number behind a descriptor.
fn host_ino(fd: &OwnedFd) -> Option<u64> {
    // SAFETY: fstat into a zeroed struct on a descriptor we own.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd.as_raw_fd(), &mut st) == 0).then_some(st.st_ino)
    }
}

/// Why an event could not be allowed.
#[derive(Debug, thiserror::Error)]
enum FillError {
    #[error(transparent)]
    Read(#[from] crate::ReadError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the fill task stopped")]
    Stopped,
}

/// An open (`FAN_OPEN`, marked only with a prefetch): start it.
fn opened(shared: &Shared, fd: &OwnedFd) {
    if let (Some(p), Some(ino)) = (&shared.prefetch, host_ino(fd)) {
        if let Some((_, file)) = shared.layout.file_of(ino) {
            p.opened(file.ino);
        }
    }
}

/// Fills what [`plan`] found missing for the event in `slot`, and answers
/// it.
async fn finish(
    shared: Arc<Shared>,
    slot: u32,
    planned: Result<Option<(usize, Vec<u64>)>, FillError>,
) {
    let filled = match planned {
        Ok(None) => Ok(()),
        Ok(Some((index, missing))) => fill_pieces(&shared, index, missing).await,
        Err(e) => Err(e),
    };
    let verdict = match filled {
        Ok(()) => 0,
        Err(e) => {
            shared.read_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "read failed (EIO)");
            libc::EIO as u32
        }
    };
    reply(&shared, slot, verdict);
}

/// Answers the event in `slot`: 0 allows, else the errno it is denied
/// with.
fn reply(shared: &Shared, slot: u32, verdict: u32) {
    if lock(&shared.pending).remove(&slot).is_none() {
        return; // denied already: the keeper died meanwhile
    }
    send_reply(
        shared.sock.as_raw_fd(),
        Reply {
            kind: ANSWER,
            a: slot,
            b: verdict,
            _pad: 0,
        },
    );
}

/// What event `ev` needs: `None` when its range is written already (the
/// common case once a reader is under way, answered on the event thread
/// without a task), else the file's index and the pieces to fill. Starts
/// read-ahead on the way.
fn plan(
    shared: &Arc<Shared>,
    ev: &Forward,
    fd: &OwnedFd,
) -> Result<Option<(usize, Vec<u64>)>, FillError> {
    // SAFETY: fstat into a zeroed struct on a descriptor we own.
    let ino = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        st.st_ino
    };
    // Not a file of the layout (a directory): nothing to fill.
    let Some((index, file)) = shared.layout.file_of(ino) else {
        return Ok(None);
    };
    let end = if ev.count == u64::MAX {
        file.size
    } else {
        ev.offset.saturating_add(ev.count)
    };
    // Read-ahead is decided before this event's own pieces are awaited,
    // as FUSE does: chunks far ahead once reads go in order, and a few
    // pieces verified just ahead. An mmap's event (the whole mapping) is
    // filled whole anyway.
    if let (Some(view), true) = (shared.inodes.file(file.ino), ev.count != u64::MAX) {
        let end = end.min(view.size);
        if ev.offset < end {
            let (range, sequential) = {
                let mut all = file.ahead.lock().unwrap_or_else(|e| e.into_inner());
                if all.len() > 256 && !all.contains_key(&ev.tid) {
                    all.clear();
                }
                let ra = all.entry(ev.tid).or_default();
                let range = ra.next(
                    view.chunks,
                    touched(view.chunks, ev.offset, end),
                    ev.offset,
                    end,
                );
                (range, ra.sequential())
            };
            // Nothing to fetch ahead where the file is filled already (a
            // remount of a file filled in part).
            if let (Some(first), Some(last)) = (
                view.chunks.get(range.start),
                range.end.checked_sub(1).and_then(|l| view.chunks.get(l)),
            ) {
                if !file
                    .missing(first.offset, last.offset + u64::from(last.length))
                    .is_empty()
                {
                    shared
                        .reader
                        .chunks()
                        .fetch_ahead(view.chunks[range].to_vec());
                }
            }
            if sequential {
                let next = end.div_ceil(PIECE);
                if !file
                    .missing(next * PIECE, (next + PIECES_AHEAD) * PIECE)
                    .is_empty()
                {
                    shared
                        .reader
                        .verify_ahead(file.ino, next..next + PIECES_AHEAD);
                }
                fill_ahead(shared, index, end);
            }
        }
    }
    let missing = file.missing(ev.offset, end);
    Ok((!missing.is_empty()).then_some((index, missing)))
}

/// Where this mount's prefetch puts a chunk: the pieces it completes, in
/// the layout's files, so that prefetched bytes are written once, where
/// the kernel reads them.
fn prefetch_sink(shared: &Arc<Shared>) -> crate::prefetch::Sink {
    super::layout::prefetch_sink(
        shared,
        &shared.inodes,
        |s| &s.layout,
        |s, index, pieces| {
            async move {
                fill_pieces(&s, index, pieces)
                    .await
                    .map_err(|e| e.to_string())
            }
            .boxed()
        },
    )
}

/// Pieces filled ahead of a sequential reader, in the background, in one
/// batch (one fsync): its next reads then find them filled and are
/// answered at once instead of each waiting on a write and an fsync.
const FILL_AHEAD: u64 = 8;

/// Starts filling the pieces after `end` of file `index` for a reader that
/// goes in order, unless a fill ahead already covers them.
fn fill_ahead(shared: &Arc<Shared>, index: usize, end: u64) {
    let file = &shared.layout.files[index];
    let next = end.div_ceil(PIECE);
    let upto = (next + FILL_AHEAD).min(file.size.div_ceil(PIECE));
    let before = file.ahead_to.fetch_max(upto, Ordering::AcqRel);
    if before >= upto {
        return;
    }
    // Pieces before `before` are being filled by an earlier batch.
    let pieces = file.missing(next.max(before) * PIECE, upto * PIECE);
    if pieces.is_empty() {
        return;
    }
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        if let Err(e) = fill_pieces(&shared, index, pieces).await {
            // The reads that need them will fail or retry on their own.
            tracing::debug!(error = %e, "fill ahead failed");
        }
    });
}

/// Fetches verified `pieces` of file `index`, writes them, makes them
/// durable and records them (see [`super::layout::LaidFile::commit`]).
async fn fill_pieces(
    shared: &Arc<Shared>,
    index: usize,
    missing: Vec<u64>,
) -> Result<(), FillError> {
    let file = &shared.layout.files[index];
    if !missing.is_empty() {
        let ino = file.ino;
        stream::iter(missing.iter().copied())
            .map(|p| {
                let shared = Arc::clone(shared);
                async move {
                    let bytes = shared.reader.read(ino, p * PIECE, PIECE as u32).await?;
                    let s = Arc::clone(&shared);
                    tokio::task::spawn_blocking(move || {
                        let failed = s.failed.read().unwrap_or_else(|e| e.into_inner());
                        if *failed {
                            return Err(std::io::Error::other("the mount failed closed"));
                        }
                        let open = |rel: &str| match &*lock(&s.writers) {
                            Some(w) => w.open(rel),
                            None => Err(std::io::Error::other("no file is left to fill")),
                        };
                        s.layout.files[index].write(p * PIECE, &bytes, &open)
                    })
                    .await
                    .map_err(|_| FillError::Stopped)??;
                    Ok::<(), FillError>(())
                }
            })
            .buffer_unordered(FILL_JOBS)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<()>, _>>()?;
        // Readers may have the bytes now; durable and recorded (for later
        // mounts, and for the marks) in the background.
        file.written(&missing);
        let s = Arc::clone(shared);
        s.commits.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(async move {
            let c = Arc::clone(&s);
            let done = tokio::task::spawn_blocking(move || {
                let failed = c.failed.read().unwrap_or_else(|e| e.into_inner());
                if *failed {
                    return Err(std::io::Error::other("the mount failed closed"));
                }
                c.layout.files[index].commit(&missing)
            })
            .await;
            match done {
                Ok(Ok(())) => {
                    if s.layout.files[index].full() {
                        filled(&s, index);
                    }
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "filled pieces not recorded"),
                Err(_) => {}
            }
            s.commits.fetch_sub(1, Ordering::AcqRel);
        });
    }
    Ok(())
}

/// File `index` is wholly filled: its mark goes, so its reads and faults
/// no longer reach this process (or the kernel's fanotify code at all once
/// no mark is left on the file system).
fn filled(shared: &Shared, index: usize) {
    let file = &shared.layout.files[index];
    // Two fills may both see the file complete: count it once.
    if file.announced.swap(true, Ordering::AcqRel) {
        return;
    }
    // The keeper need not truncate it when it settles (either order is
    // safe: a full file reads right with or without its mark).
    send_reply(
        shared.sock.as_raw_fd(),
        Reply {
            kind: FULL,
            a: index as u32,
            ..Reply::default()
        },
    );
    if let Err(e) = shared.group.unmark_inode(&file.path, shared.mask) {
        tracing::debug!(file = file.rel, error = %e, "mark not removed");
    }
    if shared.unfilled.fetch_sub(1, Ordering::AcqRel) == 1 {
        lock(&shared.writers).take();
    }
}

impl Session {
    /// Resolves when the mount went away from outside.
    pub fn ended(&self) -> tokio::sync::watch::Receiver<bool> {
        self.ended.clone()
    }

    /// Unmounts: cleanly when no descriptor is open there (the keeper then
    /// exits), else detaches; the keeper serves the open files for as long
    /// as this process lives, and fails them closed after.
    pub fn unmount(&mut self) -> std::io::Result<Unmounted> {
        if self.done.swap(true, Ordering::AcqRel) {
            return Ok(Unmounted::Already);
        }
        // What was filled is recorded before the mount goes (bounded: a
        // disk that hangs only costs the next mount a refetch).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.shared.commits.load(Ordering::Acquire) > 0
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        match sys::umount(&self.mountpoint, 0) {
            Ok(()) => {
                self.shared.said_bye.store(true, Ordering::Release);
                bye(&self.sock);
                Ok(Unmounted::Clean)
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                sys::umount(&self.mountpoint, libc::MNT_DETACH)?;
                Ok(Unmounted::Detached)
            }
            // Gone already, perhaps lazily with files still open: the
            // keeper fails those closed when this process lets it go.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(Unmounted::Already),
            Err(e) => {
                self.done.store(false, Ordering::Release);
                Err(e)
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        // If the keeper died, this process holds the group alone: it may
        // not exit (which lets the group go) before the files are settled.
        let (m, cv) = &self.shared.settled;
        let mut st = lock(m);
        while st.0 && !st.1 {
            st = cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The keeper is gone without a goodbye (killed): this process holds the
/// group alone now and does what the keeper would have done had this
/// process died (see [`keeper`]): deny what waits, stop every fill, detach
/// the mount, truncate what is not wholly filled, then deny every later
/// event for as long as it lives. Runs on the event thread, which it keeps.
fn keeper_died(shared: &Shared) {
    tracing::warn!(
        mountpoint = %shared.mountpoint.display(),
        "the fanotify keeper died; the mount fails closed"
    );
    lock(&shared.settled.0).0 = true;
    let kfds: Vec<RawFd> = lock(&shared.pending).drain().map(|(_, k)| k).collect();
    keeper::deny_numbers(shared.group.raw(), &kfds);
    // Waits for the writes under way, and fails the later ones.
    *shared.failed.write().unwrap_or_else(|e| e.into_inner()) = true;
    let cstr = |p: &Path| CString::new(p.as_os_str().as_bytes()).ok();
    let k = Keeper {
        group: shared.group.raw(),
        sock: -1,
        lock: shared.layout.lock_fd(),
        lock_path: cstr(&shared.layout.folder.join("lock")).unwrap_or_default(),
        mountpoint: cstr(&shared.mountpoint).unwrap_or_default(),
        files: shared
            .layout
            .files
            .iter()
            .map(|f| cstr(&f.path).unwrap_or_default())
            .collect(),
        full: shared.layout.files.iter().map(|f| f.full()).collect(),
    };
    keeper::settle(&k);
    {
        let (m, cv) = &shared.settled;
        lock(m).1 = true;
        cv.notify_all();
    }
    keeper::deny_forever(shared.group.raw());
}
