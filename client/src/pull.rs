//! Fetching a version (or a path inside one) into a directory. Every byte is
//! checked against the version digest before its file is renamed into
//! place, so the destination never holds a half-written or wrong file:
//! through the chain (SPEC.md §2.5), each 1 MiB piece as soon as the chunks
//! covering it have landed (from the chunk in memory when it holds the
//! whole piece, so most bytes are hashed once and never read back), or for
//! a format 1 tree through the whole-file BLAKE3. The chain is the only
//! hash a format 2 pull computes: chunks are not checked by sha256 as they
//! arrive (SPEC.md §2.5, "Hash each byte once"). A piece the chain rejects
//! is repaired once the rest has landed: the chunks covering it are dropped
//! from the cache, fetched again checked by sha256, and the piece checked
//! again; only a piece built from sha256-checked chunks that still fails
//! ends the pull (the tree's chunk list is forged). A format 1 tree has no
//! chain, so its chunks are checked by sha256. The chunk cache then refers
//! to the finished files, and complete files are recognised by their hash,
//! so pulling again after an interruption fetches only what is still
//! missing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{stream, StreamExt, TryStreamExt};
use sealvol_spec::chain::{self, PieceCv};
use sealvol_spec::path as spath;
use sealvol_spec::reference::VolumeRef;
use sealvol_spec::tree::{ChunkRef, Entry, EntryData, TreeIndex};
use sealvol_spec::{B3Digest, Sha256Digest};
use serde::Serialize;

use crate::cache::ChunkCache;
use crate::dest::{self, Dest};
use crate::remote::{BlobCheck, Remote};
use crate::resolve::{display_ref, load_tree, resolve};
use crate::walk::Filter;
use crate::{Error, Progress};

#[derive(Clone, Debug, Default)]
pub struct PullOptions {
    /// Only files whose path (relative to what is pulled) matches one of
    /// these globs; all when empty.
    pub includes: Vec<String>,
    /// Parallel downloads; 0 picks the default.
    pub jobs: usize,
    /// The chunk cache; off keeps chunks only in memory.
    pub cache_dir: crate::CacheDir,
    /// What to do with a format 1 tree (SPEC.md §2.6).
    pub legacy: crate::resolve::Legacy,
    /// Keep the setuid, setgid and sticky bits a version records; by
    /// default only the `0o777` permission bits are applied.
    pub keep_special_bits: bool,
    /// Refuse a version none of these keys signed (SPEC.md §5.9), before
    /// any file is written; no check when empty.
    pub signed_by: Vec<crate::signature::TrustedKey>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PullReport {
    #[serde(rename = "ref")]
    pub reference: String,
    pub digest: B3Digest,
    pub files: u64,
    pub bytes: u64,
    /// Distinct chunks the pulled files need.
    pub chunks: u64,
    pub chunks_downloaded: u64,
    pub bytes_downloaded: u64,
    pub chunks_from_cache: u64,
    /// Files already complete at the destination (a resumed pull).
    pub files_present: u64,
    /// Whether the version's tree is format 2, so every byte was checked
    /// against the digest as it was read (format 1: only each whole file).
    pub verifiable: bool,
    pub duration_seconds: f64,
    pub bandwidth_bytes_per_second: f64,
}

/// What one selected entry becomes at the destination.
struct Target<'a> {
    entry: &'a Entry,
    /// Its path under the destination: a valid version path (SPEC.md
    /// §2.2), so no `..`, no leading `/`.
    rel: String,
}

impl Target<'_> {
    fn parent(&self) -> Option<&str> {
        spath::parent(&self.rel)
    }

    fn name(&self) -> &str {
        self.rel.rsplit('/').next().unwrap_or(&self.rel)
    }
}

