//! `sealvol verify`: does a registry hold exactly the pinned version, and
//! does a local directory hold exactly its files?
//!
//! Against a registry (any: a mirror filled with skopeo or crane too) it
//! checks the index, the tree and view manifests with the blobs they name,
//! the shard manifests, that every chunk the tree names is listed in a
//! shard (a chunk no manifest lists is one a mirror's GC may delete) and
//! present; with `--deep`, every byte of every file, fetched again from the
//! registry and checked through the chain (SPEC.md §2.5). Against a
//! directory it seals the directory (with the file-state cache, so an
//! unchanged tree verifies without reading a file) and compares entry by
//! entry; against a bare digest it can only say match or mismatch.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use futures_util::{stream, StreamExt, TryStreamExt};
use sealvol_spec::oci::{self, OciDescriptor as Descriptor};
use sealvol_spec::reference::VolumeRef;
use sealvol_spec::tree::{ChunkRef, EntryData, TreeIndex};
use sealvol_spec::{B3Digest, Sha256Digest};
use serde::Serialize;

use crate::inspect::diff;
use crate::pull::{fetch_chunk, FetchStats};
use crate::remote::Remote;
use crate::resolve::{display_ref, load_tree, resolve};
use crate::verified::InOrder;
use crate::{Error, SealOptions, TransportError};

/// One thing missing from the registry, or found damaged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// `manifest`, `blob`, `chunk`, `unlisted` (a chunk present but in no
    /// shard manifest), `tree` or `file`.
    pub kind: &'static str,
    pub digest: String,
    /// The file it belongs to, when it belongs to one.
    pub path: Option<String>,
    /// Why it is corrupt, where more can be said than the kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The result of verifying a version on a registry. In JSON:
/// `{"ref","ok","verifiable","deep","missing":[Problem…],"corrupt":[Problem…]}`.
#[derive(Clone, Debug, Serialize)]
pub struct RegistryReport {
    #[serde(rename = "ref")]
    pub reference: String,
    pub ok: bool,
    /// Whether the tree is format 2, so reads verify against the digest.
    pub verifiable: bool,
    pub deep: bool,
    pub chunks: u64,
    pub bytes_checked: u64,
    pub missing: Vec<Problem>,
    pub corrupt: Vec<Problem>,
}

