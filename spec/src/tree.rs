//! The tree index: every entry of a version with its chunk list, its binary
//! encoding, and the validation rules every index obeys (SPEC.md §2).
//!
//! A [`TreeIndex`] is always valid: [`TreeIndex::new`] and
//! [`TreeIndex::decode`] are the only ways to make one and both check every
//! rule, so code that holds one never re-checks paths or sizes.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::chunking::{ChunkingError, ChunkingParams};
use crate::digest::{B3Digest, Sha256Digest};
use crate::path::{self, PathError};

/// First bytes of an encoded tree index, format version 1.
pub const MAGIC: &[u8; 8] = b"SVTREE\x00\x01";
/// Largest permission bits value (`0o7777`: rwx for all plus setuid, setgid, sticky).
pub const MAX_MODE: u32 = 0o7777;
const CHUNK_RECORD: usize = 8 + 4 + 32 + 32;

/// One content-defined piece of a file, stored as one blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChunkRef {
    /// Offset of the chunk's first byte in the file.
    pub offset: u64,
    pub length: u32,
    /// The blob digest: where the chunk lives in an OCI registry.
    pub sha256: Sha256Digest,
    /// BLAKE3 of the chunk's bytes, checked with `sha256` before use.
    pub blake3: B3Digest,
}

/// What kind of entry, with the kind's own fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum EntryData {
    Dir,
    File {
        size: u64,
        blake3: B3Digest,
        chunks: Vec<ChunkRef>,
    },
    Symlink {
        target: String,
    },
}

impl EntryData {
    fn code(&self) -> u8 {
        match self {
            EntryData::Dir => 1,
            EntryData::File { .. } => 2,
            EntryData::Symlink { .. } => 3,
        }
    }

    /// The size `stat` reports: file length, target length, 0 for a directory.
    pub fn size(&self) -> u64 {
        match self {
            EntryData::Dir => 0,
            EntryData::File { size, .. } => *size,
            EntryData::Symlink { target } => target.len() as u64,
        }
    }
}

/// One file, directory or symlink of a version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Normalized relative path (SPEC.md §2.2).
    pub path: String,
    /// Permission bits, at most `0o7777`.
    pub mode: u32,
    #[serde(flatten)]
    pub data: EntryData,
}

impl Entry {
    pub fn is_dir(&self) -> bool {
        matches!(self.data, EntryData::Dir)
    }
}

/// Why a tree index was rejected.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TreeError {
    #[error("invalid entry path: {0}")]
    Path(#[from] PathError),
    #[error("duplicate path {0:?}")]
    Duplicate(String),
    #[error("entries are not in canonical order at {0:?}")]
    Order(String),
    #[error("{path:?} has no parent directory entry {parent:?}")]
    MissingParent { path: String, parent: String },
    #[error("{path:?} lies under {parent:?}, which is not a directory")]
    ParentNotDir { path: String, parent: String },
    #[error("symlink {path:?} -> {target:?} points outside the volume")]
    SymlinkEscapes { path: String, target: String },
    #[error("file {path:?}: chunk sizes do not add up: {detail}")]
    Sizes { path: String, detail: String },
    #[error("{path:?} has mode {mode:#o}; only permission bits (at most 0o7777) are allowed")]
    Mode { path: String, mode: u32 },
    #[error(transparent)]
    Chunking(#[from] ChunkingError),
    #[error("tree index is malformed at byte {offset}: {what}")]
    Format { offset: usize, what: &'static str },
}

/// A valid tree index (SPEC.md §2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeIndex {
    params: ChunkingParams,
    entries: Vec<Entry>,
}

/// Totals over a version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TreeStats {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Sum of file sizes.
    pub bytes: u64,
    /// Chunk references, counting repeats.
    pub chunks: u64,
    /// Distinct chunk blobs.
    pub unique_chunks: u64,
    /// Bytes of the distinct chunk blobs.
    pub unique_bytes: u64,
}

