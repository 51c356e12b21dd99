//! The version laid out as local files that start empty, and which of
//! their 1 MiB pieces are filled.
//!
//! `<cache>/fanotify/<key>/` holds `tree/` (what the mountpoint shows),
//! `fill/<inode>` (one bit per piece of each file, set only after the
//! piece's bytes were written and fsynced), `ref` (the pinned ref, for
//! `sealvol mounts`) and `lock` (held with `flock` by every mount of the
//! folder, so that trimming the cache skips it). The key is the version
//! digest, plus a hash of the directory when a ref mounts one.
//!
//! Laying out is idempotent: a later mount keeps every file whose size is
//! right (its bitmap with it) and lays out again any file that is missing
//! or has another size (the keeper truncates files it could not vouch
//! for; see [`super`]), with an empty bitmap.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Range;

use futures_util::future::BoxFuture;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{FileExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use sealvol_spec::chain::{pieces_of, PIECE};
use sealvol_spec::tree::EntryData;
use sealvol_spec::{B3Digest, Sha256Digest};

use super::EngineError;
use crate::inodes::{Inodes, Owner, ROOT};

/// One laid-out file.
pub(crate) struct LaidFile {
    pub ino: u64,
    /// Its path through the cache folder (a mount no mark watches).
    pub path: PathBuf,
    /// Its path relative to the tree, for messages.
    pub rel: String,
    pub size: u64,
    /// Opened for writing on first fill.
    writer: Mutex<Option<Arc<File>>>,
    /// Read-ahead over the file's events, one per reading thread (FUSE
    /// keeps one per handle; events name no handle).
    pub ahead: Mutex<HashMap<u32, crate::reader::ReadAhead>>,
    /// The piece a fill ahead has been started up to (exclusive).
    pub ahead_to: std::sync::atomic::AtomicU64,
    /// Set once the file was reported wholly filled.
    pub announced: std::sync::atomic::AtomicBool,
    fill: Mutex<Fill>,
}

/// A file's fill bitmap, in memory and in `fill/<inode>`.
pub(crate) struct Fill {
    /// Durable and recorded: what a later mount may trust.
    bits: Vec<u8>,
    /// Written into the file (in the page cache, so readers see them) but
    /// perhaps not durable yet: enough to allow a read, never recorded.
    written: Vec<u8>,
    pieces: u64,
    file: File,
}

impl Fill {
    fn open(path: &Path, pieces: u64, fresh: bool) -> io::Result<Fill> {
        let len = pieces.div_ceil(8) as usize;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(fresh)
            .mode(0o600)
            .open(path)?;
        let mut bits = vec![0u8; len];
        let n = file.read_at(&mut bits, 0).unwrap_or(0);
        if n != len {
            // Short or missing: trust nothing of it.
            bits.iter_mut().for_each(|b| *b = 0);
            file.set_len(0)?;
        }
        let written = bits.clone();
        Ok(Fill {
            bits,
            written,
            pieces,
            file,
        })
    }

    fn has(&self, piece: u64) -> bool {
        self.bits[(piece / 8) as usize] & (1 << (piece % 8)) != 0
    }

    /// The pieces of `range` not written yet.
    pub fn missing(&self, range: std::ops::Range<u64>) -> Vec<u64> {
        let written = |p: u64| self.written[(p / 8) as usize] & (1 << (p % 8)) != 0;
        range.filter(|&p| p < self.pieces && !written(p)).collect()
    }

    fn set_written(&mut self, pieces: &[u64]) {
        for &p in pieces {
            self.written[(p / 8) as usize] |= 1 << (p % 8);
        }
    }

    /// Records `pieces` as filled (their bytes are already durable).
    fn set(&mut self, pieces: &[u64]) -> io::Result<()> {
        for &p in pieces {
            self.bits[(p / 8) as usize] |= 1 << (p % 8);
        }
        self.set_written(pieces);
        // The bitmap needs no fsync: losing it only refetches pieces.
        self.file.write_all_at(&self.bits, 0)
    }

    pub fn full(&self) -> bool {
        (0..self.pieces).all(|p| self.has(p))
    }
}

impl LaidFile {
    pub fn missing(&self, offset: u64, end: u64) -> Vec<u64> {
        let end = end.min(self.size);
        if offset >= end {
            return Vec::new();
        }
        self.fill().missing(pieces_of(offset, end))
    }

    fn fill(&self) -> std::sync::MutexGuard<'_, Fill> {
        self.fill.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn full(&self) -> bool {
        self.fill().full()
    }

    /// Writes verified bytes at `offset` (not yet durable), through the
    /// descriptor `open` gives for the file's path relative to the tree
    /// on its first write: one whose writes raise no event of the file's
    /// own mark (`sys::Unwatched`).
    pub fn write(
        &self,
        offset: u64,
        bytes: &[u8],
        open: &dyn Fn(&str) -> io::Result<File>,
    ) -> io::Result<()> {
        // The lock covers only the open: writes of other pieces, and an
        // fsync, go on at the same time.
        let w = {
            let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
            if w.is_none() {
                *w = Some(Arc::new(open(&self.rel)?));
            }
            Arc::clone(w.as_ref().expect("opened above"))
        };
        w.write_all_at(bytes, offset)
    }

    /// Makes the written pieces durable, then records them as filled.
    /// Records `pieces` as written: their bytes are in the page cache,
    /// where every reader of the file finds them, so reads of them may be
    /// allowed before they are durable ([`LaidFile::commit`] records them
    /// for later mounts only once they are).
    pub fn written(&self, pieces: &[u64]) {
        self.fill().set_written(pieces)
    }

    pub fn commit(&self, pieces: &[u64]) -> io::Result<()> {
        // Not under the lock: an fsync waits on the disk, and the writes
        // of the pieces readers wait for must not wait behind it.
        let w = self
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(f) = w {
            f.sync_data()?;
        }
        self.fill().set(pieces)
    }
}

/// A version's folder, laid out and locked for as long as it lives.
pub(crate) struct Layout {
    pub folder: PathBuf,
    pub tree: PathBuf,
    pub files: Vec<LaidFile>,
    /// The layout's inode number (on the host file system) to the index in
    /// `files`.
    by_host_ino: HashMap<u64, usize>,
    lock: File,
}

fn err(path: &Path) -> impl Fn(io::Error) -> EngineError + '_ {
    move |e| EngineError::Layout {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// The folder of a version (and a directory of it, and an owner other
/// than the mounting user's) under `cache_dir`.
pub(crate) fn folder(
    cache_dir: &Path,
    version: &B3Digest,
    base: Option<&str>,
    remapped: Option<(u32, u32)>,
) -> PathBuf {
    let mut key = version.hex();
    if let Some(b) = base {
        key = format!("{key}-{}", &blake3::hash(b.as_bytes()).to_hex()[..16]);
    }
    if let Some((uid, gid)) = remapped {
        key = format!("{key}-u{uid}g{gid}");
    }
    cache_dir.join("fanotify").join(key)
}

impl Layout {
    /// Lays out the files of `inodes` in `folder` (see the module docs).
    pub fn prepare(
        folder: &Path,
        inodes: &Inodes,
        owner: Owner,
        reference: &str,
    ) -> Result<Layout, EngineError> {
        let tree = folder.join("tree");
        let fill_dir = folder.join("fill");
        for d in [folder, &tree, &fill_dir] {
            std::fs::create_dir_all(d).map_err(err(d))?;
        }
        // Unfilled files read as zeros, and the files are the owner's: only
        // root may reach them other than through a mount.
        if let Some(base) = folder.parent() {
            std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o700))
                .map_err(err(base))?;
        }
        let lock_path = folder.join("lock");
        let lock = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(err(&lock_path))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_SH) } != 0 {
            return Err(err(&lock_path)(io::Error::last_os_error()));
        }
        // The lock's mtime is the folder's last use, for trimming.
        let _ = lock.set_modified(SystemTime::now());
        let _ = std::fs::write(folder.join("ref"), reference);

        let mut files = Vec::new();
        let mut dirs = Vec::new();
        for ino in ROOT + 1..=inodes.len() {
            let Some(entry) = inodes.entry(ino) else {
                continue;
            };
            let rel = relative(inodes, ino);
            let path = tree.join(&rel);
            let mode = entry.mode & 0o7777;
            match &entry.data {
                EntryData::Dir => {
                    match std::fs::create_dir(&path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(err(&path)(e)),
                    }
                    dirs.push((path, mode));
                }
                EntryData::Symlink { target } => {
                    match std::fs::symlink_metadata(&path) {
                        Ok(m) if m.file_type().is_symlink() => {}
                        Ok(_) => {
                            remove_any(&path).map_err(err(&path))?;
                            std::os::unix::fs::symlink(target, &path).map_err(err(&path))?;
                        }
                        Err(_) => std::os::unix::fs::symlink(target, &path).map_err(err(&path))?,
                    }
                    chown(&path, owner).map_err(err(&path))?;
                }
                EntryData::File { size, .. } => {
                    let size = *size;
                    let fresh = match std::fs::symlink_metadata(&path) {
                        Ok(m) if m.is_file() && m.len() == size => false,
                        Ok(_) => {
                            remove_any(&path).map_err(err(&path))?;
                            true
                        }
                        Err(_) => true,
                    };
                    if fresh {
                        let f = File::create(&path).map_err(err(&path))?;
                        f.set_len(size).map_err(err(&path))?;
                    }
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                        .map_err(err(&path))?;
                    chown(&path, owner).map_err(err(&path))?;
                    set_time(&path, owner.time).map_err(err(&path))?;
                    let fill_path = fill_dir.join(ino.to_string());
                    let fill = Fill::open(&fill_path, pieces_of(0, size).end, fresh)
                        .map_err(err(&fill_path))?;
                    files.push(LaidFile {
                        ino,
                        path,
                        rel,
                        size,
                        writer: Mutex::new(None),
                        ahead: Mutex::default(),
                        ahead_to: Default::default(),
                        announced: Default::default(),
                        fill: Mutex::new(fill),
                    });
                }
            }
        }
        // Directory modes and times last: creating children changes both.
        dirs.push((
            tree.clone(),
            inodes.attr(ROOT).map_or(0o755, |a| a.perm.into()),
        ));
        for (path, mode) in dirs.iter().rev() {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode))
                .map_err(err(path))?;
            chown(path, owner).map_err(err(path))?;
            set_time(path, owner.time).map_err(err(path))?;
        }
        // Where each chunk lies, for later mounts of other versions
        // (`reuse`); losing it only costs them downloads.
        let index = super::reuse::Index {
            files: files
                .iter()
                .filter_map(|f| {
                    let view = inodes.file(f.ino)?;
                    Some(super::reuse::IndexedFile {
                        rel: f.rel.clone(),
                        ino: f.ino,
                        size: f.size,
                        chunks: view
                            .chunks
                            .iter()
                            .map(|c| (c.sha256.hex(), c.offset, c.length))
                            .collect(),
                    })
                })
                .collect(),
        };
        if let Err(e) = super::reuse::write_index(folder, &index) {
            tracing::debug!(folder = %folder.display(), error = %e, "chunk index not written");
        }
        let mut by_host_ino = HashMap::new();
        for (i, f) in files.iter().enumerate() {
            let m = std::fs::metadata(&f.path).map_err(err(&f.path))?;
            by_host_ino.insert(m.ino(), i);
        }
        Ok(Layout {
            folder: folder.to_path_buf(),
            tree,
            files,
            by_host_ino,
            lock,
        })
    }

    /// The descriptor holding the folder's shared lock.
    pub fn lock_fd(&self) -> std::os::fd::RawFd {
        self.lock.as_raw_fd()
    }

    /// The laid-out file behind a descriptor (an event's), by inode.
    pub fn file_of(&self, host_ino: u64) -> Option<(usize, &LaidFile)> {
        let i = *self.by_host_ino.get(&host_ino)?;
        Some((i, &self.files[i]))
    }
}

