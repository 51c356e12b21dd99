//! The inode table of a mounted version: built once from the tree index
//! when the mount starts and never changed, so `lookup`, `getattr`,
//! `readdir` and `readlink` are answered from memory.
//!
//! Inode 1 is the mount's root: the version's implicit root directory, or
//! the directory a ref's path names. Every entry below it gets the next
//! number in canonical order (SPEC.md §2.2), so a directory's children are
//! sorted by name and found by binary search.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{FileAttr, FileType, INodeNo};
use sealvol_spec::chain::PieceCv;
use sealvol_spec::path as spath;
use sealvol_spec::tree::{ChunkRef, Entry, EntryData, TreeIndex};
use sealvol_spec::B3Digest;

/// The inode number of the mount's root.
pub const ROOT: u64 = 1;

/// `stat`'s block size: what tools size their read buffers by. Reads are
/// served in pieces of up to 1 MiB (the kernel's largest FUSE request).
const BLKSIZE: u32 = 1 << 20;

/// Permission bits of the version's root, which has no entry of its own.
const ROOT_MODE: u32 = 0o755;

/// Who owns every entry, and when it was made: the mounting user and the
/// time the version was sealed.
#[derive(Clone, Copy, Debug)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub time: SystemTime,
}

impl Owner {
    /// The user running this process, with `time` for every timestamp.
    pub fn current(time: SystemTime) -> Owner {
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Owner { uid, gid, time }
    }
}

/// Why an inode table could not be built.
#[derive(Debug, thiserror::Error)]
pub enum InodeError {
    #[error("{0}: no such directory in this version")]
    NotFound(String),
    #[error("{0}: not a directory; mount the whole version or a directory of it")]
    NotADirectory(String),
}

/// One inode: an entry of the version (none for the version's root).
#[derive(Debug)]
struct Node {
    /// Index into the tree's entries.
    entry: Option<usize>,
    parent: u64,
    /// Inodes of a directory's children, in name order.
    children: Vec<u64>,
    /// Subdirectories, for the directory's link count.
    subdirs: u32,
}

/// A file's contents as the tree index describes them.
#[derive(Clone, Copy, Debug)]
pub struct FileView<'a> {
    pub path: &'a str,
    pub size: u64,
    pub chunks: &'a [ChunkRef],
    /// The file's BLAKE3, which the version digest covers.
    pub blake3: &'a B3Digest,
    /// Its pieces' chaining values (SPEC.md §2.5): none for a file of at
    /// most one piece, or in a format 1 tree.
    pub pieces: &'a [PieceCv],
}

/// The inode table.
#[derive(Debug)]
pub struct Inodes {
    /// Shared with other mounts of the same version.
    tree: Arc<TreeIndex>,
    /// `nodes[ino - 1]`.
    nodes: Vec<Node>,
    root_mode: u32,
    owner: Owner,
    /// Sum of the file sizes below the root, for `statfs`.
    bytes: u64,
}

impl Inodes {
    /// The inodes of `tree` below `base` (the whole version for `None`).
    pub fn new(
        tree: impl Into<Arc<TreeIndex>>,
        base: Option<&str>,
        owner: Owner,
    ) -> Result<Inodes, InodeError> {
        let tree = tree.into();
        let (start, len, root_mode) = match base {
            None => (0, tree.entries().len(), ROOT_MODE),
            Some(b) => {
                let sub = tree.subtree(Some(b));
                let Some(first) = sub.first() else {
                    return Err(InodeError::NotFound(b.to_string()));
                };
                if !first.is_dir() {
                    return Err(InodeError::NotADirectory(b.to_string()));
                }
                let start = tree
                    .entries()
                    .partition_point(|e| spath::canonical_cmp(&e.path, b).is_lt());
                // The directory itself is the root; its descendants follow.
                (start + 1, sub.len() - 1, first.mode)
            }
        };
        let mut nodes = Vec::with_capacity(len + 1);
        nodes.push(Node {
            entry: None,
            parent: ROOT,
            children: Vec::new(),
            subdirs: 0,
        });
        // Canonical order puts a directory right before its descendants, so
        // the open directories form a stack: the top is the parent of the
        // next entry once the ones it is not under are popped.
        let mut open: Vec<(Option<&str>, u64)> = vec![(base, ROOT)];
        let mut bytes = 0u64;
        for (i, e) in tree.entries()[start..start + len].iter().enumerate() {
            let ino = i as u64 + 2;
            let parent = spath::parent(&e.path);
            while open.last().is_some_and(|(dir, _)| *dir != parent) {
                open.pop();
            }
            let &(_, parent_ino) = open
                .last()
                .expect("a valid tree index has every parent before its children");
            let p = &mut nodes[(parent_ino - 1) as usize];
            p.children.push(ino);
            match &e.data {
                EntryData::Dir => {
                    p.subdirs += 1;
                    open.push((Some(e.path.as_str()), ino));
                }
                EntryData::File { size, .. } => bytes += size,
                EntryData::Symlink { .. } => {}
            }
            nodes.push(Node {
                entry: Some(start + i),
                parent: parent_ino,
                children: Vec::new(),
                subdirs: 0,
            });
        }
        Ok(Inodes {
            tree,
            nodes,
            root_mode,
            owner,
            bytes,
        })
    }

