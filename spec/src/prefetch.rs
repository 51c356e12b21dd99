//! The recorded prefetch list (SPEC.md §5.8): the order in which a cold
//! start first read the pieces of a version's files, stored as an OCI
//! referrer of the version so that later mounts fetch in that order ahead
//! of their reader.
//!
//! A list names files by path and ranges of their 1 MiB pieces (§2.5), never
//! chunks or blobs: it can only ask for bytes of the version it is checked
//! against ([`PrefetchList::check`]), and a reader turns those pieces into
//! the chunks that cover them from the tree index it already verified. A
//! hostile list is bounded before it is parsed ([`MAX_LIST_BYTES`]) and
//! after ([`MAX_FILES`], [`MAX_RUNS`], each piece named at most once, so the
//! work it causes is at most the version's own size).
//!
//! ```
//! use sealvol_spec::prefetch::PrefetchList;
//! use sealvol_spec::{ChunkingParams, Entry, EntryData, TreeIndex};
//! let tree = TreeIndex::new(ChunkingParams::default(), vec![Entry {
//!     path: "w.bin".into(), mode: 0o644, data: EntryData::file_of(&[7u8; 3 << 20], &[3 << 20]),
//! }]).unwrap();
//! let list = PrefetchList::from_reads(tree.version_digest(), [("w.bin", 2), ("w.bin", 0), ("w.bin", 1)]);
//! let bytes = list.encode().unwrap();
//! let reads = PrefetchList::decode(&bytes).unwrap().check(&tree.version_digest(), &tree).unwrap();
//! assert_eq!(reads.iter().map(|r| r.pieces.clone()).collect::<Vec<_>>(), vec![2..3, 0..2]);
//! ```

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::chain::PIECE;
use crate::digest::B3Digest;
use crate::tree::{EntryData, TreeIndex};

/// `schemaVersion` of the list this crate writes and reads.
pub const SCHEMA_VERSION: u32 = 1;
/// Largest list blob a reader fetches (the manifest limit of §5.2).
pub const MAX_LIST_BYTES: u64 = 4 << 20;
/// Most files a list may name.
pub const MAX_FILES: usize = 65_536;
/// Most runs a list may hold.
pub const MAX_RUNS: usize = 131_072;

/// Why a prefetch list was refused: it names something the version does not
/// have, or is larger than a reader accepts.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PrefetchError {
    #[error("the prefetch list is {size} bytes, over the {MAX_LIST_BYTES}-byte limit")]
    TooLarge { size: u64 },
    #[error("the prefetch list is not valid JSON of its schema: {0}")]
    Json(String),
    #[error("the prefetch list has schemaVersion {0}; this sealvol reads {SCHEMA_VERSION}")]
    Schema(u32),
    #[error("the prefetch list is for version {found}, not {expected}")]
    WrongVersion { expected: B3Digest, found: B3Digest },
    #[error("the prefetch list has {n} {what}, over the limit of {max}")]
    TooMany {
        what: &'static str,
        n: usize,
        max: usize,
    },
    #[error("the prefetch list names {0:?}, which is not a file of the version")]
    UnknownPath(String),
    #[error("the prefetch list names {0:?} twice in its files")]
    DuplicatePath(String),
    #[error("the prefetch list's run {run} names file {file}, but it lists {files} files")]
    BadFile { run: usize, file: u32, files: usize },
    #[error("the prefetch list's run {run} is empty")]
    EmptyRun { run: usize },
    #[error("the prefetch list asks for pieces {first}..{first}+{count} of {path:?}, which has {pieces}")]
    OutOfRange {
        path: String,
        first: u64,
        count: u64,
        pieces: u64,
    },
    #[error("the prefetch list names piece {piece} of {path:?} twice")]
    Repeated { path: String, piece: u64 },
}

/// Pieces `first..first + count` of file `file` (an index into
/// [`PrefetchList::files`]). On the wire the array `[file, first, count]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u32, u64, u64)", into = "(u32, u64, u64)")]
pub struct Run {
    pub file: u32,
    pub first: u64,
    pub count: u64,
}

impl From<(u32, u64, u64)> for Run {
    fn from((file, first, count): (u32, u64, u64)) -> Run {
        Run { file, first, count }
    }
}

impl From<Run> for (u32, u64, u64) {
    fn from(r: Run) -> (u32, u64, u64) {
        (r.file, r.first, r.count)
    }
}