/// The entries `vref`'s path selects, with where each goes under `dir`: a
/// directory's contents go into `dir`, a single file or symlink goes to
/// `dir/<its name>`, like `cp -r dir/. DEST` and `cp file DEST/`.
fn select<'a>(
    tree: &'a TreeIndex,
    path: Option<&str>,
    includes: &Filter,
    shown: &str,
) -> Result<Vec<Target<'a>>, Error> {
    let (entries, base): (&[Entry], Option<&str>) = match path {
        None => (tree.entries(), None),
        Some(p) => {
            let e = tree.get(p).ok_or_else(|| {
                Error::NotFound(format!(
                    "{shown}: no such file or directory in this version"
                ))
            })?;
            if e.is_dir() {
                (tree.subtree(Some(p)).get(1..).unwrap_or(&[]), Some(p))
            } else {
                (std::slice::from_ref(e), spath::parent(p))
            }
        }
    };
    let mut out = Vec::new();
    for e in entries {
        let rel = match base {
            None => e.path.as_str(),
            Some(b) => &e.path[b.len() + 1..],
        };
        // With --include, directories come along only as parents of
        // selected files.
        let keep = if e.is_dir() {
            !includes.has_includes()
        } else {
            includes.included(Path::new(rel))
        };
        if !keep {
            continue;
        }
        out.push(Target {
            entry: e,
            rel: rel.to_string(),
        });
    }
    if out.is_empty() && includes.has_includes() {
        return Err(Error::NotFound(format!(
            "{shown}: no file matches the --include patterns"
        )));
    }
    Ok(out)
}

