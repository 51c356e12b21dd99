//! Verified chunks for reads. A read asks for the chunks its byte range
//! touches and nothing more: from memory (an LRU of recently read chunks),
//! else from the shared on-disk chunk cache, else from the registry. Every
//! chunk is checked (sha256 and BLAKE3, by `sealvol_client::pull::fetch_chunk`)
//! before its bytes are kept or served, so a damaged chunk fails the read
//! with `EIO` instead of returning wrong bytes.
//!
//! Each fetch runs as its own task: a slow fetch never holds up reads of
//! other chunks, two readers of one chunk share one fetch (single flight),
//! and a fetch that takes longer than the mount's fetch timeout fails, so a
//! registry that is down or hangs gives `EIO` in bounded time. Nothing
//! remembers a failure: the next read tries again, so reads succeed once
//! the registry is back.
//!
//! Chunks are fetched whole even when a read needs a few bytes of one: only
//! the whole chunk can be checked against its digests.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{self, BoxFuture, FutureExt as _, Shared};
use sealvol_client::cache::ChunkCache;
use sealvol_client::pull::{fetch_chunk, FetchStats};
use sealvol_client::{Remote, TransportError};
use sealvol_spec::tree::ChunkRef;
use sealvol_spec::Sha256Digest;

/// Why a chunk could not be had. Reads that need it fail with `EIO`.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ReadError {
    #[error("chunk {chunk} is corrupt ({message})")]
    Corrupt {
        chunk: Sha256Digest,
        message: String,
    },
    #[error("chunk {chunk} is unavailable ({message})")]
    Unavailable {
        chunk: Sha256Digest,
        message: String,
    },
    #[error("chunk {chunk} did not arrive within {seconds} s")]
    TimedOut { chunk: Sha256Digest, seconds: u64 },
}

/// Where chunks come from when memory does not hold them.
pub(crate) trait ChunkSource: Send + Sync + 'static {
    /// The chunk's verified bytes.
    fn fetch(self: Arc<Self>, chunk: ChunkRef) -> BoxFuture<'static, Result<Bytes, ReadError>>;

    /// Whether the chunk is on this machine already (a fetch would not use
    /// the network), without checking its bytes.
    fn is_local(&self, chunk: &ChunkRef) -> bool;
}

/// Chunks from the on-disk cache or, failing that, the registry.
pub(crate) struct RegistrySource {
    pub remote: Remote,
    pub repo: String,
    pub cache: ChunkCache,
    pub stats: Arc<FetchStats>,
    /// How long one chunk may take, retries included.
    pub timeout: Duration,
}

impl RegistrySource {
    async fn fetch_checked(&self, c: &ChunkRef) -> Result<Vec<u8>, sealvol_client::Error> {
        let once = || fetch_chunk(&self.remote, &self.repo, c, Some(&self.cache), &self.stats);
        match once().await {
            // A mount lives longer than a registry token: answer the
            // challenge again, once.
            Err(sealvol_client::Error::Transport(TransportError::Denied { .. })) => {
                self.remote.prepare(&self.repo, false).await;
                once().await
            }
            r => r,
        }
    }
}

impl ChunkSource for RegistrySource {
    fn fetch(self: Arc<Self>, c: ChunkRef) -> BoxFuture<'static, Result<Bytes, ReadError>> {
        async move {
            match tokio::time::timeout(self.timeout, self.fetch_checked(&c)).await {
                Err(_) => Err(ReadError::TimedOut {
                    chunk: c.sha256,
                    seconds: self.timeout.as_secs(),
                }),
                Ok(Ok(bytes)) => Ok(Bytes::from(bytes)),
                Ok(Err(
                    e @ (sealvol_client::Error::Corrupt(_)
                    | sealvol_client::Error::Transport(TransportError::Corrupt { .. })),
                )) => Err(ReadError::Corrupt {
                    chunk: c.sha256,
                    message: e.to_string(),
                }),
                Ok(Err(e)) => Err(ReadError::Unavailable {
                    chunk: c.sha256,
                    message: e.to_string(),
                }),
            }
        }
        .boxed()
    }

    fn is_local(&self, c: &ChunkRef) -> bool {
        self.cache.contains(&c.sha256)
    }
}