    fn node(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(usize::try_from(ino.checked_sub(1)?).ok()?)
    }

    /// The entry of `ino`; `None` for the root and for unknown inodes.
    pub fn entry(&self, ino: u64) -> Option<&Entry> {
        Some(&self.tree.entries()[self.node(ino)?.entry?])
    }

    /// Whether `ino` exists.
    pub fn contains(&self, ino: u64) -> bool {
        self.node(ino).is_some()
    }

    /// Number of inodes, the root included.
    pub fn len(&self) -> u64 {
        self.nodes.len() as u64
    }

    /// Whether the mount has nothing but its root.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() == 1
    }

    /// Sum of the file sizes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether every file's bytes can be verified against the version
    /// digest as they are read (a format 2 tree, SPEC.md §2.5).
    pub fn verifiable(&self) -> bool {
        self.tree.is_verifiable()
    }

    /// The last path component of `ino` (empty for the root).
    pub fn name(&self, ino: u64) -> &str {
        match self.entry(ino) {
            Some(e) => e.path.rsplit('/').next().unwrap_or(&e.path),
            None => "",
        }
    }

    /// The parent directory of `ino` (the root is its own parent).
    pub fn parent(&self, ino: u64) -> Option<u64> {
        Some(self.node(ino)?.parent)
    }

    /// Whether `ino` is a directory.
    pub fn is_dir(&self, ino: u64) -> bool {
        match self.node(ino) {
            None => false,
            Some(n) => n.entry.is_none_or(|i| self.tree.entries()[i].is_dir()),
        }
    }

    /// The children of a directory, in name order; `None` if `ino` is not
    /// a directory.
    pub fn children(&self, ino: u64) -> Option<&[u64]> {
        self.is_dir(ino)
            .then(|| self.node(ino).map(|n| n.children.as_slice()))
            .flatten()
    }

    /// The child of directory `parent` called `name`.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<u64, fuser::Errno> {
        let children = self.children(parent).ok_or(if self.contains(parent) {
            fuser::Errno::ENOTDIR
        } else {
            fuser::Errno::ENOENT
        })?;
        // Children sort by their names' bytes (canonical order).
        children
            .binary_search_by(|&c| self.name(c).as_bytes().cmp(name))
            .map(|i| children[i])
            .map_err(|_| fuser::Errno::ENOENT)
    }

    /// A file's size, chunks and hashes; `None` if `ino` is not a file.
    pub fn file(&self, ino: u64) -> Option<FileView<'_>> {
        let e = self.entry(ino)?;
        match &e.data {
            EntryData::File {
                size,
                blake3,
                chunks,
                pieces,
            } => Some(FileView {
                path: &e.path,
                size: *size,
                chunks,
                blake3,
                pieces,
            }),
            _ => None,
        }
    }

    /// A symlink's target; `None` if `ino` is not a symlink.
    pub fn target(&self, ino: u64) -> Option<&str> {
        match &self.entry(ino)?.data {
            EntryData::Symlink { target } => Some(target),
            _ => None,
        }
    }

    /// Every file's inode, in canonical order.
    pub fn files(&self) -> impl Iterator<Item = u64> + '_ {
        (1..=self.len()).filter(|&ino| self.file(ino).is_some())
    }

    /// What `stat` says about `ino`.
    pub fn attr(&self, ino: u64) -> Option<FileAttr> {
        let node = self.node(ino)?;
        let (kind, perm, size, nlink) = match node.entry {
            None => (FileType::Directory, self.root_mode, 0, 2 + node.subdirs),
            Some(i) => {
                let e = &self.tree.entries()[i];
                let (kind, nlink) = match e.data {
                    EntryData::Dir => (FileType::Directory, 2 + node.subdirs),
                    EntryData::File { .. } => (FileType::RegularFile, 1),
                    EntryData::Symlink { .. } => (FileType::Symlink, 1),
                };
                (kind, e.mode, e.data.size(), nlink)
            }
        };
        let t = self.owner.time;
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            // What the file would take on disk, so `du` adds up the version.
            blocks: if kind == FileType::RegularFile {
                size.div_ceil(512)
            } else {
                0
            },
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind,
            perm: perm as u16,
            nlink,
            uid: self.owner.uid,
            gid: self.owner.gid,
            rdev: 0,
            blksize: BLKSIZE,
            flags: 0,
        })
    }
}