/// Pulls the version `vref` names into `dir`.
pub async fn pull(
    remote: &Remote,
    vref: &VolumeRef,
    dir: &Path,
    opts: &PullOptions,
    progress: Arc<dyn Progress>,
) -> Result<PullReport, Error> {
    let started = Instant::now();
    let includes = Filter::new(&opts.includes, &[]).map_err(crate::SealError::from)?;
    remote.prepare(&vref.repository(), false).await;
    let version = resolve(remote, vref).await?;
    let tree = load_tree(remote, &version).await?;
    let shown = display_ref(remote, vref);
    let verifiable = crate::resolve::check_legacy(&tree, opts.legacy, &shown)?;
    if !opts.signed_by.is_empty() {
        crate::signature::require(remote, &version, &tree, &opts.signed_by).await?;
    }
    let targets = select(&tree, vref.path.as_deref(), &includes, &shown)?;
    let cache = opts
        .cache_dir
        .chunks()
        .map_err(|e| Error::io(opts.cache_dir.path().unwrap_or(dir), e))?;
    // Only the permission bits unless asked: downloaded model data has no
    // business carrying setuid, setgid or sticky bits.
    let mode_of = |e: &Entry| {
        if opts.keep_special_bits {
            e.mode
        } else {
            e.mode & 0o777
        }
    };

    let dest = Arc::new(Dest::open(dir)?);

    // Files already complete at the destination stay; the rest get a
    // temporary file next to where they go, once there is room for them
    // (nothing is created before that is known).
    let mut todo: Vec<&Target> = Vec::new();
    let mut present = 0u64;
    let mut total_bytes = 0u64;
    let mut to_write = 0u64;
    for t in &targets {
        let EntryData::File { size, blake3, .. } = &t.entry.data else {
            continue;
        };
        total_bytes = total_bytes.saturating_add(*size);
        let existing = dest
            .existing_dir(t.parent())
            .and_then(|parent| dest.existing_file(&parent, t.name()));
        let (size, blake3, mode) = (*size, *blake3, mode_of(t.entry));
        let complete = match existing {
            None => false,
            Some(file) => {
                tokio::task::spawn_blocking(move || is_complete(file, size, &blake3, mode))
                    .await
                    .expect("hashing task panicked")
            }
        };
        if complete {
            present += 1;
        } else {
            to_write = to_write.saturating_add(size);
            todo.push(t);
        }
    }
    // Sizes come from the version: refuse up front what cannot fit rather
    // than filling the disk.
    let free = dest.available()?;
    if to_write > free {
        return Err(Error::Usage(format!(
            "{shown} has {to_write} bytes to write and {} has {free} bytes free; free space, pull into another directory, or pull fewer files with --include",
            dir.display()
        )));
    }

    for t in targets.iter().filter(|t| t.entry.is_dir()) {
        dest.dir(Some(&t.rel))?;
    }
    let staging = Staging {
        dest: dest.clone(),
        files: Mutex::new(Vec::new()),
    };
    let mut swept = std::collections::HashSet::new();
    let mut files: Vec<FileJob> = Vec::new();
    // Each distinct chunk once, with every place it goes. Keyed by length
    // too: the tree's rule 9 (SPEC.md §2.3) already refuses one blob at two
    // lengths, and a plan keyed by digest alone would otherwise write one
    // record's length where another's was due.
    let mut wanted: Vec<Vec<ChunkRef>> = Vec::new();
    let mut places: HashMap<(Sha256Digest, u32), Vec<(usize, u64)>> = HashMap::new();
    for t in todo {
        let EntryData::File {
            size,
            blake3,
            chunks,
            pieces,
        } = &t.entry.data
        else {
            continue;
        };
        let parent = dest.dir(t.parent())?;
        if swept.insert(t.parent().map(str::to_string)) {
            dest.sweep(&parent);
        }
        let shown_path = dest.shown(&t.rel);
        let (temp, _) = dest.create_temp(&parent, *size, &shown_path)?;
        staging.add(t.parent(), &temp);
        let mut own = Vec::new();
        for c in chunks {
            let p = places.entry((c.sha256, c.length)).or_default();
            if p.is_empty() {
                own.push(*c);
            }
            p.push((files.len(), c.offset));
        }
        wanted.push(own);
        files.push(FileJob {
            dest: dest.clone(),
            rel: t.rel.clone(),
            shown: shown_path,
            temp,
            size: *size,
            blake3: *blake3,
            mode: mode_of(t.entry),
            chunks: chunks.clone(),
            remaining: AtomicUsize::new(chunks.len()),
            chain: verifiable.then(|| Chain::new(*size, pieces, chunks)),
            handle: Mutex::new(None),
            writing: Mutex::new(()),
            cache: cache.clone(),
        });
    }

    let wanted = interleave(wanted);
    let files = Arc::new(files);
    let places = Arc::new(places);
    let stats = FetchStats::default();
    progress.phase(
        "downloading",
        wanted.iter().map(|c| u64::from(c.length)).sum(),
    );

    // Empty files have no chunks: finish them now.
    for (i, f) in files.iter().enumerate() {
        if f.remaining.load(Ordering::Relaxed) == 0 {
            finish_file(&files, i, None)?;
        }
    }

    let jobs = if opts.jobs == 0 {
        crate::push::DEFAULT_JOBS
    } else {
        opts.jobs
    };
    // With the chain, each byte is hashed once, by it; without one, sha256
    // is all there is to check chunks against.
    let check = if verifiable {
        BlobCheck::Length
    } else {
        BlobCheck::Sha256
    };
    let chunk_count = wanted.len() as u64;
    let result = stream::iter(wanted)
        .map(|c| {
            let files = files.clone();
            let places = places.clone();
            let cache = cache.clone();
            let stats = &stats;
            let repo = version.repo.clone();
            let progress = progress.clone();
            async move {
                // Not copied into the cache: the finished file is what the
                // cache then points to (`ChunkCache::put_refs`).
                let bytes = fetch(remote, &repo, &c, cache.as_ref(), stats, false, check).await?;
                progress.advance(u64::from(c.length));
                tokio::task::spawn_blocking(move || {
                    let written = write_chunk(&files, &places[&(c.sha256, c.length)], &bytes);
                    crate::buffers::give(bytes);
                    written
                })
                .await
                .expect("writer task panicked")
            }
        })
        .buffer_unordered(jobs)
        .try_collect::<()>()
        .await;
    progress.finish();
    result?;
    repair(remote, &version.repo, &files, cache.as_ref(), &stats).await?;

    // Symlinks, then the modes of the directories this pull created,
    // deepest first (a read-only directory must not stop files from
    // landing in it).
    for t in &targets {
        if let EntryData::Symlink { target } = &t.entry.data {
            let parent = dest.dir(t.parent())?;
            dest.symlink(&parent, t.name(), target, &dest.shown(&t.rel))?;
        }
    }
    for t in targets.iter().rev().filter(|t| t.entry.is_dir()) {
        dest.set_created_dir_mode(&t.rel, mode_of(t.entry))?;
    }
    drop(staging);

    let elapsed = started.elapsed().max(Duration::from_micros(1));
    let bytes_downloaded = stats.bytes.load(Ordering::Relaxed);
    Ok(PullReport {
        reference: display_ref(remote, &version.pinned),
        digest: version.index.digest,
        files: targets
            .iter()
            .filter(|t| matches!(t.entry.data, EntryData::File { .. }))
            .count() as u64,
        bytes: total_bytes,
        chunks: chunk_count,
        chunks_downloaded: stats.downloaded.load(Ordering::Relaxed),
        bytes_downloaded,
        chunks_from_cache: stats.cached.load(Ordering::Relaxed),
        files_present: present,
        verifiable,
        duration_seconds: elapsed.as_secs_f64(),
        bandwidth_bytes_per_second: bytes_downloaded as f64 / elapsed.as_secs_f64(),
    })
}

