//! The few fanotify and mount system calls the engine makes, over `libc`.
//! Constants that the `libc` crate does not have yet are defined here from
//! the kernel's `include/uapi/linux/fanotify.h` (Linux 6.14 and later).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// `FAN_PRE_ACCESS`: pre-content access hook (uapi/linux/fanotify.h).
pub const FAN_PRE_ACCESS: u64 = 0x0010_0000;
/// `FAN_EVENT_INFO_TYPE_RANGE`: the info record with `{offset, count}`
/// (uapi/linux/fanotify.h, `struct fanotify_event_info_range`).
pub const FAN_EVENT_INFO_TYPE_RANGE: u8 = 6;
/// `FAN_ERRNO_SHIFT` (32 - `FAN_ERRNO_BITS`), for `FAN_DENY_ERRNO(err)`
/// (uapi/linux/fanotify.h).
const FAN_ERRNO_SHIFT: u32 = 24;

/// `MOUNT_ATTR__ATIME`: the atime field of `struct mount_attr`, cleared
/// to change the atime mode (uapi/linux/mount.h).
pub const MOUNT_ATTR_ATIME_FIELD: u64 = 0x70;

/// `FAN_DENY_ERRNO(errno)`: deny, and give the reader `errno`.
pub const fn deny_errno(errno: i32) -> u32 {
    libc::FAN_DENY | (((errno as u32) & 0xff) << FAN_ERRNO_SHIFT)
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A fanotify group of class `FAN_CLASS_PRE_CONTENT` whose event
/// descriptors are opened read-only.
pub struct Group {
    fd: OwnedFd,
}

impl Group {
    pub fn init() -> io::Result<Group> {
        // SAFETY: plain system call with constant arguments.
        let fd = check(unsafe {
            libc::fanotify_init(
                // FAN_REPORT_TID: events name the reading thread, so that
                // read-ahead follows each reader, not their mix.
                libc::FAN_CLASS_PRE_CONTENT | libc::FAN_CLOEXEC | libc::FAN_REPORT_TID,
                (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC) as u32,
            )
        })?;
        // SAFETY: fd was just returned to us and is owned by nobody else.
        Ok(Group {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn mark(&self, flags: u32, mask: u64, path: &Path) -> io::Result<()> {
        let c = cpath(path)?;
        // SAFETY: `c` is a valid NUL-terminated path for the call.
        check(unsafe { libc::fanotify_mark(self.raw(), flags, mask, libc::AT_FDCWD, c.as_ptr()) })
            .map(|_| ())
    }

    pub fn mark_inode(&self, path: &Path, mask: u64) -> io::Result<()> {
        self.mark(libc::FAN_MARK_ADD, mask, path)
    }

    /// Removes `mask` from the inode mark of `path` (the mark goes once
    /// its mask is empty).
    pub fn unmark_inode(&self, path: &Path, mask: u64) -> io::Result<()> {
        self.mark(libc::FAN_MARK_REMOVE, mask, path)
    }

    /// Marks the mount `dirfd` is on (an `open_tree` descriptor: `O_PATH`
    /// descriptors are refused without a path, so it is looked up as ".").
    pub fn mark_mount_at(&self, dirfd: RawFd, mask: u64) -> io::Result<()> {
        // SAFETY: a valid descriptor and a static NUL-terminated path.
        check(unsafe {
            libc::fanotify_mark(
                self.raw(),
                libc::FAN_MARK_ADD | libc::FAN_MARK_MOUNT,
                mask,
                dirfd,
                c".".as_ptr(),
            )
        })
        .map(|_| ())
    }
}

/// A detached copy of the mount at `tree` (`open_tree(OPEN_TREE_CLONE)`),
/// read-only (with nosuid, nodev, noatime) when `read_only`: no path
/// reaches it until `move_mount` attaches it, and none ever does if it is
/// only used through its descriptor.
pub fn clone_tree(tree: &Path, read_only: bool) -> io::Result<OwnedFd> {
    let c = cpath(tree)?;
    // SAFETY: open_tree with a valid path; returns a new descriptor.
    let r = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us.
    let fd = unsafe { OwnedFd::from_raw_fd(r as RawFd) };
    if !read_only {
        return Ok(fd);
    }
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_RDONLY
            | libc::MOUNT_ATTR_NOSUID
            | libc::MOUNT_ATTR_NODEV
            | libc::MOUNT_ATTR_NOATIME,
        // Changing the atime mode needs its field cleared first.
        attr_clr: MOUNT_ATTR_ATIME_FIELD,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr on our descriptor with a struct of its size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &raw const attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Opens the layout's files for writing such that their writes raise no
/// pre-content event of their own inode marks (a write is an access too:
/// without this, every fill would wait on the group it is filling for).
///
/// The kernel opens the descriptor of a fanotify event with
/// `FMODE_NONOTIFY`, so that a listener's own I/O through it raises no
/// event. This asks for one: a notification group whose event descriptors
/// are opened `O_RDWR` marks a private, writable, detached copy of the
/// layout's tree for `FAN_OPEN`; opening a file there read-only queues an
/// open event, whose descriptor is the writable, unwatched one. No other
/// process can open anything through a detached mount only this process
/// holds, so every event on it is ours.
pub struct Unwatched {
    group: Group,
    tree: OwnedFd,
    turn: std::sync::Mutex<()>,
}

impl Unwatched {
    pub fn new(tree: &Path) -> io::Result<Unwatched> {
        // SAFETY: plain system call with constant arguments.
        let fd = check(unsafe {
            libc::fanotify_init(
                // Non-blocking: the open event is queued before openat
                // returns, so a read that finds none fails instead of
                // hanging a fill.
                libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK,
                (libc::O_RDWR | libc::O_LARGEFILE | libc::O_CLOEXEC) as u32,
            )
        })?;
        // SAFETY: fd was just returned to us and is owned by nobody else.
        let group = Group {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        };
        let tree = clone_tree(tree, false)?;
        group.mark_mount_at(tree.as_raw_fd(), libc::FAN_OPEN)?;
        Ok(Unwatched {
            group,
            tree,
            turn: std::sync::Mutex::new(()),
        })
    }

    /// `rel` (a path under the tree), open for writing, unwatched.
    pub fn open(&self, rel: &str) -> io::Result<std::fs::File> {
        let c = CString::new(rel).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // One open at a time: the event read next is this open's.
        let _turn = self.turn.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: openat under our descriptor with a valid relative path.
        let opened = check(unsafe {
            libc::openat(
                self.tree.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NOCTTY,
            )
        })?;
        // SAFETY: just opened, ours.
        let opened = unsafe { OwnedFd::from_raw_fd(opened) };
        let mut buf = [0u8; 4096];
        // SAFETY: reads into a stack buffer of its length. The open event
        // was queued before openat returned.
        let len = unsafe { libc::read(self.group.raw(), buf.as_mut_ptr().cast(), buf.len()) };
        if len < 0 {
            return Err(io::Error::last_os_error());
        }
        let meta = std::mem::size_of::<libc::fanotify_event_metadata>();
        let mut at = 0usize;
        let mut got = None;
        while at + meta <= len as usize {
            // SAFETY: `meta` bytes at `at` lie within what the kernel wrote.
            let m: libc::fanotify_event_metadata =
                unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
            if (m.event_len as usize) < meta {
                break;
            }
            if m.fd >= 0 {
                // SAFETY: the event's descriptor, now ours.
                let fd = unsafe { OwnedFd::from_raw_fd(m.fd) };
                if got.is_none() {
                    got = Some(fd);
                }
            }
            at += m.event_len as usize;
        }
        drop(opened);
        got.map(std::fs::File::from)
            .ok_or_else(|| io::Error::other(format!("no open event for {rel}")))
    }
}

pub fn umount(path: &Path, flags: libc::c_int) -> io::Result<()> {
    let c = cpath(path)?;
    // SAFETY: valid NUL-terminated path.
    check(unsafe { libc::umount2(c.as_ptr(), flags) }).map(|_| ())
}
