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
/// `FAN_MARK_IGNORE` (Linux 6.0, uapi/linux/fanotify.h).
pub const FAN_MARK_IGNORE: u32 = 0x0000_0400;

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

    /// Marks the mount `dirfd` is on (an `open_tree` descriptor: `O_PATH`
    /// descriptors are refused without a path, so it is looked up as ".").
    /// `mask`: [`FAN_PRE_ACCESS`], and `FAN_OPEN` when opens start a
    /// prefetch.
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

    pub fn unmark_mount(&self, path: &Path) -> io::Result<()> {
        self.mark(
            libc::FAN_MARK_REMOVE | libc::FAN_MARK_MOUNT,
            FAN_PRE_ACCESS | libc::FAN_OPEN,
            path,
        )
    }

    /// Removes every inode mark of the group (the ignore marks): with no
    /// mark left on its file system, a file opened later is not watched at
    /// all, and reads cost what they cost without fanotify.
    pub fn flush_inode_marks(&self, any: &Path) -> io::Result<()> {
        self.mark(libc::FAN_MARK_FLUSH, 0, any)
    }

    /// Stops the events of one file under the marked mount.
    pub fn ignore(&self, path: &Path) -> io::Result<()> {
        self.mark(
            libc::FAN_MARK_ADD | FAN_MARK_IGNORE | libc::FAN_MARK_IGNORED_SURV_MODIFY,
            FAN_PRE_ACCESS,
            path,
        )
    }
}

pub fn umount(path: &Path, flags: libc::c_int) -> io::Result<()> {
    let c = cpath(path)?;
    // SAFETY: valid NUL-terminated path.
    check(unsafe { libc::umount2(c.as_ptr(), flags) }).map(|_| ())
}
