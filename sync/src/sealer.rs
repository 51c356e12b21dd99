//! The streaming sealer: one object's bytes in, its chunk list out, each
//! chunk stored once.
//!
//! Three stages run at once so the network, the CPU and the disk overlap:
//! the reader forwards the source's buffers; one blocking thread cuts
//! chunks (SPEC.md §4: a cut needs a window of `max` bytes or the tail) and
//! hashes them in the same pass (SHA-256 per chunk for the blob digest, the
//! BLAKE3 chaining value of each 1 MiB piece and the file's BLAKE3 root
//! (§2.5), and the source's own checksum); the writer stores the chunks the
//! sink lacks, a few at a time. Memory stays bounded by the channel depths
//! whatever the object's size.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use blake3::hazmat::HasherExt as _;
use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use md5::Md5;
use sealvol_spec::chain::{self, PieceCv, PIECE};
use sealvol_spec::{B3Digest, ChunkRef, Cutter, Sha256Digest};
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;

use crate::{ByteStream, Checksum, ErrorKind, Object, SyncError};

/// Chunks stored at once per object: enough to overlap fsyncs.
const WRITERS: usize = 4;
/// Most source buffers handed to the cutter at once.
const BATCH: usize = 256;
/// What the cutter says when the writer stopped taking chunks: the
/// writer's own error is the cause.
const WRITER_STOPPED: &str = "chunk writer stopped";

/// Where chunks go: the registry's blob store.
#[async_trait]
pub trait ChunkSink: Send + Sync {
    async fn has(&self, digest: &Sha256Digest) -> Result<bool, SyncError>;
    /// Stores bytes that hash to `digest` (the sealer has checked).
    async fn put(&self, digest: &Sha256Digest, bytes: Bytes) -> Result<(), SyncError>;
}

/// One object, chunked, stored and verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedObject {
    pub size: u64,
    pub blake3: B3Digest,
    pub chunks: Vec<ChunkRef>,
    /// Chaining values of the object's 1 MiB pieces (SPEC.md §2.5): one
    /// per piece when it is larger than a piece, none otherwise.
    pub pieces: Vec<PieceCv>,
    /// Chunk bytes this object wrote (the sink lacked them).
    pub bytes_stored: u64,
}