/// How long the kernel may keep names and attributes: a version never
/// changes, so as long as it likes.
pub const TTL: Duration = Duration::from_secs(365 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;
    use sealvol_spec::ChunkingParams;

    fn dir(path: &str, mode: u32) -> Entry {
        Entry {
            path: path.into(),
            mode,
            data: EntryData::Dir,
        }
    }

    fn file(path: &str, data: &[u8]) -> Entry {
        Entry {
            path: path.into(),
            mode: 0o640,
            data: EntryData::file_of(data, &[]),
        }
    }

    fn sample() -> TreeIndex {
        TreeIndex::new(
            ChunkingParams::default(),
            vec![
                dir("a", 0o750),
                file("a/x", b"hello"),
                dir("a/b", 0o755),
                file("a/b/y", &[7; 1000]),
                file("a-b", b""),
                dir("c", 0o700),
                Entry {
                    path: "l".into(),
                    mode: 0o777,
                    data: EntryData::Symlink {
                        target: "a/x".into(),
                    },
                },
                file("z", b"zz"),
            ],
        )
        .unwrap()
    }

    fn owner() -> Owner {
        Owner {
            uid: 1234,
            gid: 99,
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        }
    }

    fn path_of(inodes: &Inodes, mut ino: u64) -> String {
        let mut parts = vec![];
        while ino != ROOT {
            parts.push(inodes.name(ino).to_string());
            ino = inodes.parent(ino).unwrap();
        }
        parts.reverse();
        parts.join("/")
    }

    #[test]
    fn every_entry_is_found_by_name_under_its_parent() {
        let inodes = Inodes::new(sample(), None, owner()).unwrap();
        assert_eq!(inodes.len(), 9);
        let names = |ino| -> Vec<&str> {
            inodes
                .children(ino)
                .unwrap()
                .iter()
                .map(|&c| inodes.name(c))
                .collect()
        };
        assert_eq!(names(ROOT), ["a", "a-b", "c", "l", "z"]);
        let a = inodes.lookup(ROOT, b"a").unwrap();
        assert_eq!(names(a), ["b", "x"]);
        let b = inodes.lookup(a, b"b").unwrap();
        let y = inodes.lookup(b, b"y").unwrap();
        assert_eq!(path_of(&inodes, y), "a/b/y");
        assert_eq!(inodes.file(y).unwrap().size, 1000);
        assert_eq!(inodes.lookup(ROOT, b"nope"), Err(fuser::Errno::ENOENT));
        assert_eq!(inodes.lookup(y, b"x"), Err(fuser::Errno::ENOTDIR));
        assert_eq!(inodes.lookup(77, b"x"), Err(fuser::Errno::ENOENT));
        let l = inodes.lookup(ROOT, b"l").unwrap();
        assert_eq!(inodes.target(l), Some("a/x"));
        assert_eq!(inodes.files().count(), 4);
        assert_eq!(inodes.bytes(), 5 + 1000 + 2);
        assert!(inodes.attr(0).is_none() && inodes.attr(10).is_none());
    }

    #[test]
    fn attributes_come_from_the_tree_and_the_owner() {
        let inodes = Inodes::new(sample(), None, owner()).unwrap();
        let root = inodes.attr(ROOT).unwrap();
        assert_eq!(root.kind, FileType::Directory);
        assert_eq!(root.perm, 0o755);
        // a and c are subdirectories of the root.
        assert_eq!(root.nlink, 4);
        let a = inodes.lookup(ROOT, b"a").unwrap();
        let attr = inodes.attr(a).unwrap();
        assert_eq!((attr.perm, attr.nlink), (0o750, 3));
        let y = inodes
            .lookup(inodes.lookup(a, b"b").unwrap(), b"y")
            .unwrap();
        let attr = inodes.attr(y).unwrap();
        assert_eq!(attr.kind, FileType::RegularFile);
        assert_eq!((attr.size, attr.blocks, attr.nlink), (1000, 2, 1));
        assert_eq!((attr.uid, attr.gid, attr.perm), (1234, 99, 0o640));
        assert_eq!(attr.mtime, owner().time);
        let l = inodes.attr(inodes.lookup(ROOT, b"l").unwrap()).unwrap();
        assert_eq!((l.kind, l.size, l.perm), (FileType::Symlink, 3, 0o777));
    }

    #[test]
    fn a_path_mounts_its_directory_as_the_root() {
        let inodes = Inodes::new(sample(), Some("a"), owner()).unwrap();
        // The root, x, b and b/y.
        assert_eq!(inodes.len(), 4);
        let root = inodes.attr(ROOT).unwrap();
        assert_eq!((root.perm, root.nlink), (0o750, 3));
        let b = inodes.lookup(ROOT, b"b").unwrap();
        assert_eq!(inodes.parent(b), Some(ROOT));
        assert!(inodes.lookup(b, b"y").is_ok());
        assert_eq!(inodes.lookup(ROOT, b"z"), Err(fuser::Errno::ENOENT));
        assert_eq!(inodes.bytes(), 1005);

        let c = Inodes::new(sample(), Some("c"), owner()).unwrap();
        assert!(c.is_empty());
        assert!(matches!(
            Inodes::new(sample(), Some("z"), owner()),
            Err(InodeError::NotADirectory(_))
        ));
        assert!(matches!(
            Inodes::new(sample(), Some("q"), owner()),
            Err(InodeError::NotFound(_))
        ));
    }
}
