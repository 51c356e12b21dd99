//! The chunk-and-hash pipeline: files in, chunk lists out.
//!
//! Reader threads stream files through fixed blocks, find FastCDC cut
//! points and feed the whole-file BLAKE3; hasher threads compute each
//! chunk's SHA-256 (its blob digest) and BLAKE3. Every byte is read once
//! and the chunk hashes run on all cores even for a single large file.
//! Memory is bounded by a small pool of blocks whatever the input size.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use sealvol_spec::{B3Digest, ChunkRef, Cutter, Sha256Digest};
use sha2::Digest as _;

use crate::walk::FileStamp;
use crate::SealError;

/// Bytes per read block; at least twice the largest chunk so a carried-over
/// tail always leaves room to read.
const BLOCK: usize = 32 << 20;

/// One file to chunk, with what `stat` said before reading it.
#[derive(Clone, Debug)]
pub struct FileJob {
    pub path: PathBuf,
    pub stamp: FileStamp,
}

/// A chunked file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkedFile {
    pub size: u64,
    pub blake3: B3Digest,
    pub chunks: Vec<ChunkRef>,
}

/// A block of file data, returned to the pool when the last chunk that
/// borrows from it has been hashed.
struct Block {
    data: Vec<u8>,
    home: Sender<Vec<u8>>,
}

impl Drop for Block {
    fn drop(&mut self) {
        // The pool channel has room for every block, so this never blocks;
        // it fails only when the pipeline is gone, and then nothing waits.
        let _ = self.home.send(std::mem::take(&mut self.data));
    }
}

struct ChunkJob {
    block: Arc<Block>,
    start: usize,
    len: usize,
    file: usize,
    index: usize,
}

enum Msg {
    Chunk {
        file: usize,
        index: usize,
        sha256: Sha256Digest,
        blake3: B3Digest,
    },
    File {
        file: usize,
        result: Result<(u64, B3Digest, Vec<u32>), SealError>,
    },
}

/// Chunks and hashes `files` on `threads` cores. Results are in input
/// order; the first error stops the work and is returned.
pub fn chunk_files(
    files: &[FileJob],
    cutter: Cutter,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<ChunkedFile>, SealError> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let threads = threads.max(1);
    let readers = files.len().min(threads.clamp(1, 4));
    // Each reader may hold two blocks while it carries a tail over; one
    // more keeps hashers busy while readers wait.
    let blocks = readers * 2 + 1;
    let (pool_tx, pool_rx) = bounded::<Vec<u8>>(blocks);
    for _ in 0..blocks {
        pool_tx.send(Vec::new()).expect("pool has room");
    }
    let (job_tx, job_rx) = bounded::<ChunkJob>(256);
    let (msg_tx, msg_rx) = unbounded::<Msg>();
    let next = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);

    let mut hashes: Vec<Vec<Option<(Sha256Digest, B3Digest)>>> = vec![Vec::new(); files.len()];
    let mut done: Vec<Option<(u64, B3Digest, Vec<u32>)>> = vec![None; files.len()];
    let mut first_error = None;

    std::thread::scope(|s| {
        for _ in 0..readers {
            let (pool_tx, pool_rx, job_tx, msg_tx) = (
                pool_tx.clone(),
                pool_rx.clone(),
                job_tx.clone(),
                msg_tx.clone(),
            );
            let (next, abort) = (&next, &abort);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= files.len() || abort.load(Ordering::Relaxed) {
                    break;
                }
                let result = read_file(&files[i], i, cutter, &pool_tx, &pool_rx, &job_tx);
                if result.is_err() {
                    abort.store(true, Ordering::Relaxed);
                }
                let _ = msg_tx.send(Msg::File { file: i, result });
            });
        }
        for _ in 0..threads {
            let (job_rx, msg_tx) = (job_rx.clone(), msg_tx.clone());
            s.spawn(move || hash_chunks(job_rx, msg_tx));
        }
        drop((job_tx, job_rx, msg_tx, pool_tx));
        for msg in msg_rx.iter() {
            match msg {
                Msg::Chunk {
                    file,
                    index,
                    sha256,
                    blake3,
                } => {
                    let v = &mut hashes[file];
                    if v.len() <= index {
                        v.resize(index + 1, None);
                    }
                    v[index] = Some((sha256, blake3));
                }
                Msg::File { file, result } => match result {
                    Ok(r) => {
                        progress(r.0);
                        done[file] = Some(r);
                    }
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                },
            }
        }
    });
    if let Some(e) = first_error {
        return Err(e);
    }
    let mut out = Vec::with_capacity(files.len());
    for (i, (d, h)) in done.into_iter().zip(hashes).enumerate() {
        let (size, blake3, lengths) =
            d.ok_or_else(|| SealError::io(&files[i].path, ErrorKind::Interrupted.into()))?;
        let mut offset = 0u64;
        let mut chunks = Vec::with_capacity(lengths.len());
        for (len, hash) in lengths.iter().zip(h.iter().chain(std::iter::repeat(&None))) {
            let (sha256, b3) = hash.expect("every chunk of a finished file was hashed");
            chunks.push(ChunkRef {
                offset,
                length: *len,
                sha256,
                blake3: b3,
            });
            offset += u64::from(*len);
        }
        out.push(ChunkedFile {
            size,
            blake3,
            chunks,
        });
    }
    Ok(out)
}