/// The list as it is stored (SPEC.md §5.8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrefetchList {
    pub schema_version: u32,
    /// The version it was recorded on.
    pub version: B3Digest,
    /// The files it names, by path in the version, in order of first read.
    pub files: Vec<String>,
    /// Piece runs in the order they were first read.
    pub runs: Vec<Run>,
}

/// One checked run: pieces `pieces` of the file at `path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefetchRead<'a> {
    pub path: &'a str,
    pub pieces: Range<u64>,
}

/// How many pieces a prefetch list may name in a file of `size` bytes: its
/// 1 MiB pieces, the last one short (a file of at most 1 MiB has one, an
/// empty file none).
pub fn pieces_in(size: u64) -> u64 {
    size.div_ceil(PIECE)
}

impl PrefetchList {
    /// The list of `reads`, (path, piece) in the order they happened:
    /// repeats are dropped, consecutive pieces of one file merge into one
    /// run, and what is past [`MAX_FILES`] or [`MAX_RUNS`] is left out (a
    /// cold start's first reads matter most).
    pub fn from_reads<'a>(
        version: B3Digest,
        reads: impl IntoIterator<Item = (&'a str, u64)>,
    ) -> PrefetchList {
        let mut files: Vec<String> = Vec::new();
        let mut index: HashMap<&'a str, u32> = HashMap::new();
        let mut seen: HashSet<(u32, u64)> = HashSet::new();
        let mut runs: Vec<Run> = Vec::new();
        for (path, piece) in reads {
            let file = match index.get(path) {
                Some(&f) => f,
                None => {
                    if files.len() >= MAX_FILES {
                        continue;
                    }
                    let f = files.len() as u32;
                    files.push(path.to_string());
                    index.insert(path, f);
                    f
                }
            };
            if !seen.insert((file, piece)) {
                continue;
            }
            let full = runs.len() >= MAX_RUNS;
            match runs.last_mut() {
                Some(r) if r.file == file && r.first.checked_add(r.count) == Some(piece) => {
                    r.count += 1
                }
                _ if full => continue,
                _ => runs.push(Run {
                    file,
                    first: piece,
                    count: 1,
                }),
            }
        }
        let mut list = PrefetchList {
            schema_version: SCHEMA_VERSION,
            version,
            files,
            runs,
        };
        list.drop_unused_files();
        list
    }

    /// Removes files no run names (left when runs were cut), renumbering.
    fn drop_unused_files(&mut self) {
        let mut used = vec![false; self.files.len()];
        for r in &self.runs {
            if let Some(u) = used.get_mut(r.file as usize) {
                *u = true;
            }
        }
        let mut renumber = vec![0u32; self.files.len()];
        let mut kept = Vec::new();
        for (i, f) in std::mem::take(&mut self.files).into_iter().enumerate() {
            if used[i] {
                renumber[i] = kept.len() as u32;
                kept.push(f);
            }
        }
        self.files = kept;
        for r in &mut self.runs {
            r.file = renumber[r.file as usize];
        }
    }

