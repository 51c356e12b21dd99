//! Verified bytes for reads of a format 2 tree (SPEC.md §2.5): nothing
//! leaves this process that was not checked against the version digest.
//!
//! A read of bytes `offset..end` of a file needs the 1 MiB pieces
//! [`pieces_of`] gives. Each piece not in memory is assembled from the
//! chunks that cover it (a piece straddles content-defined cuts, so it may
//! take the end of one chunk and the start of the next), checked against
//! its chaining value with [`verify_piece`] (or, for a file of one piece,
//! against the file's BLAKE3), and kept in a memory LRU of verified pieces
//! keyed by (inode, piece). Reads are answered from those bytes only. A
//! sequential reader thus hashes each piece once, whatever the size of its
//! reads, and a small random read hashes only the piece or two it touches.
//!
//! Verification is per (file, piece), never per chunk: the chunk caches
//! below ([`crate::reader`], the disk cache) are keyed by sha256, and the
//! same chunk in another file, or at another offset, has other chaining
//! values. That is the point: a tree index whose chunk list names another
//! file's chunk (valid under its own sha256) fails here, and the read gets
//! `EIO` ([`ReadError::Forged`]) while other pieces and files still read.
//!
//! Chunks under a piece come from the disk cache or the registry unhashed
//! ([`Check::Chain`]): the chain is the one hash of each byte served. When a piece fails, the chunks that were not checked
//! by sha256 are checked now; damaged ones are removed from the cache and
//! fetched again, and the piece is tried once more. Only a piece made of
//! intact chunks that still fails is reported as forged.
//!
//! Like chunk fetches, each piece is assembled by its own task, two reads
//! of one piece share it, and hashing runs on blocking threads, so a read
//! waiting on the network or on a hash never holds up other reads. Nothing
//! remembers a failure.
//!
//! A format 1 tree has no chaining values: its reads go straight to
//! [`ChunkReader::read`], chunks checked by sha256 only.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::future::{self, BoxFuture, FutureExt as _, Shared};
use sealvol_spec::chain::{piece_range, pieces_of, verify_piece, PIECE};
use sealvol_spec::tree::ChunkRef;

use crate::inodes::Inodes;
use crate::reader::{touched, Check, ChunkReader, ChunkSource, Fetched, Keep, Lru, ReadError};

/// Pieces verified ahead of a sequential reader: hashing then overlaps the
/// reads instead of sitting in front of them.
pub(crate) const PIECES_AHEAD: u64 = 4;

/// A file's piece: (inode, piece index).
type PieceKey = (u64, u64);
type SharedPiece = Shared<BoxFuture<'static, Result<Bytes, ReadError>>>;

/// Counters of the verification layer, read by [`crate::Mount::stats`].
#[derive(Debug, Default)]
pub(crate) struct PieceStats {
    /// Pieces hashed and found to match.
    pub verified: AtomicU64,
    /// Piece requests served from verified memory.
    pub hits: AtomicU64,
    /// Piece requests that joined an assembly under way.
    pub joined: AtomicU64,
    /// Pieces that do not match the version digest.
    pub forged: AtomicU64,
}

/// A verified piece as the memory LRU keeps it: its bytes, weighed as the
/// buffer they keep alive (a slice of a chunk keeps the whole chunk).
#[derive(Clone)]
struct Piece {
    bytes: Bytes,
    weight: u64,
}

impl crate::reader::Weigh for Piece {
    fn weight(&self) -> u64 {
        self.weight
    }
}

struct State {
    memory: Lru<PieceKey, Piece>,
    inflight: HashMap<PieceKey, SharedPiece>,
}

