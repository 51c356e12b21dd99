//! Chunks for reads. A read asks for the chunks its byte range touches and
//! nothing more: from memory (an LRU of recently used chunks), else from
//! the shared on-disk chunk cache, else from the registry.
//!
//! What this layer promises about a chunk's bytes depends on the tree
//! ([`Check`]). For a format 2 tree they are raw material for the chain
//! checks of [`crate::verify`]: a chunk read from the disk cache or
//! downloaded is only checked for its length (hashing it would be wasted
//! work, since every byte served is checked against the version digest
//! anyway: SPEC.md §2.5), and a chunk that fails there is re-checked by
//! sha256 ([`ChunkReader::recheck`]), removed from the cache if damaged,
//! and fetched again, checked by sha256 this time. So a cache entry
//! poisoned by another version's forged chunk list costs one fetch, never
//! a lasting `EIO`. For a format 1
//! tree, which has no chaining values, every chunk is checked by sha256
//! (from the cache or by the transport) before its bytes are kept or
//! served, and that is all a format 1 read can be checked against.
//!
//! Each fetch runs as its own task: a slow fetch never holds up reads of
//! other chunks, two readers of one chunk share one fetch (single flight),
//! and a fetch that takes longer than the mount's fetch timeout fails, so a
//! registry that is down or hangs gives `EIO` in bounded time. Nothing
//! remembers a failure: the next read tries again, so reads succeed once
//! the registry is back.
//!
//! Chunks are fetched whole even when a read needs a few bytes of one: a
//! chunk is one blob.
//!
//! A downloaded chunk is kept in the on-disk cache, except under the
//! fanotify engine ([`ChunkReader::keep_reads_in_memory`]): there the
//! bytes a read needs are written into the layout's own files, which later
//! mounts read, and a copy in the chunk cache would write each byte twice.
//! Background prefetch still fills the disk cache.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{self, BoxFuture, FutureExt as _, Shared};
use sealvol_client::cache::ChunkCache;
use sealvol_client::pull::{fetch_chunk_as, FetchStats};
use sealvol_client::{BlobCheck, Remote, TransportError};
use sealvol_spec::tree::ChunkRef;
use sealvol_spec::Sha256Digest;

/// Why bytes could not be had. Reads that need them fail with `EIO`.
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
    /// A task serving the read stopped (the runtime is shutting down).
    #[error("the read stopped ({0})")]
    Stopped(String),
    /// This machine's copy of the bytes could not be read or written.
    #[error("{path}: {message}")]
    Local { path: String, message: String },
    /// A piece assembled from intact chunks (each matches its sha256) that
    /// fails its chaining value: the chunk list names the wrong chunks.
    #[error("{path}: piece {piece} (bytes {start}..{end}) does not match the version digest: the registry holds a forged tree index or damaged data")]
    Forged {
        path: String,
        piece: u64,
        start: u64,
        end: u64,
    },
}

/// What a fetch must have checked before it returns a chunk's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Check {
    /// Its sha256, always: format 1 trees, and re-checks.
    Sha256,
    /// Only its length, from the disk cache or the registry: the reader
    /// checks every byte it serves through the chain (SPEC.md §2.5).
    Chain,
}

/// A chunk's bytes, and whether they were checked against its sha256.
#[derive(Clone, Debug)]
pub(crate) struct Fetched {
    pub bytes: Bytes,
    pub checked: bool,
}

/// Where chunks come from when memory does not hold them.
pub(crate) trait ChunkSource: Send + Sync + 'static {
    /// The chunk's bytes, of its length, checked as `check` asks
    /// ([`Fetched::checked`] says whether they were checked by sha256).
    fn fetch(
        self: Arc<Self>,
        chunk: ChunkRef,
        check: Check,
    ) -> BoxFuture<'static, Result<Fetched, ReadError>>;

    /// [`ChunkSource::fetch`]; with `store` false a download is not kept on
    /// this machine beyond the call (a source without a disk ignores it).
    fn fetch_to(
        self: Arc<Self>,
        chunk: ChunkRef,
        check: Check,
        store: bool,
    ) -> BoxFuture<'static, Result<Fetched, ReadError>> {
        let _ = store;
        self.fetch(chunk, check)
    }

    /// Whether the chunk is on this machine already (a fetch would not use
    /// the network), without checking its bytes.
    fn is_local(&self, chunk: &ChunkRef) -> bool;

    /// Removes the local copy of a chunk found damaged, so that the next
    /// fetch goes to the registry. Blocking.
    fn discard(&self, chunk: &ChunkRef);
}

