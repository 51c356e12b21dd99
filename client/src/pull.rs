//! Fetching a version (or a path inside one) into a directory. Every chunk
//! is checked against its sha256 (by the transport, or when read from the
//! cache) before it is written, and every byte is checked against the
//! version digest before its file is renamed into place, so the destination
//! never holds a half-written or wrong file: through the chain (SPEC.md
//! §2.5), each 1 MiB piece as soon as the chunks covering it have landed
//! (from the chunk in memory when it holds the whole piece, so most bytes
//! are hashed once and never read back), or for a format 1 tree through the
//! whole-file BLAKE3. The chunk cache then refers to the finished files, and
//! complete files are recognised by their hash, so pulling again after an
//! interruption fetches only what is still missing.

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
use crate::remote::Remote;
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
    dest: PathBuf,
}

/// The entries `vref`'s path selects, with where each goes under `dir`: a
/// directory's contents go into `dir`, a single file or symlink goes to
/// `dir/<its name>`, like `cp -r dir/. DEST` and `cp file DEST/`.
fn select<'a>(
    tree: &'a TreeIndex,
    path: Option<&str>,
    includes: &Filter,
    dir: &Path,
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
            dest: dir.join(rel),
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
    let targets = select(&tree, vref.path.as_deref(), &includes, dir, &shown)?;
    let cache = opts
        .cache_dir
        .chunks()
        .map_err(|e| Error::io(opts.cache_dir.path().unwrap_or(dir), e))?;

    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    for t in targets.iter().filter(|t| t.entry.is_dir()) {
        std::fs::create_dir_all(&t.dest).map_err(|e| Error::io(&t.dest, e))?;
    }

    // Files already complete at the destination stay; the rest get a
    // temporary file next to where they go.
    let staging = Staging::default();
    let mut swept = std::collections::HashSet::new();
    let mut files: Vec<FileJob> = Vec::new();
    // Each distinct chunk once, with every place it goes.
    let mut wanted: Vec<Vec<ChunkRef>> = Vec::new();
    let mut places: HashMap<Sha256Digest, Vec<(usize, u64)>> = HashMap::new();
    let mut present = 0u64;
    let mut total_bytes = 0u64;
    for t in &targets {
        let EntryData::File {
            size,
            blake3,
            chunks,
            pieces,
        } = &t.entry.data
        else {
            continue;
        };
        total_bytes += size;
        if let Some(parent) = t.dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let (dest, size, blake3) = (t.dest.clone(), *size, *blake3);
        let mode = t.entry.mode;
        let complete = tokio::task::spawn_blocking({
            let dest = dest.clone();
            move || is_complete(&dest, size, &blake3, mode)
        })
        .await
        .expect("hashing task panicked");
        if complete {
            present += 1;
            continue;
        }
        if let Some(parent) = dest.parent() {
            if swept.insert(parent.to_path_buf()) {
                Staging::sweep(parent);
            }
        }
        let tmp = staging.create(&dest, size)?;
        let mut own = Vec::new();
        for c in chunks {
            let p = places.entry(c.sha256).or_default();
            if p.is_empty() {
                own.push(*c);
            }
            p.push((files.len(), c.offset));
        }
        wanted.push(own);
        files.push(FileJob {
            dest,
            tmp,
            size,
            blake3,
            mode,
            chunks: chunks.clone(),
            remaining: AtomicUsize::new(chunks.len()),
            chain: verifiable.then(|| Chain::new(size, pieces, chunks)),
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
            finish_file(&files, i)?;
        }
    }

    let jobs = if opts.jobs == 0 {
        crate::push::DEFAULT_JOBS
    } else {
        opts.jobs
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
                let bytes = fetch(remote, &repo, &c, cache.as_ref(), stats, false).await?;
                progress.advance(u64::from(c.length));
                tokio::task::spawn_blocking(move || {
                    let written = write_chunk(&files, &places[&c.sha256], &bytes);
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

    // Symlinks, then directory modes deepest first (a read-only directory
    // must not stop files from landing in it).
    for t in &targets {
        if let EntryData::Symlink { target } = &t.entry.data {
            place_symlink(&t.dest, target)?;
        }
    }
    for t in targets.iter().rev().filter(|t| t.entry.is_dir()) {
        set_mode(&t.dest, t.entry.mode)?;
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
    dest: PathBuf,
    tmp: PathBuf,
    size: u64,
    blake3: B3Digest,
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
    fn handle(&self) -> Result<Arc<std::fs::File>, Error> {
        let mut h = self.handle.lock().expect("file handle lock");
        if let Some(f) = h.as_ref() {
            return Ok(f.clone());
        }
        // Readable too: a piece that straddles chunks is read back to be
        // checked once its last chunk has landed.
        let f = Arc::new(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&self.tmp)
                .map_err(|e| Error::io(&self.tmp, e))?,
        );
        *h = Some(f.clone());
        Ok(f)
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
    fetch(remote, repo, c, cache, stats, true).await
}

/// [`fetch_chunk`], adding what it downloads to the cache only with
/// `store`.
async fn fetch(
    remote: &Remote,
    repo: &str,
    c: &ChunkRef,
    cache: Option<&ChunkCache>,
    stats: &FetchStats,
    store: bool,
) -> Result<Vec<u8>, Error> {
    if let Some(cache) = cache {
        let cache = cache.clone();
        let c = *c;
        if let Some(bytes) = tokio::task::spawn_blocking(move || cache.get(&c))
            .await
            .expect("cache task panicked")
        {
            stats.cached.fetch_add(1, Ordering::Relaxed);
            return Ok(bytes);
        }
    }
    // The transport checks sha256 as the bytes stream in.
    let bytes = remote
        .get_blob(repo, &c.sha256, u64::from(c.length))
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
        }
    }

    /// Counts `bytes`, just written at `offset` of `file`, against the
    /// pieces they touch, and checks each piece they complete: from `bytes`
    /// when it lies inside them, otherwise read back from `file`.
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
                    .map_err(|e| Error::io(&f.tmp, e))?;
                &back[..]
            };
            if !chain::verify_piece(self.size, &f.blake3, &self.cvs, p, data) {
                return Err(Error::Corrupt(format!(
                    "{}: bytes {}..{} do not match the version digest (a chunk list or chunk the registry served is wrong)",
                    f.dest.display(),
                    range.start,
                    range.end
                )));
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
                .map_err(|e| Error::io(&f.dest, e))?;
        }
        if let Some(chain) = &f.chain {
            chain.landed(f, &file, offset, bytes)?;
        }
        drop(file);
        if f.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            f.handle.lock().expect("file handle lock").take();
            finish_file(files, i)?;
        }
    }
    Ok(())
}

