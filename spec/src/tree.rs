//! The tree index: every entry of a version with its chunk list, its binary
//! encoding, and the validation rules every index obeys (SPEC.md §2).
//!
//! A [`TreeIndex`] is always valid: [`TreeIndex::new`] and
//! [`TreeIndex::decode`] are the only ways to make one and both check every
//! rule, so code that holds one never re-checks paths or sizes.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::chain::{self, PieceCv};
use crate::chunking::{ChunkingError, ChunkingParams};
use crate::digest::{B3Digest, Sha256Digest};
use crate::path::{self, PathError};

/// First bytes of an encoded tree index, format version 2 (§2.4).
pub const MAGIC: &[u8; 8] = b"SVTREE\x00\x02";
/// First bytes of a format version 1 index (§2.6), which readers still read.
pub const MAGIC_V1: &[u8; 8] = b"SVTREE\x00\x01";
/// The magic and the chunking parameters: what
/// [`TreeIndex::params_of`] reads.
pub const HEADER_BYTES: usize = 20;
/// Largest permission bits value (`0o7777`: rwx for all plus setuid, setgid, sticky).
pub const MAX_MODE: u32 = 0o7777;
const CHUNK_RECORD: usize = 8 + 4 + 32;
const CHUNK_RECORD_V1: usize = 8 + 4 + 32 + 32;
/// Largest encoded tree index a reader accepts (§2.4): 1 GiB, a volume of
/// over 10 TB. Checked before anything is allocated for it.
pub const MAX_TREE_BYTES: u64 = 1 << 30;

/// The encoding a tree index was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TreeFormat {
    /// Format 1: chunk lists without chaining values. Its chunks cannot be
    /// tied to the version digest until the whole file is read (§2.6).
    V1,
    /// Format 2: every file larger than a piece carries its chaining values
    /// (§2.5), so every byte range verifies against the version digest.
    V2,
}

impl TreeFormat {
    /// The media type of the tree index blob in this format (§5.6).
    pub fn media_type(self) -> &'static str {
        match self {
            TreeFormat::V1 => crate::oci::MT_TREE_BLOB_V1,
            TreeFormat::V2 => crate::oci::MT_TREE_BLOB,
        }
    }
}

/// One content-defined piece of a file, stored as one blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChunkRef {
    /// Offset of the chunk's first byte in the file.
    pub offset: u64,
    pub length: u32,
    /// The blob digest: where the chunk lives in an OCI registry, checked
    /// on download. What a reader serves is checked through the chain
    /// (§2.5), not per chunk.
    pub sha256: Sha256Digest,
}

/// The indexes of the chunks in `chunks` (a file's chunk list: in order and
/// contiguous, as §2.3 requires) that hold bytes `offset..end` of the file:
/// what a reader fetches to serve a range or to complete a piece (§2.5).
/// Empty when `end <= offset`.
pub fn chunks_covering(chunks: &[ChunkRef], offset: u64, end: u64) -> std::ops::Range<usize> {
    let first = chunks.partition_point(|c| c.offset + u64::from(c.length) <= offset);
    if end <= offset {
        return first..first;
    }
    let last = chunks.partition_point(|c| c.offset < end);
    first..last.max(first)
}

/// What kind of entry, with the kind's own fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum EntryData {
    Dir,
    File {
        size: u64,
        /// BLAKE3 of the whole file: what the version digest covers.
        blake3: B3Digest,
        chunks: Vec<ChunkRef>,
        /// Chaining values of the file's 1 MiB pieces (§2.5): one per piece
        /// for a file larger than a piece, none otherwise (and none in a
        /// format 1 index).
        #[serde(default, skip_serializing_if = "Vec::is_empty", with = "hex_cvs")]
        pieces: Vec<PieceCv>,
    },
    Symlink {
        target: String,
    },
}