/// Chunks from the on-disk cache or, failing that, the registry.
pub(crate) struct RegistrySource {
    pub remote: Remote,
    pub repo: String,
    pub cache: ChunkCache,
    pub stats: Arc<FetchStats>,
    /// How long one chunk may take, retries included.
    pub timeout: Duration,
    /// Downloads under way in other mounts sharing `cache`.
    pub in_flight: Option<Downloads>,
}

/// The chunk downloads under way among mounts that share one chunk cache
/// (the containerd snapshotter's fuse manager): a mount needing a chunk
/// another mount is downloading waits for that download, then finds the
/// chunk in the cache, so versions sharing chunks fetch each once. Only
/// the wait is shared, not the result: a download that fails or is
/// abandoned leaves each waiter to fetch for itself.
#[derive(Clone, Debug, Default)]
pub struct Downloads(Arc<Mutex<HashMap<Sha256Digest, tokio::sync::watch::Receiver<()>>>>);

/// Whose turn a download is.
enum Turn {
    /// Download it; the guard tells the waiters when dropped.
    Lead(Leading),
    /// Another mount is downloading it: wait for the sender to go.
    Wait(tokio::sync::watch::Receiver<()>),
}

struct Leading {
    downloads: Downloads,
    digest: Sha256Digest,
    _done: tokio::sync::watch::Sender<()>,
}

impl Drop for Leading {
    fn drop(&mut self) {
        self.downloads
            .0
            .lock()
            .expect("downloads lock")
            .remove(&self.digest);
        // Dropping the sender after this wakes the waiters.
    }
}

impl Downloads {
    fn turn(&self, digest: Sha256Digest) -> Turn {
        let mut map = self.0.lock().expect("downloads lock");
        if let Some(rx) = map.get(&digest) {
            return Turn::Wait(rx.clone());
        }
        let (tx, rx) = tokio::sync::watch::channel(());
        map.insert(digest, rx);
        Turn::Lead(Leading {
            downloads: self.clone(),
            digest,
            _done: tx,
        })
    }
}

impl RegistrySource {
    /// The chunk's bytes, from the cache or the registry, checked as `how`
    /// says (`fetch_chunk_as`).
    async fn fetch_checked(
        &self,
        c: &ChunkRef,
        how: BlobCheck,
        store: bool,
    ) -> Result<Vec<u8>, sealvol_client::Error> {
        let _leading = match self.in_flight.as_ref().map(|d| d.turn(c.sha256)) {
            Some(Turn::Wait(mut rx)) => {
                // Resolves with an error once the leader's sender is gone.
                let _ = rx.changed().await;
                None
            }
            Some(Turn::Lead(l)) => Some(l),
            None => None,
        };
        let once = || {
            fetch_chunk_as(
                &self.remote,
                &self.repo,
                c,
                // Not stored: the cache was looked at already (`fetch_as`).
                store.then_some(&self.cache),
                &self.stats,
                how,
            )
        };
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

    async fn fetch_as(
        &self,
        c: &ChunkRef,
        check: Check,
        store: bool,
    ) -> Result<Fetched, sealvol_client::Error> {
        if check == Check::Chain {
            let (cache, chunk) = (self.cache.clone(), *c);
            let cached = tokio::task::spawn_blocking(move || cache.get_unverified(&chunk))
                .await
                .expect("cache task panicked");
            if let Some(bytes) = cached {
                self.stats.cached.fetch_add(1, Ordering::Relaxed);
                return Ok(Fetched {
                    bytes: sealvol_client::buffers::into_bytes(bytes),
                    checked: false,
                });
            }
        }
        // With the chain the download is not hashed either: the chain
        // checks every byte served, and a chunk it rejects is checked by
        // sha256 then (`ChunkReader::recheck`).
        let how = match check {
            Check::Chain => BlobCheck::Length,
            Check::Sha256 => BlobCheck::Sha256,
        };
        // A sha256 fetch (a format 1 tree, a re-check) always goes through
        // the cache: it reads what it checks from there too.
        let store = store || how == BlobCheck::Sha256;
        Ok(Fetched {
            bytes: sealvol_client::buffers::into_bytes(self.fetch_checked(c, how, store).await?),
            checked: how == BlobCheck::Sha256,
        })
    }
}

impl ChunkSource for RegistrySource {
    fn fetch(
        self: Arc<Self>,
        c: ChunkRef,
        check: Check,
    ) -> BoxFuture<'static, Result<Fetched, ReadError>> {
        self.fetch_to(c, check, true)
    }

