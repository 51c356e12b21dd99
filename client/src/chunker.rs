//! The chunk-and-hash pipeline: files in, chunk lists out.
//!
//! Reader threads stream files through blocks and find FastCDC cut points;
//! hasher threads compute each chunk's SHA-256 (its blob digest) and the
//! chaining values of the file's 1 MiB pieces, merged into the whole-file
//! BLAKE3 ([`sealvol_spec::chain`], SPEC.md §2.5). Every byte is read once,
//! each hash runs once per byte, and the hashing spreads over all cores even for a single large
//! file. Memory is bounded by a small pool of blocks whatever the input size.
//!
//! A block is either a buffer that `read` fills (the tail that is not yet
//! cut is copied into the next one) or, when [`ReadMode::Mmap`] is chosen,
//! a window of the file mapped into memory; windows overlap by the longest
//! chunk plus a piece, so nothing is copied at all.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use sealvol_spec::chain::{self, PieceCv, PIECE};
use sealvol_spec::{B3Digest, ChunkRef, Cutter, Sha256Digest};
use sha2::Digest as _;

use crate::walk::FileStamp;
use crate::SealError;

/// Bytes per read buffer. A carried-over tail is shorter than the largest
/// chunk (16 MiB) plus one piece, so a buffer always has room to read.
const BLOCK: usize = 32 << 20;
/// Distance between mapped windows: a multiple of [`PIECE`] and of the page
/// size. Each window also maps the overlap, so windows in flight
/// (readers + 2) stay near 130 MiB of resident file pages.
const STRIDE: usize = 16 << 20;

/// How readers get file bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadMode {
    /// `read(2)` into pooled buffers: one copy from the page cache, plus the
    /// carried tail of each block. Safe against any concurrent change.
    #[default]
    Read,
    /// Map files larger than one piece. No copies, so faster; but a file
    /// truncated while it is mapped raises `SIGBUS` in the process, so only
    /// a process that handles that signal should choose it.
    Mmap,
}

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
    /// Chaining values of its pieces (none for a file of one piece).
    pub pieces: Vec<PieceCv>,
}

/// File bytes borrowed by hash jobs; its pool token (and read buffer) goes
/// back to the pool when the last job that uses it is done.
struct Block {
    data: Vec<u8>,
    map: Option<memmap2::Mmap>,
    home: Sender<Vec<u8>>,
}

impl Block {
    fn bytes(&self) -> &[u8] {
        match &self.map {
            Some(m) => m,
            None => &self.data,
        }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // The pool channel has room for every block, so this never blocks;
        // it fails only when the pipeline is gone, and then nothing waits.
        let _ = self.home.send(std::mem::take(&mut self.data));
    }
}

/// Bytes of one block for a hasher: a chunk, or a piece of the file hash.
struct Job {
    block: Arc<Block>,
    start: usize,
    len: usize,
    file: usize,
    index: usize,
    kind: JobKind,
}

#[derive(Clone, Copy)]
enum JobKind {
    Chunk,
    Piece,
}

/// What a reader learned of a whole file.
struct FileRead {
    size: u64,
    lengths: Vec<u32>,
    /// The file's BLAKE3 when it fits one piece (hashed by the reader).
    small_hash: Option<B3Digest>,
}

enum Msg {
    Chunk {
        file: usize,
        index: usize,
        sha256: Sha256Digest,
    },
    Piece {
        file: usize,
        index: usize,
        cv: [u8; 32],
    },
    File {
        file: usize,
        result: Result<FileRead, SealError>,
    },
}

/// Called by a hasher thread with each chunk as soon as its sha256 is
/// known, with the chunk's bytes (borrowed from the pipeline's block, valid
/// for the call only): a push sends it from there, while the rest of the
/// directory is still being sealed. It may block to slow sealing down; a
/// chunk that occurs several times is passed each time. Returning `false`
/// stops the sealing (it then fails as interrupted).
pub type ChunkSink<'a> = &'a (dyn Fn(Sha256Digest, &[u8]) -> bool + Sync);

