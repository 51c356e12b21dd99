//! Background prefetch into the on-disk chunk cache, so later reads are
//! local. With [`Prefetch::Open`](crate::Prefetch::Open) a file's chunks are
//! fetched once it is opened; with [`Prefetch::All`](crate::Prefetch::All)
//! the whole version is, files that were opened first, then the rest in
//! canonical order. A recorded prefetch
//! ([`Prefetcher::recorded`], SPEC.md §5.8) fetches the chunks under the
//! pieces a cold start read first, in the order it read them. A few workers
//! fetch in parallel (like `pull`), each distinct chunk once; chunks
//! already on this machine are skipped.
//!
//! Prefetch never stands in the way of reads: a read of a chunk being
//! prefetched joins that fetch, and a failed prefetch is only logged (the
//! read that needs the chunk fetches it again).
//!
//! Under the fanotify engine, a [`Sink`] takes each chunk instead: the
//! engine fills the layout's files with the pieces the chunk completes, so
//! prefetched bytes are written once, where the kernel reads them.
//!
//! Prefetch fills the disk cache with chunks checked only for their length
//! (sha256 too for a format 1 tree); it verifies nothing through the chain.
//! A read checks every piece it serves against the version digest
//! ([`crate::verify`]), whatever the cache holds, and fetches again,
//! checked by sha256, a chunk that fails there.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use sealvol_spec::tree::ChunkRef;
use sealvol_spec::Sha256Digest;

use crate::inodes::Inodes;
use crate::reader::{ChunkReader, Keep};

/// Where a prefetched chunk goes instead of the disk cache (the fanotify
/// engine's layout); resolves once it is there.
pub(crate) type Sink =
    Arc<dyn Fn(ChunkRef) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

pub(crate) struct Prefetcher {
    reader: Arc<ChunkReader>,
    sink: std::sync::OnceLock<Sink>,
    inodes: Arc<Inodes>,
    /// Parallel fetches.
    jobs: usize,
    queue: Mutex<Queue>,
    rt: tokio::runtime::Handle,
    stopped: AtomicBool,
    pub fetched: AtomicU64,
    pub failed: AtomicU64,
}

#[derive(Default)]
struct Queue {
    /// Opened files not yet fully scheduled, first opened first, with the
    /// next chunk to schedule.
    opened: VecDeque<(u64, usize)>,
    /// Files ever queued, so reopening one queues nothing.
    queued: HashSet<u64>,
    /// The whole version's files in canonical order (prefetch all), with
    /// the position of the next chunk to schedule.
    order: Vec<u64>,
    next_file: usize,
    next_chunk: usize,
    /// Chunks already scheduled.
    scheduled: HashSet<Sha256Digest>,
    workers: usize,
    /// A recorded prefetch's chunks, in order, and whether opens are
    /// ignored (they are when there is a recording to follow).
    planned: VecDeque<ChunkRef>,
    recorded: bool,
    /// Set by [`Prefetcher::begin`]: no worker starts before, so that an
    /// engine can set its sink first.
    begun: bool,
}

impl Prefetcher {
    /// A prefetcher for the files opened from now on, and for the whole
    /// version too when `all`.
    pub fn new(
        reader: Arc<ChunkReader>,
        inodes: Arc<Inodes>,
        all: bool,
        jobs: usize,
        rt: tokio::runtime::Handle,
    ) -> Arc<Prefetcher> {
        let order = if all {
            inodes.files().collect()
        } else {
            Vec::new()
        };
        Arc::new(Prefetcher {
            reader,
            sink: std::sync::OnceLock::new(),
            inodes,
            jobs: jobs.max(1),
            queue: Mutex::new(Queue {
                order,
                ..Queue::default()
            }),
            rt,
            stopped: AtomicBool::new(false),
            fetched: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        })
    }

    /// Sends every chunk to `sink` instead of the disk cache (before
    /// [`Prefetcher::begin`]; a second sink is ignored).
    pub fn fill_into(&self, sink: Sink) {
        let _ = self.sink.set(sink);
    }

    /// Starts the workers: the mount is up.
    pub fn begin(self: &Arc<Self>) {
        let mut q = self.queue();
        q.begun = true;
        self.kick(&mut q);
    }

    /// A prefetcher for a recorded prefetch ([`crate::record::start`]):
    /// it fetches what [`Prefetcher::follow`] hands it, in that order.
    /// Opened files add nothing: the recording already says what a start
    /// reads, and in which order.
    pub fn recorded(
        reader: Arc<ChunkReader>,
        inodes: Arc<Inodes>,
        jobs: usize,
        rt: tokio::runtime::Handle,
    ) -> Arc<Prefetcher> {
        let p = Prefetcher::new(reader, inodes, false, jobs, rt);
        p.queue().recorded = true;
        p
    }