impl TreeIndex {
    /// Builds an index from entries in any order: sorts them canonically and
    /// checks every rule of SPEC.md §2.3.
    pub fn new(params: ChunkingParams, mut entries: Vec<Entry>) -> Result<TreeIndex, TreeError> {
        entries.sort_by(|a, b| path::canonical_cmp(&a.path, &b.path));
        for w in entries.windows(2) {
            if w[0].path == w[1].path {
                return Err(TreeError::Duplicate(w[0].path.clone()));
            }
        }
        Self::checked(params, entries)
    }

    /// Checks an index whose entries are claimed to be in canonical order.
    fn checked(params: ChunkingParams, entries: Vec<Entry>) -> Result<TreeIndex, TreeError> {
        params.validate()?;
        let mut dirs: HashSet<&str> = HashSet::new();
        let mut prev: Option<&str> = None;
        for e in &entries {
            path::validate(&e.path)?;
            if let Some(p) = prev {
                match path::canonical_cmp(p, &e.path) {
                    std::cmp::Ordering::Less => {}
                    std::cmp::Ordering::Equal => return Err(TreeError::Duplicate(e.path.clone())),
                    std::cmp::Ordering::Greater => return Err(TreeError::Order(e.path.clone())),
                }
            }
            prev = Some(&e.path);
            if let Some(parent) = path::parent(&e.path) {
                // Canonical order puts a parent before its children, so the
                // parent, if present, has been seen.
                if !dirs.contains(parent) {
                    let is_entry = entries
                        .binary_search_by(|x| path::canonical_cmp(&x.path, parent))
                        .is_ok();
                    return Err(if is_entry {
                        TreeError::ParentNotDir {
                            path: e.path.clone(),
                            parent: parent.to_string(),
                        }
                    } else {
                        TreeError::MissingParent {
                            path: e.path.clone(),
                            parent: parent.to_string(),
                        }
                    });
                }
            }
            if e.mode > MAX_MODE {
                return Err(TreeError::Mode {
                    path: e.path.clone(),
                    mode: e.mode,
                });
            }
            match &e.data {
                EntryData::Dir => {
                    dirs.insert(&e.path);
                }
                EntryData::Symlink { target } => {
                    if !path::symlink_target_stays_inside(&e.path, target) {
                        return Err(TreeError::SymlinkEscapes {
                            path: e.path.clone(),
                            target: target.clone(),
                        });
                    }
                }
                EntryData::File { size, chunks, .. } => {
                    check_chunks(&e.path, *size, chunks, &params)?
                }
            }
        }
        Ok(TreeIndex { params, entries })
    }

    pub fn params(&self) -> ChunkingParams {
        self.params
    }