/// Chunks and hashes `files` on `threads` cores. Results are in input
/// order; the first error stops the work and is returned. `sink`, when
/// given, sees every chunk as it is hashed.
pub fn chunk_files(
    files: &[FileJob],
    cutter: Cutter,
    threads: usize,
    mode: ReadMode,
    progress: &(dyn Fn(u64) + Sync),
    sink: Option<ChunkSink>,
) -> Result<Vec<ChunkedFile>, SealError> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let threads = threads.max(1);
    let readers = files.len().min(threads.clamp(1, 4));
    // A reader holds two blocks while it carries a tail over; with one more
    // block than readers every reader can always make progress, and a
    // second spare keeps the hashers busy. At most 6 buffers of 32 MiB or
    // mapped windows of 33 MiB.
    let blocks = readers + 2;
    let (pool_tx, pool_rx) = bounded::<Vec<u8>>(blocks);
    for _ in 0..blocks {
        pool_tx.send(Vec::new()).expect("pool has room");
    }
    let (job_tx, job_rx) = bounded::<Job>(1024);
    let (msg_tx, msg_rx) = unbounded::<Msg>();
    let next = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);

    let mut hashes: Vec<Vec<Option<Sha256Digest>>> = vec![Vec::new(); files.len()];
    let mut pieces: Vec<Vec<Option<[u8; 32]>>> = vec![Vec::new(); files.len()];
    let mut done: Vec<Option<FileRead>> = (0..files.len()).map(|_| None).collect();
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
                let mut reader = FileReader {
                    file: i,
                    path: &files[i].path,
                    cutter,
                    pool_tx: &pool_tx,
                    pool_rx: &pool_rx,
                    jobs: &job_tx,
                    abort,
                    lengths: Vec::new(),
                    next_piece: 0,
                };
                let result = reader.run(&files[i], mode);
                if result.is_err() {
                    abort.store(true, Ordering::Relaxed);
                }
                let _ = msg_tx.send(Msg::File { file: i, result });
            });
        }
        for _ in 0..threads {
            let (job_rx, msg_tx) = (job_rx.clone(), msg_tx.clone());
            let abort = &abort;
            s.spawn(move || hash_chunks(job_rx, msg_tx, sink, abort));
        }
        drop((job_tx, job_rx, msg_tx, pool_tx));
        for msg in msg_rx.iter() {
            match msg {
                Msg::Chunk {
                    file,
                    index,
                    sha256,
                } => {
                    put(&mut hashes[file], index, sha256);
                }
                Msg::Piece { file, index, cv } => put(&mut pieces[file], index, cv),
                Msg::File { file, result } => match result {
                    Ok(r) => {
                        progress(r.size);
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
    for (i, ((d, h), p)) in done.into_iter().zip(hashes).zip(pieces).enumerate() {
        let read = d.ok_or_else(|| SealError::io(&files[i].path, ErrorKind::Interrupted.into()))?;
        let (blake3, pieces) = match read.small_hash {
            Some(h) => (h, Vec::new()),
            None => {
                let cvs: Vec<[u8; 32]> = p
                    .into_iter()
                    .map(|cv| cv.expect("every piece was hashed"))
                    .collect();
                let root = chain::combine(&cvs, read.size).expect("one value per piece");
                (root, cvs)
            }
        };
        let mut offset = 0u64;
        let mut chunks = Vec::with_capacity(read.lengths.len());
        for (len, hash) in read.lengths.iter().zip(h) {
            let sha256 = hash.expect("every chunk of a finished file was hashed");
            chunks.push(ChunkRef {
                offset,
                length: *len,
                sha256,
            });
            offset += u64::from(*len);
        }
        assert_eq!(
            chunks.len(),
            read.lengths.len(),
            "every chunk of a finished file was hashed"
        );
        out.push(ChunkedFile {
            size: read.size,
            blake3,
            chunks,
            pieces,
        });
    }
    Ok(out)
}

fn put<T>(v: &mut Vec<Option<T>>, index: usize, value: T) {
    if v.len() <= index {
        v.resize_with(index + 1, || None);
    }
    v[index] = Some(value);
}

fn hash_chunks(jobs: Receiver<Job>, out: Sender<Msg>, sink: Option<ChunkSink>, abort: &AtomicBool) {
    for job in jobs {
        let data = &job.block.bytes()[job.start..job.start + job.len];
        let msg = match job.kind {
            JobKind::Chunk => {
                let sha256 = Sha256Digest(sha2::Sha256::digest(data).into());
                if let Some(sink) = sink {
                    if !abort.load(Ordering::Relaxed) && !sink(sha256, data) {
                        abort.store(true, Ordering::Relaxed);
                    }
                }
                Msg::Chunk {
                    file: job.file,
                    index: job.index,
                    sha256,
                }
            }
            JobKind::Piece => Msg::Piece {
                file: job.file,
                index: job.index,
                cv: chain::piece_cv(job.index as u64, data),
            },
        };
        let _ = out.send(msg);
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

/// Streams one file: cut points here, chunk hashes and file-hash pieces on
/// the hasher threads.
struct FileReader<'a> {
    file: usize,
    path: &'a PathBuf,
    cutter: Cutter,
    pool_tx: &'a Sender<Vec<u8>>,
    pool_rx: &'a Receiver<Vec<u8>>,
    jobs: &'a Sender<Job>,
    /// Set when another file failed or the sink said stop.
    abort: &'a AtomicBool,
    lengths: Vec<u32>,
    next_piece: u64,
}

impl FileReader<'_> {
    fn run(&mut self, job: &FileJob, mode: ReadMode) -> Result<FileRead, SealError> {
        let mut f = File::open(self.path).map_err(|e| SealError::io(self.path, e))?;
        let len = f.metadata().map_err(|e| SealError::io(self.path, e))?.len();
        let (size, small_hash) = if mode == ReadMode::Mmap && len > PIECE {
            (self.mapped(&f, len)?, None)
        } else {
            self.buffered(&mut f)?
        };
        // A file that changed while we read it would seal bytes that never
        // existed together; refuse rather than guess.
        let after = f.metadata().map_err(|e| SealError::io(self.path, e))?;
        let now = FileStamp::of(&after);
        if size != job.stamp.size
            || now.size != job.stamp.size
            || now.mtime_ns != job.stamp.mtime_ns
        {
            return Err(SealError::Changed(self.path.clone()));
        }
        Ok(FileRead {
            size,
            lengths: std::mem::take(&mut self.lengths),
            small_hash,
        })
    }

    fn block(&self, data: Vec<u8>, map: Option<memmap2::Mmap>) -> Arc<Block> {
        Arc::new(Block {
            data,
            map,
            home: self.pool_tx.clone(),
        })
    }

    fn send(
        &self,
        block: &Arc<Block>,
        start: usize,
        len: usize,
        index: usize,
        kind: JobKind,
    ) -> Result<(), SealError> {
        if self.abort.load(Ordering::Relaxed) {
            return Err(SealError::io(self.path, ErrorKind::Interrupted.into()));
        }
        let job = Job {
            block: Arc::clone(block),
            start,
            len,
            file: self.file,
            index,
            kind,
        };
        self.jobs
            .send(job)
            .map_err(|_| SealError::io(self.path, ErrorKind::BrokenPipe.into()))
    }

    /// Sends the chunks of `block` (file bytes `[offset, offset + len)`)
    /// from `pos` on while at least `max` bytes, or the rest of the file
    /// when `eof`, follow; then the pieces that lie wholly in it. Returns
    /// where the next chunk starts, relative to `block`.
    fn dispatch(
        &mut self,
        block: &Arc<Block>,
        offset: u64,
        mut pos: usize,
        len: usize,
        eof: bool,
    ) -> Result<usize, SealError> {
        let max = self.cutter.params().max as usize;
        let bytes = &block.bytes()[..len];
        while pos < len && (eof || len - pos >= max) {
            let n = self.cutter.cut(&bytes[pos..]);
            self.send(block, pos, n, self.lengths.len(), JobKind::Chunk)?;
            self.lengths.push(n as u32);
            pos += n;
        }
        let end = offset + len as u64;
        loop {
            let start = self.next_piece * PIECE;
            let stop = (start + PIECE).min(end);
            if start >= stop || (!eof && stop - start < PIECE) {
                break;
            }
            let at = (start - offset) as usize;
            self.send(
                block,
                at,
                (stop - start) as usize,
                self.next_piece as usize,
                JobKind::Piece,
            )?;
            self.next_piece += 1;
        }
        Ok(pos)
    }

    /// Reads into pooled buffers, copying each block's uncut tail into the next.
    fn buffered(&mut self, f: &mut File) -> Result<(u64, Option<B3Digest>), SealError> {
        let mut offset = 0u64;
        let mut carry: Option<(Arc<Block>, usize, usize)> = None;
        loop {
            let mut data = self.pool_rx.recv().expect("the pool outlives its readers");
            if data.len() != BLOCK {
                data = vec![0u8; BLOCK];
            }
            let mut filled = 0;
            if let Some((prev, start, end)) = carry.take() {
                data[..end - start].copy_from_slice(&prev.bytes()[start..end]);
                filled = end - start;
            }
            let (n, eof) = read_full(f, &mut data[filled..], self.path)?;
            filled += n;
            let end = offset + filled as u64;
            // A file that fits one piece: the reader hashes it whole.
            let small_hash = (eof && end <= PIECE).then(|| B3Digest::of(&data[..filled]));
            let block = self.block(data, None);
            if let Some(hash) = small_hash {
                // No pieces: the whole-file hash is already known.
                self.next_piece = 1;
                self.dispatch(&block, offset, 0, filled, true)?;
                return Ok((end, Some(hash)));
            }
            let pos = self.dispatch(&block, offset, 0, filled, eof)?;
            if eof {
                return Ok((end, None));
            }
            // Carry over what is not yet cut or not yet in a piece.
            let keep = pos.min((self.next_piece * PIECE - offset) as usize);
            offset += keep as u64;
            carry = Some((block, keep, filled));
        }
    }

    /// Maps overlapping windows `STRIDE` apart; a chunk or piece that starts
    /// in one window ends in it.
    fn mapped(&mut self, f: &File, size: u64) -> Result<u64, SealError> {
        let overlap = self.cutter.params().max as u64 + PIECE;
        let mut offset = 0u64;
        let mut pos = 0usize;
        while offset < size {
            let len = (STRIDE as u64 + overlap).min(size - offset);
            let token = self.pool_rx.recv().expect("the pool outlives its readers");
            // SAFETY: the mapping is only read. If another process changes
            // the file meanwhile, the bytes may be inconsistent, which the
            // stamp check after reading catches; if it truncates the file,
            // reads past the end raise SIGBUS, which is why this mode is
            // opt-in (see `ReadMode::Mmap`).
            let map = unsafe {
                memmap2::MmapOptions::new()
                    .offset(offset)
                    .len(len as usize)
                    .populate()
                    .map(f)
            }
            .map_err(|e| SealError::io(self.path, e))?;
            let block = self.block(token, Some(map));
            let eof = offset + len == size;
            pos = self.dispatch(&block, offset, pos, len as usize, eof)?;
            if eof {
                break;
            }
            offset += STRIDE as u64;
            pos -= STRIDE;
        }
        Ok(size)
    }
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

    fn check_streaming(params: ChunkingParams, sizes: &[usize]) {
        for mode in [ReadMode::Read, ReadMode::Mmap] {
            check_mode(params, sizes, mode);
        }
    }

    fn check_mode(params: ChunkingParams, sizes: &[usize], mode: ReadMode) {
        let cutter = params.cutter().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut jobs = Vec::new();
        for (i, size) in sizes.iter().enumerate() {
            let p = dir.path().join(format!("f{i}"));
            std::fs::write(&p, pseudo_random(*size, &format!("file {i}"))).unwrap();
            let m = std::fs::metadata(&p).unwrap();
            jobs.push(FileJob {
                path: p,
                stamp: FileStamp::of(&m),
            });
        }
        let out = chunk_files(&jobs, cutter, 3, mode, &|_| {}, None).unwrap();
        for (i, size) in sizes.iter().enumerate() {
            let data = pseudo_random(*size, &format!("file {i}"));
            let want: Vec<usize> = cutter.chunk_lengths(&data);
            let got: Vec<usize> = out[i].chunks.iter().map(|c| c.length as usize).collect();
            assert_eq!(got, want, "file {i} of {size} bytes, {mode:?}");
            assert_eq!(out[i].size, *size as u64);
            assert_eq!(
                out[i].blake3,
                B3Digest::of(&data),
                "file {i} of {size} bytes"
            );
            let mut h = chain::PieceHasher::new();
            h.update(&data);
            assert_eq!(out[i].pieces, h.finish().1, "file {i} of {size} bytes");
            for c in &out[i].chunks {
                let bytes = &data[c.offset as usize..c.offset as usize + c.length as usize];
                assert_eq!(c.sha256, Sha256Digest::of(bytes));
            }
        }
    }

    #[test]
    fn streaming_matches_in_memory_chunking() {
        let piece = PIECE as usize;
        let small = ChunkingParams {
            min: 64 << 10,
            avg: 256 << 10,
            max: 1 << 20,
        };
        let sizes = [
            0,
            1,
            70_000,
            piece,
            piece + 1,
            BLOCK,
            2 * BLOCK + 12_345,
            5 << 20,
        ];
        check_streaming(small, &sizes);
    }

    #[test]
    fn streaming_with_default_parameters_across_blocks() {
        check_streaming(
            ChunkingParams::default(),
            &[3 * BLOCK + 777, PIECE as usize * 3],
        );
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
        let err = chunk_files(&[job], cutter, 2, ReadMode::Read, &|_| {}, None).unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/sealvol-test"),
            "{err}"
        );
    }
}