/// How a mount's memory budget is shared out: `(chunks, pieces)`.
///
/// A format 2 mount gives a quarter to verified pieces and the rest to raw
/// chunks. Pieces are what reads are served from; the kernel's page cache
/// keeps what was served, so pieces need only outlive the reads of them: a
/// few per sequential reader ([`PIECES_AHEAD`] plus the current one) and
/// one per concurrent random read (the default 128 MiB holds 32). Chunks
/// need more: they are up to 8 MiB (16 MiB in volumes of the earlier
/// default), the chunk read-ahead window runs up to
/// [`crate::reader::ReadAhead::BYTES`] ahead, a piece straddling a cut needs
/// the chunks on both sides, and small random reads in one chunk reuse it
/// for its other pieces. A piece that straddles a cut is a copy; one inside
/// a chunk is a slice of it (no copy), counted as the whole chunk it keeps
/// alive ([`Piece`]), so the budget holds however pieces and chunks are
/// evicted. A format 1 mount has no pieces: chunks get it all.
pub(crate) fn split_memory(total: u64, verifiable: bool) -> (u64, u64) {
    if verifiable {
        let pieces = total / 4;
        (total - pieces, pieces)
    } else {
        (total, 0)
    }
}

/// Serves file bytes to reads; see the module documentation.
pub(crate) struct FileReader {
    inodes: Arc<Inodes>,
    chunks: Arc<ChunkReader>,
    verifiable: bool,
    state: Mutex<State>,
    rt: tokio::runtime::Handle,
    pub stats: PieceStats,
    /// Notes each (file, piece) the first time it is read (`sealvol
    /// record`; [`crate::record`]).
    recorder: Option<Arc<crate::record::Recorder>>,
}

impl FileReader {
    /// A reader of the files of `inodes` over chunks from `source`, within
    /// `memory_bytes` ([`split_memory`]), running its tasks on `rt`.
    pub fn new(
        inodes: Arc<Inodes>,
        source: Arc<dyn ChunkSource>,
        memory_bytes: u64,
        rt: tokio::runtime::Handle,
    ) -> Arc<FileReader> {
        let verifiable = inodes.verifiable();
        let (chunk_bytes, piece_bytes) = split_memory(memory_bytes, verifiable);
        let check = if verifiable {
            Check::Chain
        } else {
            Check::Sha256
        };
        Arc::new(FileReader {
            inodes,
            chunks: ChunkReader::new(source, chunk_bytes, check, rt.clone()),
            verifiable,
            state: Mutex::new(State {
                memory: Lru::new(piece_bytes),
                inflight: HashMap::new(),
            }),
            rt,
            stats: PieceStats::default(),
            recorder: crate::record::take_for_mount(),
        })
    }

    /// The chunk layer, for read-ahead, prefetch and its counters.
    pub fn chunks(&self) -> &Arc<ChunkReader> {
        &self.chunks
    }