fn hash_chunks(jobs: Receiver<ChunkJob>, out: Sender<Msg>) {
    for job in jobs {
        let data = &job.block.data[job.start..job.start + job.len];
        let sha256 = Sha256Digest(sha2::Sha256::digest(data).into());
        let blake3 = B3Digest::of(data);
        let _ = out.send(Msg::Chunk {
            file: job.file,
            index: job.index,
            sha256,
            blake3,
        });
    }
}

fn read_full(f: &mut File, buf: &mut [u8], path: &Path) -> Result<(usize, bool), SealError> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => return Ok((n, true)),
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(SealError::io(path, e)),
        }
    }
    Ok((n, false))
}

/// Streams one file: cut points and the file hash here, chunk hashes on
/// the hasher threads. Returns size, file BLAKE3 and chunk lengths.
fn read_file(
    job: &FileJob,
    file: usize,
    cutter: Cutter,
    pool_tx: &Sender<Vec<u8>>,
    pool_rx: &Receiver<Vec<u8>>,
    jobs: &Sender<ChunkJob>,
) -> Result<(u64, B3Digest, Vec<u32>), SealError> {
    let path = &job.path;
    let mut f = File::open(path).map_err(|e| SealError::io(path, e))?;
    let max = cutter.params().max as usize;
    let mut hasher = blake3::Hasher::new();
    let mut lengths = Vec::new();
    let mut total = 0u64;
    let mut carry: Option<(Arc<Block>, usize, usize)> = None;
    loop {
        let mut data = pool_rx.recv().expect("the pool outlives its readers");
        if data.len() != BLOCK {
            data = vec![0u8; BLOCK];
        }
        let mut filled = 0;
        if let Some((prev, start, end)) = carry.take() {
            data[..end - start].copy_from_slice(&prev.data[start..end]);
            filled = end - start;
        }
        let (n, eof) = read_full(&mut f, &mut data[filled..], path)?;
        filled += n;
        total += n as u64;
        let block = Arc::new(Block {
            data,
            home: pool_tx.clone(),
        });
        let mut pos = 0;
        while pos < filled && (eof || filled - pos >= max) {
            let len = cutter.cut(&block.data[pos..filled]);
            let job = ChunkJob {
                block: Arc::clone(&block),
                start: pos,
                len,
                file,
                index: lengths.len(),
            };
            if jobs.send(job).is_err() {
                return Err(SealError::io(path, ErrorKind::BrokenPipe.into()));
            }
            lengths.push(len as u32);
            pos += len;
        }
        hasher.update(&block.data[..pos]);
        if eof {
            break;
        }
        carry = Some((block, pos, filled));
    }
    // A file that changed while we read it would seal bytes that never
    // existed together; refuse rather than guess.
    let after = f.metadata().map_err(|e| SealError::io(path, e))?;
    let now = FileStamp::of(&after);
    if total != job.stamp.size || now.size != job.stamp.size || now.mtime_ns != job.stamp.mtime_ns {
        return Err(SealError::Changed(path.clone()));
    }
    Ok((total, hasher.finalize().into(), lengths))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sealvol_spec::ChunkingParams;

    fn pseudo_random(n: usize, seed: &str) -> Vec<u8> {
        let mut out = vec![0u8; n];
        blake3::Hasher::new_derive_key(seed)
            .finalize_xof()
            .fill(&mut out);
        out
    }

    #[test]
    fn streaming_matches_in_memory_chunking() {
        let params = ChunkingParams {
            min: 64 << 10,
            avg: 256 << 10,
            max: 1 << 20,
        };
        let cutter = params.cutter().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut jobs = Vec::new();
        let sizes = [0usize, 1, 70_000, (BLOCK * 2) + 12_345, 5 << 20];
        for (i, size) in sizes.iter().enumerate() {
            let p = dir.path().join(format!("f{i}"));
            std::fs::write(&p, pseudo_random(*size, &format!("file {i}"))).unwrap();
            let m = std::fs::metadata(&p).unwrap();
            jobs.push(FileJob {
                path: p,
                stamp: FileStamp::of(&m),
            });
        }
        let out = chunk_files(&jobs, cutter, 3, &|_| {}).unwrap();
        for (i, size) in sizes.iter().enumerate() {
            let data = pseudo_random(*size, &format!("file {i}"));
            let want: Vec<usize> = cutter.chunk_lengths(&data);
            let got: Vec<usize> = out[i].chunks.iter().map(|c| c.length as usize).collect();
            assert_eq!(got, want, "file {i}");
            assert_eq!(out[i].blake3, B3Digest::of(&data));
            for c in &out[i].chunks {
                let bytes = &data[c.offset as usize..c.offset as usize + c.length as usize];
                assert_eq!(c.sha256, Sha256Digest::of(bytes));
                assert_eq!(c.blake3, B3Digest::of(bytes));
            }
        }
    }

    #[test]
    fn missing_file_is_an_error_naming_it() {
        let cutter = ChunkingParams::default().cutter().unwrap();
        let job = FileJob {
            path: "/nonexistent/sealvol-test".into(),
            stamp: FileStamp {
                size: 1,
                mtime_ns: 0,
                ctime_ns: 0,
                ino: 0,
                dev: 0,
            },
        };
        let err = chunk_files(&[job], cutter, 2, &|_| {}).unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/sealvol-test"),
            "{err}"
        );
    }
}