/// Verifies that `remote` holds the version `vref` names; see the module
/// documentation.
pub async fn verify_registry(
    remote: &Remote,
    vref: &VolumeRef,
    deep: bool,
    jobs: usize,
) -> Result<RegistryReport, Error> {
    remote.prepare(&vref.repository(), false).await;
    let version = resolve(remote, vref).await?;
    let repo = version.repo.as_str();
    let mut report = RegistryReport {
        reference: display_ref(remote, &version.pinned.without_path()),
        ok: false,
        verifiable: false,
        deep,
        chunks: 0,
        bytes_checked: 0,
        missing: Vec::new(),
        corrupt: Vec::new(),
    };
    // The tree: without it nothing else can be checked.
    let tree = match load_tree(remote, &version).await {
        Ok(t) => t,
        Err(Error::Transport(TransportError::NotFound(_))) => {
            report.missing.push(Problem {
                kind: "tree",
                digest: version.index.tree_manifest.digest().to_string(),
                path: None,
                reason: None,
            });
            return Ok(report);
        }
        Err(
            e @ (Error::Corrupt(_)
            | Error::InvalidTree(_)
            | Error::Transport(TransportError::Corrupt { .. })),
        ) => {
            report.corrupt.push(Problem {
                kind: "tree",
                digest: version.index.tree_manifest.digest().to_string(),
                path: None,
                reason: Some(e.to_string()),
            });
            return Ok(report);
        }
        Err(e) => return Err(e),
    };
    report.verifiable = tree.is_verifiable();

    // View manifests and their blobs.
    for m in &version.index.view_manifests {
        match remote.manifest(repo, m.digest().as_ref()).await {
            Ok((bytes, _)) => match oci::image_blobs(&bytes) {
                Ok(blobs) => {
                    for b in blobs {
                        check_blob(remote, repo, &b, &mut report.missing).await?;
                    }
                }
                Err(_) => report.corrupt.push(manifest(m)),
            },
            Err(TransportError::NotFound(_)) => report.missing.push(manifest(m)),
            Err(e) => return Err(e.into()),
        }
    }

    // Shards: what they list is what the registry keeps.
    let mut listed: HashSet<Sha256Digest> = HashSet::new();
    for m in &version.index.chunk_manifests {
        if m.size() > oci::MAX_MANIFEST_BYTES as u64 {
            report.corrupt.push(manifest(m));
            continue;
        }
        match remote.manifest(repo, m.digest().as_ref()).await {
            Ok((bytes, _)) => match oci::artifact_layers(&bytes, oci::MT_CHUNKS_MANIFEST) {
                Ok(layers) => listed.extend(layers.iter().filter_map(oci::sha256_of)),
                Err(_) => report.corrupt.push(manifest(m)),
            },
            Err(TransportError::NotFound(_)) => report.missing.push(manifest(m)),
            Err(e) => return Err(e.into()),
        }
    }

    // Every chunk: listed and present.
    let mut first_use: HashMap<Sha256Digest, &str> = HashMap::new();
    let mut order = Vec::new();
    for e in tree.entries() {
        if let EntryData::File { chunks, .. } = &e.data {
            for c in chunks {
                if first_use.insert(c.sha256, &e.path).is_none() {
                    order.push(c.sha256);
                }
            }
        }
    }
    report.chunks = order.len() as u64;
    for d in &order {
        if !listed.contains(d) {
            report.missing.push(Problem {
                kind: "unlisted",
                digest: d.to_string(),
                path: Some(first_use[d].to_string()),
                reason: None,
            });
        }
    }
    let present: Vec<(Sha256Digest, bool)> = stream::iter(order.iter().copied())
        .map(|d| async move { Ok::<_, Error>((d, remote.has_blob(repo, &d).await?)) })
        .buffered(jobs.max(1))
        .try_collect()
        .await?;
    let absent: HashSet<Sha256Digest> = present
        .into_iter()
        .filter(|(_, here)| !here)
        .map(|(d, _)| d)
        .collect();
    for d in &order {
        if absent.contains(d) {
            report.missing.push(Problem {
                kind: "chunk",
                digest: d.to_string(),
                path: Some(first_use[d].to_string()),
                reason: None,
            });
        }
    }

    if deep {
        deep_check(remote, repo, &tree, &absent, jobs, &mut report).await?;
    }
    report.ok = report.missing.is_empty() && report.corrupt.is_empty();
    Ok(report)
}

/// Every file read again from the registry (not the cache) through the
/// chain; a file with a missing chunk was reported already and is skipped.
///
/// The work is bounded by the tree, not by how it lists its chunks: each
/// distinct chunk is fetched once (records in flight for the same chunk
/// wait on one fetch) and kept while later records still need it, up to
/// [`DEEP_KEEP_BYTES`]; past that a record fetches again, which costs its
/// own length, so what is fetched never exceeds the bytes the files
/// declare. Twenty thousand one-byte records of one chunk are one fetch.
async fn deep_check(
    remote: &Remote,
    repo: &str,
    tree: &TreeIndex,
    absent: &HashSet<Sha256Digest>,
    jobs: usize,
    report: &mut RegistryReport,
) -> Result<(), Error> {
    let files: Vec<(&sealvol_spec::Entry, &[ChunkRef])> = tree
        .entries()
        .iter()
        .filter_map(|e| match &e.data {
            EntryData::File { chunks, .. }
                if !chunks.iter().any(|c| absent.contains(&c.sha256)) =>
            {
                Some((e, chunks.as_slice()))
            }
            _ => None,
        })
        .collect();
    let fetcher = OnceFetcher::new(remote, repo, files.iter().flat_map(|(_, cs)| cs.iter()));
    let mut fetched = stream::iter(
        files
            .iter()
            .enumerate()
            .flat_map(|(i, (_, cs))| cs.iter().map(move |c| (i, c))),
    )
    .map(|(i, c)| {
        let fetcher = &fetcher;
        async move { (i, c, fetcher.get(c).await) }
    })
    .buffered(jobs.max(1));

    // Files in tree order; each checked as its chunks arrive in order.
    let mut current: Option<(usize, InOrder, Option<Problem>)> = None;
    let finish = |cur: Option<(usize, InOrder, Option<Problem>)>, report: &mut RegistryReport| {
        if let Some((i, check, bad)) = cur {
            let (e, _) = files[i];
            let bad = bad.or_else(|| check.finish().err().map(|_| file_problem(e)));
            report.corrupt.extend(bad);
        }
    };
    // Empty files have no records: checked here, in order with the rest.
    let mut next_file = 0usize;
    while let Some((i, c, got)) = fetched.next().await {
        if current.as_ref().is_none_or(|(at, _, _)| *at != i) {
            finish(current.take(), report);
            for (e, _) in &files[next_file..i] {
                let check = InOrder::new(&e.path, &e.data, tree.is_verifiable()).expect("a file");
                if check.finish().is_err() {
                    report.corrupt.push(file_problem(e));
                }
            }
            next_file = i + 1;
            let (e, _) = files[i];
            let check = InOrder::new(&e.path, &e.data, tree.is_verifiable()).expect("a file");
            current = Some((i, check, None));
        }
        let (_, check, bad) = current.as_mut().expect("a current file");
        if bad.is_some() {
            continue;
        }
        let (e, _) = files[i];
        match got {
            Ok(bytes) => {
                report.bytes_checked += bytes.len() as u64;
                if check.push(&bytes, &mut |_| Ok(())).is_err() {
                    *bad = Some(file_problem(e));
                }
            }
            Err(Error::Transport(TransportError::Corrupt { .. }) | Error::Corrupt(_)) => {
                *bad = Some(Problem {
                    kind: "chunk",
                    digest: c.sha256.to_string(),
                    path: Some(e.path.clone()),
                    reason: None,
                });
            }
            Err(err) => return Err(err),
        }
    }
    finish(current.take(), report);
    for (e, _) in &files[next_file..] {
        let check = InOrder::new(&e.path, &e.data, tree.is_verifiable()).expect("a file");
        if check.finish().is_err() {
            report.corrupt.push(file_problem(e));
        }
    }
    Ok(())
}

