//! The directory a pull writes into, reached only beneath itself.
//!
//! A version is someone else's content, and the directory may already hold
//! anything, links planted by a hostile earlier version among them. So no
//! path a pull touches is ever resolved by the kernel from the top: every
//! directory is opened from the destination's own descriptor without
//! following a symlink (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`, or one `O_NOFOLLOW` step per component where the
//! kernel lacks it), a symlink found where the version has a directory is
//! replaced, never followed; temporary files are created `O_EXCL |
//! O_NOFOLLOW` under unpredictable names; modes are set with `fchmod` on
//! the open file; and an entry is replaced only by renaming onto it. What
//! a pull creates or changes therefore lies beneath the destination,
//! whatever the version says and whatever the destination held (as tar,
//! `oras pull` and containerd's unpacker promise).
//!
//! `cap-std` offers sandboxed directories too, but it follows symlinks that
//! stay inside its sandbox, where a pull must replace them: the few
//! syscalls are taken from `rustix` instead.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::Error;

/// Prefix of a pull's temporary files: `.sealvol-<pid>-<random>`.
const TEMP_PREFIX: &str = ".sealvol-";

/// The destination directory, opened once.
pub(crate) struct Dest {
    root: OwnedFd,
    path: PathBuf,
    /// Directories this pull created (paths under the destination): only
    /// their modes are set from the version.
    created: Mutex<std::collections::HashSet<String>>,
}

impl Dest {
    /// Opens `path` (created if missing: the user named it, so it is
    /// resolved as given).
    pub(crate) fn open(path: &Path) -> Result<Dest, Error> {
        std::fs::create_dir_all(path).map_err(|e| Error::io(path, e))?;
        let root = rfs::open(
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::io(path, e.into()))?;
        Ok(Dest {
            root,
            path: path.to_path_buf(),
            created: Default::default(),
        })
    }

    /// Where `rel` is, for messages and the chunk cache.
    pub(crate) fn shown(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }

    /// Bytes the destination's file system has free for this user.
    pub(crate) fn available(&self) -> Result<u64, Error> {
        let s = rfs::fstatvfs(&self.root).map_err(|e| Error::io(&self.path, e.into()))?;
        Ok(s.f_bavail.saturating_mul(s.f_frsize))
    }

    /// The directory `rel` (the destination itself for `None`), created
    /// where missing; a symlink in the way is replaced by a directory, a
    /// file in the way is an error.
    pub(crate) fn dir(&self, rel: Option<&str>) -> Result<OwnedFd, Error> {
        let Some(rel) = rel else {
            return self.dup_root();
        };
        if let Ok(fd) = self.open_existing(rel) {
            return Ok(fd);
        }
        let mut at = self.dup_root()?;
        let mut walked = String::new();
        for name in rel.split('/') {
            if !walked.is_empty() {
                walked.push('/');
            }
            walked.push_str(name);
            at = self.step(&at, name, &walked)?;
        }
        Ok(at)
    }