    /// Whether every byte served is verified against the version digest
    /// (a format 2 tree).
    pub fn verifiable(&self) -> bool {
        self.verifiable
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change is one insert or remove: consistent after a panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes `offset..offset + len` of file `ino` (fewer at its end).
    pub async fn read(
        self: &Arc<Self>,
        ino: u64,
        offset: u64,
        len: u32,
    ) -> Result<Bytes, ReadError> {
        let Some(file) = self.inodes.file(ino) else {
            return Ok(Bytes::new());
        };
        let end = offset.saturating_add(u64::from(len)).min(file.size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        if let Some(r) = &self.recorder {
            r.read(ino, file.path, pieces_of(offset, end));
        }
        if !self.verifiable {
            return self.chunks.read(file.chunks, file.size, offset, len).await;
        }
        let wanted = pieces_of(offset, end);
        let parts = future::try_join_all(wanted.clone().map(|i| self.piece(ino, i))).await?;
        let slice = |i: u64, bytes: &Bytes| -> Range<usize> {
            let start = i * PIECE;
            (offset.max(start) - start) as usize
                ..(end.min(start + bytes.len() as u64) - start) as usize
        };
        if let [bytes] = parts.as_slice() {
            return Ok(bytes.slice(slice(wanted.start, bytes)));
        }
        let mut out = Vec::with_capacity((end - offset) as usize);
        for (i, bytes) in wanted.zip(&parts) {
            out.extend_from_slice(&bytes[slice(i, bytes)]);
        }
        Ok(out.into())
    }

    /// Starts verifying pieces `pieces` of file `ino` (clipped to the
    /// file) without waiting for them: read-ahead for a sequential reader.
    /// Failures are left for the reads that need the pieces.
    pub fn verify_ahead(self: &Arc<Self>, ino: u64, pieces: Range<u64>) {
        if !self.verifiable {
            return;
        }
        let Some(file) = self.inodes.file(ino) else {
            return;
        };
        let last = pieces_of(0, file.size).end;
        let mut st = self.state();
        for i in pieces.start..pieces.end.min(last) {
            let key = (ino, i);
            if !st.memory.contains(&key) && !st.inflight.contains_key(&key) {
                let f = self.spawn_piece(key);
                st.inflight.insert(key, f);
            }
        }
    }

    /// The verified bytes of piece `index` of file `ino`.
    fn piece(self: &Arc<Self>, ino: u64, index: u64) -> SharedPiece {
        let key = (ino, index);
        let mut st = self.state();
        if let Some(p) = st.memory.get(&key) {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
            return future::ready(Ok(p.bytes)).boxed().shared();
        }
        if let Some(f) = st.inflight.get(&key) {
            self.stats.joined.fetch_add(1, Ordering::Relaxed);
            return f.clone();
        }
        // Registered under the lock the task needs to finish.
        let f = self.spawn_piece(key);
        st.inflight.insert(key, f.clone());
        f
    }

    fn spawn_piece(self: &Arc<Self>, key: PieceKey) -> SharedPiece {
        let me = Arc::clone(self);
        let task = self.rt.spawn(async move {
            let result = me.assemble(key).await;
            let mut st = me.state();
            st.inflight.remove(&key);
            result.map(|p| {
                st.memory.insert(key, p.clone());
                p.bytes
            })
        });
        async move {
            task.await
                .unwrap_or_else(|e| Err(ReadError::Stopped(format!("piece task: {e}"))))
        }
        .boxed()
        .shared()
    }

    /// Assembles and verifies one piece; see the module documentation.
    async fn assemble(self: &Arc<Self>, (ino, index): PieceKey) -> Result<Piece, ReadError> {
        let inodes = Arc::clone(&self.inodes);
        let Some(file) = inodes.file(ino) else {
            return Err(ReadError::Stopped(format!("inode {ino} is not a file")));
        };
        let range = piece_range(file.size, index);
        let list = &file.chunks[touched(file.chunks, range.start, range.end)];
        let mut parts =
            future::try_join_all(list.iter().map(|c| self.chunks.chunk(*c, Keep::Memory))).await?;
        if let Some(b) = self.check(ino, index, list, &parts).await {
            return Ok(b);
        }
        // The chunks read unhashed from the disk cache may be damaged
        // copies rather than the wrong chunks: check them by sha256.
        let rechecked = future::try_join_all(
            list.iter()
                .zip(&parts)
                .map(|(c, f)| self.chunks.recheck(*c, f.clone())),
        )
        .await?;
        let mut damaged = false;
        for (part, (fresh, was_damaged)) in parts.iter_mut().zip(rechecked) {
            *part = fresh;
            damaged |= was_damaged;
        }
        if damaged {
            if let Some(b) = self.check(ino, index, list, &parts).await {
                return Ok(b);
            }
        }
        self.stats.forged.fetch_add(1, Ordering::Relaxed);
        Err(ReadError::Forged {
            path: file.path.to_string(),
            piece: index,
            start: range.start,
            end: range.end,
        })
    }

    /// The piece's bytes from its chunks `list` (bytes `parts`) when they
    /// match its chaining value. Hashes on a blocking thread.
    async fn check(
        self: &Arc<Self>,
        ino: u64,
        index: u64,
        list: &[ChunkRef],
        parts: &[Fetched],
    ) -> Option<Piece> {
        let inodes = Arc::clone(&self.inodes);
        let list = list.to_vec();
        let parts: Vec<Bytes> = parts.iter().map(|f| f.bytes.clone()).collect();
        let checked = tokio::task::spawn_blocking(move || {
            let file = inodes.file(ino)?;
            let range = piece_range(file.size, index);
            let piece = assemble(&list, &parts, &range)?;
            verify_piece(file.size, file.blake3, file.pieces, index, &piece.bytes).then_some(piece)
        })
        .await
        .ok()
        .flatten()?;
        self.stats.verified.fetch_add(1, Ordering::Relaxed);
        Some(checked)
    }
}

/// Bytes `range` of a file from its chunks `list` (bytes `parts`) that
/// cover it: a slice of the chunk when one holds it all (half the pieces,
/// at the default 2 MiB chunks; no copy), else a copy. `None` when a chunk
/// is shorter than its length says.
fn assemble(list: &[ChunkRef], parts: &[Bytes], range: &Range<u64>) -> Option<Piece> {
    if let ([c], [bytes]) = (list, parts) {
        let from = usize::try_from(range.start.checked_sub(c.offset)?).ok()?;
        let to = usize::try_from(range.end.checked_sub(c.offset)?).ok()?;
        // A chunk shorter than its length says holds no such range.
        bytes.get(from..to)?;
        return Some(Piece {
            bytes: bytes.slice(from..to),
            weight: bytes.len() as u64,
        });
    }
    let bytes = join(list, parts, range)?;
    Some(Piece {
        weight: bytes.len() as u64,
        bytes: sealvol_client::buffers::into_bytes(bytes),
    })
}

/// Bytes `range` of a file from its chunks `list` that cover it; `None`
/// when a chunk is shorter than its length says.
fn join(list: &[ChunkRef], parts: &[Bytes], range: &Range<u64>) -> Option<Vec<u8>> {
    let mut out = sealvol_client::buffers::take((range.end - range.start) as usize);
    for (c, bytes) in list.iter().zip(parts) {
        let from = (range.start.max(c.offset) - c.offset) as usize;
        let to = (range.end.min(c.offset + u64::from(c.length)) - c.offset) as usize;
        out.extend_from_slice(bytes.get(from..to)?);
    }
    (out.len() as u64 == range.end - range.start).then_some(out)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::testing::{data, file, file_of, inodes, owner, v1_tree, Fake};
    use sealvol_spec::tree::EntryData;

    const MIB: usize = 1 << 20;

    fn reader(inodes: &Arc<Inodes>, source: &Arc<Fake>, memory: u64) -> Arc<FileReader> {
        FileReader::new(
            Arc::clone(inodes),
            source.clone(),
            memory,
            tokio::runtime::Handle::current(),
        )
    }

    fn chunks(e: &EntryData) -> &[ChunkRef] {
        match e {
            EntryData::File { chunks, .. } => chunks,
            _ => panic!("not a file"),
        }
    }

    /// Reads `offset..offset + len` and compares it with `want`.
    async fn expect(r: &Arc<FileReader>, ino: u64, want: &[u8], offset: u64, len: u32) {
        let got = r.read(ino, offset, len).await.unwrap();
        let from = (offset as usize).min(want.len());
        let to = (offset as usize + len as usize).min(want.len());
        assert!(got[..] == want[from..to], "{offset}+{len}: wrong bytes");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn any_range_of_files_whose_chunks_straddle_pieces_reads_back_exactly() {
        // Cuts at 0.67, 2.1 and 2.42 MiB: piece 0 straddles one, piece 1
        // lies inside a chunk, piece 2 takes bytes of three.
        let big = data(3 * MIB + 4321, 1);
        let big_e = file_of(&big, &[700_000, 1_500_000, 333_333]);
        let two = data(2 * MIB, 2);
        let two_e = file_of(&two, &[MIB - 1, MIB + 1]);
        let small = data(300_000, 3);
        let small_e = file_of(&small, &[100_000, 150_000]);
        let files: [(&[u8], &EntryData); 3] = [(&big, &big_e), (&two, &two_e), (&small, &small_e)];
        let source = Arc::new(Fake::of_files(&files, Duration::ZERO));
        let inodes = inodes(vec![
            file("big", big_e.clone()),
            file("small", small_e.clone()),
            file("two", two_e.clone()),
        ]);
        let ino = |name: &str| inodes.lookup(crate::inodes::ROOT, name.as_bytes()).unwrap();
        // Ample memory, and none at all: the bytes are the same.
        for memory in [64 << 20, 0] {
            let r = reader(&inodes, &source, memory);
            assert!(r.verifiable());
            for (name, want) in [("big", &big), ("two", &two), ("small", &small)] {
                let ino = ino(name);
                let size = want.len() as u64;
                let mut edges = vec![0, 1, size - 1, size];
                for c in chunks(&inodes.entry(ino).unwrap().data) {
                    edges.extend([c.offset.saturating_sub(1), c.offset, c.offset + 1]);
                }
                for p in 1..=3 {
                    let at = p * PIECE;
                    edges.extend([at - 1, at, at + 1]);
                }
                for &o in &edges {
                    for len in [1, 2, 4096, 131_072, 1 << 20, 3 << 20] {
                        expect(&r, ino, want, o, len).await;
                    }
                }
                expect(&r, ino, want, 0, u32::MAX).await;
                // And some anywhere.
                let mut x = 0x9e37_79b9_7f4a_7c15u64;
                for _ in 0..40 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let o = x % (size + 10);
                    let len = (x >> 40) as u32 % (2 << 20) + 1;
                    expect(&r, ino, want, o, len).await;
                }
            }
            assert_eq!(r.stats.forged.load(Ordering::SeqCst), 0);
        }
    }

    /// File `a` whose chunk list names file `b`'s chunk 1 (valid under its
    /// own sha256, same length) instead of its own: a rewritten tree index
    /// that keeps paths, sizes and file hashes.
    fn forged(a: &[u8], b: &[u8], lengths: &[usize]) -> (EntryData, EntryData) {
        let a_e = file_of(a, lengths);
        let b_e = file_of(b, lengths);
        let mut spliced = a_e.clone();
        if let EntryData::File { chunks, .. } = &mut spliced {
            chunks[1] = self::chunks(&b_e)[1];
        }
        assert_ne!(spliced, a_e);
        (spliced, b_e)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_forged_chunk_list_fails_the_pieces_it_touches_and_nothing_else() {
        let lengths = [1_200_000, 1_000_000];
        let a = data(3 * MIB + MIB / 2, 1);
        let b = data(3 * MIB + MIB / 2, 2);
        // Chunk 1 covers bytes 1_200_000..2_200_000: pieces 1 and 2.
        let (a_forged, b_e) = forged(&a, &b, &lengths);
        let c = data(500_000, 3);
        let d = data(500_000, 4);
        let (c_forged, d_e) = forged(&c, &d, &[200_000, 100_000]);
        let source = Arc::new(Fake::of_files(
            &[
                (&a, &file_of(&a, &lengths)),
                (&b, &b_e),
                (&c, &file_of(&c, &[200_000, 100_000])),
                (&d, &d_e),
            ],
            Duration::ZERO,
        ));
        // Every chunk is on disk, read unhashed: forged pieces are
        // re-checked by sha256 before they are called forged.
        let all: Vec<_> = source
            .registry
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        source.disk().extend(all);
        let inodes = inodes(vec![
            file("a", a_forged),
            file("b", b_e),
            file("c", c_forged),
            file("d", d_e),
        ]);
        let ino = |name: &str| inodes.lookup(crate::inodes::ROOT, name.as_bytes()).unwrap();
        let r = reader(&inodes, &source, 64 << 20);
        let forged_piece = |e: ReadError| match e {
            ReadError::Forged { path, piece, .. } => (path, piece),
            e => panic!("not reported as forged: {e}"),
        };
        let p = PIECE;
        for (offset, len, piece) in [
            (p, 10, 1),
            (p - 5, 10, 1),
            (1_200_000, 1, 1),
            (2 * p + 7, 100, 2),
        ] {
            let e = r.read(ino("a"), offset, len).await.unwrap_err();
            assert_eq!(forged_piece(e), ("a".to_string(), piece), "{offset}+{len}");
        }
        // The whole file fails on whichever forged piece fails first.
        let e = r.read(ino("a"), 0, u32::MAX).await.unwrap_err();
        assert!([1, 2].contains(&forged_piece(e).1));
        let e = r.read(ino("a"), 2 * p, 10).await.unwrap_err();
        assert!(e.to_string().contains("a: piece 2"), "{e}");
        assert!(
            e.to_string().contains("does not match the version digest"),
            "{e}"
        );
        // Pieces 0 and 3 hold only a's own chunks, and still read; so does b.
        expect(&r, ino("a"), &a, 0, p as u32).await;
        expect(&r, ino("a"), &a, 3 * p, p as u32).await;
        expect(&r, ino("b"), &b, 0, u32::MAX).await;
        // A file of one piece is checked against its BLAKE3.
        let e = r.read(ino("c"), 0, 10).await.unwrap_err();
        assert_eq!(forged_piece(e), ("c".to_string(), 0));
        expect(&r, ino("d"), &d, 0, u32::MAX).await;
        // The chunks were intact: nothing was removed or fetched again.
        assert_eq!(source.discarded.load(Ordering::SeqCst), 0);
        assert_eq!(source.downloads.load(Ordering::SeqCst), 0);
        assert!(r.stats.forged.load(Ordering::SeqCst) >= 3);
        assert!(r.chunks().stats.rechecked.load(Ordering::SeqCst) > 0);
        // Not remembered, and not fixed by asking again.
        assert!(r.read(ino("a"), p, 10).await.is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sequential_reads_hash_each_piece_once_and_random_reads_only_theirs() {
        let bytes = data(5 * MIB + 100, 7);
        let e = file_of(&bytes, &[2_000_000, 1_700_000]);
        let source = Arc::new(Fake::of_files(&[(&bytes, &e)], Duration::ZERO));
        let inodes = inodes(vec![file("f", e)]);
        let ino = inodes.lookup(crate::inodes::ROOT, b"f").unwrap();
        let pieces = pieces_of(0, bytes.len() as u64).end;
        assert_eq!(pieces, 6);

        // 128 KiB at a time, as FUSE reads, verifying ahead as `fs` does.
        for ahead in [false, true] {
            let r = reader(&inodes, &source, 64 << 20);
            let fetched = source.fetches.load(Ordering::SeqCst);
            let mut offset = 0u64;
            while offset < bytes.len() as u64 {
                if ahead {
                    let next = pieces_of(offset, offset + (128 << 10)).end;
                    r.verify_ahead(ino, next..next + PIECES_AHEAD);
                }
                expect(&r, ino, &bytes, offset, 128 << 10).await;
                offset += 128 << 10;
            }
            assert_eq!(
                r.stats.verified.load(Ordering::SeqCst),
                pieces,
                "ahead {ahead}"
            );
            // Each chunk was fetched once; pieces straddling a cut took the
            // neighbour from memory.
            assert_eq!(source.fetches.load(Ordering::SeqCst) - fetched, 3);
        }

        // A small read hashes the one piece it touches; one across a piece
        // boundary, two.
        let r = reader(&inodes, &source, 64 << 20);
        expect(&r, ino, &bytes, 3 * PIECE + 10, 4096).await;
        assert_eq!(r.stats.verified.load(Ordering::SeqCst), 1);
        expect(&r, ino, &bytes, PIECE - 10, 20).await;
        assert_eq!(r.stats.verified.load(Ordering::SeqCst), 3);
        expect(&r, ino, &bytes, PIECE - 1000, 10).await;
        assert_eq!(r.stats.verified.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_reads_of_a_piece_share_one_hash() {
        let bytes = data(3 * MIB, 9);
        let e = file_of(&bytes, &[1_500_000]);
        let source = Arc::new(Fake::of_files(&[(&bytes, &e)], Duration::from_millis(100)));
        let inodes = inodes(vec![file("f", e)]);
        let ino = inodes.lookup(crate::inodes::ROOT, b"f").unwrap();
        let r = reader(&inodes, &source, 64 << 20);
        let reads = (0..8u64).map(|i| {
            let r = Arc::clone(&r);
            tokio::spawn(async move { r.read(ino, PIECE + i * 4096, 4096).await })
        });
        for got in future::join_all(reads).await {
            got.unwrap().unwrap();
        }
        assert_eq!(r.stats.verified.load(Ordering::SeqCst), 1);
        assert_eq!(source.fetches.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_damaged_cached_chunk_is_fetched_again_not_called_forged() {
        let bytes = data(3 * MIB, 5);
        let e = file_of(&bytes, &[1_100_000, 1_000_000]);
        let list = chunks(&e).to_vec();
        let source = Arc::new(Fake::of_files(&[(&bytes, &e)], Duration::ZERO));
        let all: Vec<_> = source
            .registry
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        source.disk().extend(all);
        // Chunk 1 (pieces 1 and 2) is damaged on disk, with its length.
        let c = list[1];
        let mut bad = bytes[c.offset as usize..(c.offset + u64::from(c.length)) as usize].to_vec();
        bad[12_345] ^= 4;
        source.disk().insert(c.sha256, bad);
        let inodes = inodes(vec![file("f", e)]);
        let ino = inodes.lookup(crate::inodes::ROOT, b"f").unwrap();
        let r = reader(&inodes, &source, 64 << 20);
        expect(&r, ino, &bytes, 0, u32::MAX).await;
        assert_eq!(source.discarded.load(Ordering::SeqCst), 1);
        assert_eq!(source.downloads.load(Ordering::SeqCst), 1);
        assert_eq!(r.chunks().stats.damaged.load(Ordering::SeqCst), 1);
        assert_eq!(r.stats.forged.load(Ordering::SeqCst), 0);
        // The good copy is back on disk and in memory.
        expect(&r, ino, &bytes, 0, u32::MAX).await;
        assert_eq!(source.downloads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_format_1_tree_reads_chunks_checked_by_sha256() {
        let bytes = data(2 * MIB + 5, 6);
        let e = file_of(&bytes, &[1_000_000, 700_000]);
        let list = chunks(&e).to_vec();
        let source = Arc::new(Fake::of_files(&[(&bytes, &e)], Duration::ZERO));
        // A damaged copy on disk is hashed, dropped and fetched again.
        let c = list[0];
        let mut bad = bytes[..c.length as usize].to_vec();
        bad[3] ^= 1;
        source.disk().insert(c.sha256, bad);
        let tree = v1_tree(&[file("f", e)]);
        let inodes = Arc::new(Inodes::new(tree, None, owner()).unwrap());
        let ino = inodes.lookup(crate::inodes::ROOT, b"f").unwrap();
        let r = reader(&inodes, &source, 64 << 20);
        assert!(!r.verifiable());
        expect(&r, ino, &bytes, 0, u32::MAX).await;
        expect(&r, ino, &bytes, 999_990, 20).await;
        assert_eq!(source.downloads.load(Ordering::SeqCst), 3);
        assert_eq!(r.stats.verified.load(Ordering::SeqCst), 0);
        // Verifying ahead is a no-op without chaining values.
        r.verify_ahead(ino, 0..3);
        assert!(r.state().inflight.is_empty());
    }

    #[test]
    fn memory_is_split_between_chunks_and_pieces() {
        assert_eq!(split_memory(128 << 20, true), (96 << 20, 32 << 20));
        assert_eq!(split_memory(128 << 20, false), (128 << 20, 0));
        assert_eq!(split_memory(0, true), (0, 0));
    }
}
