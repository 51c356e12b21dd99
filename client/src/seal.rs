//! Sealing: a directory in, a valid tree index and its version digest out.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sealvol_spec::{
    B3Digest, ChunkingParams, Entry, EntryData, Sha256Digest, TreeIndex, TreeStats,
};

use crate::chunker::{chunk_files, ChunkedFile, FileJob, ReadMode};
use crate::walk::{walk, Filter, WalkKind};
use crate::SealError;

/// How to seal.
#[derive(Clone, Debug)]
pub struct SealOptions {
    pub includes: Vec<String>,
    pub excludes: Vec<String>,
    pub params: ChunkingParams,
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    /// Where the file-state cache lives, if anywhere.
    pub cache_dir: crate::CacheDir,
    /// How files are read; see [`ReadMode`] before choosing `Mmap`.
    pub read_mode: ReadMode,
}

impl Default for SealOptions {
    fn default() -> Self {
        SealOptions {
            includes: Vec::new(),
            excludes: Vec::new(),
            params: ChunkingParams::default(),
            threads: 0,
            cache_dir: crate::CacheDir::default_location(),
            read_mode: ReadMode::Read,
        }
    }
}

/// A sealed directory.
#[derive(Clone, Debug)]
pub struct Sealed {
    pub root: PathBuf,
    pub tree: TreeIndex,
    pub digest: B3Digest,
    pub stats: TreeStats,
    /// Files whose data was read (not found in the file-state cache).
    pub files_read: u64,
    pub bytes_read: u64,
    pub duration: Duration,
}

/// Where the bytes of one distinct chunk blob can be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkLocation {
    pub sha256: Sha256Digest,
    pub path: PathBuf,
    pub offset: u64,
    pub length: u32,
}

impl Sealed {
    /// Each distinct chunk blob once, with the first place it occurs: what
    /// a push uploads.
    pub fn chunk_locations(&self) -> Vec<ChunkLocation> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for e in self.tree.entries() {
            if let EntryData::File { chunks, .. } = &e.data {
                for c in chunks {
                    if seen.insert(c.sha256) {
                        out.push(ChunkLocation {
                            sha256: c.sha256,
                            path: self.root.join(&e.path),
                            offset: c.offset,
                            length: c.length,
                        });
                    }
                }
            }
        }
        out
    }
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Seals `root`: walks it, chunks and hashes every selected file (or takes
/// its chunk list from the file-state cache when its `stat` is unchanged),
/// and builds the tree index.
pub fn seal(root: &Path, opts: &SealOptions) -> Result<Sealed, SealError> {
    seal_with_progress(root, opts, &|_| {})
}

/// [`seal`], calling `progress` with the byte count of each file as it is hashed.
pub fn seal_with_progress(
    root: &Path,
    opts: &SealOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Sealed, SealError> {
    seal_streaming(root, opts, progress, None)
}

/// [`seal_with_progress`], handing each chunk of the files it reads to
/// `sink` as soon as it is hashed (files the file-state cache knows are not
/// read, so their chunks are not passed).
pub fn seal_streaming(
    root: &Path,
    opts: &SealOptions,
    progress: &(dyn Fn(u64) + Sync),
    sink: Option<crate::chunker::ChunkSink>,
) -> Result<Sealed, SealError> {
    let started = Instant::now();
    let cutter = opts.params.cutter()?;
    let filter = Filter::new(&opts.includes, &opts.excludes)?;
    let stat_time = std::time::SystemTime::now();
    let walked = walk(root, &filter)?;
    let cache = opts.cache_dir.file_states();

    // Files the cache knows are taken from it; the rest are chunked.
    let mut known: Vec<Option<ChunkedFile>> = Vec::new();
    let mut jobs: Vec<FileJob> = Vec::new();
    for e in &walked {
        if let WalkKind::File { abs, stamp } = &e.kind {
            let hit = cache.as_ref().and_then(|c| c.get(abs, stamp, &opts.params));
            if hit.is_none() {
                jobs.push(FileJob {
                    path: abs.clone(),
                    stamp: *stamp,
                });
            }
            known.push(hit);
        }
    }
    let threads = if opts.threads == 0 {
        default_threads()
    } else {
        opts.threads
    };
    let fresh = chunk_files(&jobs, cutter, threads, opts.read_mode, progress, sink)?;
    if let Some(c) = &cache {
        let items = jobs
            .iter()
            .zip(&fresh)
            .map(|(j, f)| (j.path.as_path(), &j.stamp, f));
        if let Err(e) = c.put_all(items, &opts.params, stat_time) {
            tracing::warn!("could not update the file-state cache: {e}");
        }
    }
    let bytes_read = fresh.iter().map(|f| f.size).sum();
    let files_read = fresh.len() as u64;

    let mut fresh = fresh.into_iter();
    let mut known = known.into_iter();
    let mut entries = Vec::with_capacity(walked.len());
    for e in walked {
        let data = match e.kind {
            WalkKind::Dir => EntryData::Dir,
            WalkKind::Symlink { target } => EntryData::Symlink { target },
            WalkKind::File { .. } => {
                let f = known
                    .next()
                    .flatten()
                    .or_else(|| fresh.next())
                    .expect("one chunked file per walked file");
                EntryData::File {
                    size: f.size,
                    blake3: f.blake3,
                    chunks: f.chunks,
                    pieces: f.pieces,
                }
            }
        };
        entries.push(Entry {
            path: e.rel,
            mode: e.mode,
            data,
        });
    }
    let tree = TreeIndex::new(opts.params, entries)?;
    Ok(Sealed {
        root: root.to_path_buf(),
        digest: tree.version_digest(),
        stats: tree.stats(),
        tree,
        files_read,
        bytes_read,
        duration: started.elapsed(),
    })
}