/// Chunks kept in memory by `verify --deep` for records still to come.
const DEEP_KEEP_BYTES: u64 = 256 << 20;

/// Fetches each distinct chunk once for [`deep_check`]: a record waits on
/// the fetch of an earlier record of the same chunk, and a chunk is kept
/// until its last record took it (or dropped at once when the budget is
/// spent).
struct OnceFetcher<'a> {
    remote: &'a Remote,
    repo: &'a str,
    stats: FetchStats,
    /// Records still to come per chunk, and the chunk's shared fetch.
    chunks: std::sync::Mutex<HashMap<ChunkRef2, (usize, SharedChunk)>>,
    kept: std::sync::atomic::AtomicU64,
}

/// A chunk as a blob: its digest and length (rule 9 of SPEC.md §2.3 gives
/// one length per digest; keyed by both all the same).
type ChunkRef2 = (Sha256Digest, u32);
type SharedChunk = std::sync::Arc<tokio::sync::OnceCell<std::sync::Arc<Vec<u8>>>>;

impl<'a> OnceFetcher<'a> {
    fn new<'c>(
        remote: &'a Remote,
        repo: &'a str,
        records: impl Iterator<Item = &'c ChunkRef>,
    ) -> Self {
        let mut chunks: HashMap<ChunkRef2, (usize, SharedChunk)> = HashMap::new();
        for c in records {
            chunks.entry((c.sha256, c.length)).or_default().0 += 1;
        }
        OnceFetcher {
            remote,
            repo,
            stats: FetchStats::default(),
            chunks: std::sync::Mutex::new(chunks),
            kept: Default::default(),
        }
    }

    async fn get(&self, c: &ChunkRef) -> Result<std::sync::Arc<Vec<u8>>, Error> {
        use std::sync::atomic::Ordering;
        let key = (c.sha256, c.length);
        let cell = self.chunks.lock().expect("chunks lock")[&key].1.clone();
        let bytes = cell
            .get_or_try_init(|| async {
                let bytes = fetch_chunk(self.remote, self.repo, c, None, &self.stats).await?;
                self.kept.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                Ok::<_, Error>(std::sync::Arc::new(bytes))
            })
            .await?
            .clone();
        let mut chunks = self.chunks.lock().expect("chunks lock");
        let (left, cell) = chunks.get_mut(&key).expect("a planned chunk");
        *left -= 1;
        if cell.initialized() && (*left == 0 || self.kept.load(Ordering::Relaxed) > DEEP_KEEP_BYTES)
        {
            // Fetched again by a later record, if any: a fresh cell.
            *cell = SharedChunk::default();
            self.kept.fetch_sub(bytes.len() as u64, Ordering::Relaxed);
        }
        Ok(bytes)
    }
}