/// Checks a complete temporary file against the version and moves it into
/// place with its mode.
fn finish_file(files: &[FileJob], i: usize) -> Result<(), Error> {
    let f = &files[i];
    let len = std::fs::metadata(&f.tmp)
        .map_err(|e| Error::io(&f.tmp, e))?
        .len();
    if len != f.size {
        return Err(Error::Corrupt(format!(
            "{}: assembled file has {len} bytes, the version says {}",
            f.dest.display(),
            f.size
        )));
    }
    // With the chain every piece was checked as it landed; a file without
    // chunks (empty) has no pieces, so its hash is checked here, cheaply.
    let whole = f.chain.is_none() || f.size == 0;
    let actual = if whole {
        hash_file(&f.tmp).map_err(|e| Error::io(&f.tmp, e))?
    } else {
        f.blake3
    };
    if actual != f.blake3 {
        return Err(Error::Corrupt(format!(
            "{}: assembled file has BLAKE3 {actual}, the version says {}",
            f.dest.display(),
            f.blake3
        )));
    }
    set_mode(&f.tmp, f.mode)?;
    std::fs::rename(&f.tmp, &f.dest).map_err(|e| Error::io(&f.dest, e))?;
    if let Some(cache) = &f.cache {
        cache.put_refs(&f.dest, &f.chunks);
    }
    Ok(())
}

fn hash_file(path: &Path) -> std::io::Result<B3Digest> {
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(std::fs::File::open(path)?)?;
    Ok(B3Digest(*hasher.finalize().as_bytes()))
}

/// A destination file that is already the version's file (a resumed
/// pull), given the right mode if it lacks it.
fn is_complete(dest: &Path, size: u64, blake3: &B3Digest, mode: u32) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(dest) else {
        return false;
    };
    if !meta.is_file() || meta.len() != size {
        return false;
    }
    if hash_file(dest).ok().as_ref() != Some(blake3) {
        return false;
    }
    set_mode(dest, mode).is_ok()
}

fn set_mode(path: &Path, mode: u32) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(path, e))
}

fn place_symlink(dest: &Path, target: &str) -> Result<(), Error> {
    if let Ok(existing) = std::fs::read_link(dest) {
        if existing == Path::new(target) {
            return Ok(());
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(dest) {
        if meta.is_dir() {
            return Err(Error::Usage(format!(
                "{}: a directory is in the way of a symlink of the version; move it away and pull again",
                dest.display()
            )));
        }
        std::fs::remove_file(dest).map_err(|e| Error::io(dest, e))?;
    }
    std::os::unix::fs::symlink(target, dest).map_err(|e| Error::io(dest, e))
}

/// Temporary files of a pull in progress: removed unless the pull finished,
/// so a failed pull leaves only complete, verified files behind.
#[derive(Default)]
struct Staging {
    files: Mutex<Vec<PathBuf>>,
}

impl Staging {
    /// Removes the temporary files a pull that was killed (SIGKILL, power
    /// loss) left in `dir`: `.<name>.sealvol-<pid>` of a process that no
    /// longer runs.
    fn sweep(dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some((_, pid)) = name.rsplit_once(".sealvol-") else {
                continue;
            };
            let stale = name.starts_with('.')
                && pid.parse::<u32>().is_ok_and(|pid| {
                    pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
                });
            if stale {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// `.<name>.sealvol-<pid>` next to `dest`, sized to `size`.
    fn create(&self, dest: &Path, size: u64) -> Result<PathBuf, Error> {
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dest.with_file_name(format!(".{name}.sealvol-{}", std::process::id()));
        let file = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        self.files.lock().expect("staging lock").push(tmp.clone());
        file.set_len(size).map_err(|e| Error::io(&tmp, e))?;
        Ok(tmp)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Renamed files are gone from their temporary path already; what is
        // left is partial.
        for p in self.files.lock().expect("staging lock").iter() {
            let _ = std::fs::remove_file(p);
        }
    }
}