/// The files' chunk lists taken in turn, one chunk of each file at a time:
/// concurrent downloads then land in different files, and a file's writes
/// seldom wait on each other (ext4 serialises writes to one inode, and a
/// writer spins on its lock while the holder copies — a tenth of a pull's
/// CPU on 2 cores when all downloads went to one file).
fn interleave(lists: Vec<Vec<ChunkRef>>) -> Vec<ChunkRef> {
    let mut iters: Vec<_> = lists.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::new();
    while !iters.is_empty() {
        iters.retain_mut(|it| match it.next() {
            Some(c) => {
                out.push(c);
                true
            }
            None => false,
        });
    }
    out
}

/// Where fetched chunks came from, counted across concurrent fetches.
#[derive(Debug, Default)]
pub struct FetchStats {
    pub downloaded: AtomicU64,
    pub bytes: AtomicU64,
    pub cached: AtomicU64,
}

/// One file being assembled in a temporary file.
struct FileJob {
    dest: Arc<Dest>,
    /// Where it goes under the destination.
    rel: String,
    /// The same, for messages and the chunk cache.
    shown: PathBuf,
    /// The temporary file's name, next to where it goes.
    temp: String,
    size: u64,
    blake3: B3Digest,
    /// The mode it is given (special bits already dropped unless kept).
    mode: u32,
    /// The file's chunks, which the cache refers to once it is in place.
    chunks: Vec<ChunkRef>,
    remaining: AtomicUsize,
    /// Per-piece checking (SPEC.md §2.5); `None` for a format 1 tree,
    /// whose files are checked whole once assembled.
    chain: Option<Chain>,
    /// Open while chunks are landing: opened by the first, closed by the
    /// last, so a version of many files never holds many descriptors.
    handle: Mutex<Option<Arc<std::fs::File>>>,
    /// Held around each write: a writer waiting here sleeps, where one
    /// waiting on the inode's lock in the kernel spins on a core.
    writing: Mutex<()>,
    cache: Option<ChunkCache>,
}

impl FileJob {
    fn parent(&self) -> Option<&str> {
        spath::parent(&self.rel)
    }

    fn name(&self) -> &str {
        self.rel.rsplit('/').next().unwrap_or(&self.rel)
    }

    fn handle(&self) -> Result<Arc<std::fs::File>, Error> {
        let mut h = self.handle.lock().expect("file handle lock");
        if let Some(f) = h.as_ref() {
            return Ok(f.clone());
        }
        // Readable too: a piece that straddles chunks is read back to be
        // checked once its last chunk has landed.
        let f = Arc::new(self.open_temp()?);
        *h = Some(f.clone());
        Ok(f)
    }

    fn open_temp(&self) -> Result<std::fs::File, Error> {
        let parent = self.dest.dir(self.parent())?;
        self.dest
            .reopen_temp(&parent, &self.temp)
            .map_err(|e| Error::io(&self.shown, e.into()))
    }
}

/// The chunk's bytes, from the cache or the registry, checked against its
/// sha256; downloaded chunks are added to the cache. The chunk list they
/// come from is only tied to the version digest through the chain (SPEC.md
/// §2.5) or the whole-file BLAKE3: callers check one of those.
pub async fn fetch_chunk(
    remote: &Remote,
    repo: &str,
    c: &ChunkRef,
    cache: Option<&ChunkCache>,
    stats: &FetchStats,
) -> Result<Vec<u8>, Error> {
    fetch_chunk_as(remote, repo, c, cache, stats, BlobCheck::Sha256).await
}