    /// Fetches `planned` (a recorded prefetch's chunks,
    /// [`crate::record::plan`]) in that order, after what was planned
    /// before.
    pub fn follow(self: &Arc<Self>, planned: Vec<ChunkRef>) {
        let mut q = self.queue();
        q.planned.extend(planned);
        self.kick(&mut q);
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A file was opened: its chunks go first.
    pub fn opened(self: &Arc<Self>, ino: u64) {
        let mut q = self.queue();
        if !q.recorded && q.queued.insert(ino) {
            q.opened.push_back((ino, 0));
            self.kick(&mut q);
        }
    }

    /// Stops scheduling (the mount is going away); fetches under way finish.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Starts workers up to `jobs`; each stops when nothing is left.
    fn kick(self: &Arc<Self>, q: &mut Queue) {
        while q.begun && q.workers < self.jobs {
            q.workers += 1;
            let me = Arc::clone(self);
            self.rt.spawn(async move { me.work().await });
        }
    }

    async fn work(self: Arc<Self>) {
        loop {
            let next = {
                let mut q = self.queue();
                let next = self.next(&mut q);
                if next.is_none() {
                    // Decided under the lock `opened` takes, so a file queued
                    // after this finds one worker fewer and starts another.
                    q.workers -= 1;
                }
                next
            };
            let Some(c) = next else {
                return;
            };
            let done = match self.sink.get() {
                Some(sink) => sink(c).await,
                None => self
                    .reader
                    .chunk(c, Keep::DiskOnly)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
            };
            match done {
                Ok(()) => {
                    self.fetched.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    // One line for the first failure; the rest would repeat
                    // it while the registry is away.
                    if self.failed.fetch_add(1, Ordering::Relaxed) == 0 {
                        tracing::warn!(error = %e, "prefetch failed; reads will fetch what they need");
                    } else {
                        tracing::debug!(error = %e, "prefetch failed");
                    }
                }
            }
        }
    }

    /// The next chunk to fetch: from the files opened, first opened first,
    /// then from the whole version. Skips chunks scheduled or local.
    fn next(&self, q: &mut Queue) -> Option<ChunkRef> {
        if self.stopped.load(Ordering::Relaxed) {
            return None;
        }
        while let Some(&(ino, i)) = q.opened.front() {
            let chunks = self.inodes.file(ino).map(|f| f.chunks).unwrap_or(&[]);
            let Some(c) = chunks.get(i) else {
                q.opened.pop_front();
                continue;
            };
            q.opened[0].1 += 1;
            if self.wanted(q, c) {
                return Some(*c);
            }
        }
        while let Some(c) = q.planned.pop_front() {
            if self.wanted(q, &c) {
                return Some(c);
            }
        }
        while let Some(&ino) = q.order.get(q.next_file) {
            let chunks = self.inodes.file(ino).map(|f| f.chunks).unwrap_or(&[]);
            let Some(c) = chunks.get(q.next_chunk) else {
                q.next_file += 1;
                q.next_chunk = 0;
                continue;
            };
            q.next_chunk += 1;
            if self.wanted(q, c) {
                return Some(*c);
            }
        }
        None
    }

    /// Not scheduled yet, and not local: a sink decides for itself what it
    /// lacks (a chunk in memory may still have pieces to write).
    fn wanted(&self, q: &mut Queue, c: &ChunkRef) -> bool {
        q.scheduled.insert(c.sha256) && (self.sink.get().is_some() || !self.reader.is_local(c))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::future::{BoxFuture, FutureExt as _};

    use super::*;
    use crate::reader::{Check, ChunkSource, Fetched, ReadError};
    use crate::testing::{data, file, file_of, inodes, Fake};

    /// A source that logs the order of fetches.
    struct Logged {
        inner: Arc<Fake>,
        log: Mutex<Vec<Sha256Digest>>,
    }

    impl ChunkSource for Logged {
        fn fetch(
            self: Arc<Self>,
            c: ChunkRef,
            check: Check,
        ) -> BoxFuture<'static, Result<Fetched, ReadError>> {
            self.log.lock().unwrap().push(c.sha256);
            Arc::clone(&self.inner).fetch(c, check).boxed()
        }
        fn is_local(&self, c: &ChunkRef) -> bool {
            self.inner.is_local(c)
        }
        fn discard(&self, c: &ChunkRef) {
            self.inner.discard(c)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_recorded_prefetch_fetches_its_chunks_in_order_and_ignores_opens() {
        let a = data(40_000, 1);
        let ea = file_of(&a, &[10_000; 4]);
        let b = data(5_000, 2);
        let eb = file_of(&b, &[5_000]);
        let fake = Arc::new(Fake::of_files(&[(&a, &ea), (&b, &eb)], Duration::ZERO));
        let inodes = inodes(vec![file("a", ea.clone()), file("b", eb.clone())]);
        let (ca, cb) = (
            inodes.file(2).unwrap().chunks,
            inodes.file(3).unwrap().chunks,
        );
        // One chunk is local already: skipped.
        fake.disk().insert(ca[0].sha256, a[..10_000].to_vec());
        let src = Arc::new(Logged {
            inner: Arc::clone(&fake),
            log: Mutex::new(Vec::new()),
        });
        let rt = tokio::runtime::Handle::current();
        let reader = ChunkReader::new(src.clone(), 1 << 20, Check::Chain, rt.clone());
        let plan = vec![ca[3], cb[0], ca[0], ca[1], ca[3]];
        let p = Prefetcher::recorded(reader, Arc::clone(&inodes), 1, rt);
        p.begin();
        p.opened(2);
        p.follow(plan);
        for _ in 0..500 {
            if p.fetched.load(Ordering::Relaxed) == 3 && p.queue().workers == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            *src.log.lock().unwrap(),
            vec![ca[3].sha256, cb[0].sha256, ca[1].sha256]
        );
        assert!(
            !fake.disk().contains_key(&ca[2].sha256),
            "opens are ignored"
        );
    }
}
