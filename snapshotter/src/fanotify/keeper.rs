//! The keeper: a process forked before the mount is shown, which owns the
//! fanotify group so that the group, its marks and its pending events
//! outlive the daemon (see the kernel facts in [`super`]).
//!
//! It reads the group's events and forwards each one over a
//! `SOCK_SEQPACKET` socket pair to the daemon (a [`Forward`] with the
//! event's descriptor attached by `SCM_RIGHTS`), and writes the daemon's
//! [`Reply`]s back to the group. When the daemon's end of the socket
//! closes without a goodbye (the daemon died, or dropped the mount without
//! unmounting it), [`fail_closed`] runs: every pending and later event is
//! denied with `EIO`, the mount is detached, every file not known to be
//! filled is truncated to length zero unless another mount holds the
//! version's folder ([`settle`]), and only then does the keeper exit and
//! let the group go. A goodbye settles the same way: the mountpoint is
//! gone then, but a bind mount of it may not be.
//!
//! The keeper is forked from a multi-threaded process, so between `fork`
//! and `_exit` it makes system calls only: no allocation, no locks, no
//! panics. Everything it needs (paths as C strings, the fill flags) is
//! prepared before the fork.

use std::ffi::CString;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, RawFd};

use super::sys::deny_errno;

/// Events forwarded and not yet answered, at most (each holds an open
/// descriptor in the keeper; the default limit is 1024).
const PENDING: usize = 512;
/// The smallest event: `struct fanotify_event_metadata`.
const META: usize = std::mem::size_of::<libc::fanotify_event_metadata>();
/// A read buffer smaller than one event with its range record fails
/// (`EINVAL`): read only with room for one.
const MIN_READ: usize = META + 24;

/// keeper → daemon: one event. The event's descriptor rides along.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Forward {
    /// [`NO_ANSWER`] for a notification (an open), which takes none.
    pub slot: u32,
    /// The reading thread (`FAN_REPORT_TID`).
    pub tid: u32,
    pub mask: u64,
    pub offset: u64,
    /// `u64::MAX` when the kernel gave no range: the whole file.
    pub count: u64,
    /// The event's descriptor number in the keeper, which names the event
    /// in a response: the daemon denies it itself if the keeper dies.
    pub kfd: i32,
    pub _pad: u32,
}

impl Forward {
    /// Its bytes as they travel (a `repr(C)` struct of integers, no
    /// padding left implicit).
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: plain integers with explicit padding; any byte is valid
        // to read.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const Forward).cast::<u8>(),
                std::mem::size_of::<Forward>(),
            )
        }
    }

    /// [`Forward::as_bytes`], writable: every bit pattern is a valid value.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; every bit pattern of its integers is valid.
        unsafe {
            std::slice::from_raw_parts_mut(
                (self as *mut Forward).cast::<u8>(),
                std::mem::size_of::<Forward>(),
            )
        }
    }
}

/// daemon → keeper.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Reply {
    pub kind: u32,
    pub a: u32,
    pub b: u32,
    pub _pad: u32,
}

/// `Forward::slot` of an event that takes no answer.
pub(crate) const NO_ANSWER: u32 = u32::MAX;

/// `Reply::kind`: answer the event in slot `a` with `b` (0: allow, else
/// the errno to deny with).
pub(crate) const ANSWER: u32 = 1;
/// File `a` (its index in the layout) is wholly filled and durable.
pub(crate) const FULL: u32 = 2;
/// The mount was unmounted cleanly (no descriptor is left on it): exit.
pub(crate) const BYE: u32 = 3;

/// What the keeper owns after the fork.
pub(crate) struct Keeper {
    pub group: RawFd,
    pub sock: RawFd,
    /// The folder's lock file, opened (and shared-locked) by the daemon.
    pub lock: RawFd,
    pub lock_path: CString,
    pub mountpoint: CString,
    /// Every laid-out file by its path through the cache folder.
    pub files: Vec<CString>,
    /// Which of them are wholly filled.
    pub full: Vec<bool>,
}