/// [`fetch_chunk`], checking the bytes as `check` says. With
/// [`BlobCheck::Length`] neither a cached copy nor a download is hashed, and
/// the download is cached unchecked: the caller checks every byte it uses
/// through the chain, and where the chain rejects them calls
/// [`ChunkCache::remove_damaged`] and [`fetch_chunk`] (SPEC.md §2.5), so a
/// poisoned entry costs one fetch, never a lasting error.
pub async fn fetch_chunk_as(
    remote: &Remote,
    repo: &str,
    c: &ChunkRef,
    cache: Option<&ChunkCache>,
    stats: &FetchStats,
    check: BlobCheck,
) -> Result<Vec<u8>, Error> {
    fetch(remote, repo, c, cache, stats, true, check).await
}

/// [`fetch_chunk_as`], adding what it downloads to the cache only with
/// `store`.
async fn fetch(
    remote: &Remote,
    repo: &str,
    c: &ChunkRef,
    cache: Option<&ChunkCache>,
    stats: &FetchStats,
    store: bool,
    check: BlobCheck,
) -> Result<Vec<u8>, Error> {
    if let Some(cache) = cache {
        let cache = cache.clone();
        let c = *c;
        if let Some(bytes) = tokio::task::spawn_blocking(move || match check {
            BlobCheck::Sha256 => cache.get(&c),
            BlobCheck::Length => cache.get_unverified(&c),
        })
        .await
        .expect("cache task panicked")
        {
            stats.cached.fetch_add(1, Ordering::Relaxed);
            return Ok(bytes);
        }
    }
    let bytes = remote
        .get_blob_as(repo, &c.sha256, u64::from(c.length), check)
        .await?;
    stats.downloaded.fetch_add(1, Ordering::Relaxed);
    stats.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    let Some(cache) = cache.filter(|_| store) else {
        return Ok(bytes);
    };
    // Writing 4 MiB is blocking work; keep it off the async threads.
    let (cache, digest) = (cache.clone(), c.sha256);
    Ok(tokio::task::spawn_blocking(move || {
        cache.put(&digest, &bytes);
        bytes
    })
    .await
    .expect("cache task panicked"))
}

/// A file's pieces (SPEC.md §2.5) and how many of the chunks covering each
/// have yet to land: a piece is checked when its count reaches zero.
struct Chain {
    size: u64,
    cvs: Vec<PieceCv>,
    pending: Vec<std::sync::atomic::AtomicU32>,
    /// Pieces checked so far: a file is renamed into place only when this
    /// is every piece, counted rather than assumed from the chunk list.
    checked: AtomicUsize,
    /// Pieces the chain rejected, to be repaired ([`repair`]).
    failed: Mutex<Vec<u64>>,
}

impl Chain {
    fn new(size: u64, cvs: &[PieceCv], chunks: &[ChunkRef]) -> Chain {
        let count = chain::pieces_of(0, size).end as usize;
        let mut pending = vec![0u32; count];
        for c in chunks {
            for p in chain::pieces_of(c.offset, c.offset + u64::from(c.length)) {
                pending[p as usize] += 1;
            }
        }
        Chain {
            size,
            cvs: cvs.to_vec(),
            pending: pending.into_iter().map(Into::into).collect(),
            checked: AtomicUsize::new(0),
            failed: Mutex::new(Vec::new()),
        }
    }

    fn has_failed(&self) -> bool {
        !self.failed.lock().expect("failed pieces lock").is_empty()
    }

    /// Checks piece `p` of `f`, read back from `file`.
    fn check_back(&self, f: &FileJob, file: &std::fs::File, p: u64) -> Result<bool, Error> {
        use std::os::unix::fs::FileExt as _;
        let range = chain::piece_range(self.size, p);
        let mut back = vec![0; (range.end - range.start) as usize];
        file.read_exact_at(&mut back, range.start)
            .map_err(|e| Error::io(&f.shown, e))?;
        Ok(chain::verify_piece(
            self.size, &f.blake3, &self.cvs, p, &back,
        ))
    }

