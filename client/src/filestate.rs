//! The file-state cache: what sealing learned about a file, keyed by its
//! path and checked against its `stat`, so re-sealing an unchanged tree
//! reads no file data (as git's index does for `git status`).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{Database, ReadableDatabase, TableDefinition};
use sealvol_spec::{B3Digest, ChunkRef, ChunkingParams, Sha256Digest};

use crate::chunker::ChunkedFile;
use crate::walk::FileStamp;

/// Records of the tree format 2 writer: chunk lists without per-chunk
/// BLAKE3, with the file's chaining values. The `files` table of earlier
/// releases holds neither and is never read, so its records count as misses
/// (the file is read again once).
const FILES: TableDefinition<&str, &[u8]> = TableDefinition::new("files.v2");
/// A file modified this close to when we stat it could change again within
/// the same timestamp tick without its stamp changing ("racy" in git's
/// terms); such files are not cached.
const RACY_NS: i64 = 100_000_000;

/// An open cache. Failing to open it only costs speed, so callers may go
/// on without one.
pub struct FileStateCache {
    db: Database,
}

#[derive(Debug, thiserror::Error)]
#[error("file-state cache {path}: {message}")]
pub struct CacheError {
    pub path: PathBuf,
    pub message: String,
}

fn err(path: &Path, e: impl std::fmt::Display) -> CacheError {
    CacheError {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl FileStateCache {
    /// Opens or creates `dir/filestate.redb`.
    pub fn open(dir: &Path) -> Result<FileStateCache, CacheError> {
        std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
        let path = dir.join("filestate.redb");
        let db = Database::create(&path).map_err(|e| err(&path, e))?;
        Ok(FileStateCache { db })
    }

    /// The cached chunk list of `path` if its stamp and the chunking
    /// parameters are unchanged.
    pub fn get(
        &self,
        path: &Path,
        stamp: &FileStamp,
        params: &ChunkingParams,
    ) -> Option<ChunkedFile> {
        let key = path.to_str()?;
        let tx = self.db.begin_read().ok()?;
        let table = tx.open_table(FILES).ok()?;
        let value = table.get(key).ok()??;
        decode(value.value(), stamp, params)
    }

    /// Records freshly chunked files in one transaction, skipping racy ones:
    /// those changed less than 100 ms before `stat_time`, when their stamps
    /// were taken.
    pub fn put_all<'a>(
        &self,
        items: impl IntoIterator<Item = (&'a Path, &'a FileStamp, &'a ChunkedFile)>,
        params: &ChunkingParams,
        stat_time: SystemTime,
    ) -> Result<(), CacheError> {
        let now = stat_time
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0);
        let tx = self
            .db
            .begin_write()
            .map_err(|e| err(Path::new("write"), e))?;
        {
            let mut table = tx
                .open_table(FILES)
                .map_err(|e| err(Path::new("table"), e))?;
            for (path, stamp, file) in items {
                let (Some(key), false) = (
                    path.to_str(),
                    now - stamp.mtime_ns.max(stamp.ctime_ns) < RACY_NS,
                ) else {
                    continue;
                };
                table
                    .insert(key, encode(stamp, params, file).as_slice())
                    .map_err(|e| err(path, e))?;
            }
        }
        tx.commit().map_err(|e| err(Path::new("commit"), e))
    }
}

// Record: size u64 | mtime i64 | ctime i64 | ino u64 | dev u64 | min avg max u32 |
// blake3 [32] | n u32 | n × (length u32 | sha256 [32]) | piece_count(size) × cv [32],
// little-endian.
fn encode(s: &FileStamp, p: &ChunkingParams, f: &ChunkedFile) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + f.chunks.len() * CHUNK + f.pieces.len() * 32);
    out.extend_from_slice(&s.size.to_le_bytes());
    out.extend_from_slice(&s.mtime_ns.to_le_bytes());
    out.extend_from_slice(&s.ctime_ns.to_le_bytes());
    out.extend_from_slice(&s.ino.to_le_bytes());
    out.extend_from_slice(&s.dev.to_le_bytes());
    for v in [p.min, p.avg, p.max] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&f.blake3.0);
    out.extend_from_slice(&(f.chunks.len() as u32).to_le_bytes());
    for c in &f.chunks {
        out.extend_from_slice(&c.length.to_le_bytes());
        out.extend_from_slice(&c.sha256.0);
    }
    for cv in &f.pieces {
        out.extend_from_slice(cv);
    }
    out
}

const CHUNK: usize = 4 + 32;

fn decode(b: &[u8], want: &FileStamp, params: &ChunkingParams) -> Option<ChunkedFile> {
    let u64_at = |i: usize| {
        b.get(i..i + 8)
            .map(|s| u64::from_le_bytes(s.try_into().unwrap()))
    };
    let u32_at = |i: usize| {
        b.get(i..i + 4)
            .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
    };
    let arr_at = |i: usize| b.get(i..i + 32).map(|s| <[u8; 32]>::try_from(s).unwrap());
    let stamp = FileStamp {
        size: u64_at(0)?,
        mtime_ns: u64_at(8)? as i64,
        ctime_ns: u64_at(16)? as i64,
        ino: u64_at(24)?,
        dev: u64_at(32)?,
    };
    let p = ChunkingParams {
        min: u32_at(40)?,
        avg: u32_at(44)?,
        max: u32_at(48)?,
    };
    if stamp != *want || p != *params {
        return None;
    }
    let blake3 = B3Digest(arr_at(52)?);
    let n = u32_at(84)? as usize;
    let p = sealvol_spec::chain::piece_count(stamp.size) as usize;
    let pieces_at = 88 + n.checked_mul(CHUNK)?;
    if b.len() != pieces_at + p.checked_mul(32)? {
        return None;
    }
    let mut chunks = Vec::with_capacity(n);
    let mut offset = 0u64;
    for i in 0..n {
        let at = 88 + i * CHUNK;
        let length = u32_at(at)?;
        chunks.push(ChunkRef {
            offset,
            length,
            sha256: Sha256Digest(arr_at(at + 4)?),
        });
        offset += u64::from(length);
    }
    let pieces = (0..p)
        .map(|i| arr_at(pieces_at + i * 32))
        .collect::<Option<Vec<_>>>()?;
    // A record whose values do not merge to its hash is damaged: a miss.
    if p > 0 && sealvol_spec::chain::combine(&pieces, stamp.size) != Some(blake3) {
        return None;
    }
    (offset == stamp.size).then_some(ChunkedFile {
        size: stamp.size,
        blake3,
        chunks,
        pieces,
    })
}