impl EntryData {
    /// The file entry of `data` cut into chunks of `lengths` (one chunk of
    /// the whole file when empty), with its BLAKE3 and chaining values: what
    /// a writer computes, for code that has the bytes at hand.
    pub fn file_of(data: &[u8], lengths: &[usize]) -> EntryData {
        let whole = [data.len()];
        let lengths = if lengths.is_empty() {
            &whole[..]
        } else {
            lengths
        };
        let mut chunks = Vec::new();
        let mut offset = 0usize;
        for &n in lengths {
            if n == 0 {
                continue;
            }
            let end = (offset + n).min(data.len());
            chunks.push(ChunkRef {
                offset: offset as u64,
                length: (end - offset) as u32,
                sha256: Sha256Digest::of(&data[offset..end]),
            });
            offset = end;
        }
        let mut h = chain::PieceHasher::new();
        h.update(data);
        let (blake3, pieces) = h.finish();
        EntryData::File {
            size: data.len() as u64,
            blake3,
            chunks,
            pieces,
        }
    }

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

/// Chaining values in JSON (the test vectors) as hex strings.
mod hex_cvs {
    use serde::{de::Error as _, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(cvs: &[[u8; 32]], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(cvs.iter().map(hex::encode))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<[u8; 32]>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|h| {
                let mut cv = [0u8; 32];
                hex::decode_to_slice(h, &mut cv).map_err(D::Error::custom)?;
                Ok(cv)
            })
            .collect()
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
    #[error("symlink {path:?} -> {target:?} goes up ('..') after passing through the symlink {through:?}, which may leave the volume")]
    SymlinkDotDot {
        path: String,
        target: String,
        through: String,
    },
    #[error("chunk {sha256} is listed with length {first} and with length {second}; one blob has one length")]
    ChunkLength {
        sha256: Sha256Digest,
        first: u32,
        second: u32,
    },
    #[error("file {path:?}: chunk sizes do not add up: {detail}")]
    Sizes { path: String, detail: String },
    #[error("{path:?} has mode {mode:#o}; only permission bits (at most 0o7777) are allowed")]
    Mode { path: String, mode: u32 },
    #[error(transparent)]
    Chunking(#[from] ChunkingError),
    #[error("file {path:?}: {detail}")]
    Chain { path: String, detail: String },
    #[error("tree index is malformed at byte {offset}: {what}")]
    Format { offset: usize, what: &'static str },
    #[error("unsupported tree format (magic {0}); upgrade sealvol")]
    Unsupported(String),
    #[error(
        "a format 1 tree index cannot be written again; re-seal or `sealvol upgrade` the version"
    )]
    Legacy,
}

/// A valid tree index (SPEC.md §2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeIndex {
    params: ChunkingParams,
    entries: Vec<Entry>,
    format: TreeFormat,
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
    /// Builds a format 2 index from entries in any order: sorts them
    /// canonically and checks every rule of SPEC.md §2.3, the chain
    /// included (every file larger than a piece carries its chaining
    /// values, and they merge to its BLAKE3).
    pub fn new(params: ChunkingParams, mut entries: Vec<Entry>) -> Result<TreeIndex, TreeError> {
        entries.sort_by(|a, b| path::canonical_cmp(&a.path, &b.path));
        for w in entries.windows(2) {
            if w[0].path == w[1].path {
                return Err(TreeError::Duplicate(w[0].path.clone()));
            }
        }
        Self::checked(params, entries, TreeFormat::V2)
    }