    /// Entries in canonical order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry at `path`, if any.
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.position(path).map(|i| &self.entries[i])
    }

    fn position(&self, path: &str) -> Option<usize> {
        self.entries
            .binary_search_by(|e| path::canonical_cmp(&e.path, path))
            .ok()
    }

    /// The entries at or below `dir` (the whole tree for `None`), contiguous
    /// in canonical order. Empty when `dir` does not exist.
    pub fn subtree(&self, dir: Option<&str>) -> &[Entry] {
        let Some(dir) = dir else {
            return &self.entries;
        };
        let Some(start) = self.position(dir) else {
            return &[];
        };
        let len = self.entries[start..]
            .iter()
            .take_while(|e| path::is_within(&e.path, dir))
            .count();
        &self.entries[start..start + len]
    }

    /// The immediate children of `dir` (top level for `None`).
    pub fn children<'a>(&'a self, dir: Option<&'a str>) -> impl Iterator<Item = &'a Entry> + 'a {
        let sub = match dir {
            Some(d) => self.subtree(Some(d)).get(1..).unwrap_or(&[]),
            None => &self.entries[..],
        };
        sub.iter().filter(move |e| path::parent(&e.path) == dir)
    }

    pub fn stats(&self) -> TreeStats {
        let mut s = TreeStats::default();
        let mut seen: HashSet<Sha256Digest> = HashSet::new();
        for e in &self.entries {
            match &e.data {
                EntryData::Dir => s.dirs += 1,
                EntryData::Symlink { .. } => s.symlinks += 1,
                EntryData::File { size, chunks, .. } => {
                    s.files += 1;
                    s.bytes += size;
                    s.chunks += chunks.len() as u64;
                    for c in chunks {
                        if seen.insert(c.sha256) {
                            s.unique_chunks += 1;
                            s.unique_bytes += u64::from(c.length);
                        }
                    }
                }
            }
        }
        s
    }

    /// The version digest (SPEC.md §3): BLAKE3 over the canonical encoding.
    pub fn version_digest(&self) -> B3Digest {
        let mut h = blake3::Hasher::new();
        h.update(crate::version::CANONICAL_MAGIC);
        for e in &self.entries {
            crate::version::canonical_entry(&mut h, e);
        }
        h.finalize().into()
    }

    /// The binary encoding of SPEC.md §2.4.
    pub fn encode(&self) -> Vec<u8> {
        let chunks: usize = self
            .entries
            .iter()
            .map(|e| match &e.data {
                EntryData::File { chunks, .. } => chunks.len(),
                _ => 0,
            })
            .sum();
        let mut out = Vec::with_capacity(28 + self.entries.len() * 64 + chunks * CHUNK_RECORD);
        out.extend_from_slice(MAGIC);
        for v in [self.params.min, self.params.avg, self.params.max] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for e in &self.entries {
            encode_entry(&mut out, e);
        }
        out
    }

    /// Decodes and validates an encoded index.
    pub fn decode(bytes: &[u8]) -> Result<TreeIndex, TreeError> {
        let mut r = Reader { buf: bytes, pos: 0 };
        if r.take(8, "missing magic")? != MAGIC {
            return Err(TreeError::Format {
                offset: 0,
                what: "not a sealvol tree index (bad magic)",
            });
        }
        let params = ChunkingParams {
            min: r.u32()?,
            avg: r.u32()?,
            max: r.u32()?,
        };
        let count = r.u64()?;
        // Every entry takes at least 9 bytes; refuse counts the input cannot hold.
        if count > (bytes.len() / 9) as u64 {
            return Err(r.err("entry count larger than the input"));
        }
        let mut entries = Vec::with_capacity(count as usize);
        for _ in 0..count {
            entries.push(decode_entry(&mut r)?);
        }
        if r.pos != bytes.len() {
            return Err(r.err("trailing bytes after the last entry"));
        }
        Self::checked(params, entries)
    }
}