/// Whether a fetched chunk stays in memory: yes for reads and read-ahead,
/// no for background prefetch, which only fills the disk cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keep {
    Memory,
    DiskOnly,
}

type SharedFetch = Shared<BoxFuture<'static, Result<Bytes, ReadError>>>;

/// Counters of a reader, read by [`crate::Mount::stats`].
#[derive(Debug, Default)]
pub(crate) struct ReaderStats {
    pub memory_hits: AtomicU64,
    /// Fetches started (from disk or the registry).
    pub fetches: AtomicU64,
    /// Requests that joined a fetch already under way.
    pub joined: AtomicU64,
    pub failures: AtomicU64,
}

struct State {
    memory: Lru,
    inflight: HashMap<Sha256Digest, SharedFetch>,
}

/// Serves chunks to reads; see the module documentation.
pub(crate) struct ChunkReader {
    source: Arc<dyn ChunkSource>,
    state: Mutex<State>,
    rt: tokio::runtime::Handle,
    pub stats: ReaderStats,
}

impl ChunkReader {
    /// A reader over `source` that keeps up to `memory_bytes` of chunks in
    /// memory and runs its fetches on `rt`.
    pub fn new(
        source: Arc<dyn ChunkSource>,
        memory_bytes: u64,
        rt: tokio::runtime::Handle,
    ) -> Arc<ChunkReader> {
        Arc::new(ChunkReader {
            source,
            state: Mutex::new(State {
                memory: Lru::new(memory_bytes),
                inflight: HashMap::new(),
            }),
            rt,
            stats: ReaderStats::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves maps that are still
        // consistent (every change is one insert or remove).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The chunk's verified bytes.
    pub async fn chunk(self: &Arc<Self>, c: ChunkRef, keep: Keep) -> Result<Bytes, ReadError> {
        let fetch = {
            let mut st = self.state();
            if let Some(b) = st.memory.get(&c.sha256) {
                self.stats.memory_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(b);
            }
            match st.inflight.get(&c.sha256) {
                Some(f) => {
                    self.stats.joined.fetch_add(1, Ordering::Relaxed);
                    f.clone()
                }
                None => {
                    // Registered under the lock the task needs to finish, so
                    // it cannot finish before it is registered.
                    let f = self.spawn_fetch(c);
                    st.inflight.insert(c.sha256, f.clone());
                    f
                }
            }
        };
        let result = fetch.await;
        match &result {
            Ok(bytes) if keep == Keep::Memory => {
                self.state().memory.insert(c.sha256, bytes.clone());
            }
            Ok(_) => {}
            Err(_) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    fn spawn_fetch(self: &Arc<Self>, c: ChunkRef) -> SharedFetch {
        self.stats.fetches.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(chunk = %c.sha256, offset = c.offset, "fetch");
        let me = Arc::clone(self);
        let task = self.rt.spawn(async move {
            let result = Arc::clone(&me.source).fetch(c).await;
            me.state().inflight.remove(&c.sha256);
            result
        });
        async move {
            task.await.unwrap_or_else(|e| {
                Err(ReadError::Unavailable {
                    chunk: c.sha256,
                    message: format!("the fetch stopped: {e}"),
                })
            })
        }
        .boxed()
        .shared()
    }

    /// Whether the chunk would be served without the network.
    pub fn is_local(&self, c: &ChunkRef) -> bool {
        self.state().memory.contains(&c.sha256) || self.source.is_local(c)
    }

    /// Bytes `offset..offset + len` of a file of `size` bytes made of
    /// `chunks` (fewer at the end of the file).
    pub async fn read(
        self: &Arc<Self>,
        chunks: &[ChunkRef],
        size: u64,
        offset: u64,
        len: u32,
    ) -> Result<Bytes, ReadError> {
        let end = offset.saturating_add(u64::from(len)).min(size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        let touched = &chunks[touched(chunks, offset, end)];
        let parts =
            future::try_join_all(touched.iter().map(|c| self.chunk(*c, Keep::Memory))).await?;
        let piece = |c: &ChunkRef, bytes: &Bytes| -> Result<Range<usize>, ReadError> {
            let from = (offset.max(c.offset) - c.offset) as usize;
            let to = (end.min(c.offset + u64::from(c.length)) - c.offset) as usize;
            if bytes.len() < to {
                // Verification makes this impossible; never serve short.
                return Err(ReadError::Corrupt {
                    chunk: c.sha256,
                    message: format!("{} bytes, expected {}", bytes.len(), c.length),
                });
            }
            Ok(from..to)
        };
        if let ([c], [bytes]) = (touched, parts.as_slice()) {
            return Ok(bytes.slice(piece(c, bytes)?));
        }
        let mut out = Vec::with_capacity((end - offset) as usize);
        for (c, bytes) in touched.iter().zip(&parts) {
            out.extend_from_slice(&bytes[piece(c, bytes)?]);
        }
        Ok(out.into())
    }

    /// Starts fetching `chunks` into memory without waiting for them
    /// (read-ahead). Failures are left for the reads that need the chunks.
    pub fn fetch_ahead(self: &Arc<Self>, chunks: Vec<ChunkRef>) {
        for c in chunks {
            if self.state().memory.contains(&c.sha256) {
                continue;
            }
            let me = Arc::clone(self);
            self.rt.spawn(async move {
                if let Err(e) = me.chunk(c, Keep::Memory).await {
                    tracing::debug!(error = %e, "read-ahead failed");
                }
            });
        }
    }
}

/// The indexes of the chunks that hold bytes `offset..end` (`end > offset`).
pub(crate) fn touched(chunks: &[ChunkRef], offset: u64, end: u64) -> Range<usize> {
    let first = chunks.partition_point(|c| c.offset + u64::from(c.length) <= offset);
    let last = chunks.partition_point(|c| c.offset < end);
    first..last.max(first)
}

/// Read-ahead for one open file: once a read continues where the previous
/// one ended, the chunks after the current one are fetched before they are
/// asked for, up to [`ReadAhead::BYTES`] (and at most [`ReadAhead::CHUNKS`])
/// ahead. Reads that jump around (a loader reading a header, then one
/// tensor) fetch nothing ahead.
#[derive(Debug, Default)]
pub(crate) struct ReadAhead {
    /// Where the previous read ended.
    expected: Option<u64>,
    /// The first chunk not yet fetched ahead.
    ahead: usize,
}

impl ReadAhead {
    pub const BYTES: u64 = 64 << 20;
    pub const CHUNKS: usize = 8;
    /// How far a read may start from where the last one ended and still
    /// continue it: the kernel's read-ahead may send a few requests of one
    /// sequence out of order.
    const SLACK: u64 = 1 << 20;

    /// After a read of bytes `offset..end` (chunks `touched`): the chunks
    /// to fetch ahead.
    pub fn next(
        &mut self,
        chunks: &[ChunkRef],
        touched: Range<usize>,
        offset: u64,
        end: u64,
    ) -> Range<usize> {
        let in_order = self
            .expected
            .is_some_and(|e| offset + Self::SLACK >= e && offset <= e + Self::SLACK);
        self.expected = Some(end);
        if touched.is_empty() {
            return 0..0;
        }
        if !in_order {
            self.ahead = touched.end;
            return 0..0;
        }
        let start = self.ahead.max(touched.end);
        let mut stop = start;
        let mut bytes = 0u64;
        while stop < chunks.len() && stop - touched.end < Self::CHUNKS && bytes < Self::BYTES {
            bytes += u64::from(chunks[stop].length);
            stop += 1;
        }
        self.ahead = stop.max(self.ahead);
        start..stop.max(start)
    }
}

/// Chunks in memory, least recently used dropped first once over `max`
/// bytes.
struct Lru {
    max: u64,
    used: u64,
    tick: u64,
    map: HashMap<Sha256Digest, (Bytes, u64)>,
    order: BTreeMap<u64, Sha256Digest>,
}

impl Lru {
    fn new(max: u64) -> Lru {
        Lru {
            max,
            used: 0,
            tick: 0,
            map: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    fn contains(&self, d: &Sha256Digest) -> bool {
        self.map.contains_key(d)
    }

    fn get(&mut self, d: &Sha256Digest) -> Option<Bytes> {
        self.tick += 1;
        let (bytes, used) = self.map.get_mut(d)?;
        self.order.remove(used);
        *used = self.tick;
        self.order.insert(self.tick, *d);
        Some(bytes.clone())
    }

    fn insert(&mut self, d: Sha256Digest, bytes: Bytes) {
        if self.get(&d).is_some() {
            return;
        }
        self.used += bytes.len() as u64;
        self.map.insert(d, (bytes, self.tick));
        self.order.insert(self.tick, d);
        while self.used > self.max {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some((b, _)) = self.map.remove(&oldest) {
                self.used -= b.len() as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sealvol_spec::B3Digest;
    use std::sync::atomic::AtomicUsize;

    fn chunk_of(data: &[u8], offset: u64) -> ChunkRef {
        ChunkRef {
            offset,
            length: data.len() as u32,
            sha256: Sha256Digest::of(data),
            blake3: B3Digest::of(data),
        }
    }

    /// A file cut into the given pieces, with their chunk list.
    fn file(pieces: &[Vec<u8>]) -> (Vec<u8>, Vec<ChunkRef>) {
        let mut bytes = Vec::new();
        let mut chunks = Vec::new();
        for p in pieces {
            chunks.push(chunk_of(p, bytes.len() as u64));
            bytes.extend_from_slice(p);
        }
        (bytes, chunks)
    }

    /// A source that serves from a map after a pause, counting fetches, and
    /// fails for digests it lacks or is told to corrupt.
    struct Fake {
        chunks: HashMap<Sha256Digest, Vec<u8>>,
        pause: Duration,
        fetches: AtomicUsize,
        bad: Option<Sha256Digest>,
    }

    impl Fake {
        fn new(pieces: &[Vec<u8>], pause: Duration) -> Fake {
            Fake {
                chunks: pieces
                    .iter()
                    .map(|p| (Sha256Digest::of(p), p.clone()))
                    .collect(),
                pause,
                fetches: AtomicUsize::new(0),
                bad: None,
            }
        }
    }

    impl ChunkSource for Fake {
        fn fetch(self: Arc<Self>, c: ChunkRef) -> BoxFuture<'static, Result<Bytes, ReadError>> {
            async move {
                self.fetches.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(self.pause).await;
                if self.bad == Some(c.sha256) {
                    return Err(ReadError::Corrupt {
                        chunk: c.sha256,
                        message: "flipped".into(),
                    });
                }
                match self.chunks.get(&c.sha256) {
                    Some(b) => Ok(Bytes::from(b.clone())),
                    None => Err(ReadError::Unavailable {
                        chunk: c.sha256,
                        message: "not there".into(),
                    }),
                }
            }
            .boxed()
        }

        fn is_local(&self, _: &ChunkRef) -> bool {
            false
        }
    }

    fn pieces() -> Vec<Vec<u8>> {
        (0..5u8)
            .map(|i| {
                (0..1000u32)
                    .map(|j| (j as u8) ^ i.wrapping_mul(37))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn touched_finds_the_chunks_of_a_range() {
        let (_, chunks) = file(&[vec![0; 10], vec![1; 10], vec![2; 5]]);
        assert_eq!(touched(&chunks, 0, 1), 0..1);
        assert_eq!(touched(&chunks, 9, 11), 0..2);
        assert_eq!(touched(&chunks, 10, 20), 1..2);
        assert_eq!(touched(&chunks, 0, 25), 0..3);
        assert_eq!(touched(&chunks, 24, 25), 2..3);
        assert_eq!(touched(&chunks, 19, 21), 1..3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_return_exactly_the_bytes_of_any_range() {
        let p = pieces();
        let (bytes, chunks) = file(&p);
        let source = Arc::new(Fake::new(&p, Duration::ZERO));
        let reader = ChunkReader::new(source.clone(), 1 << 20, tokio::runtime::Handle::current());
        let size = bytes.len() as u64;
        for (offset, len) in [
            (0, 1),
            (0, 5000),
            (999, 2),
            (1000, 1000),
            (1500, 2100),
            (4999, 100),
            (5000, 10),
            (7000, 10),
        ] {
            let got = reader.read(&chunks, size, offset, len).await.unwrap();
            let from = (offset as usize).min(bytes.len());
            let to = (offset as usize + len as usize).min(bytes.len());
            assert_eq!(&got[..], &bytes[from..to], "{offset}+{len}");
        }
        // Each chunk crossed the source once; the rest came from memory.
        assert_eq!(source.fetches.load(Ordering::SeqCst), 5);
        assert!(reader.stats.memory_hits.load(Ordering::SeqCst) > 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_readers_of_a_chunk_share_one_fetch() {
        let p = pieces();
        let (_, chunks) = file(&p);
        let source = Arc::new(Fake::new(&p, Duration::from_millis(200)));
        let reader = ChunkReader::new(source.clone(), 1 << 20, tokio::runtime::Handle::current());
        let reads = (0..8).map(|i| {
            let (reader, chunks) = (reader.clone(), chunks.clone());
            tokio::spawn(async move { reader.read(&chunks, 5000, 100 + i, 10).await })
        });
        for r in future::join_all(reads).await {
            r.unwrap().unwrap();
        }
        assert_eq!(source.fetches.load(Ordering::SeqCst), 1);
        assert_eq!(reader.stats.fetches.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_fetch_does_not_hold_up_reads_of_other_chunks() {
        let p = pieces();
        let (_, chunks) = file(&p);
        let source = Arc::new(Fake::new(&p, Duration::from_secs(3600)));
        let reader = ChunkReader::new(source, 1 << 20, tokio::runtime::Handle::current());
        // Chunk 1 is in memory; chunk 0 takes an hour.
        reader
            .state()
            .memory
            .insert(chunks[1].sha256, Bytes::from(p[1].clone()));
        let slow = {
            let (reader, chunks) = (reader.clone(), chunks.clone());
            tokio::spawn(async move { reader.read(&chunks, 5000, 0, 10).await })
        };
        let fast = reader.read(&chunks, 5000, 1000, 10).await.unwrap();
        assert_eq!(&fast[..], &p[1][..10]);
        assert!(!slow.is_finished());
        slow.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failures_are_reported_and_not_remembered() {
        let p = pieces();
        let (_, chunks) = file(&p);
        let mut fake = Fake::new(&p, Duration::ZERO);
        fake.bad = Some(chunks[2].sha256);
        fake.chunks.remove(&chunks[3].sha256);
        let source = Arc::new(fake);
        let reader = ChunkReader::new(source.clone(), 1 << 20, tokio::runtime::Handle::current());
        let e = reader.read(&chunks, 5000, 1990, 20).await.unwrap_err();
        assert!(matches!(e, ReadError::Corrupt { chunk, .. } if chunk == chunks[2].sha256));
        let e = reader.read(&chunks, 5000, 3000, 20).await.unwrap_err();
        assert!(matches!(e, ReadError::Unavailable { .. }), "{e}");
        // Tried again on the next read, not served from a remembered error.
        let before = source.fetches.load(Ordering::SeqCst);
        reader.read(&chunks, 5000, 3000, 20).await.unwrap_err();
        assert_eq!(source.fetches.load(Ordering::SeqCst), before + 1);
        assert_eq!(reader.stats.failures.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unreachable_registry_fails_within_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        // A port nothing listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let source = Arc::new(RegistrySource {
            remote: Remote::connect(&format!("127.0.0.1:{port}"), false).unwrap(),
            repo: "ns/vol".into(),
            cache: ChunkCache::open(dir.path()).unwrap(),
            stats: Arc::default(),
            timeout: Duration::from_secs(30),
        });
        let p = pieces();
        let (_, chunks) = file(&p);
        // In the cache: served without the registry.
        source.cache.put(&chunks[0].sha256, &p[0]);
        let reader = ChunkReader::new(source, 1 << 20, tokio::runtime::Handle::current());
        assert_eq!(
            &reader.read(&chunks, 5000, 0, 10).await.unwrap()[..],
            &p[0][..10]
        );
        let started = std::time::Instant::now();
        let e = reader.read(&chunks, 5000, 1000, 10).await.unwrap_err();
        assert!(matches!(e, ReadError::Unavailable { .. }), "{e}");
        assert!(e.to_string().contains("unreachable"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn read_ahead_follows_reads_in_order_only() {
        const MIB: u64 = 1 << 20;
        let p: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 1 << 20]).collect();
        let (_, chunks) = file(&p);
        let mut ra = ReadAhead::default();
        let read = |ra: &mut ReadAhead, from: u64, to: u64| {
            ra.next(&chunks, touched(&chunks, from, to), from, to)
        };
        // A first read fetches nothing ahead, even from the start.
        assert_eq!(read(&mut ra, 0, 4096), 0..0);
        // The next one continues it: the next CHUNKS chunks.
        assert_eq!(read(&mut ra, 4096, 128 << 10), 1..1 + ReadAhead::CHUNKS);
        // Still in chunk 0: nothing new.
        assert_eq!(read(&mut ra, 128 << 10, MIB), 9..9);
        // Into chunk 1: one more at the far end.
        assert_eq!(read(&mut ra, MIB, MIB + 4096), 9..10);
        // A jump: nothing ahead; reads continuing it start a new run.
        assert_eq!(read(&mut ra, 15 * MIB, 15 * MIB + 4096), 0..0);
        assert_eq!(read(&mut ra, 15 * MIB + 4096, 16 * MIB + 4096), 17..20);
        assert_eq!(read(&mut ra, 16 * MIB + 4096, 17 * MIB + 4096), 20..20);

        // Header, then a tensor far away, then another: never ahead.
        let mut ra = ReadAhead::default();
        assert_eq!(read(&mut ra, 0, 8), 0..0);
        assert_eq!(read(&mut ra, 5 * MIB, 6 * MIB), 0..0);
        assert_eq!(read(&mut ra, 12 * MIB, 12 * MIB + 10), 0..0);
        // A little out of order still counts as in order.
        assert_eq!(read(&mut ra, 12 * MIB - 4096, 12 * MIB + 4096), 13..20);
    }

    #[test]
    fn the_memory_lru_drops_the_least_recently_used() {
        let d: Vec<Sha256Digest> = (0..4u8).map(|i| Sha256Digest::of(&[i])).collect();
        let mut lru = Lru::new(300);
        for x in &d[..3] {
            lru.insert(*x, Bytes::from(vec![0; 100]));
        }
        assert!(lru.get(&d[0]).is_some());
        lru.insert(d[3], Bytes::from(vec![0; 100]));
        assert!(lru.contains(&d[0]));
        assert!(!lru.contains(&d[1]));
        assert!(lru.contains(&d[2]) && lru.contains(&d[3]));
        assert_eq!(lru.used, 300);
        // Larger than the whole budget: kept nowhere.
        lru.insert(Sha256Digest::of(b"big"), Bytes::from(vec![0; 400]));
        assert_eq!(lru.used, 0);
    }
}