    /// Whether every piece of the file was checked.
    fn complete(&self) -> bool {
        self.checked.load(Ordering::Acquire) == self.pending.len()
    }

    /// Counts `bytes`, just written at `offset` of `file`, against the
    /// pieces they touch, and checks each piece they complete: from `bytes`
    /// when it lies inside them, otherwise read back from `file`. A piece
    /// that fails is noted for [`repair`].
    fn landed(
        &self,
        f: &FileJob,
        file: &std::fs::File,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), Error> {
        use std::os::unix::fs::FileExt as _;
        let end = offset + bytes.len() as u64;
        let mut back = Vec::new();
        for p in chain::pieces_of(offset, end) {
            if self.pending[p as usize].fetch_sub(1, Ordering::AcqRel) != 1 {
                continue;
            }
            let range = chain::piece_range(self.size, p);
            let data = if range.start >= offset && range.end <= end {
                &bytes[(range.start - offset) as usize..(range.end - offset) as usize]
            } else {
                back.resize((range.end - range.start) as usize, 0);
                file.read_exact_at(&mut back, range.start)
                    .map_err(|e| Error::io(&f.shown, e))?;
                &back[..]
            };
            if chain::verify_piece(self.size, &f.blake3, &self.cvs, p, data) {
                self.checked.fetch_add(1, Ordering::AcqRel);
            } else {
                self.failed.lock().expect("failed pieces lock").push(p);
            }
        }
        Ok(())
    }
}

/// Writes a chunk everywhere it occurs, checks the pieces it completes and
/// finishes the files it completes.
fn write_chunk(files: &[FileJob], places: &[(usize, u64)], bytes: &[u8]) -> Result<(), Error> {
    use std::os::unix::fs::FileExt as _;
    for &(i, offset) in places {
        let f = &files[i];
        let file = f.handle()?;
        {
            let _one_writer = f.writing.lock().expect("file write lock");
            file.write_all_at(bytes, offset)
                .map_err(|e| Error::io(&f.shown, e))?;
        }
        if let Some(chain) = &f.chain {
            chain.landed(f, &file, offset, bytes)?;
        }
        drop(file);
        if f.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let last = f.handle.lock().expect("file handle lock").take();
            // A file with a piece to repair is finished by `repair`.
            if !f.chain.as_ref().is_some_and(Chain::has_failed) {
                finish_file(files, i, last)?;
            }
        }
    }
    Ok(())
}

/// Repairs the pieces the chain rejected, once every chunk has landed. Their
/// bytes came unchecked from the cache or the registry (SPEC.md §2.5): the
/// chunks covering each are dropped from the cache, fetched again checked
/// by sha256, and written over it, and the piece is checked again. A piece
/// of sha256-checked chunks that still fails means the chunk list itself
/// is forged: the pull fails and the file is not placed.
async fn repair(
    remote: &Remote,
    repo: &str,
    files: &Arc<Vec<FileJob>>,
    cache: Option<&ChunkCache>,
    stats: &FetchStats,
) -> Result<(), Error> {
    for (i, f) in files.iter().enumerate() {
        let Some(chain) = &f.chain else { continue };
        let failed = std::mem::take(&mut *chain.failed.lock().expect("failed pieces lock"));
        if failed.is_empty() {
            continue;
        }
        tracing::info!(
            file = %f.shown.display(),
            pieces = failed.len(),
            "bytes failed the chain check; fetching their chunks again, checked by sha256"
        );
        let ranges: Vec<_> = failed
            .iter()
            .map(|&p| chain::piece_range(f.size, p))
            .collect();
        let covering = f.chunks.iter().filter(|c| {
            let end = c.offset + u64::from(c.length);
            ranges.iter().any(|r| c.offset < r.end && r.start < end)
        });
        let file = Arc::new(f.open_temp()?);
        for c in covering {
            if let Some(cache) = cache {
                cache.drop_rejected(&c.sha256);
            }
            let bytes = fetch(remote, repo, c, None, stats, false, BlobCheck::Sha256).await?;
            let (file, offset) = (file.clone(), c.offset);
            tokio::task::spawn_blocking(move || {
                use std::os::unix::fs::FileExt as _;
                file.write_all_at(&bytes, offset)
            })
            .await
            .expect("writer task panicked")
            .map_err(|e| Error::io(&f.shown, e))?;
        }
        for (&p, range) in failed.iter().zip(&ranges) {
            if !chain.check_back(f, &file, p)? {
                return Err(Error::Corrupt(format!(
                    "{}: bytes {}..{} do not match the version digest (a chunk list or chunk the registry served is wrong)",
                    f.shown.display(),
                    range.start,
                    range.end
                )));
            }
            chain.checked.fetch_add(1, Ordering::AcqRel);
        }
        let files = files.clone();
        tokio::task::spawn_blocking(move || finish_file(&files, i, Some(file)))
            .await
            .expect("writer task panicked")?;
    }
    Ok(())
}

