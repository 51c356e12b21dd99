//! Chunks that other versions' layouts on this machine already hold.
//!
//! This engine writes each byte once, into the layout of the version being
//! read, and not into the chunk cache. A new version that shares chunks
//! with one mounted before (a fine-tune that changed two shards of five)
//! finds them here instead of downloading them again: every layout folder
//! keeps an index of where each chunk of its files lies (`chunks.json`,
//! written when it is laid out), and a chunk is taken from a file whose
//! fill bitmap records every piece under it as filled (written, fsynced,
//! and verified against that version's digest when it was filled).
//!
//! The bytes are raw material like the chunk cache's: the reader checks
//! every piece it serves against this version's digest (SPEC.md §2.5), and
//! fetches a chunk again, checked by sha256, when it fails there.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use sealvol_spec::chain::pieces_of;
use sealvol_spec::tree::ChunkRef;
use sealvol_spec::Sha256Digest;

/// The name of a folder's index.
pub(crate) const INDEX: &str = "chunks.json";
/// An index larger than this is not read (a version of about two million
/// chunks).
const MAX_INDEX: u64 = 256 << 20;

/// One folder's index: its files and where their chunks lie.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Index {
    pub files: Vec<IndexedFile>,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct IndexedFile {
    /// The path under `tree/`.
    pub rel: String,
    /// The inode number of the version (the name of its fill bitmap).
    pub ino: u64,
    pub size: u64,
    /// `[sha256 hex, offset, length]` of each chunk.
    pub chunks: Vec<(String, u64, u32)>,
}

/// Where one chunk lies in another layout.
struct Spot {
    file: PathBuf,
    fill: PathBuf,
    size: u64,
    offset: u64,
}

/// The chunks of every other layout folder under a cache folder, as they
/// were laid out when the mount started.
#[derive(Default)]
pub(crate) struct Elsewhere {
    spots: HashMap<Sha256Digest, Vec<Spot>>,
}

impl Elsewhere {
    /// Reads the indexes of the folders under `base` (`<cache>/fanotify`)
    /// but `own`. A folder without a readable index is skipped.
    pub fn load(base: &Path, own: &Path) -> Elsewhere {
        let mut spots: HashMap<Sha256Digest, Vec<Spot>> = HashMap::new();
        let Ok(rd) = std::fs::read_dir(base) else {
            return Elsewhere::default();
        };
        for folder in rd.flatten().map(|e| e.path()) {
            if folder == own || !folder.is_dir() {
                continue;
            }
            let Some(index) = read_index(&folder.join(INDEX)) else {
                continue;
            };
            for f in index.files {
                // Only paths inside the folder's tree.
                if f.rel
                    .split('/')
                    .any(|c| c.is_empty() || c == "." || c == "..")
                {
                    continue;
                }
                for (hex, offset, length) in f.chunks {
                    let Ok(digest) = format!("sha256:{hex}").parse::<Sha256Digest>() else {
                        continue;
                    };
                    if offset.saturating_add(u64::from(length)) > f.size {
                        continue;
                    }
                    spots.entry(digest).or_default().push(Spot {
                        file: folder.join("tree").join(&f.rel),
                        fill: folder.join("fill").join(f.ino.to_string()),
                        size: f.size,
                        offset,
                    });
                }
            }
        }
        Elsewhere { spots }
    }

    pub fn is_empty(&self) -> bool {
        self.spots.is_empty()
    }

    /// The bytes of `c` from a layout that has them filled, if one does.
    /// Blocking.
    pub fn read(&self, c: &ChunkRef) -> Option<Vec<u8>> {
        let length = u64::from(c.length);
        for spot in self.spots.get(&c.sha256)? {
            if !filled(&spot.fill, spot.size, spot.offset, spot.offset + length) {
                continue;
            }
            let Ok(file) = File::open(&spot.file) else {
                continue;
            };
            // A folder laid out again since has a file of another size.
            if file.metadata().map(|m| m.len()).ok() != Some(spot.size) {
                continue;
            }
            let mut buf = vec![0u8; c.length as usize];
            if file.read_exact_at(&mut buf, spot.offset).is_ok() {
                return Some(buf);
            }
        }
        None
    }
}

fn read_index(path: &Path) -> Option<Index> {
    let f = File::open(path).ok()?;
    if f.metadata().ok()?.len() > MAX_INDEX {
        return None;
    }
    serde_json::from_reader(std::io::BufReader::new(f)).ok()
}

/// Whether the fill bitmap at `fill`, of a file of `size` bytes, records
/// every piece under bytes `start..end` as filled.
fn filled(fill: &Path, size: u64, start: u64, end: u64) -> bool {
    let pieces = pieces_of(0, size).end;
    let Ok(f) = File::open(fill) else {
        return false;
    };
    let mut bits = vec![0u8; pieces.div_ceil(8) as usize];
    if f.read_exact_at(&mut bits, 0).is_err() {
        return false;
    }
    pieces_of(start, end).all(|p| bits[(p / 8) as usize] & (1 << (p % 8)) != 0)
}

/// Writes `index` as `folder`'s, unless it has one (a version's index
/// never changes). Written whole, then renamed into place.
pub(crate) fn write_index(folder: &Path, index: &Index) -> std::io::Result<()> {
    let path = folder.join(INDEX);
    if path.exists() {
        return Ok(());
    }
    let tmp = folder.join(format!(".{INDEX}.{}", std::process::id()));
    let bytes = serde_json::to_vec(index).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, &path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inodes::Owner;
    use crate::testing;
    use sealvol_spec::tree::EntryData;
    use std::time::SystemTime;

    #[test]
    fn a_chunk_is_taken_from_another_layout_only_where_it_is_filled() {
        // Three different chunks (one seed's data repeats every MiB).
        let bytes = [
            testing::data(1 << 20, 7),
            testing::data(1 << 20, 8),
            testing::data((1 << 20) + 5, 9),
        ]
        .concat();
        // Chunks of 1 MiB, 1 MiB and the rest: the second is piece 1.
        let cuts = [1 << 20, 1 << 20];
        let entries = vec![testing::file("w.bin", testing::file_of(&bytes, &cuts))];
        let inodes = testing::inodes(entries.clone());
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("fanotify");
        let (a, b) = (base.join("a"), base.join("b"));
        let owner = Owner::current(SystemTime::UNIX_EPOCH);
        let layout = super::super::layout::Layout::prepare(&a, &inodes, owner, "r").unwrap();
        let _ = super::super::layout::Layout::prepare(&b, &inodes, owner, "r").unwrap();
        let EntryData::File { chunks, .. } = &entries[0].data else {
            unreachable!()
        };

        // Nothing filled in a: b finds nothing there.
        let there = Elsewhere::load(&base, &b);
        assert!(!there.is_empty());
        assert!(there.read(&chunks[1]).is_none());
        // a's second piece filled and recorded: its chunk is found, the
        // others are not.
        let f = &layout.files[0];
        let plain = |rel: &str| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(a.join("tree").join(rel))
        };
        f.write(1 << 20, &bytes[1 << 20..2 << 20], &plain).unwrap();
        f.commit(&[1]).unwrap();
        assert!(there.read(&chunks[1]).as_deref() == Some(&bytes[1 << 20..2 << 20]));
        assert!(there.read(&chunks[0]).is_none());
        assert!(there.read(&chunks[2]).is_none());
        // Its own folder is not looked at.
        assert!(Elsewhere::load(&base, &a).read(&chunks[1]).is_none());
    }
}