    /// Checks an index whose entries are claimed to be in canonical order.
    fn checked(
        params: ChunkingParams,
        entries: Vec<Entry>,
        format: TreeFormat,
    ) -> Result<TreeIndex, TreeError> {
        params.validate()?;
        let mut dirs: HashSet<&str> = HashSet::new();
        let mut prev: Option<&str> = None;
        // Symlinks whose target goes up after going down: rule 5's second
        // half needs the whole tree, so they are checked after the scan.
        let mut climbing: Vec<usize> = Vec::new();
        // Rule 9: one length per blob.
        let mut lengths: HashMap<Sha256Digest, u32> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
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
                    if path::climbs_after_descending(target) {
                        climbing.push(i);
                    }
                }
                EntryData::File {
                    size,
                    blake3,
                    chunks,
                    pieces,
                } => {
                    check_chunks(&e.path, *size, chunks, &params)?;
                    check_chain(&e.path, *size, blake3, pieces, format)?;
                    for c in chunks {
                        let first = *lengths.entry(c.sha256).or_insert(c.length);
                        if first != c.length {
                            return Err(TreeError::ChunkLength {
                                sha256: c.sha256,
                                first,
                                second: c.length,
                            });
                        }
                    }
                }
            }
        }
        if !climbing.is_empty() {
            let lookup = Lookup::new(&entries);
            for i in climbing {
                lookup.check_no_dotdot_after_symlink(&entries[i])?;
            }
        }
        Ok(TreeIndex {
            params,
            entries,
            format,
        })
    }

    pub fn params(&self) -> ChunkingParams {
        self.params
    }

    /// The encoding this index was read from (format 2 when built).
    pub fn format(&self) -> TreeFormat {
        self.format
    }

    /// Whether every byte of every file can be checked against the version
    /// digest as it is read (format 2, §2.5).
    pub fn is_verifiable(&self) -> bool {
        self.format == TreeFormat::V2
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
        crate::version::digest_of(&self.entries)
    }

    /// The binary encoding of SPEC.md §2.4 (format 2). A format 1 index
    /// lacks the chaining values and cannot be written again.
    pub fn encode(&self) -> Result<Vec<u8>, TreeError> {
        if self.format != TreeFormat::V2 {
            return Err(TreeError::Legacy);
        }
        let (chunks, pieces) = self.entries.iter().fold((0, 0), |(c, p), e| match &e.data {
            EntryData::File { chunks, pieces, .. } => (c + chunks.len(), p + pieces.len()),
            _ => (c, p),
        });
        let mut out =
            Vec::with_capacity(28 + self.entries.len() * 64 + chunks * CHUNK_RECORD + pieces * 32);
        write_entries(
            &mut out,
            TreeFormat::V2,
            self.params,
            &self.entries,
            &|_, _| unreachable!("format 2 has no per-chunk BLAKE3"),
        );
        Ok(out)
    }

    /// The chunking parameters an encoded index (of format 2 or 1) records
    /// in its first [`HEADER_BYTES`] bytes, without decoding the rest.
    pub fn params_of(header: &[u8]) -> Option<ChunkingParams> {
        let magic = header.get(..8)?;
        if magic != MAGIC && magic != MAGIC_V1 {
            return None;
        }
        let u32_at = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(header.get(at..at + 4)?.try_into().ok()?))
        };
        let params = ChunkingParams {
            min: u32_at(8)?,
            avg: u32_at(12)?,
            max: u32_at(16)?,
        };
        params.validate().ok()?;
        Some(params)
    }

    /// Decodes and validates an encoded index of format 2 or 1.
    pub fn decode(bytes: &[u8]) -> Result<TreeIndex, TreeError> {
        if bytes.len() as u64 > MAX_TREE_BYTES {
            return Err(TreeError::Format {
                offset: 0,
                what: "tree index larger than 1 GiB",
            });
        }
        let mut r = Reader { buf: bytes, pos: 0 };
        let magic = r.take(8, "missing magic")?;
        let format = if magic == MAGIC {
            TreeFormat::V2
        } else if magic == MAGIC_V1 {
            TreeFormat::V1
        } else if magic.starts_with(b"SVTREE\x00") {
            return Err(TreeError::Unsupported(hex::encode(magic)));
        } else {
            return Err(TreeError::Format {
                offset: 0,
                what: "not a sealvol tree index (bad magic)",
            });
        };
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
            entries.push(decode_entry(&mut r, format)?);
        }
        if r.pos != bytes.len() {
            return Err(r.err("trailing bytes after the last entry"));
        }
        Self::checked(params, entries, format)
    }
}

/// Children by (parent, name), for walking a symlink's target through the
/// tree (rule 5): built only for trees with a target that climbs, in one
/// pass, so the check costs the targets' length, not their count times the
/// tree's depth.
struct Lookup<'a> {
    entries: &'a [Entry],
    /// (index of the parent directory entry, `ROOT` for the root; name) →
    /// entry index.
    children: HashMap<(usize, &'a str), usize>,
}

const ROOT: usize = usize::MAX;

impl<'a> Lookup<'a> {
    fn new(entries: &'a [Entry]) -> Lookup<'a> {
        let mut dirs: HashMap<&str, usize> = HashMap::new();
        let mut children = HashMap::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            // Valid so far: every parent is a directory entry seen earlier.
            let (parent, name) = match e.path.rsplit_once('/') {
                Some((d, n)) => (dirs[d], n),
                None => (ROOT, e.path.as_str()),
            };
            children.insert((parent, name), i);
            if e.is_dir() {
                dirs.insert(&e.path, i);
            }
        }
        Lookup { entries, children }
    }