    /// The list's bytes: JSON, object keys sorted, no insignificant
    /// whitespace. A list over [`MAX_LIST_BYTES`] loses runs from its end
    /// until it fits.
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut list = self.clone();
        loop {
            let bytes = crate::oci::canonical_json(&list)?;
            if bytes.len() as u64 <= MAX_LIST_BYTES || list.runs.is_empty() {
                return Ok(bytes);
            }
            let keep = list.runs.len() * 3 / 4;
            list.runs.truncate(keep);
            list.drop_unused_files();
        }
    }

    /// Parses a list's bytes, refusing more than [`MAX_LIST_BYTES`] before
    /// parsing. Check it against the version with [`PrefetchList::check`].
    pub fn decode(bytes: &[u8]) -> Result<PrefetchList, PrefetchError> {
        if bytes.len() as u64 > MAX_LIST_BYTES {
            return Err(PrefetchError::TooLarge {
                size: bytes.len() as u64,
            });
        }
        serde_json::from_slice(bytes).map_err(|e| PrefetchError::Json(e.to_string()))
    }

    /// The runs, in order, once the list is found to be for `version`, whose
    /// tree is `tree`, and to name only its files and pieces, each piece at
    /// most once (SPEC.md §5.8).
    pub fn check<'t>(
        &self,
        version: &B3Digest,
        tree: &'t TreeIndex,
    ) -> Result<Vec<PrefetchRead<'t>>, PrefetchError> {
        if self.schema_version != SCHEMA_VERSION {
            return Err(PrefetchError::Schema(self.schema_version));
        }
        if self.version != *version {
            return Err(PrefetchError::WrongVersion {
                expected: *version,
                found: self.version,
            });
        }
        for (what, n, max) in [
            ("files", self.files.len(), MAX_FILES),
            ("runs", self.runs.len(), MAX_RUNS),
        ] {
            if n > max {
                return Err(PrefetchError::TooMany { what, n, max });
            }
        }
        // Each file, as the tree's own path and its piece count.
        let mut files: Vec<(&'t str, u64)> = Vec::with_capacity(self.files.len());
        let mut names = HashSet::with_capacity(self.files.len());
        for path in &self.files {
            let entry = tree
                .get(path)
                .filter(|e| e.path == *path)
                .ok_or_else(|| PrefetchError::UnknownPath(path.clone()))?;
            let EntryData::File { size, .. } = &entry.data else {
                return Err(PrefetchError::UnknownPath(path.clone()));
            };
            if !names.insert(path.as_str()) {
                return Err(PrefetchError::DuplicatePath(path.clone()));
            }
            files.push((entry.path.as_str(), pieces_in(*size)));
        }
        let mut out = Vec::with_capacity(self.runs.len());
        for (i, r) in self.runs.iter().enumerate() {
            let &(path, pieces) = files.get(r.file as usize).ok_or(PrefetchError::BadFile {
                run: i,
                file: r.file,
                files: files.len(),
            })?;
            if r.count == 0 {
                return Err(PrefetchError::EmptyRun { run: i });
            }
            match r.first.checked_add(r.count) {
                Some(end) if end <= pieces => out.push(PrefetchRead {
                    path,
                    pieces: r.first..end,
                }),
                _ => {
                    return Err(PrefetchError::OutOfRange {
                        path: path.to_string(),
                        first: r.first,
                        count: r.count,
                        pieces,
                    })
                }
            }
        }
        // No piece twice: with that, a list asks for at most the version.
        let mut by_file: Vec<(&str, u64, u64)> = out
            .iter()
            .map(|r| (r.path, r.pieces.start, r.pieces.end))
            .collect();
        by_file.sort_unstable();
        for w in by_file.windows(2) {
            if w[0].0 == w[1].0 && w[1].1 < w[0].2 {
                return Err(PrefetchError::Repeated {
                    path: w[1].0.to_string(),
                    piece: w[1].1,
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::Entry;
    use crate::ChunkingParams;

    const MIB: usize = 1 << 20;

    fn tree() -> TreeIndex {
        let file = |path: &str, len: usize| Entry {
            path: path.into(),
            mode: 0o644,
            data: EntryData::file_of(&vec![path.len() as u8; len], &[len]),
        };
        TreeIndex::new(
            ChunkingParams::default(),
            vec![
                file("a.bin", 3 * MIB + 5),
                file("b/c.json", 10),
                Entry {
                    path: "b".into(),
                    mode: 0o755,
                    data: EntryData::Dir,
                },
                file("empty", 0),
            ],
        )
        .unwrap()
    }

    fn list(files: &[&str], runs: &[(u32, u64, u64)]) -> PrefetchList {
        PrefetchList {
            schema_version: SCHEMA_VERSION,
            version: tree().version_digest(),
            files: files.iter().map(|s| s.to_string()).collect(),
            runs: runs.iter().map(|&r| r.into()).collect(),
        }
    }

    #[test]
    fn reads_become_runs_in_first_read_order() {
        let t = tree();
        let l = PrefetchList::from_reads(
            t.version_digest(),
            [
                ("a.bin", 3),
                ("b/c.json", 0),
                ("a.bin", 0),
                ("a.bin", 1),
                ("a.bin", 3),
                ("a.bin", 2),
            ],
        );
        assert_eq!(l.files, vec!["a.bin", "b/c.json"]);
        assert_eq!(
            l.runs,
            vec![(0, 3, 1).into(), (1, 0, 1).into(), (0, 0, 3).into()]
        );
        let bytes = l.encode().unwrap();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            format!(
                r#"{{"files":["a.bin","b/c.json"],"runs":[[0,3,1],[1,0,1],[0,0,3]],"schemaVersion":1,"version":"{}"}}"#,
                t.version_digest()
            )
        );
        let back = PrefetchList::decode(&bytes).unwrap();
        assert_eq!(back, l);
        let reads = back.check(&t.version_digest(), &t).unwrap();
        assert_eq!(
            reads,
            vec![
                PrefetchRead {
                    path: "a.bin",
                    pieces: 3..4
                },
                PrefetchRead {
                    path: "b/c.json",
                    pieces: 0..1
                },
                PrefetchRead {
                    path: "a.bin",
                    pieces: 0..3
                },
            ]
        );
    }

    #[test]
    fn a_list_names_only_files_and_pieces_of_its_version() {
        let t = tree();
        let v = t.version_digest();
        let err = |l: PrefetchList| l.check(&v, &t).unwrap_err();
        assert!(matches!(
            err(list(&["nope"], &[(0, 0, 1)])),
            PrefetchError::UnknownPath(p) if p == "nope"
        ));
        assert!(matches!(
            err(list(&["b"], &[(0, 0, 1)])),
            PrefetchError::UnknownPath(_)
        ));
        assert!(matches!(
            err(list(&["a.bin"], &[(0, 3, 2)])),
            PrefetchError::OutOfRange { pieces: 4, .. }
        ));
        assert!(matches!(
            err(list(&["a.bin"], &[(0, u64::MAX, 2)])),
            PrefetchError::OutOfRange { .. }
        ));
        assert!(matches!(
            err(list(&["empty"], &[(0, 0, 1)])),
            PrefetchError::OutOfRange { pieces: 0, .. }
        ));
        assert!(matches!(
            err(list(&["a.bin"], &[(1, 0, 1)])),
            PrefetchError::BadFile { .. }
        ));
        assert!(matches!(
            err(list(&["a.bin"], &[(0, 0, 0)])),
            PrefetchError::EmptyRun { .. }
        ));
        assert!(matches!(
            err(list(&["a.bin", "a.bin"], &[(0, 0, 1)])),
            PrefetchError::DuplicatePath(_)
        ));
        assert!(matches!(
            err(list(&["a.bin"], &[(0, 0, 3), (0, 2, 1)])),
            PrefetchError::Repeated { piece: 2, .. }
        ));
        let mut other = list(&["a.bin"], &[(0, 0, 1)]);
        other.version = B3Digest::of(b"another version");
        assert!(matches!(err(other), PrefetchError::WrongVersion { .. }));
        let mut future = list(&["a.bin"], &[(0, 0, 1)]);
        future.schema_version = 2;
        assert_eq!(err(future), PrefetchError::Schema(2));
        let many = list(&["a.bin"], &vec![(0, 0, 1); MAX_RUNS + 1]);
        assert!(matches!(
            err(many),
            PrefetchError::TooMany { what: "runs", .. }
        ));
    }

    #[test]
    fn bytes_are_bounded_before_parsing() {
        let big = vec![b' '; MAX_LIST_BYTES as usize + 1];
        assert!(matches!(
            PrefetchList::decode(&big),
            Err(PrefetchError::TooLarge { .. })
        ));
        assert!(matches!(
            PrefetchList::decode(b"{\"schemaVersion\":1}"),
            Err(PrefetchError::Json(_))
        ));
        assert!(matches!(
            PrefetchList::decode(b"[1,2,3]"),
            Err(PrefetchError::Json(_))
        ));
    }

    #[test]
    fn a_long_recording_is_cut_to_the_bounds() {
        let t = tree();
        let names: Vec<String> = (0..MAX_FILES + 10).map(|i| format!("f{i}")).collect();
        let reads = names.iter().map(|n| (n.as_str(), 0));
        let l = PrefetchList::from_reads(t.version_digest(), reads);
        assert_eq!(l.files.len(), MAX_FILES);
        assert_eq!(l.runs.len(), MAX_FILES);
        // Every other piece of one long file: one run per read.
        let reads = (0..(MAX_RUNS as u64 + 10)).map(|i| ("x", i * 2));
        let l = PrefetchList::from_reads(t.version_digest(), reads);
        assert_eq!(l.runs.len(), MAX_RUNS);
        assert!(l.encode().unwrap().len() as u64 <= MAX_LIST_BYTES);
        // Long paths: the encoding drops runs (and their files) to fit.
        let long: Vec<String> = (0..3000)
            .map(|i| format!("{i}{}", "p".repeat(2000)))
            .collect();
        let l = PrefetchList::from_reads(t.version_digest(), long.iter().map(|p| (p.as_str(), 0)));
        let bytes = l.encode().unwrap();
        assert!(bytes.len() as u64 <= MAX_LIST_BYTES);
        let back = PrefetchList::decode(&bytes).unwrap();
        assert!(back.runs.len() < 3000 && !back.runs.is_empty());
        assert_eq!(back.files.len(), back.runs.len());
        assert_eq!(back.files[..], l.files[..back.files.len()]);
    }
}