/// For each chunk of the files not yet filled, the pieces it completes:
/// those that touch it and end within it, so that it is the last chunk
/// they need. A prefetch handing over chunks in its order then fills
/// each piece once its chunks have all come, and never fetches a chunk
/// it did not ask for (a recorded prefetch fetches its list, no more).
pub(crate) fn completed_by(
    layout: &Layout,
    inodes: &Inodes,
) -> HashMap<Sha256Digest, Vec<(usize, Range<u64>)>> {
    let mut map: HashMap<Sha256Digest, Vec<(usize, std::ops::Range<u64>)>> = HashMap::new();
    for (index, f) in layout.files.iter().enumerate() {
        let Some(view) = inodes.file(f.ino).filter(|_| !f.full()) else {
            continue;
        };
        for c in view.chunks {
            let end = c.offset + u64::from(c.length);
            // Piece p ends at min((p + 1) * PIECE, size).
            let stop = if end >= view.size {
                end.div_ceil(PIECE)
            } else {
                end / PIECE
            };
            let first = c.offset / PIECE;
            if first < stop {
                map.entry(c.sha256).or_default().push((index, first..stop));
            }
        }
    }
    map
}

/// A prefetch's sink into a layout (`prefetch::Sink`): each chunk handed
/// over becomes the pieces it completes ([`completed_by`]) that are still
/// missing, given to `fill` with the file's index, for as long as `owner`
/// (which holds the layout, `layout_of`) lives. Held weakly: the
/// prefetcher lives in the owner.
pub(crate) fn prefetch_sink<T: Send + Sync + 'static>(
    owner: &std::sync::Arc<T>,
    inodes: &Inodes,
    layout_of: fn(&T) -> &Layout,
    fill: impl Fn(std::sync::Arc<T>, usize, Vec<u64>) -> BoxFuture<'static, Result<(), String>>
        + Send
        + Sync
        + 'static,
) -> crate::prefetch::Sink {
    use std::sync::Arc;
    let map = Arc::new(completed_by(layout_of(owner), inodes));
    let (weak, fill) = (Arc::downgrade(owner), Arc::new(fill));
    Arc::new(move |c: sealvol_spec::tree::ChunkRef| {
        let (map, weak, fill) = (Arc::clone(&map), weak.clone(), Arc::clone(&fill));
        Box::pin(async move {
            let Some(owner) = weak.upgrade() else {
                return Err("the mount is gone".to_string());
            };
            for (index, pieces) in map.get(&c.sha256).into_iter().flatten() {
                let missing = layout_of(&owner).files[*index]
                    .missing(pieces.start * PIECE, pieces.end * PIECE);
                if !missing.is_empty() {
                    fill(Arc::clone(&owner), *index, missing).await?;
                }
            }
            Ok(())
        })
    })
}