fn check_chunks(
    path: &str,
    size: u64,
    chunks: &[ChunkRef],
    params: &ChunkingParams,
) -> Result<(), TreeError> {
    let bad = |detail: String| TreeError::Sizes {
        path: path.to_string(),
        detail,
    };
    let mut next = 0u64;
    for (i, c) in chunks.iter().enumerate() {
        if c.offset != next {
            return Err(bad(format!(
                "chunk {i} starts at {} instead of {next}",
                c.offset
            )));
        }
        if c.length == 0 || c.length > params.max {
            return Err(bad(format!(
                "chunk {i} has length {} (must be 1..={})",
                c.length, params.max
            )));
        }
        next += u64::from(c.length);
    }
    if next != size {
        return Err(bad(format!(
            "chunks cover {next} bytes, file size is {size}"
        )));
    }
    Ok(())
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn encode_entry(out: &mut Vec<u8>, e: &Entry) {
    out.push(e.data.code());
    out.extend_from_slice(&e.mode.to_le_bytes());
    put_str(out, &e.path);
    match &e.data {
        EntryData::Dir => {}
        EntryData::Symlink { target } => put_str(out, target),
        EntryData::File {
            size,
            blake3,
            chunks,
        } => {
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&blake3.0);
            out.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
            for c in chunks {
                out.extend_from_slice(&c.offset.to_le_bytes());
                out.extend_from_slice(&c.length.to_le_bytes());
                out.extend_from_slice(&c.sha256.0);
                out.extend_from_slice(&c.blake3.0);
            }
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, what: &'static str) -> TreeError {
        TreeError::Format {
            offset: self.pos,
            what,
        }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], TreeError> {
        if self.buf.len() - self.pos < n {
            return Err(self.err(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], TreeError> {
        let s = self.take(N, "truncated")?;
        Ok(s.try_into().expect("take returned N bytes"))
    }

    fn u32(&mut self) -> Result<u32, TreeError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, TreeError> {
        self.array().map(u64::from_le_bytes)
    }

    fn string(&mut self) -> Result<String, TreeError> {
        let len = self.u32()? as usize;
        if len > path::MAX_PATH_LEN {
            return Err(self.err("string longer than 4096 bytes"));
        }
        let bytes = self.take(len, "truncated string")?;
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|_| self.err("string is not UTF-8"))
    }
}

fn decode_entry(r: &mut Reader<'_>) -> Result<Entry, TreeError> {
    let kind = r.array::<1>()?[0];
    let mode = r.u32()?;
    let path = r.string()?;
    let data = match kind {
        1 => EntryData::Dir,
        3 => EntryData::Symlink {
            target: r.string()?,
        },
        2 => {
            let size = r.u64()?;
            let blake3 = B3Digest(r.array()?);
            let n = r.u32()? as usize;
            if n > (r.buf.len() - r.pos) / CHUNK_RECORD {
                return Err(r.err("chunk count larger than the input"));
            }
            let mut chunks = Vec::with_capacity(n);
            for _ in 0..n {
                chunks.push(ChunkRef {
                    offset: r.u64()?,
                    length: r.u32()?,
                    sha256: Sha256Digest(r.array()?),
                    blake3: B3Digest(r.array()?),
                });
            }
            EntryData::File {
                size,
                blake3,
                chunks,
            }
        }
        _ => return Err(r.err("unknown entry kind")),
    };
    Ok(Entry { path, mode, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(p: &str) -> Entry {
        Entry {
            path: p.into(),
            mode: 0o755,
            data: EntryData::Dir,
        }
    }

    fn file(p: &str, data: &[u8]) -> Entry {
        let chunks = if data.is_empty() {
            vec![]
        } else {
            vec![ChunkRef {
                offset: 0,
                length: data.len() as u32,
                sha256: Sha256Digest::of(data),
                blake3: B3Digest::of(data),
            }]
        };
        Entry {
            path: p.into(),
            mode: 0o644,
            data: EntryData::File {
                size: data.len() as u64,
                blake3: B3Digest::of(data),
                chunks,
            },
        }
    }

    #[test]
    fn round_trip_and_lookup() {
        let t = TreeIndex::new(
            ChunkingParams::default(),
            vec![
                file("a/x", b"hello"),
                dir("a"),
                dir("empty"),
                file("b", b""),
            ],
        )
        .unwrap();
        let back = TreeIndex::decode(&t.encode()).unwrap();
        assert_eq!(back, t);
        assert_eq!(t.get("a/x").unwrap().data.size(), 5);
        let top: Vec<_> = t.children(None).map(|e| e.path.as_str()).collect();
        assert_eq!(top, ["a", "b", "empty"]);
        let sub: Vec<_> = t.children(Some("a")).map(|e| e.path.as_str()).collect();
        assert_eq!(sub, ["a/x"]);
        assert_eq!(t.subtree(Some("nope")).len(), 0);
    }

    #[test]
    fn decode_rejects_garbage_without_panicking() {
        let t = TreeIndex::new(
            ChunkingParams::default(),
            vec![dir("a"), file("a/x", b"hello")],
        )
        .unwrap();
        let enc = t.encode();
        for cut in 0..enc.len() {
            assert!(
                TreeIndex::decode(&enc[..cut]).is_err(),
                "truncated at {cut}"
            );
        }
        let mut extra = enc.clone();
        extra.push(0);
        assert!(TreeIndex::decode(&extra).is_err());
    }
}