    fn fetch_to(
        self: Arc<Self>,
        c: ChunkRef,
        check: Check,
        store: bool,
    ) -> BoxFuture<'static, Result<Fetched, ReadError>> {
        async move {
            match tokio::time::timeout(self.timeout, self.fetch_as(&c, check, store)).await {
                Err(_) => Err(ReadError::TimedOut {
                    chunk: c.sha256,
                    seconds: self.timeout.as_secs(),
                }),
                Ok(Ok(f)) => Ok(f),
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

    fn discard(&self, c: &ChunkRef) {
        self.cache.remove_damaged(&c.sha256);
    }
}

/// Whether a fetched chunk stays in memory: yes for reads and read-ahead,
/// no for background prefetch, which only fills the disk cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keep {
    Memory,
    DiskOnly,
}

type SharedFetch = Shared<BoxFuture<'static, Result<Fetched, ReadError>>>;

/// A chunk's bytes from somewhere on this machine other than the source,
/// unchecked (the chain checks them), if they are there. Blocking.
pub(crate) type Elsewhere = Arc<dyn Fn(&ChunkRef) -> Option<Vec<u8>> + Send + Sync>;

/// Counters of a reader, read by [`crate::Mount::stats`].
#[derive(Debug, Default)]
pub(crate) struct ReaderStats {
    pub memory_hits: AtomicU64,
    /// Fetches started (from disk or the registry).
    pub fetches: AtomicU64,
    /// Requests that joined a fetch already under way.
    pub joined: AtomicU64,
    pub failures: AtomicU64,
    /// Chunks re-checked by sha256 after a piece failed its chain check.
    pub rechecked: AtomicU64,
    /// Damaged cached copies found that way, removed and fetched again.
    pub damaged: AtomicU64,
}

struct State {
    memory: Lru<Sha256Digest, Fetched>,
    inflight: HashMap<(Sha256Digest, Check), SharedFetch>,
    /// Fetches under way that a request wants kept in memory. The fetch
    /// puts its result there itself, under the lock that unregisters it:
    /// were the waiting request to do it after, a read in between would
    /// find the chunk neither in flight nor in memory and fetch it again.
    keep: HashSet<(Sha256Digest, Check)>,
}

/// Serves chunks to reads; see the module documentation.
pub(crate) struct ChunkReader {
    source: Arc<dyn ChunkSource>,
    state: Mutex<State>,
    rt: tokio::runtime::Handle,
    /// What every fetch but a re-check asks of the source.
    check: Check,
    /// Whether chunks fetched for reads go to the source's disk cache too
    /// (background prefetch always does: that is what it is for). Off when
    /// the reads land in a local copy of their own (the fanotify engine's
    /// layout files), so that a cold read writes each byte once.
    store_reads: std::sync::atomic::AtomicBool,
    /// Where else on this machine a chunk may lie (other versions' fanotify
    /// layouts), looked at before the source by fetches the chain checks.
    elsewhere: std::sync::OnceLock<Elsewhere>,
    pub stats: ReaderStats,
}

impl ChunkReader {
    /// A reader over `source` that keeps up to `memory_bytes` of chunks in
    /// memory, fetches them checked as `check` says, and runs its fetches
    /// on `rt`.
    pub fn new(
        source: Arc<dyn ChunkSource>,
        memory_bytes: u64,
        check: Check,
        rt: tokio::runtime::Handle,
    ) -> Arc<ChunkReader> {
        Arc::new(ChunkReader {
            source,
            state: Mutex::new(State {
                memory: Lru::new(memory_bytes),
                inflight: HashMap::new(),
                keep: HashSet::new(),
            }),
            rt,
            check,
            store_reads: std::sync::atomic::AtomicBool::new(true),
            elsewhere: std::sync::OnceLock::new(),
            stats: ReaderStats::default(),
        })
    }