/// Streams `object` from `bytes` into `sink`. `progress` hears each buffer
/// read; `cancel` stops the work at the next buffer. A source that sends
/// more than `object.size` bytes fails the object as soon as it does, before
/// the extra bytes are stored.
pub async fn seal_object(
    object: &Object,
    bytes: ByteStream,
    cutter: Cutter,
    sink: Arc<dyn ChunkSink>,
    progress: &(dyn Fn(u64) + Send + Sync),
    cancel: &AtomicBool,
) -> Result<SealedObject, SyncError> {
    // `None` marks the end of the object; a closed channel without it means
    // the reader gave up, and the cutter must not store the tail.
    // Buffers travel in batches of what the source had ready: an HTTP body
    // arrives in pieces of a few KiB, and one hand-off per piece would wake
    // the cutter thread hundreds of thousands of times per GiB.
    let (to_cutter, from_reader) = mpsc::channel::<Option<Vec<Bytes>>>(8);
    let (to_writer, from_cutter) = mpsc::channel::<(Sha256Digest, Bytes)>(WRITERS);
    let expected = object.checksum;
    let size = object.size;
    let cutting = tokio::task::spawn_blocking(move || {
        cut_and_hash(from_reader, to_writer, cutter, expected, size)
    });

    let what = || format!("{} ({})", object.key, object.path);
    // `move`: the reader owns the sender, so the channel closes when it
    // stops, whatever the reason.
    let read = async move {
        let mut batches = bytes.ready_chunks(BATCH);
        let mut sent = 0u64;
        while let Some(batch) = batches.next().await {
            let batch = batch.into_iter().collect::<Result<Vec<Bytes>, _>>()?;
            if cancel.load(Ordering::Relaxed) {
                return Err(SyncError::new(ErrorKind::Canceled, "canceled"));
            }
            let n: u64 = batch.iter().map(|b| b.len() as u64).sum();
            sent += n;
            if sent > object.size {
                return Err(SyncError::new(
                    ErrorKind::Checksum,
                    format!(
                        "{}: the source sent more than the {} bytes it listed",
                        what(),
                        object.size
                    ),
                ));
            }
            progress(n);
            if to_cutter.send(Some(batch)).await.is_err() {
                // The cutter stopped on an error; it reports it.
                return Ok(());
            }
        }
        let _ = to_cutter.send(None).await;
        Ok::<_, SyncError>(())
    };
    let write = async move {
        tokio_stream_of(from_cutter)
            .map(|(digest, chunk)| {
                let sink = Arc::clone(&sink);
                async move {
                    if sink.has(&digest).await? {
                        return Ok(0);
                    }
                    let n = chunk.len() as u64;
                    sink.put(&digest, chunk).await?;
                    Ok::<_, SyncError>(n)
                }
            })
            .buffer_unordered(WRITERS)
            .try_fold(0u64, |acc, n| async move { Ok(acc + n) })
            .await
    };
    let (read, stored) = tokio::join!(read, write);
    let cut = cutting
        .await
        .map_err(|e| SyncError::new(ErrorKind::Internal, format!("chunker failed: {e}")))?;
    // The reader's error is the cause when there is one; the cutter then
    // only saw its input end early. A cutter whose writer stopped reports
    // that only: the writer's error (a full disk) is the cause.
    read?;
    let cut = match cut {
        Err(e) if e.message == WRITER_STOPPED => {
            stored?;
            return Err(e);
        }
        cut => cut?,
    };
    let bytes_stored = stored?;

    if cut.size != object.size {
        return Err(SyncError::new(
            ErrorKind::Checksum,
            format!(
                "{}: read {} bytes, the source listed {}",
                what(),
                cut.size,
                object.size
            ),
        ));
    }
    if let (Some(want), Some(got)) = (expected, cut.checksum) {
        if want != got {
            return Err(SyncError::new(
                ErrorKind::Checksum,
                format!(
                    "{}: content has {got}, the source says {want}{}",
                    what(),
                    object
                        .mismatch_hint
                        .map(|h| format!(" {h}"))
                        .unwrap_or_default()
                ),
            ));
        }
    }
    Ok(SealedObject {
        size: cut.size,
        blake3: cut.blake3,
        chunks: cut.chunks,
        pieces: cut.pieces,
        bytes_stored,
    })
}

fn tokio_stream_of<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

struct Cut {
    size: u64,
    blake3: B3Digest,
    chunks: Vec<ChunkRef>,
    pieces: Vec<PieceCv>,
    checksum: Option<Checksum>,
}

/// The file's BLAKE3 as the chain needs it (SPEC.md §2.5), hashed as the
/// bytes arrive: each 1 MiB piece is its own subtree, hashed in place (no
/// copy into a piece buffer) and closed when the next byte arrives, so a
/// file of exactly one piece has no chaining values. The result is what
/// [`chain::PieceHasher`] gives.
struct Pieces {
    /// The piece being hashed: piece `cvs.len()`.
    current: blake3::Hasher,
    /// Bytes of the current piece so far.
    filled: u64,
    cvs: Vec<PieceCv>,
    len: u64,
}

impl Pieces {
    fn new() -> Pieces {
        Pieces {
            current: blake3::Hasher::new(),
            filled: 0,
            cvs: Vec::new(),
            len: 0,
        }
    }

    fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.filled == PIECE {
                self.cvs.push(self.current.finalize_non_root());
                self.current = blake3::Hasher::new();
                self.current.set_input_offset(self.cvs.len() as u64 * PIECE);
                self.filled = 0;
            }
            let n = ((PIECE - self.filled) as usize).min(data.len());
            self.current.update(&data[..n]);
            self.filled += n as u64;
            self.len += n as u64;
            data = &data[n..];
        }
    }

    /// The file's BLAKE3 and its chaining values.
    fn finish(mut self) -> (B3Digest, Vec<PieceCv>) {
        if self.cvs.is_empty() {
            // Piece 0 at offset 0 is the whole file: its root is the hash.
            return (B3Digest(*self.current.finalize().as_bytes()), Vec::new());
        }
        self.cvs.push(self.current.finalize_non_root());
        let root = chain::combine(&self.cvs, self.len).expect("one value per piece");
        (root, self.cvs)
    }
}

