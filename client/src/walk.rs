//! Walking a directory into the entries a version will hold, with the
//! include/exclude globs applied (SPEC.md §2.2 for what may be sealed).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::SealError;

pub use sealvol_spec::filter::Filter;

/// What `stat` said about a file before it was read; the file-state cache
/// key and the change check compare these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub dev: u64,
}

impl FileStamp {
    pub fn of(m: &std::fs::Metadata) -> FileStamp {
        FileStamp {
            size: m.len(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
            ino: m.ino(),
            dev: m.dev(),
        }
    }
}

#[derive(Clone, Debug)]
pub enum WalkKind {
    Dir,
    File { abs: PathBuf, stamp: FileStamp },
    Symlink { target: String },
}

#[derive(Clone, Debug)]
pub struct WalkEntry {
    pub rel: String,
    pub mode: u32,
    pub kind: WalkKind,
}

/// Lists what `root` holds that `filter` selects. Fails on names that are
/// not UTF-8, on special files and on unreadable directories, naming the
/// path; never follows symlinks.
pub fn walk(root: &Path, filter: &Filter) -> Result<Vec<WalkEntry>, SealError> {
    let meta = std::fs::metadata(root).map_err(|e| SealError::io(root, e))?;
    if !meta.is_dir() {
        return Err(SealError::NotADirectory(root.to_path_buf()));
    }
    let mut out = Vec::new();
    let it = walkdir::WalkDir::new(root)
        .min_depth(1)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| {
            // Skip excluded directories whole; other names are checked below.
            let rel = e.path().strip_prefix(root).ok();
            !(e.file_type().is_dir() && rel.is_some_and(|r| filter.excluded(r)))
        });
    for item in it {
        let item = item.map_err(|e| {
            let path = e.path().unwrap_or(root).to_path_buf();
            match e.into_io_error() {
                Some(io) => SealError::io(&path, io),
                None => SealError::Io {
                    path,
                    message: "filesystem loop".into(),
                },
            }
        })?;
        let path = item.path();
        let rel_path = path
            .strip_prefix(root)
            .expect("walkdir yields paths under its root");
        let ft = item.file_type();
        // Filter before looking closer, so that an excluded special file or
        // odd name is simply left out.
        if !ft.is_dir() && !filter.included(rel_path) {
            continue;
        }
        let rel = rel_path
            .to_str()
            .ok_or_else(|| SealError::NotUtf8(path.to_path_buf()))?
            .to_string();
        let m = item.metadata().map_err(|e| SealError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let mode = m.permissions().mode() & sealvol_spec::tree::MAX_MODE;
        let kind = if ft.is_dir() {
            WalkKind::Dir
        } else if ft.is_file() {
            WalkKind::File {
                abs: path.to_path_buf(),
                stamp: FileStamp::of(&m),
            }
        } else if ft.is_symlink() {
            let target = std::fs::read_link(path).map_err(|e| SealError::io(path, e))?;
            let target = target
                .to_str()
                .ok_or_else(|| SealError::NotUtf8(path.to_path_buf()))?
                .to_string();
            WalkKind::Symlink { target }
        } else {
            return Err(SealError::SpecialFile(path.to_path_buf()));
        };
        out.push(WalkEntry { rel, mode, kind });
    }
    if filter.has_includes() {
        prune_dirs(&mut out, filter);
    }
    Ok(out)
}

/// With includes, keep a directory only if an include matches it or it
/// leads to a kept file or symlink. Entries are in walk order, so a
/// directory's descendants follow it.
fn prune_dirs(entries: &mut Vec<WalkEntry>, filter: &Filter) {
    let mut needed: std::collections::HashSet<String> = std::collections::HashSet::new();
    for e in entries.iter() {
        let leaf = !matches!(e.kind, WalkKind::Dir) || filter.included(&e.rel);
        if leaf {
            let mut p = e.rel.as_str();
            while let Some((parent, _)) = p.rsplit_once('/') {
                if !needed.insert(parent.to_string()) {
                    break;
                }
                p = parent;
            }
        }
    }
    entries.retain(|e| {
        !matches!(e.kind, WalkKind::Dir) || filter.included(&e.rel) || needed.contains(&e.rel)
    });
}