    fn entry(&self, i: usize) -> &'a Entry {
        &self.entries[i]
    }

    fn path_of(&self, i: usize) -> &'a str {
        &self.entries[i].path
    }

    /// Rule 5, second half: resolving `link`'s target from its directory,
    /// no `..` follows a component that is one of the tree's symlinks.
    fn check_no_dotdot_after_symlink(&self, link: &Entry) -> Result<(), TreeError> {
        let EntryData::Symlink { target } = &link.data else {
            return Ok(());
        };
        // Where the walk is: the directories from the root down (`None`
        // past a name the tree does not hold, which the kernel could not
        // resolve either), or the symlink it passed through.
        let mut at: Vec<Option<usize>> = vec![Some(ROOT)];
        if let Some(dir) = path::parent(&link.path) {
            for name in dir.split('/') {
                let here = at.last().copied().flatten();
                at.push(here.and_then(|d| self.children.get(&(d, name)).copied()));
            }
        }
        let mut through: Option<usize> = None;
        for c in target.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    if let Some(s) = through {
                        return Err(TreeError::SymlinkDotDot {
                            path: link.path.clone(),
                            target: target.clone(),
                            through: self.path_of(s).to_string(),
                        });
                    }
                    // Rule 5's first half keeps this above the root.
                    at.pop();
                }
                name if through.is_none() => {
                    let here = at.last().copied().flatten();
                    let child = here.and_then(|d| self.children.get(&(d, name)).copied());
                    match child.map(|i| (i, &self.entry(i).data)) {
                        Some((i, EntryData::Symlink { .. })) => through = Some(i),
                        Some((i, EntryData::Dir)) => at.push(Some(i)),
                        _ => at.push(None),
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The chain rule of §2.3: a format 2 file larger than a piece carries one
/// chaining value per piece and they merge to its BLAKE3; any other file
/// carries none.
fn check_chain(
    path: &str,
    size: u64,
    blake3: &B3Digest,
    pieces: &[PieceCv],
    format: TreeFormat,
) -> Result<(), TreeError> {
    let bad = |detail: String| TreeError::Chain {
        path: path.to_string(),
        detail,
    };
    let want = match format {
        TreeFormat::V1 => 0,
        TreeFormat::V2 => chain::piece_count(size),
    };
    if pieces.len() as u64 != want {
        return Err(bad(format!(
            "{} chaining values for {size} bytes, expected {want}",
            pieces.len()
        )));
    }
    if want > 0 && chain::combine(pieces, size).as_ref() != Some(blake3) {
        return Err(bad(format!(
            "its chaining values do not merge to its BLAKE3 {blake3}"
        )));
    }
    Ok(())
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

/// Encodes `entries`, in the order given, as a tree index blob of `format`,
/// checking nothing: format 2 writes the chaining values each file holds as
/// they are, format 1 (§2.6) drops them and gives each chunk record the
/// BLAKE3 `chunk_blake3(entry, chunk)` returns (of the chunk's bytes, for a
/// faithful copy). No sealvol writer uses it: it is for tests and tools
/// that need what an earlier release, or a hostile registry, would write.
/// Writers use [`TreeIndex::encode`].
pub fn encode_entries(
    format: TreeFormat,
    params: ChunkingParams,
    entries: &[Entry],
    chunk_blake3: &dyn Fn(&Entry, &ChunkRef) -> B3Digest,
) -> Vec<u8> {
    let mut out = Vec::new();
    write_entries(&mut out, format, params, entries, chunk_blake3);
    out
}

fn write_entries(
    out: &mut Vec<u8>,
    format: TreeFormat,
    params: ChunkingParams,
    entries: &[Entry],
    chunk_blake3: &dyn Fn(&Entry, &ChunkRef) -> B3Digest,
) {
    out.extend_from_slice(match format {
        TreeFormat::V1 => MAGIC_V1,
        TreeFormat::V2 => MAGIC,
    });
    for v in [params.min, params.avg, params.max] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for e in entries {
        encode_entry(out, e, format, chunk_blake3);
    }
}

fn encode_entry(
    out: &mut Vec<u8>,
    e: &Entry,
    format: TreeFormat,
    chunk_blake3: &dyn Fn(&Entry, &ChunkRef) -> B3Digest,
) {
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
            pieces,
        } => {
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&blake3.0);
            out.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
            for c in chunks {
                out.extend_from_slice(&c.offset.to_le_bytes());
                out.extend_from_slice(&c.length.to_le_bytes());
                out.extend_from_slice(&c.sha256.0);
                if format == TreeFormat::V1 {
                    out.extend_from_slice(&chunk_blake3(e, c).0);
                }
            }
            // The piece count follows from the size (§2.4).
            if format == TreeFormat::V2 {
                for cv in pieces {
                    out.extend_from_slice(cv);
                }
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

fn decode_entry(r: &mut Reader<'_>, format: TreeFormat) -> Result<Entry, TreeError> {
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
            let record = match format {
                TreeFormat::V1 => CHUNK_RECORD_V1,
                TreeFormat::V2 => CHUNK_RECORD,
            };
            if n > (r.buf.len() - r.pos) / record {
                return Err(r.err("chunk count larger than the input"));
            }
            let mut chunks = Vec::with_capacity(n);
            for _ in 0..n {
                chunks.push(ChunkRef {
                    offset: r.u64()?,
                    length: r.u32()?,
                    sha256: Sha256Digest(r.array()?),
                });
                if format == TreeFormat::V1 {
                    // The chunk's BLAKE3: no link to the version digest,
                    // and sha256 names the same bytes (§2.6).
                    r.take(32, "truncated")?;
                }
            }
            let pieces = match format {
                TreeFormat::V1 => Vec::new(),
                TreeFormat::V2 => {
                    let p = chain::piece_count(size);
                    if p > ((r.buf.len() - r.pos) / 32) as u64 {
                        return Err(r.err("chaining values larger than the input"));
                    }
                    (0..p).map(|_| r.array()).collect::<Result<_, _>>()?
                }
            };
            EntryData::File {
                size,
                blake3,
                chunks,
                pieces,
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
        Entry {
            path: p.into(),
            mode: 0o644,
            data: EntryData::file_of(data, &[]),
        }
    }

    #[test]
    fn chunks_covering_finds_the_chunks_of_a_range() {
        let EntryData::File { chunks, .. } = EntryData::file_of(&[7; 25], &[10, 10, 5]) else {
            unreachable!("file_of makes a file")
        };
        assert_eq!(chunks_covering(&chunks, 0, 1), 0..1);
        assert_eq!(chunks_covering(&chunks, 9, 11), 0..2);
        assert_eq!(chunks_covering(&chunks, 10, 20), 1..2);
        assert_eq!(chunks_covering(&chunks, 0, 25), 0..3);
        assert_eq!(chunks_covering(&chunks, 24, 25), 2..3);
        assert_eq!(chunks_covering(&chunks, 19, 21), 1..3);
        assert!(chunks_covering(&chunks, 5, 5).is_empty());
        assert!(chunks_covering(&chunks, 30, 40).is_empty());
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
        let back = TreeIndex::decode(&t.encode().unwrap()).unwrap();
        assert_eq!(back, t);
        assert_eq!(t.get("a/x").unwrap().data.size(), 5);
        let top: Vec<_> = t.children(None).map(|e| e.path.as_str()).collect();
        assert_eq!(top, ["a", "b", "empty"]);
        let sub: Vec<_> = t.children(Some("a")).map(|e| e.path.as_str()).collect();
        assert_eq!(sub, ["a/x"]);
        assert_eq!(t.subtree(Some("nope")).len(), 0);
    }

    #[test]
    fn params_come_from_the_header_alone() {
        for params in [ChunkingParams::default(), ChunkingParams::EARLIER_DEFAULT] {
            let t = TreeIndex::new(params, vec![file("a", b"x")]).unwrap();
            let bytes = t.encode().unwrap();
            assert_eq!(TreeIndex::params_of(&bytes[..HEADER_BYTES]), Some(params));
        }
        let bytes = TreeIndex::new(ChunkingParams::default(), vec![])
            .unwrap()
            .encode()
            .unwrap();
        assert_eq!(TreeIndex::params_of(&bytes[..HEADER_BYTES - 1]), None);
        assert_eq!(TreeIndex::params_of(b"SVTREE\x00\x09 and more bytes"), None);
        let mut bad = bytes.clone();
        bad[16..20].copy_from_slice(&(64u32 << 20).to_le_bytes()); // max over 16 MiB
        assert_eq!(TreeIndex::params_of(&bad), None);
    }

    #[test]
    fn decode_rejects_garbage_without_panicking() {
        let t = TreeIndex::new(
            ChunkingParams::default(),
            vec![dir("a"), file("a/x", b"hello")],
        )
        .unwrap();
        let enc = t.encode().unwrap();
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