/// Checks a complete temporary file against the version and moves it into
/// place with its mode. `open` is its handle when the last chunk left one.
fn finish_file(files: &[FileJob], i: usize, open: Option<Arc<std::fs::File>>) -> Result<(), Error> {
    let f = &files[i];
    let file = match open {
        Some(h) => h,
        None => Arc::new(f.open_temp()?),
    };
    let len = file.metadata().map_err(|e| Error::io(&f.shown, e))?.len();
    if len != f.size {
        return Err(Error::Corrupt(format!(
            "{}: assembled file has {len} bytes, the version says {}",
            f.shown.display(),
            f.size
        )));
    }
    // With the chain every piece was checked as it landed (and counted: a
    // piece no chunk covered was never checked, so the file is refused);
    // a format 1 file, or an empty one, is hashed whole here.
    let actual = match &f.chain {
        Some(chain) if f.size > 0 => {
            if !chain.complete() {
                return Err(Error::Corrupt(format!(
                    "{}: only {} of its {} pieces were checked against the version digest",
                    f.shown.display(),
                    chain.checked.load(Ordering::Acquire),
                    chain.pending.len()
                )));
            }
            f.blake3
        }
        _ => hash_file(&file).map_err(|e| Error::io(&f.shown, e))?,
    };
    if actual != f.blake3 {
        return Err(Error::Corrupt(format!(
            "{}: assembled file has BLAKE3 {actual}, the version says {}",
            f.shown.display(),
            f.blake3
        )));
    }
    let parent = f.dest.dir(f.parent())?;
    f.dest
        .place(&parent, &f.temp, &file, f.name(), f.mode, &f.shown)?;
    if let Some(cache) = &f.cache {
        cache.put_refs(&f.shown, &f.chunks);
    }
    Ok(())
}

fn hash_file(file: &std::fs::File) -> std::io::Result<B3Digest> {
    use std::io::{Seek as _, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(0))?;
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(file)?;
    Ok(B3Digest(*hasher.finalize().as_bytes()))
}

/// A destination file (opened without following links) that is already
/// the version's file (a resumed pull), given the right mode if it lacks
/// it.
fn is_complete(file: std::fs::File, size: u64, blake3: &B3Digest, mode: u32) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    let Ok(meta) = file.metadata() else {
        return false;
    };
    if meta.len() != size || hash_file(&file).ok().as_ref() != Some(blake3) {
        return false;
    }
    meta.permissions().mode() & 0o7777 == mode || dest::set_mode(&file, mode, Path::new("")).is_ok()
}

/// Temporary files of a pull in progress: removed unless the pull finished,
/// so a failed pull leaves only complete, verified files behind.
struct Staging {
    dest: Arc<Dest>,
    /// (parent directory, temporary name).
    files: Mutex<Vec<(Option<String>, String)>>,
}

impl Staging {
    fn add(&self, parent: Option<&str>, temp: &str) {
        self.files
            .lock()
            .expect("staging lock")
            .push((parent.map(str::to_string), temp.to_string()));
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Renamed files are gone from their temporary name already; what
        // is left is partial.
        for (parent, name) in self.files.lock().expect("staging lock").iter() {
            self.dest.remove_temp(parent.as_deref(), name);
        }
    }
}