enum WholeHash {
    None,
    Sha256(Sha256),
    Md5(Md5),
}

/// The hashes of the whole file: its BLAKE3 with the chain's chaining
/// values, and the source's checksum when it gives one.
struct Whole {
    file: Pieces,
    checksum: WholeHash,
    expected: Option<Checksum>,
}

impl Whole {
    fn new(expected: Option<Checksum>) -> Whole {
        let checksum = match expected {
            // The file's BLAKE3 is computed in any case.
            None | Some(Checksum::Blake3(_)) => WholeHash::None,
            Some(Checksum::Sha256(_)) => WholeHash::Sha256(Sha256::new()),
            Some(Checksum::Md5(_)) => WholeHash::Md5(Md5::new()),
        };
        Whole {
            file: Pieces::new(),
            checksum,
            expected,
        }
    }

    fn update(&mut self, b: &[u8]) {
        self.file.update(b);
        match &mut self.checksum {
            WholeHash::None => {}
            WholeHash::Sha256(h) => h.update(b),
            WholeHash::Md5(h) => h.update(b),
        }
    }

    /// The file's BLAKE3, its chaining values, and the checksum to compare
    /// with the source's.
    fn finish(self) -> (B3Digest, Vec<PieceCv>, Option<Checksum>) {
        let (blake3, pieces) = self.file.finish();
        let checksum = match self.checksum {
            WholeHash::None if matches!(self.expected, Some(Checksum::Blake3(_))) => {
                Some(Checksum::Blake3(blake3.0))
            }
            WholeHash::None => None,
            WholeHash::Sha256(h) => Some(Checksum::Sha256(h.finalize().into())),
            WholeHash::Md5(h) => Some(Checksum::Md5(h.finalize().into())),
        };
        (blake3, pieces, checksum)
    }
}

/// Objects at least this large hash the whole file on a second thread, so
/// one large object keeps two cores busy: the whole-file hashes (MD5 is
/// strictly serial) cost about as much as cutting and hashing the chunks.
/// Smaller ones hash in line, where a thread would cost more than it saves.
const WHOLE_ON_ITS_OWN_THREAD: u64 = 8 << 20;

/// Where the whole-file hashes run: in line, or on their own thread fed
/// the same buffers (shared, not copied).
enum WholeStage {
    Inline(Box<Whole>),
    Thread {
        to: std::sync::mpsc::SyncSender<Vec<Bytes>>,
        done: std::thread::JoinHandle<(B3Digest, Vec<PieceCv>, Option<Checksum>)>,
    },
}

impl WholeStage {
    fn new(expected: Option<Checksum>, size: u64) -> Result<WholeStage, SyncError> {
        let mut whole = Box::new(Whole::new(expected));
        if size < WHOLE_ON_ITS_OWN_THREAD {
            return Ok(WholeStage::Inline(whole));
        }
        let (to, from) = std::sync::mpsc::sync_channel::<Vec<Bytes>>(8);
        let done = std::thread::Builder::new()
            .name("sealvol-hash".into())
            .spawn(move || {
                for batch in from {
                    for b in &batch {
                        whole.update(b);
                    }
                }
                whole.finish()
            })
            .map_err(|e| {
                SyncError::new(
                    ErrorKind::Internal,
                    format!("cannot start a hash thread: {e}"),
                )
            })?;
        Ok(WholeStage::Thread { to, done })
    }

    fn update(&mut self, batch: &[Bytes]) {
        match self {
            WholeStage::Inline(w) => batch.iter().for_each(|b| w.update(b)),
            // The thread only stops when the sender goes, so a send fails
            // only if it panicked; `finish` reports that.
            WholeStage::Thread { to, .. } => {
                let _ = to.send(batch.to_vec());
            }
        }
    }

    fn finish(self) -> Result<(B3Digest, Vec<PieceCv>, Option<Checksum>), SyncError> {
        match self {
            WholeStage::Inline(w) => Ok(w.finish()),
            WholeStage::Thread { to, done } => {
                drop(to);
                done.join()
                    .map_err(|_| SyncError::new(ErrorKind::Internal, "the hash thread stopped"))
            }
        }
    }
}