    /// Keep chunks fetched for reads in memory only ([`ChunkReader`]'s
    /// `store_reads`).
    pub fn keep_reads_in_memory(&self) {
        self.store_reads.store(false, Ordering::Relaxed);
    }

    /// Looks for chunks with `elsewhere` before the source (once; a second
    /// call is ignored).
    pub fn reuse_from(&self, elsewhere: Elsewhere) {
        let _ = self.elsewhere.set(elsewhere);
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves maps that are still
        // consistent (every change is one insert or remove).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The chunk's bytes, checked as this reader's [`Check`] says.
    pub async fn chunk(self: &Arc<Self>, c: ChunkRef, keep: Keep) -> Result<Fetched, ReadError> {
        self.chunk_as(c, keep, self.check).await
    }

    async fn chunk_as(
        self: &Arc<Self>,
        c: ChunkRef,
        keep: Keep,
        check: Check,
    ) -> Result<Fetched, ReadError> {
        let fetch = {
            let mut st = self.state();
            if let Some(f) = st.memory.get(&c.sha256) {
                if f.checked || check == Check::Chain {
                    self.stats.memory_hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(f);
                }
            }
            // A checked fetch under way serves an unchecked request too.
            let joined = match check {
                Check::Chain => [(c.sha256, Check::Chain), (c.sha256, Check::Sha256)]
                    .into_iter()
                    .find(|k| st.inflight.contains_key(k)),
                Check::Sha256 => {
                    Some((c.sha256, Check::Sha256)).filter(|k| st.inflight.contains_key(k))
                }
            };
            let (key, f) = match joined {
                Some(key) => {
                    self.stats.joined.fetch_add(1, Ordering::Relaxed);
                    (key, st.inflight[&key].clone())
                }
                None => {
                    // Registered under the lock the task needs to finish, so
                    // it cannot finish before it is registered.
                    let store = keep == Keep::DiskOnly || self.store_reads.load(Ordering::Relaxed);
                    let f = self.spawn_fetch(c, check, store);
                    st.inflight.insert((c.sha256, check), f.clone());
                    ((c.sha256, check), f)
                }
            };
            if keep == Keep::Memory {
                st.keep.insert(key);
            }
            f
        };
        let result = fetch.await;
        if result.is_err() {
            self.stats.failures.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn spawn_fetch(self: &Arc<Self>, c: ChunkRef, check: Check, store: bool) -> SharedFetch {
        self.stats.fetches.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(chunk = %c.sha256, offset = c.offset, ?check, "fetch");
        let me = Arc::clone(self);
        let task = self.rt.spawn(async move {
            let found = match (check, me.elsewhere.get()) {
                (Check::Chain, Some(look)) => {
                    let look = Arc::clone(look);
                    tokio::task::spawn_blocking(move || look(&c))
                        .await
                        .ok()
                        .flatten()
                        .filter(|b| b.len() == c.length as usize)
                }
                _ => None,
            };
            let result = match found {
                Some(bytes) => Ok(Fetched {
                    bytes: bytes.into(),
                    checked: false,
                }),
                None => Arc::clone(&me.source).fetch_to(c, check, store).await,
            };
            let mut st = me.state();
            st.inflight.remove(&(c.sha256, check));
            if st.keep.remove(&(c.sha256, check)) {
                if let Ok(f) = &result {
                    st.memory.insert(c.sha256, f.clone());
                }
            }
            drop(st);
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

    /// After a piece assembled from `got` (the bytes of chunk `c`) failed
    /// its chain check: the chunk's sha256-checked bytes, and whether `got`
    /// was damaged. Bytes not yet checked are hashed now; a damaged copy is
    /// dropped from memory and from the disk cache and fetched again.
    pub async fn recheck(
        self: &Arc<Self>,
        c: ChunkRef,
        got: Fetched,
    ) -> Result<(Fetched, bool), ReadError> {
        if got.checked {
            return Ok((got, false));
        }
        self.stats.rechecked.fetch_add(1, Ordering::Relaxed);
        let bytes = got.bytes.clone();
        let intact = tokio::task::spawn_blocking(move || Sha256Digest::of(&bytes) == c.sha256)
            .await
            .unwrap_or(false);
        if intact {
            let f = Fetched {
                bytes: got.bytes,
                checked: true,
            };
            self.state().memory.insert(c.sha256, f.clone());
            return Ok((f, false));
        }
        let refetch = {
            let mut st = self.state();
            match st.memory.peek(&c.sha256) {
                // Another read re-checked it first.
                Some(f) if f.checked => return Ok((f.clone(), true)),
                Some(_) => {
                    st.memory.remove(&c.sha256);
                }
                None => {}
            }
            match st.inflight.get(&(c.sha256, Check::Sha256)) {
                Some(f) => f.clone(),
                None => {
                    let f = self.spawn_refetch(c);
                    st.inflight.insert((c.sha256, Check::Sha256), f.clone());
                    f
                }
            }
        };
        match refetch.await {
            Ok(f) => Ok((f, true)),
            Err(e) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Removes a damaged copy from the disk cache and fetches the chunk
    /// again, checked by sha256, into memory. One per chunk at a time: it
    /// is registered as the chunk's checked fetch, and its result lands in
    /// memory under the lock that unregisters it, so a second re-check
    /// finds one or the other and never removes the fresh copy.
    fn spawn_refetch(self: &Arc<Self>, c: ChunkRef) -> SharedFetch {
        self.stats.fetches.fetch_add(1, Ordering::Relaxed);
        self.stats.damaged.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(chunk = %c.sha256, "cached chunk is damaged; fetching it again");
        let me = Arc::clone(self);
        let task = self.rt.spawn(async move {
            let source = Arc::clone(&me.source);
            let _ = tokio::task::spawn_blocking(move || source.discard(&c)).await;
            let result = Arc::clone(&me.source).fetch(c, Check::Sha256).await;
            let mut st = me.state();
            st.inflight.remove(&(c.sha256, Check::Sha256));
            st.keep.remove(&(c.sha256, Check::Sha256));
            if let Ok(f) = &result {
                st.memory.insert(c.sha256, f.clone());
            }
            drop(st);
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
    /// `chunks` (fewer at the end of the file), each chunk checked by
    /// sha256 and nothing more: the read of a format 1 tree. A format 2
    /// tree is read through [`crate::verify::FileReader`] instead.
    pub async fn read(
        self: &Arc<Self>,
        chunks: &[ChunkRef],
        size: u64,
        offset: u64,
        len: u32,
    ) -> Result<Bytes, ReadError> {
        debug_assert_eq!(self.check, Check::Sha256, "unchecked chunks served");
        let end = offset.saturating_add(u64::from(len)).min(size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        let touched = &chunks[touched(chunks, offset, end)];
        let parts = future::try_join_all(
            touched
                .iter()
                .map(|c| self.chunk_as(*c, Keep::Memory, Check::Sha256)),
        )
        .await?;
        let piece = |c: &ChunkRef, f: &Fetched| -> Result<Range<usize>, ReadError> {
            let from = (offset.max(c.offset) - c.offset) as usize;
            let to = (end.min(c.offset + u64::from(c.length)) - c.offset) as usize;
            if f.bytes.len() < to || !f.checked {
                // Fetches make this impossible; never serve short.
                return Err(ReadError::Corrupt {
                    chunk: c.sha256,
                    message: format!("{} bytes, expected {}", f.bytes.len(), c.length),
                });
            }
            Ok(from..to)
        };
        if let ([c], [f]) = (touched, parts.as_slice()) {
            return Ok(f.bytes.slice(piece(c, f)?));
        }
        let mut out = Vec::with_capacity((end - offset) as usize);
        for (c, f) in touched.iter().zip(&parts) {
            out.extend_from_slice(&f.bytes[piece(c, f)?]);
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

/// The indexes of the chunks that hold bytes `offset..end`; the registry's
/// file reader finds them the same way.
pub(crate) use sealvol_spec::tree::chunks_covering as touched;

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
    /// Whether the last read continued the one before.
    sequential: bool,
}

impl ReadAhead {
    pub const BYTES: u64 = 64 << 20;
    /// 32 MiB of chunks at the default 2 MiB average (SPEC.md §4.1), as
    /// many in flight as make a fast link busy.
    pub const CHUNKS: usize = 16;
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
        self.sequential = in_order && !touched.is_empty();
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

    /// Whether the last read ([`ReadAhead::next`]) continued the one
    /// before it: a sequential reader, worth verifying ahead for.
    pub fn sequential(&self) -> bool {
        self.sequential
    }
}

/// What an [`Lru`] entry weighs, and whether a new value replaces one
/// already there.
pub(crate) trait Weigh: Clone {
    fn weight(&self) -> u64;

    /// Whether `self` should replace `old` under the same key (by default
    /// the first value stays).
    fn supersedes(&self, _old: &Self) -> bool {
        false
    }
}

impl Weigh for Bytes {
    fn weight(&self) -> u64 {
        self.len() as u64
    }
}

impl Weigh for Fetched {
    fn weight(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Bytes checked by sha256 replace unchecked ones, which may be a
    /// damaged copy.
    fn supersedes(&self, old: &Fetched) -> bool {
        self.checked && !old.checked
    }
}

/// Values in memory, least recently used dropped first once over `max`
/// bytes.
pub(crate) struct Lru<K, V> {
    max: u64,
    used: u64,
    tick: u64,
    map: HashMap<K, (V, u64)>,
    order: BTreeMap<u64, K>,
}

impl<K: Hash + Eq + Copy, V: Weigh> Lru<K, V> {
    pub fn new(max: u64) -> Lru<K, V> {
        Lru {
            max,
            used: 0,
            tick: 0,
            map: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    pub fn contains(&self, k: &K) -> bool {
        self.map.contains_key(k)
    }

    /// The value without counting a use.
    pub fn peek(&self, k: &K) -> Option<&V> {
        self.map.get(k).map(|(v, _)| v)
    }

    pub fn get(&mut self, k: &K) -> Option<V> {
        self.tick += 1;
        let (v, used) = self.map.get_mut(k)?;
        self.order.remove(used);
        *used = self.tick;
        self.order.insert(self.tick, *k);
        Some(v.clone())
    }

    pub fn remove(&mut self, k: &K) -> Option<V> {
        let (v, used) = self.map.remove(k)?;
        self.order.remove(&used);
        self.used -= v.weight();
        Some(v)
    }

    pub fn insert(&mut self, k: K, v: V) {
        if let Some(old) = self.get(&k) {
            if !v.supersedes(&old) {
                return;
            }
            self.remove(&k);
        }
        self.tick += 1;
        self.used += v.weight();
        self.map.insert(k, (v, self.tick));
        self.order.insert(self.tick, k);
        while self.used > self.max {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some((v, _)) = self.map.remove(&oldest) {
                self.used -= v.weight();
            }
        }
    }

    #[cfg(test)]
    pub fn used(&self) -> u64 {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Fake;

    fn chunk_of(data: &[u8], offset: u64) -> ChunkRef {
        ChunkRef {
            offset,
            length: data.len() as u32,
            sha256: Sha256Digest::of(data),
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

    fn fake(pieces: &[Vec<u8>], pause: Duration) -> Fake {
        Fake::new(pieces.iter().map(|p| &p[..]), pause)
    }

    fn reader(source: Arc<dyn ChunkSource>) -> Arc<ChunkReader> {
        ChunkReader::new(
            source,
            1 << 20,
            Check::Sha256,
            tokio::runtime::Handle::current(),
        )
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
        let source = Arc::new(fake(&p, Duration::ZERO));
        let reader = reader(source.clone());
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
        let source = Arc::new(fake(&p, Duration::from_millis(200)));
        let reader = reader(source.clone());
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
        let source = Arc::new(fake(&p, Duration::from_secs(3600)));
        let reader = reader(source);
        // Chunk 1 is in memory; chunk 0 takes an hour.
        reader.state().memory.insert(
            chunks[1].sha256,
            Fetched {
                bytes: Bytes::from(p[1].clone()),
                checked: true,
            },
        );
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
        let mut fake = fake(&p, Duration::ZERO);
        fake.bad = Some(chunks[2].sha256);
        fake.registry.remove(&chunks[3].sha256);
        let source = Arc::new(fake);
        let reader = reader(source.clone());
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
            in_flight: None,
        });
        let p = pieces();
        let (_, chunks) = file(&p);
        // In the cache: served without the registry.
        source.cache.put(&chunks[0].sha256, &p[0]);
        let reader = reader(source);
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
        let end = 1 + ReadAhead::CHUNKS;
        // Still in chunk 0: nothing new.
        assert_eq!(read(&mut ra, 128 << 10, MIB), end..end);
        // Into chunk 1: one more at the far end.
        assert_eq!(read(&mut ra, MIB, MIB + 4096), end..end + 1);
        // A jump: nothing ahead; reads continuing it start a new run (up to
        // the file's last chunk).
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
        let mut lru: Lru<Sha256Digest, Bytes> = Lru::new(300);
        for x in &d[..3] {
            lru.insert(*x, Bytes::from(vec![0; 100]));
        }
        assert!(lru.get(&d[0]).is_some());
        lru.insert(d[3], Bytes::from(vec![0; 100]));
        assert!(lru.contains(&d[0]));
        assert!(!lru.contains(&d[1]));
        assert!(lru.contains(&d[2]) && lru.contains(&d[3]));
        assert_eq!(lru.used(), 300);
        // Larger than the whole budget: kept nowhere.
        lru.insert(Sha256Digest::of(b"big"), Bytes::from(vec![0; 400]));
        assert_eq!(lru.used(), 0);
    }

    /// A registry source on a port nothing listens on, with its cache in
    /// `dir`.
    fn offline(dir: &std::path::Path) -> Arc<RegistrySource> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Arc::new(RegistrySource {
            remote: Remote::connect(&format!("127.0.0.1:{port}"), false).unwrap(),
            repo: "ns/vol".into(),
            cache: ChunkCache::open(dir).unwrap(),
            stats: Arc::default(),
            timeout: Duration::from_secs(30),
            in_flight: None,
        })
    }

    #[tokio::test]
    async fn a_chunk_downloading_in_one_mount_is_waited_for_by_another() {
        let downloads = Downloads::default();
        let d = Sha256Digest::of(b"chunk");
        let Turn::Lead(leading) = downloads.turn(d) else {
            panic!("the first asker downloads")
        };
        let Turn::Wait(mut rx) = downloads.turn(d) else {
            panic!("the second asker waits")
        };
        assert!(matches!(
            downloads.turn(Sha256Digest::of(b"other")),
            Turn::Lead(_)
        ));
        let waiter = tokio::spawn(async move { rx.changed().await.is_err() });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "the waiter did not wait");
        drop(leading);
        assert!(waiter.await.unwrap(), "the waiter heard the download end");
        assert!(
            matches!(downloads.turn(d), Turn::Lead(_)),
            "after the download the next asker downloads (from the cache)"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cache_reads_are_hashed_unless_the_chain_checks_them() {
        let dir = tempfile::tempdir().unwrap();
        let source = offline(dir.path());
        let good = vec![5u8; 1000];
        let c = chunk_of(&good, 0);
        let mut damaged = good.clone();
        damaged[17] ^= 1;
        source.cache.put(&c.sha256, &damaged);
        // For the chain: the cached copy, unhashed, and said to be so.
        let f = Arc::clone(&source).fetch(c, Check::Chain).await.unwrap();
        assert!(!f.checked);
        assert_eq!(&f.bytes[..], &damaged[..]);
        // Checked by sha256 (ChunkCache::get): dropped, then the registry.
        let e = Arc::clone(&source)
            .fetch(c, Check::Sha256)
            .await
            .unwrap_err();
        assert!(matches!(e, ReadError::Unavailable { .. }), "{e}");
        assert!(!source.cache.contains(&c.sha256), "damaged copy kept");
        source.cache.put(&c.sha256, &good);
        let f = Arc::clone(&source).fetch(c, Check::Sha256).await.unwrap();
        assert!(f.checked);
        assert_eq!(&f.bytes[..], &good[..]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_recheck_replaces_a_damaged_copy_everywhere() {
        let p = pieces();
        let (_, chunks) = file(&p);
        let fake = Arc::new(fake(&p, Duration::ZERO));
        let mut damaged = p[1].clone();
        damaged[0] ^= 0x80;
        fake.disk().insert(chunks[1].sha256, damaged.clone());
        fake.disk().insert(chunks[2].sha256, p[2].clone());
        let reader = ChunkReader::new(
            fake.clone(),
            1 << 20,
            Check::Chain,
            tokio::runtime::Handle::current(),
        );
        let got = reader.chunk(chunks[1], Keep::Memory).await.unwrap();
        assert!(!got.checked);
        assert_eq!(&got.bytes[..], &damaged[..]);
        let (fresh, was_damaged) = reader.recheck(chunks[1], got).await.unwrap();
        assert!(was_damaged && fresh.checked);
        assert_eq!(&fresh.bytes[..], &p[1][..]);
        assert_eq!(fake.discarded.load(Ordering::SeqCst), 1);
        assert_eq!(fake.downloads.load(Ordering::SeqCst), 1);
        // Memory now holds the good copy, as checked.
        let again = reader.chunk(chunks[1], Keep::Memory).await.unwrap();
        assert!(again.checked);
        assert_eq!(&again.bytes[..], &p[1][..]);
        // An intact copy is only hashed: not discarded, not fetched.
        let got = reader.chunk(chunks[2], Keep::Memory).await.unwrap();
        let (same, was_damaged) = reader.recheck(chunks[2], got).await.unwrap();
        assert!(!was_damaged && same.checked);
        assert_eq!(fake.discarded.load(Ordering::SeqCst), 1);
        assert_eq!(fake.downloads.load(Ordering::SeqCst), 1);
        assert_eq!(reader.stats.rechecked.load(Ordering::SeqCst), 2);
        assert_eq!(reader.stats.damaged.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn checked_chunks_supersede_unchecked_ones_in_memory() {
        let d = Sha256Digest::of(b"x");
        let f = |b: &[u8], checked| Fetched {
            bytes: Bytes::copy_from_slice(b),
            checked,
        };
        let mut lru = Lru::new(100);
        lru.insert(d, f(b"bad", false));
        lru.insert(d, f(b"bad", false));
        lru.insert(d, f(b"god", true));
        assert_eq!(&lru.peek(&d).unwrap().bytes[..], b"god");
        lru.insert(d, f(b"bad", false));
        assert_eq!(&lru.peek(&d).unwrap().bytes[..], b"god");
        assert_eq!(lru.used(), 3);
    }
}