    /// One component of [`Dest::dir`]'s walk: `name` in `at`, made a
    /// directory if it is not one.
    fn step(&self, at: &OwnedFd, name: &str, walked: &str) -> Result<OwnedFd, Error> {
        let err = |e: Errno| Error::io(&self.shown(walked), e.into());
        // Bounded: each round removes or creates one entry, and only a
        // concurrent writer could undo it.
        for _ in 0..8 {
            match open_dir_at(at, name) {
                Ok(fd) => return Ok(fd),
                Err(Errno::NOENT) => match rfs::mkdirat(at, name, Mode::from_raw_mode(0o777)) {
                    Ok(()) => {
                        self.created
                            .lock()
                            .expect("created lock")
                            .insert(walked.to_string());
                    }
                    Err(Errno::EXIST) => {}
                    Err(e) => return Err(err(e)),
                },
                Err(Errno::NOTDIR | Errno::LOOP) => {
                    let st = rfs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW).map_err(err)?;
                    if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
                        return Err(Error::Usage(format!(
                            "{}: a file is in the way of a directory of the version; move it away and pull again",
                            self.shown(walked).display()
                        )));
                    }
                    // Replaced, never followed: where it points is not ours.
                    match rfs::unlinkat(at, name, AtFlags::empty()) {
                        Ok(()) | Err(Errno::NOENT) => {}
                        Err(e) => return Err(err(e)),
                    }
                }
                Err(e) => return Err(err(e)),
            }
        }
        Err(Error::Usage(format!(
            "{}: changes while the pull creates it; is another process writing there?",
            self.shown(walked).display()
        )))
    }

    /// The directory `rel` (the destination for `None`) if it is there as
    /// a directory, reached without following a link.
    pub(crate) fn existing_dir(&self, rel: Option<&str>) -> Option<OwnedFd> {
        match rel {
            None => self.dup_root().ok(),
            Some(rel) => self.open_existing(rel).ok(),
        }
    }

    /// The directory `rel` as it is, without creating or following
    /// anything.
    fn open_existing(&self, rel: &str) -> Result<OwnedFd, Errno> {
        let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let resolve =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        match rfs::openat2(&self.root, rel, flags, Mode::empty(), resolve) {
            // Kernels before 5.6 (and some sandboxes) lack openat2.
            Err(Errno::NOSYS | Errno::PERM) => {
                let mut at = rfs::openat(&self.root, ".", flags, Mode::empty())?;
                for name in rel.split('/') {
                    at = open_dir_at(&at, name)?;
                }
                Ok(at)
            }
            other => other,
        }
    }

    fn dup_root(&self) -> Result<OwnedFd, Error> {
        self.root.try_clone().map_err(|e| Error::io(&self.path, e))
    }

    /// A new, empty temporary file in `parent`, sized to `size`: created
    /// exclusively, so nothing planted under its name is followed or
    /// reused.
    pub(crate) fn create_temp(
        &self,
        parent: &OwnedFd,
        size: u64,
        shown: &Path,
    ) -> Result<(String, File), Error> {
        let name = format!(
            "{TEMP_PREFIX}{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        let fd = rfs::openat(
            parent,
            name.as_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| Error::io(shown, e.into()))?;
        let file = File::from(fd);
        if let Err(e) = file.set_len(size) {
            let _ = rfs::unlinkat(parent, name.as_str(), AtFlags::empty());
            return Err(Error::io(shown, e));
        }
        Ok((name, file))
    }

    /// A temporary file this pull created, opened again.
    pub(crate) fn reopen_temp(&self, parent: &OwnedFd, name: &str) -> Result<File, Errno> {
        rfs::openat(
            parent,
            name,
            OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map(File::from)
    }

    /// The regular file `name` in `parent`, if that is what is there
    /// (a symlink, FIFO or device of that name is not opened).
    pub(crate) fn existing_file(&self, parent: &OwnedFd, name: &str) -> Option<File> {
        // O_NONBLOCK: opening a FIFO planted under the name must not hang.
        let fd = rfs::openat(
            parent,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .ok()?;
        let st = rfs::fstat(&fd).ok()?;
        (FileType::from_raw_mode(st.st_mode) == FileType::RegularFile).then(|| File::from(fd))
    }

    /// Gives `file` (the temporary `temp` in `parent`) its mode and renames
    /// it onto `name`, replacing whatever non-directory was there.
    pub(crate) fn place(
        &self,
        parent: &OwnedFd,
        temp: &str,
        file: &File,
        name: &str,
        mode: u32,
        shown: &Path,
    ) -> Result<(), Error> {
        set_mode(file, mode, shown)?;
        self.rename_into_place(parent, temp, name, shown)
    }

    /// A symlink `name -> target` in `parent`, replacing a non-directory
    /// entry of that name.
    pub(crate) fn symlink(
        &self,
        parent: &OwnedFd,
        name: &str,
        target: &str,
        shown: &Path,
    ) -> Result<(), Error> {
        if rfs::readlinkat(parent, name, Vec::new())
            .is_ok_and(|t| t.as_bytes() == target.as_bytes())
        {
            return Ok(());
        }
        let temp = format!(
            "{TEMP_PREFIX}{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        rfs::symlinkat(target, parent, temp.as_str()).map_err(|e| Error::io(shown, e.into()))?;
        self.rename_into_place(parent, &temp, name, shown)
    }

    fn rename_into_place(
        &self,
        parent: &OwnedFd,
        temp: &str,
        name: &str,
        shown: &Path,
    ) -> Result<(), Error> {
        match rfs::renameat(parent, temp, parent, name) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = rfs::unlinkat(parent, temp, AtFlags::empty());
                Err(match e {
                    Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST => Error::Usage(format!(
                        "{}: a directory is in the way of an entry of the version; move it away and pull again",
                        shown.display()
                    )),
                    e => Error::io(shown, e.into()),
                })
            }
        }
    }

    /// Gives the directory `rel` the version's `mode`, if this pull created
    /// it; a directory that was there keeps the mode its owner gave it.
    pub(crate) fn set_created_dir_mode(&self, rel: &str, mode: u32) -> Result<(), Error> {
        if !self.created.lock().expect("created lock").contains(rel) {
            return Ok(());
        }
        let fd = self
            .open_existing(rel)
            .map_err(|e| Error::io(&self.shown(rel), e.into()))?;
        rfs::fchmod(&fd, Mode::from_raw_mode(mode))
            .map_err(|e| Error::io(&self.shown(rel), e.into()))
    }

    /// Removes a temporary file of this pull, if its directory is still
    /// there.
    pub(crate) fn remove_temp(&self, parent_rel: Option<&str>, name: &str) {
        if let Some(parent) = self.existing_dir(parent_rel) {
            let _ = rfs::unlinkat(&parent, name, AtFlags::empty());
        }
    }

    /// Removes the temporary files a pull that was killed (SIGKILL, power
    /// loss) left in `parent`: those of a process that no longer runs, in
    /// this release's form (`.sealvol-<pid>-<random>`) or the earlier one
    /// (`.<name>.sealvol-<pid>`).
    pub(crate) fn sweep(&self, parent: &OwnedFd) {
        let Ok(dir) = rfs::Dir::read_from(parent) else {
            return;
        };
        for entry in dir.flatten() {
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            let pid = if let Some(rest) = name.strip_prefix(TEMP_PREFIX) {
                rest.split_once('-').map(|(pid, _)| pid)
            } else if name.starts_with('.') {
                name.rsplit_once(".sealvol-").map(|(_, pid)| pid)
            } else {
                None
            };
            let stale = pid.and_then(|p| p.parse::<u32>().ok()).is_some_and(|pid| {
                pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
            });
            if stale && entry.file_type() == FileType::RegularFile {
                let _ = rfs::unlinkat(parent, name, AtFlags::empty());
            }
        }
    }
}

fn open_dir_at(at: &OwnedFd, name: &str) -> Result<OwnedFd, Errno> {
    rfs::openat(
        at,
        name,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
}

/// `fchmod` on the open file: a mode never lands on whatever a path would
/// resolve to.
pub(crate) fn set_mode(file: &impl AsFd, mode: u32, shown: &Path) -> Result<(), Error> {
    rfs::fchmod(file, Mode::from_raw_mode(mode)).map_err(|e| Error::io(shown, e.into()))
}