fn file_problem(e: &sealvol_spec::Entry) -> Problem {
    let blake3 = match &e.data {
        EntryData::File { blake3, .. } => blake3.to_string(),
        _ => String::new(),
    };
    Problem {
        kind: "file",
        digest: blake3,
        path: Some(e.path.clone()),
        reason: None,
    }
}

fn manifest(d: &Descriptor) -> Problem {
    Problem {
        kind: "manifest",
        digest: d.digest().to_string(),
        path: None,
        reason: None,
    }
}

async fn check_blob(
    remote: &Remote,
    repo: &str,
    d: &Descriptor,
    missing: &mut Vec<Problem>,
) -> Result<(), Error> {
    let Some(digest) = oci::sha256_of(d) else {
        return Ok(());
    };
    if !remote.has_blob(repo, &digest).await? {
        missing.push(Problem {
            kind: "blob",
            digest: digest.to_string(),
            path: None,
            reason: None,
        });
    }
    Ok(())
}

/// How a local directory differs from a version. In JSON:
/// `{"ref","dir","ok","digest","differences":[{"path","what"}]}`.
#[derive(Clone, Debug, Serialize)]
pub struct DirReport {
    #[serde(rename = "ref")]
    pub reference: String,
    pub dir: PathBuf,
    pub ok: bool,
    /// The directory's own version digest.
    pub digest: B3Digest,
    pub differences: Vec<Difference>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Difference {
    pub path: String,
    /// `missing` (in the version, not in the directory), `extra`, or
    /// `changed` (content, kind, mode or link target).
    pub what: &'static str,
}

/// Compares `dir` with the version `vref` names, naming every entry that
/// differs.
pub async fn verify_dir(
    remote: &Remote,
    vref: &VolumeRef,
    dir: &Path,
    seal: &SealOptions,
) -> Result<DirReport, Error> {
    remote.prepare(&vref.repository(), false).await;
    let version = resolve(remote, vref).await?;
    let tree = load_tree(remote, &version).await?;
    let local = seal_dir(dir, seal, tree.params()).await?;
    let shown = display_ref(remote, &version.pinned.without_path());
    let d = diff(dir.display().to_string(), &local.tree, shown.clone(), &tree);
    let mut differences: Vec<Difference> = Vec::new();
    for (entries, what) in [(&d.added, "missing"), (&d.removed, "extra")] {
        differences.extend(entries.iter().map(|e| Difference {
            path: e.path.clone(),
            what,
        }));
    }
    differences.extend(d.changed.iter().map(|c| Difference {
        path: c.path.clone(),
        what: "changed",
    }));
    differences.sort_by(|a, b| sealvol_spec::path::canonical_cmp(&a.path, &b.path));
    Ok(DirReport {
        reference: shown,
        dir: dir.to_path_buf(),
        ok: differences.is_empty() && local.digest == version.index.digest,
        digest: local.digest,
        differences,
    })
}

/// Whether `dir` seals to `digest`. In JSON: `{"dir","digest","actual","ok"}`.
#[derive(Clone, Debug, Serialize)]
pub struct DigestReport {
    pub dir: PathBuf,
    pub digest: B3Digest,
    pub actual: B3Digest,
    pub ok: bool,
}

pub async fn verify_dir_digest(
    dir: &Path,
    digest: B3Digest,
    seal: &SealOptions,
) -> Result<DigestReport, Error> {
    let local = seal_dir(dir, seal, seal.params).await?;
    Ok(DigestReport {
        dir: dir.to_path_buf(),
        digest,
        actual: local.digest,
        ok: local.digest == digest,
    })
}

/// Seals on a blocking thread, with the parameters the version used so the
/// file-state cache of its push answers without reading.
async fn seal_dir(
    dir: &Path,
    seal: &SealOptions,
    params: sealvol_spec::ChunkingParams,
) -> Result<crate::Sealed, Error> {
    let dir = dir.to_path_buf();
    let mut opts = seal.clone();
    opts.params = params;
    Ok(
        tokio::task::spawn_blocking(move || crate::seal(&dir, &opts))
            .await
            .expect("sealing task panicked")?,
    )
}