/// The blocking stage: cut points and every hash, in one pass over bytes
/// that are already in memory (the whole-file hashes on a thread of their
/// own for a large object, [`WholeStage`]).
fn cut_and_hash(
    mut input: mpsc::Receiver<Option<Vec<Bytes>>>,
    output: mpsc::Sender<(Sha256Digest, Bytes)>,
    cutter: Cutter,
    expected: Option<Checksum>,
    size_listed: u64,
) -> Result<Cut, SyncError> {
    let max = cutter.params().max as usize;
    let mut whole = WholeStage::new(expected, size_listed)?;
    // One window, reused: chunks are copied out of it, so its pages stay
    // mapped (a growing shared buffer faulted in fresh pages on every cut).
    let mut buf: Vec<u8> = Vec::with_capacity(3 * max);
    let mut chunks = Vec::new();
    let mut offset = 0u64;
    let mut emit = |chunk: Bytes, chunks: &mut Vec<ChunkRef>| -> Result<(), SyncError> {
        let sha256 = Sha256Digest(Sha256::digest(&chunk).into());
        chunks.push(ChunkRef {
            offset,
            length: chunk.len() as u32,
            sha256,
        });
        offset += chunk.len() as u64;
        output
            .blocking_send((sha256, chunk))
            .map_err(|_| SyncError::new(ErrorKind::Internal, WRITER_STOPPED))
    };
    let mut size = 0u64;
    let mut ended = false;
    while !ended {
        match input.blocking_recv() {
            Some(Some(batch)) => {
                whole.update(&batch);
                for b in batch {
                    size += b.len() as u64;
                    buf.extend_from_slice(&b);
                }
            }
            Some(None) => ended = true,
            None => return Err(SyncError::new(ErrorKind::Canceled, "the read stopped")),
        }
        // Cut while a full window is buffered, and at the end the tail.
        // Cutting starts once two windows are buffered, so what is left to
        // move to the front afterwards is under one window per window cut.
        if ended || buf.len() >= 2 * max {
            let mut at = 0;
            while buf.len() - at >= max || (ended && at < buf.len()) {
                let n = cutter.cut(&buf[at..]);
                emit(Bytes::copy_from_slice(&buf[at..at + n]), &mut chunks)?;
                at += n;
            }
            buf.drain(..at);
        }
    }
    let (blake3, pieces, checksum) = whole.finish()?;
    Ok(Cut {
        size,
        blake3,
        chunks,
        pieces,
        checksum,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    static GO: AtomicBool = AtomicBool::new(false);

    #[derive(Default)]
    struct Memory(Mutex<HashMap<Sha256Digest, Bytes>>);

    #[async_trait]
    impl ChunkSink for Memory {
        async fn has(&self, d: &Sha256Digest) -> Result<bool, SyncError> {
            Ok(self.0.lock().unwrap().contains_key(d))
        }
        async fn put(&self, d: &Sha256Digest, b: Bytes) -> Result<(), SyncError> {
            self.0.lock().unwrap().insert(*d, b);
            Ok(())
        }
    }

    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn object(data: &[u8], checksum: Option<Checksum>) -> Object {
        Object {
            path: "f".into(),
            key: "k/f".into(),
            size: data.len() as u64,
            checksum,
            mismatch_hint: None,
            version: None,
            identity: None,
            mode: crate::FILE_MODE,
        }
    }

    /// Feeds `data` in pieces of `piece` bytes.
    fn stream(data: Vec<u8>, piece: usize) -> ByteStream {
        let parts: Vec<Result<Bytes, SyncError>> = data
            .chunks(piece.max(1))
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        futures_util::stream::iter(parts).boxed()
    }

    fn cutter() -> Cutter {
        sealvol_spec::ChunkingParams {
            min: 4096,
            avg: 16384,
            max: 65536,
        }
        .cutter()
        .unwrap()
    }

    #[tokio::test]
    async fn same_chunks_as_the_whole_file_whatever_the_buffer_sizes() {
        let data = noise(1_000_003, 7);
        let want = cutter().chunk_lengths(&data);
        for piece in [7, 1000, 65536, 70000, 2_000_000] {
            let sink = Arc::new(Memory::default());
            let got = seal_object(
                &object(&data, None),
                stream(data.clone(), piece),
                cutter(),
                sink.clone(),
                &|_| {},
                &GO,
            )
            .await
            .unwrap();
            let lens: Vec<usize> = got.chunks.iter().map(|c| c.length as usize).collect();
            assert_eq!(lens, want, "piece {piece}");
            assert_eq!(got.blake3, B3Digest::of(&data));
            let mut rebuilt = Vec::new();
            let store = sink.0.lock().unwrap();
            for c in &got.chunks {
                let b = &store[&c.sha256];
                assert_eq!(Sha256Digest::of(b), c.sha256);
                rebuilt.extend_from_slice(b);
            }
            assert_eq!(rebuilt, data);
            assert_eq!(
                got.bytes_stored,
                store.values().map(|b| b.len() as u64).sum::<u64>()
            );
        }
    }

    /// The file's BLAKE3 and chaining values are what the chain gives for
    /// the whole file, at the piece edges too and whatever the buffers.
    #[tokio::test]
    async fn pieces_are_the_chains_whatever_the_buffer_sizes() {
        let p = PIECE as usize;
        for len in [0, 1, p - 1, p, p + 1, 2 * p, 3 * p + 5] {
            let data = noise(len, len as u64 + 1);
            let mut want = chain::PieceHasher::new();
            want.update(&data);
            let (root, cvs) = want.finish();
            assert_eq!(root, B3Digest::of(&data), "len {len}");
            for piece in [4096, 333_333, p, 5 * p] {
                let got = seal_object(
                    &object(&data, None),
                    stream(data.clone(), piece),
                    cutter(),
                    Arc::new(Memory::default()),
                    &|_| {},
                    &GO,
                )
                .await
                .unwrap();
                assert_eq!(got.blake3, root, "len {len} piece {piece}");
                assert_eq!(got.pieces, cvs, "len {len} piece {piece}");
                assert_eq!(got.pieces.len() as u64, chain::piece_count(len as u64));
            }
        }
    }

    #[tokio::test]
    async fn present_chunks_are_not_stored_again() {
        let data = noise(300_000, 3);
        let sink = Arc::new(Memory::default());
        let o = object(&data, None);
        let run = || {
            seal_object(
                &o,
                stream(data.clone(), 10_000),
                cutter(),
                sink.clone(),
                &|_| {},
                &GO,
            )
        };
        assert_eq!(run().await.unwrap().bytes_stored, data.len() as u64);
        assert_eq!(run().await.unwrap().bytes_stored, 0);
    }

    #[tokio::test]
    async fn checksums_and_sizes_are_verified() {
        // Small objects hash the whole file in line, large ones on a thread.
        for len in [100_000, WHOLE_ON_ITS_OWN_THREAD as usize + 3] {
            let data = noise(len, 5);
            let md5: [u8; 16] = Md5::digest(&data).into();
            let sha: [u8; 32] = Sha256::digest(&data).into();
            let run = |o: Object| {
                let data = data.clone();
                async move {
                    seal_object(
                        &o,
                        stream(data, 4096),
                        cutter(),
                        Arc::new(Memory::default()),
                        &|_| {},
                        &GO,
                    )
                    .await
                }
            };
            run(object(&data, Some(Checksum::Md5(md5)))).await.unwrap();
            run(object(&data, Some(Checksum::Sha256(sha))))
                .await
                .unwrap();
            let b3 = B3Digest::of(&data).0;
            run(object(&data, Some(Checksum::Blake3(b3))))
                .await
                .unwrap();
            let mut bad = sha;
            bad[0] ^= 1;
            let e = run(object(&data, Some(Checksum::Sha256(bad))))
                .await
                .unwrap_err();
            assert_eq!(e.kind, ErrorKind::Checksum);
            assert!(e.message.contains("k/f"), "{}", e.message);
            let e = run(object(&data, Some(Checksum::Blake3(bad))))
                .await
                .unwrap_err();
            assert_eq!(e.kind, ErrorKind::Checksum);
            assert!(e.message.contains("k/f"), "{}", e.message);
            assert!(e.message.contains("the source says b3:"), "{}", e.message);
            let mut short = object(&data, None);
            short.size += 1;
            assert_eq!(run(short).await.unwrap_err().kind, ErrorKind::Checksum);
        }
    }

    /// A sink whose disk is full: every put fails.
    struct Full;

    #[async_trait]
    impl ChunkSink for Full {
        async fn has(&self, _: &Sha256Digest) -> Result<bool, SyncError> {
            Ok(false)
        }
        async fn put(&self, _: &Sha256Digest, _: Bytes) -> Result<(), SyncError> {
            Err(SyncError::new(
                ErrorKind::Internal,
                "storing a chunk: No space left on device (os error 28)",
            ))
        }
    }

    #[tokio::test]
    async fn a_sink_error_is_the_error_reported() {
        // Large enough that the cutter is still sending when the writer
        // stops: it then sees only that the writer went away.
        let data = noise(3_000_000, 13);
        for piece in [4096, 1_000_000] {
            let e = seal_object(
                &object(&data, None),
                stream(data.clone(), piece),
                cutter(),
                Arc::new(Full),
                &|_| {},
                &GO,
            )
            .await
            .unwrap_err();
            assert_eq!(e.kind, ErrorKind::Internal, "{}", e.message);
            assert!(e.message.contains("No space left"), "{}", e.message);
        }
    }

    #[tokio::test]
    async fn a_source_that_sends_more_than_it_listed_stops_at_once() {
        let data = noise(2_000_000, 17);
        let mut o = object(&data, None);
        o.size = 100_000;
        // Buffers arrive one at a time, as from a network: the object fails
        // at the buffer that goes past the listed size, not at the end.
        let parts: Vec<Result<Bytes, SyncError>> = data
            .chunks(10_000)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let read = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = {
            let read = Arc::clone(&read);
            futures_util::stream::iter(parts)
                .then(move |p| {
                    let read = Arc::clone(&read);
                    async move {
                        tokio::task::yield_now().await;
                        if let Ok(b) = &p {
                            read.fetch_add(b.len() as u64, Ordering::Relaxed);
                        }
                        p
                    }
                })
                .boxed()
        };
        let sink = Arc::new(Memory::default());
        let e = seal_object(&o, counted, cutter(), sink.clone(), &|_| {}, &GO)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Checksum, "{}", e.message);
        assert!(
            e.message
                .contains("sent more than the 100000 bytes it listed"),
            "{}",
            e.message
        );
        assert!(
            read.load(Ordering::Relaxed) < data.len() as u64 / 2,
            "the whole stream was read before the object failed"
        );
        let stored: u64 = sink
            .0
            .lock()
            .unwrap()
            .values()
            .map(|b| b.len() as u64)
            .sum();
        assert!(
            stored <= 100_000,
            "stored {stored} bytes of a 100000-byte object"
        );
    }

    #[tokio::test]
    async fn a_mismatch_ends_with_the_objects_hint() {
        let data = noise(10_000, 19);
        let mut o = object(&data, Some(Checksum::Md5([0; 16])));
        o.mismatch_hint = Some("(add ?checksum=none)");
        let e = seal_object(
            &o,
            stream(data, 4096),
            cutter(),
            Arc::new(Memory::default()),
            &|_| {},
            &GO,
        )
        .await
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Checksum);
        assert!(
            e.message.ends_with(" (add ?checksum=none)"),
            "{}",
            e.message
        );
    }

    #[tokio::test]
    async fn a_read_error_is_the_error_reported() {
        let data = noise(50_000, 9);
        let parts: Vec<Result<Bytes, SyncError>> = vec![
            Ok(Bytes::copy_from_slice(&data[..1000])),
            Err(SyncError::new(ErrorKind::Transient, "connection reset")),
        ];
        let e = seal_object(
            &object(&data, None),
            futures_util::stream::iter(parts).boxed(),
            cutter(),
            Arc::new(Memory::default()),
            &|_| {},
            &GO,
        )
        .await
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Transient);
    }
}