/// The ref shown for a bind mount whose root (mountinfo's fourth field)
/// is a layout's `tree`: `.../fanotify/<key>/tree`; `None` for any other
/// mount. The ref is read from the folder's `ref` file when the root is a
/// path of this file system, else the key is shown.
pub(crate) fn mounted_ref(root: &str) -> Option<String> {
    // A folder removed under a live mount shows as `…/tree//deleted`.
    let root = root.strip_suffix("//deleted").unwrap_or(root);
    let rest = root.strip_suffix("/tree")?;
    let (parent, key) = rest.rsplit_once('/')?;
    if !parent.ends_with("/fanotify") || key.len() < 64 {
        return None;
    }
    let shown = std::fs::read_to_string(Path::new(rest).join("ref")).ok();
    Some(shown.unwrap_or_else(|| key.to_string()))
}

/// `ino`'s path relative to the mount's root.
fn relative(inodes: &Inodes, ino: u64) -> String {
    let mut parts = Vec::new();
    let mut at = ino;
    while at != ROOT {
        parts.push(inodes.name(at));
        match inodes.parent(at) {
            Some(p) => at = p,
            None => break,
        }
    }
    parts.reverse();
    parts.join("/")
}

fn remove_any(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(_) => Ok(()),
    }
}

fn cstr(path: &Path) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt as _;
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