fn respond(group: RawFd, fd: RawFd, response: u32) {
    let r = libc::fanotify_response { fd, response };
    // SAFETY: writes a plain struct to the group; the kernel copies it.
    unsafe {
        libc::write(
            group,
            (&raw const r).cast(),
            std::mem::size_of::<libc::fanotify_response>(),
        );
        libc::close(fd);
    }
}

/// Sends `msg` with `fd` attached; false if the daemon is not there.
/// (No allocation: the keeper is a forked child of a threaded process.)
fn send_fd(sock: RawFd, msg: &Forward, fd: RawFd) -> bool {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    // SAFETY: both descriptors are open for the length of the call: the
    // socket is the keeper's own, `fd` the event's, closed after.
    let (sock, fd) = unsafe { (BorrowedFd::borrow_raw(sock), BorrowedFd::borrow_raw(fd)) };
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    control.push(SendAncillaryMessage::ScmRights(&fds));
    let bytes = msg.as_bytes();
    sendmsg(
        sock,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    ) == Ok(bytes.len())
}

/// One event of a read from the group: `(next, mask, fd, tid, offset,
/// count)`.
type Parsed = (usize, u64, RawFd, u32, u64, u64);

fn parse(buf: &[u8], mut at: usize, len: usize) -> Option<Parsed> {
    let word = |o: usize, n: usize| -> Option<&[u8]> { buf.get(o..o + n) };
    let event_len = u32::from_ne_bytes(word(at, 4)?.try_into().ok()?) as usize;
    let meta_len = u16::from_ne_bytes(word(at + 6, 2)?.try_into().ok()?) as usize;
    if event_len < 24 || at + event_len > len {
        return None;
    }
    let mask = u64::from_ne_bytes(word(at + 8, 8)?.try_into().ok()?);
    let fd = i32::from_ne_bytes(word(at + 16, 4)?.try_into().ok()?);
    let tid = u32::from_ne_bytes(word(at + 20, 4)?.try_into().ok()?);
    let (mut offset, mut count) = (0, u64::MAX);
    let mut info = at + meta_len;
    while info + 4 <= at + event_len {
        let kind = *buf.get(info)?;
        let ilen = u16::from_ne_bytes(word(info + 2, 2)?.try_into().ok()?) as usize;
        if ilen < 4 {
            break;
        }
        if kind == super::sys::FAN_EVENT_INFO_TYPE_RANGE && ilen >= 24 {
            offset = u64::from_ne_bytes(word(info + 8, 8)?.try_into().ok()?);
            count = u64::from_ne_bytes(word(info + 16, 8)?.try_into().ok()?);
        }
        info += ilen;
    }
    at += event_len;
    Some((at, mask, fd, tid, offset, count))
}

/// The keeper's life; never returns.
pub(crate) fn run(mut k: Keeper) -> ! {
    let mut pending = [-1 as RawFd; PENDING];
    let mut buf = [0u8; 8192];
    loop {
        // A read returns as many events as fit its buffer, each at least
        // META bytes: read no more than the free slots can take.
        let free = pending.iter().filter(|&&f| f < 0).count();
        let room = buf.len().min(free * META);
        let mut fds = [
            libc::pollfd {
                fd: k.sock,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                // A negative fd is skipped: stop reading events while every
                // slot is taken.
                fd: if room >= MIN_READ { k.group } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two pollfds on the stack.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            continue; // EINTR
        }
        if fds[0].revents != 0 {
            let mut r = Reply::default();
            // SAFETY: receives at most size_of::<Reply>() bytes into `r`.
            let n = unsafe {
                libc::recv(
                    k.sock,
                    (&raw mut r).cast(),
                    std::mem::size_of::<Reply>(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n == std::mem::size_of::<Reply>() as isize {
                match r.kind {
                    ANSWER => {
                        if let Some(fd) = pending.get_mut(r.a as usize) {
                            if *fd >= 0 {
                                let resp = if r.b == 0 {
                                    libc::FAN_ALLOW
                                } else {
                                    deny_errno(r.b as i32)
                                };
                                respond(k.group, *fd, resp);
                                *fd = -1;
                            }
                        }
                    }
                    FULL => {
                        if let Some(f) = k.full.get_mut(r.a as usize) {
                            *f = true;
                        }
                    }
                    BYE => {
                        // The mountpoint is gone, but a bind mount of it
                        // (a container's volume) may outlive this group:
                        // settle as after a crash.
                        fail_closed(&mut k, &mut pending);
                    }
                    _ => {}
                }
            } else if n == 0 || (n < 0 && !would_block()) {
                fail_closed(&mut k, &mut pending);
            }
        }
        if fds[1].revents != 0 {
            // SAFETY: reads into a stack buffer of its length.
            let len = unsafe { libc::read(k.group, buf.as_mut_ptr().cast(), room) };
            if len <= 0 {
                continue;
            }
            let len = len as usize;
            let mut at = 0;
            while let Some((next, mask, fd, tid, offset, count)) = parse(&buf, at, len) {
                at = next;
                if fd < 0 {
                    continue;
                }
                if mask & super::sys::FAN_PRE_ACCESS == 0 {
                    // A notification: pass it on, nothing to answer.
                    let msg = Forward {
                        slot: NO_ANSWER,
                        tid,
                        mask,
                        offset,
                        count,
                        kfd: -1,
                        _pad: 0,
                    };
                    send_fd(k.sock, &msg, fd);
                    // SAFETY: our copy; the message carried its own.
                    unsafe { libc::close(fd) };
                    continue;
                }
                let Some(slot) = pending.iter().position(|&f| f < 0) else {
                    // Cannot happen (a read holds no more events than the
                    // free slots it was sized by), but never drop one.
                    respond(k.group, fd, deny_errno(libc::EIO));
                    continue;
                };
                let msg = Forward {
                    slot: slot as u32,
                    tid,
                    mask,
                    offset,
                    count,
                    kfd: fd,
                    _pad: 0,
                };
                if send_fd(k.sock, &msg, fd) {
                    pending[slot] = fd;
                } else {
                    respond(k.group, fd, deny_errno(libc::EIO));
                }
            }
        }
    }
}

fn would_block() -> bool {
    let e = std::io::Error::last_os_error().raw_os_error();
    e == Some(libc::EAGAIN) || e == Some(libc::EINTR)
}

/// The daemon is gone: deny what waits, take the mount away, and leave no
/// hole that a held descriptor could read as zeros once the group goes.
fn fail_closed(k: &mut Keeper, pending: &mut [RawFd]) -> ! {
    for fd in pending.iter_mut().filter(|f| **f >= 0) {
        respond(k.group, *fd, deny_errno(libc::EIO));
        *fd = -1;
    }
    settle(k);
    // SAFETY: ends the process; the kernel closes the group, and later
    // reads of the truncated files see their end, not zeros.
    unsafe { libc::_exit(0) }
}

/// Denies the events the keeper forwarded under descriptor numbers of its
/// own, `kfds` (responses name the event by that number), without closing
/// anything: run by the daemon when the keeper died with them pending.
pub(crate) fn deny_numbers(group: RawFd, kfds: &[RawFd]) {
    for &fd in kfds {
        let r = libc::fanotify_response {
            fd,
            response: deny_errno(libc::EIO),
        };
        // SAFETY: writes a plain struct to the group.
        unsafe {
            libc::write(
                group,
                (&raw const r).cast(),
                std::mem::size_of::<libc::fanotify_response>(),
            )
        };
    }
}

/// [`fail_closed`] after the pending events are denied: detach the mount,
/// then leave no file that a path or a held descriptor could read as
/// zeros once the group is gone. Returns with the events queued so far
/// denied; the caller keeps the group open (denying) or exits. Also run by
/// the daemon when its keeper died ([`super::events`]).
///
/// The marks are on the files' inodes, so they guard every path to them:
/// the mountpoint, and bind mounts of it that outlive it. When this is the
/// last mount of the version's folder (its lock can be had exclusively),
/// every file not known to be filled is truncated to length zero while
/// the marks still guard it: a held descriptor then reads end of file and
/// a mapping faults with `SIGBUS`, and the next mount lays the file out
/// again as a new inode. `open(O_TRUNC)` raises no pre-content event
/// (Linux 6.18; `truncate(2)` does, and would wait on this very group).
/// When another mount holds the folder, its group guards the same inodes
/// and settles them when it goes: this group's marks are removed, so that
/// its denials do not fail that mount's reads.
pub(crate) fn settle(k: &Keeper) {
    // SAFETY: plain system calls on C strings prepared before the fork.
    unsafe {
        libc::umount2(k.mountpoint.as_ptr(), libc::MNT_DETACH);
        // Our share of the folder's lock goes first: of two mounts that
        // settle at once, the later one then finds the lock free.
        libc::flock(k.lock, libc::LOCK_UN);
    }
    let mut buf = [0u8; 8192];
    deny_all(k.group, &mut buf);
    // SAFETY: as above.
    let exclusive = unsafe {
        let fd = libc::open(k.lock_path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if fd >= 0 && libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) == 0 {
            Some(fd)
        } else {
            if fd >= 0 {
                libc::close(fd);
            }
            None
        }
    };
    match exclusive {
        Some(lock) => {
            for (path, _) in k.files.iter().zip(&k.full).filter(|(_, full)| !**full) {
                // SAFETY: a valid C string; the descriptor is closed at once.
                unsafe {
                    let fd = libc::open(
                        path.as_ptr(),
                        libc::O_WRONLY | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                    );
                    if fd >= 0 {
                        libc::close(fd);
                    }
                }
            }
            // SAFETY: our descriptor; closing it releases the lock.
            unsafe { libc::close(lock) };
        }
        // SAFETY: FAN_MARK_FLUSH of the group's inode marks; the path is
        // only looked up, and the folder's lock file exists.
        None => unsafe {
            libc::fanotify_mark(
                k.group,
                libc::FAN_MARK_FLUSH,
                0,
                libc::AT_FDCWD,
                k.lock_path.as_ptr(),
            );
        },
    }
    deny_all(k.group, &mut buf);
}

/// Denies every event with `EIO` for as long as the group lives: the
/// daemon's last duty once its keeper is gone and the files are settled.
pub(crate) fn deny_forever(group: RawFd) -> ! {
    let mut buf = [0u8; 8192];
    loop {
        let mut p = libc::pollfd {
            fd: group,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on the stack.
        unsafe { libc::poll(&mut p, 1, -1) };
        deny_all(group, &mut buf);
    }
}

/// Denies every queued event with `EIO`, without waiting for more.
fn deny_all(group: RawFd, buf: &mut [u8]) {
    loop {
        let mut p = libc::pollfd {
            fd: group,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd; a read into `buf` of its length.
        let len = unsafe {
            if libc::poll(&mut p, 1, 0) <= 0 {
                return;
            }
            libc::read(group, buf.as_mut_ptr().cast(), buf.len())
        };
        if len <= 0 {
            return;
        }
        let mut at = 0;
        while let Some((next, _, fd, _, _, _)) = parse(buf, at, len as usize) {
            at = next;
            if fd >= 0 {
                respond(group, fd, deny_errno(libc::EIO));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_with_a_range_record_parses_and_a_short_one_does_not() {
        let mut b = vec![0u8; 48];
        b[0..4].copy_from_slice(&48u32.to_ne_bytes());
        b[4] = 3;
        b[6..8].copy_from_slice(&24u16.to_ne_bytes());
        b[8..16].copy_from_slice(&0x0010_0000u64.to_ne_bytes());
        b[16..20].copy_from_slice(&7i32.to_ne_bytes());
        b[20..24].copy_from_slice(&99u32.to_ne_bytes());
        b[24] = 6;
        b[26..28].copy_from_slice(&24u16.to_ne_bytes());
        b[32..40].copy_from_slice(&(3u64 << 20).to_ne_bytes());
        b[40..48].copy_from_slice(&4096u64.to_ne_bytes());
        assert_eq!(
            parse(&b, 0, 48),
            Some((48, 0x0010_0000, 7, 99, 3 << 20, 4096))
        );
        assert_eq!(parse(&b, 0, 40), None);
        // No range record: the whole file.
        b[0..4].copy_from_slice(&24u32.to_ne_bytes());
        assert_eq!(
            parse(&b, 0, 24),
            Some((24, 0x0010_0000, 7, 99, 0, u64::MAX))
        );
    }
}