fn chown(path: &Path, owner: Owner) -> io::Result<()> {
    let c = cstr(path)?;
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::lchown(c.as_ptr(), owner.uid, owner.gid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_time(path: &Path, time: SystemTime) -> io::Result<()> {
    let d = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let ts = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    let c = cstr(path)?;
    // SAFETY: valid path and a two-element timespec array.
    if unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            [ts, ts].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Bytes a folder takes on disk (allocated blocks, so holes count zero).
fn disk_usage(path: &Path) -> u64 {
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut total = m.blocks() * 512;
    if m.is_dir() {
        if let Ok(rd) = std::fs::read_dir(path) {
            total += rd.flatten().map(|e| disk_usage(&e.path())).sum::<u64>();
        }
    }
    total
}

/// What [`trim`] did.
#[derive(Debug, Default)]
pub(crate) struct Trimmed {
    /// Bytes the version folders took, before and after.
    pub before: u64,
    pub after: u64,
    pub removed: usize,
}

/// Keeps the version folders plus `other` bytes (the chunk cache) within
/// `bound`: removes whole folders that no mount holds, least recently used
/// first. Folders in use stay, even past the bound.
pub(crate) fn trim(cache_dir: &Path, bound: u64, other: u64) -> Trimmed {
    let base = cache_dir.join("fanotify");
    let Ok(rd) = std::fs::read_dir(&base) else {
        return Trimmed::default();
    };
    let mut folders: Vec<(SystemTime, PathBuf, u64)> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| {
            let p = e.path();
            let used = std::fs::metadata(p.join("lock"))
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let size = disk_usage(&p);
            (used, p, size)
        })
        .collect();
    let before: u64 = folders.iter().map(|f| f.2).sum();
    let mut total = before;
    folders.sort();
    let mut removed = 0;
    for (_, path, size) in folders {
        if total.saturating_add(other) <= bound {
            break;
        }
        let Ok(lock) = OpenOptions::new().write(true).open(path.join("lock")) else {
            continue;
        };
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            continue; // mounted
        }
        if std::fs::remove_dir_all(&path).is_ok() {
            total -= size;
            removed += 1;
        }
    }
    Trimmed {
        before,
        after: total,
        removed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use sealvol_spec::tree::Entry;

    #[test]
    fn a_layout_is_sparse_keeps_its_fill_and_lays_out_a_truncated_file_again() {
        let bytes = testing::data(3 * (1 << 20) + 5, 3);
        let entries = vec![
            Entry {
                path: "d".into(),
                mode: 0o750,
                data: EntryData::Dir,
            },
            testing::file("d/f", testing::file_of(&bytes, &[1 << 20])),
            Entry {
                path: "e".into(),
                mode: 0o600,
                data: EntryData::file_of(b"", &[]),
            },
            Entry {
                path: "l".into(),
                mode: 0o777,
                data: EntryData::Symlink {
                    target: "d/f".into(),
                },
            },
        ];
        let inodes = testing::inodes(entries);
        let owner = Owner::current(SystemTime::UNIX_EPOCH);
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("v");
        let layout = Layout::prepare(&folder, &inodes, owner, "bdn:ns/v@b3:00").unwrap();
        let meta = |p: &str| std::fs::symlink_metadata(folder.join("tree").join(p)).unwrap();
        assert_eq!(meta("d").permissions().mode() & 0o7777, 0o750);
        assert_eq!(meta("d/f").len(), bytes.len() as u64);
        assert_eq!(meta("d/f").blocks(), 0, "laid out sparse");
        assert_eq!(meta("e").permissions().mode() & 0o7777, 0o600);
        assert_eq!(
            std::fs::read_link(folder.join("tree/l")).unwrap(),
            Path::new("d/f")
        );
        assert_eq!(layout.files.len(), 2);
        let (i, f) = layout.file_of(meta("d/f").ino()).unwrap();
        assert_eq!((f.rel.as_str(), f.size), ("d/f", bytes.len() as u64));
        assert_eq!(f.missing(0, f.size), vec![0, 1, 2, 3]);
        assert!(layout.files.iter().any(|f| f.rel == "e" && f.full()));

        // Written counts for reads at once; recorded only after commit.
        let plain = |rel: &str| {
            OpenOptions::new()
                .write(true)
                .open(folder.join("tree").join(rel))
        };
        f.write(1 << 20, &bytes[1 << 20..2 << 20], &plain).unwrap();
        f.written(&[1]);
        assert_eq!(f.missing(0, f.size), vec![0, 2, 3]);
        drop(layout);
        let layout = Layout::prepare(&folder, &inodes, owner, "r").unwrap();
        assert_eq!(layout.files[i].missing(0, bytes.len() as u64).len(), 4);
        layout.files[i]
            .write(1 << 20, &bytes[1 << 20..2 << 20], &plain)
            .unwrap();
        layout.files[i].commit(&[1]).unwrap();
        drop(layout);
        let layout = Layout::prepare(&folder, &inodes, owner, "r").unwrap();
        assert_eq!(
            layout.files[i].missing(0, bytes.len() as u64),
            vec![0, 2, 3]
        );
        drop(layout);

        // Truncated (as a keeper does with a file it cannot vouch for):
        // laid out again, nothing filled.
        std::fs::OpenOptions::new()
            .write(true)
            .open(folder.join("tree/d/f"))
            .unwrap()
            .set_len(0)
            .unwrap();
        let layout = Layout::prepare(&folder, &inodes, owner, "r").unwrap();
        assert_eq!(meta("d/f").len(), bytes.len() as u64);
        assert_eq!(layout.files[i].missing(0, bytes.len() as u64).len(), 4);
    }

    #[test]
    fn a_bitmap_survives_reopening_and_a_short_one_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("7");
        let mut f = Fill::open(&p, 10, true).unwrap();
        assert_eq!(f.missing(0..10).len(), 10);
        f.set(&[0, 9]).unwrap();
        let f = Fill::open(&p, 10, false).unwrap();
        assert_eq!(f.missing(0..10), vec![1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(!f.full());
        // A bitmap for another size of file is not trusted.
        let f = Fill::open(&p, 100, false).unwrap();
        assert_eq!(f.missing(0..100).len(), 100);
        let f = Fill::open(&dir.path().join("e"), 0, true).unwrap();
        assert!(f.full());
    }
}
