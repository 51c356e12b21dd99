//! Publishing a directory as a sealed version (SPEC.md §5.7): seal it, send
//! only the chunks the registry lacks (parallel `HEAD`s, then a
//! cross-repository mount, then an upload), write the manifests bottom-up,
//! the index by digest, and only then the tags. An interrupted push leaves
//! no tag pointing at a partial version; pushing it again sends only what
//! is still missing.
//!
//! Sealing and sending overlap: each chunk the sealer hashes goes out from
//! memory at once (a bounded queue slows sealing down to the link), so a
//! cold push costs about the larger of the two, and no byte is read or
//! hashed twice. Chunks of files the file-state cache knows are not read
//! while sealing; they are checked, and sent from their files, after it.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{stream, StreamExt, TryStreamExt};
use sealvol_spec::oci::{self, VersionIndex, VersionMeta};
use sealvol_spec::reference::{Selector, Tag, VolumeRef};
use sealvol_spec::{B3Digest, ChunkingParams, Sha256Digest, TreeFormat};
use serde::Serialize;

use crate::cache::SeenBlobs;
use crate::remote::Remote;
use crate::resolve::display_ref;
use crate::{ChunkLocation, Error, Progress, SealOptions, TransportError};

/// What to push besides the directory and the ref.
#[derive(Clone, Debug, Default)]
pub struct PushOptions {
    /// How to seal. Its chunking parameters apply to a new volume only: a
    /// new version of a volume is cut with the parameters of the volume's
    /// head (SPEC.md §4.1), so that unchanged regions give the same chunks.
    pub seal: SealOptions,
    /// User tags to move to the new version (besides the ref's own tag).
    pub tags: Vec<Tag>,
    /// Parallel transfers; 0 picks the default.
    pub jobs: usize,
    /// Where the client remembers which repositories hold which chunks.
    pub cache_dir: crate::CacheDir,
}

/// Parallel transfers when the user does not say: enough to fill a fast
/// link with 2–4 MiB chunks, few enough to stay far below the memory budget
/// (each transfer holds at most one chunk: 8 MiB, or 16 MiB in volumes of
/// the earlier default).
pub const DEFAULT_JOBS: usize = 8;

/// What a push did.
#[derive(Clone, Debug, Serialize)]
pub struct PushReport {
    /// `bdn:ns/vol@b3:<hex>` (qualified off the default registry).
    #[serde(rename = "ref")]
    pub reference: String,
    pub digest: B3Digest,
    pub index_digest: Sha256Digest,
    pub files: u64,
    pub bytes: u64,
    /// Distinct chunks of the version.
    pub chunks: u64,
    pub chunks_uploaded: u64,
    pub bytes_uploaded: u64,
    /// Chunks linked from another volume of the registry instead of sent.
    pub chunks_mounted: u64,
    /// The version was already on the registry; only tags moved.
    pub already_present: bool,
    pub tags: Vec<String>,
    pub duration_seconds: f64,
    pub bandwidth_bytes_per_second: f64,
}

/// Seals `dir` and publishes it to the volume `vref` names.
pub async fn push(
    remote: &Remote,
    dir: &Path,
    vref: &VolumeRef,
    opts: &PushOptions,
    progress: Arc<dyn Progress>,
) -> Result<PushReport, Error> {
    let started = Instant::now();
    if vref.path.is_some() {
        return Err(Error::Usage(format!(
            "{vref}: a push target names a volume, not a path inside it"
        )));
    }
    let mut tags = opts.tags.clone();
    match &vref.selector {
        Selector::Head => {}
        Selector::Tag(t) if t.is_digest_tag() || t.as_str() == sealvol_spec::reference::HEAD => {
            return Err(Error::Usage(format!(
                "{vref}: tag {t} is reserved; push to the volume and use --tag for your own tags"
            )))
        }
        Selector::Tag(t) => tags.insert(0, t.clone()),
        Selector::Digest(_) => {
            return Err(Error::Usage(format!(
                "{vref}: a version's digest comes from its content; push to bdn:ns/vol or bdn:ns/vol:tag"
            )))
        }
    }

    // The volume's push claim (SPEC.md §7.4), before the first write (the
    // first chunks go out while sealing); a registry without the volume API
    // takes pushes without one.
    let claim = crate::claim::hold_push_claim(remote, vref, &crate::claim::push_holder()).await?;
    let result = async {
        remote.prepare(&vref.repository(), true).await;
        let mut opts = opts.clone();
        if let Some(params) = head_params(remote, vref).await? {
            opts.seal.params = params;
        }
        let opts = &opts;
        let counters = Counters::default();
        let (sealed, sent) =
            seal_sending(remote, dir, vref, opts, &counters, progress.clone()).await?;
        publish(
            remote,
            dir,
            vref,
            tags,
            opts,
            &sealed,
            &sent,
            counters,
            claim.as_ref(),
            progress,
        )
        .await
    }
    .await;
    if let Some(c) = claim {
        c.release().await;
    }
    let mut report = result?;
    let elapsed = started.elapsed().max(Duration::from_micros(1));
    report.duration_seconds = elapsed.as_secs_f64();
    report.bandwidth_bytes_per_second = report.bytes_uploaded as f64 / elapsed.as_secs_f64();
    Ok(report)
}

/// The chunking parameters of the volume's head, if it has one (SPEC.md
/// §4.1). A head that is not a readable version does not stop the push: it
/// is then sealed as a new volume would be.
async fn head_params(remote: &Remote, vref: &VolumeRef) -> Result<Option<ChunkingParams>, Error> {
    let head = vref.with_selector(Selector::Head);
    let found = match crate::resolve::resolve(remote, &head).await {
        Ok(v) => crate::resolve::load_tree(remote, &v).await,
        Err(e) => Err(e),
    };
    match found {
        Ok(tree) => Ok(Some(tree.params())),
        Err(Error::NotFound(_)) => Ok(None),
        Err(e @ (Error::NotAVersion(_) | Error::Corrupt(_) | Error::InvalidTree(_))) => {
            tracing::warn!(
                "the volume's head cannot be read ({e}); sealing with the default chunking"
            );
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

fn jobs(opts: &PushOptions) -> usize {
    if opts.jobs == 0 {
        DEFAULT_JOBS
    } else {
        opts.jobs
    }
}

/// Seals `dir` on all cores while sending each chunk it hashes that the
/// registry lacks; returns the sealed version and the chunks known to be in
/// the repository now.
async fn seal_sending(
    remote: &Remote,
    dir: &Path,
    vref: &VolumeRef,
    opts: &PushOptions,
    counters: &Counters,
    progress: Arc<dyn Progress>,
) -> Result<(crate::Sealed, HashSet<Sha256Digest>), Error> {
    let repo = vref.repository();
    let seen = opts.cache_dir.seen(remote.registry());
    let jobs = jobs(opts);
    // Chunks queued for sending wait in pooled copies; the queue's bound
    // (with the transfers in flight, 2 × jobs chunks) is what the sealer
    // may run ahead of the link.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(Sha256Digest, Bytes)>(jobs);

    // Sealing reads every byte on all cores; keep it off the async threads.
    progress.phase("sealing", 0);
    let sealing = {
        let dir = dir.to_path_buf();
        let seal_opts = opts.seal.clone();
        let p = progress.clone();
        tokio::task::spawn_blocking(move || {
            let offered = std::sync::Mutex::new(HashSet::new());
            let sink = |digest: Sha256Digest, data: &[u8]| {
                if !offered.lock().expect("offered lock").insert(digest) {
                    return true;
                }
                // Closed only when sending failed: sealing stops, and the
                // push reports the sending error.
                tx.blocking_send((digest, crate::buffers::pooled_bytes(data)))
                    .is_ok()
            };
            crate::seal::seal_streaming(&dir, &seal_opts, &|n| p.advance(n), Some(&sink))
        })
    };
    let sent = std::sync::Mutex::new(HashSet::new());
    // The stream owns the receiver: when sending fails, the finished
    // future drops it, so a sealer waiting on a full queue is released.
    let sending = stream::poll_fn(move |cx| rx.poll_recv(cx))
        .map(|(digest, bytes): (Sha256Digest, Bytes)| {
            let (repo, seen, sent) = (&repo, seen.as_ref(), &sent);
            async move {
                let chunk = Chunk {
                    sha256: digest,
                    length: bytes.len() as u32,
                    bytes: ChunkBytes::Memory(bytes),
                };
                send_chunk(remote, repo, seen, seen.is_some(), chunk, counters, None).await?;
                sent.lock().expect("sent lock").insert(digest);
                Ok::<_, Error>(())
            }
        })
        .buffer_unordered(jobs)
        .try_collect::<()>();
    let (sealed, sending) = tokio::join!(sealing, sending);
    // A failed send stops the sealing, so its error comes first.
    sending?;
    let sealed = sealed.expect("sealing task panicked")?;
    Ok((sealed, sent.into_inner().expect("sent lock")))
}

/// Sends what the registry still lacks of a sealed version (`sent` is
/// there already), then its tags; `claim`, when held, must still be ours
/// before the index and tags move.
#[allow(clippy::too_many_arguments)]
async fn publish(
    remote: &Remote,
    dir: &Path,
    vref: &VolumeRef,
    tags: Vec<Tag>,
    opts: &PushOptions,
    sealed: &crate::Sealed,
    sent: &HashSet<Sha256Digest>,
    counters: Counters,
    claim: Option<&crate::claim::PushClaim>,
    progress: Arc<dyn Progress>,
) -> Result<PushReport, Error> {
    let repo = vref.repository();
    let still_claimed = || claim.map_or(Ok(()), |c| c.check());
    let stats = sealed.stats;
    let version = VolumeRef {
        selector: Selector::Digest(sealvol_spec::DigestSelector::B3(sealed.digest)),
        ..vref.clone()
    };

    let digest_tag = Tag::for_digest(&sealed.digest);
    let seen = opts.cache_dir.seen(remote.registry());

    // The same content already published with a format 2 tree: nothing to
    // upload, and the version keeps the index (and creation time) it was
    // first sealed with (SPEC.md §5.7). Published with a format 1 tree, it
    // is published again, under the tags that named the old index.
    let mut republish: Option<Sha256Digest> = None;
    let mut first_created = None;
    let existing = match remote.manifest(&repo, digest_tag.as_str()).await {
        Ok((bytes, digest)) => match VersionIndex::parse(&bytes) {
            Ok(ix) if ix.digest == sealed.digest => {
                match crate::resolve::tree_format(remote, &repo, &ix).await? {
                    Some(TreeFormat::V2) => Some((bytes, digest)),
                    _ => {
                        republish = Some(digest);
                        first_created = ix.created.clone();
                        None
                    }
                }
            }
            _ => None,
        },
        Err(TransportError::NotFound(_)) => None,
        Err(e) => return Err(e.into()),
    };
    // The tags that name the old index, read before the new one is stored
    // (a registry with the volume API moves them itself on re-publication).
    let old_tags = match republish {
        Some(old) => tags_naming(remote, &repo, &old).await?,
        None => Vec::new(),
    };

    let mut report = PushReport {
        reference: display_ref(remote, &version),
        digest: sealed.digest,
        index_digest: Sha256Digest([0; 32]),
        files: stats.files,
        bytes: stats.bytes,
        chunks: stats.unique_chunks,
        chunks_uploaded: 0,
        bytes_uploaded: 0,
        chunks_mounted: 0,
        already_present: existing.is_some(),
        tags: Vec::new(),
        duration_seconds: 0.0,
        bandwidth_bytes_per_second: 0.0,
    };

    let (index_bytes, index_digest) = match existing {
        Some(found) => found,
        None => {
            let built = oci::build_version(
                &sealed.tree,
                &VersionMeta {
                    // A re-publication keeps the version's creation time.
                    created: first_created.clone().unwrap_or_else(|| {
                        humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
                    }),
                    source: None,
                },
            )
            .map_err(|e| Error::Usage(format!("{}: {e}", dir.display())))?;

            let all = sealed.chunk_locations();
            // What went out while sealing is there; the rest (chunks of
            // files the file-state cache knew) is checked now.
            let mut locations: Vec<_> = all
                .iter()
                .filter(|l| !sent.contains(&l.sha256))
                .cloned()
                .collect();
            progress.phase(
                "uploading",
                locations.iter().map(|l| u64::from(l.length)).sum(),
            );
            let jobs = jobs(opts);
            // Chunks this client saw in the repository before are trusted
            // without a HEAD. If the registry lost one since, it rejects the
            // shard manifest that names it; the chunks are then checked
            // again, this time each with a HEAD.
            let mut trust_seen = seen.is_some();
            loop {
                stream::iter(locations.iter().cloned())
                    .map(|loc| {
                        send_chunk(
                            remote,
                            &repo,
                            seen.as_ref(),
                            trust_seen,
                            Chunk::at(loc),
                            &counters,
                            Some(progress.as_ref()),
                        )
                    })
                    .buffer_unordered(jobs)
                    .try_collect::<()>()
                    .await?;

                let sent = put_small_blobs(remote, &repo, &built, jobs).await?;
                report_bytes(&counters, sent as usize);
                let manifests = put_manifests(remote, &repo, &built, jobs).await;
                match manifests {
                    Ok(()) => break,
                    Err(e) if trust_seen && counters.trusted.load(Ordering::Relaxed) > 0 => {
                        tracing::debug!(error = %e, "shard manifest rejected");
                        tracing::warn!("a chunk seen in this volume before is gone from the registry; checking every chunk");
                        trust_seen = false;
                        locations = all.clone();
                        progress.phase(
                            "uploading",
                            locations.iter().map(|l| u64::from(l.length)).sum(),
                        );
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            report.chunks_uploaded = counters.uploaded.load(Ordering::Relaxed);
            report.bytes_uploaded = counters.bytes.load(Ordering::Relaxed);
            report.chunks_mounted = counters.mounted.load(Ordering::Relaxed);
            let index_digest = built.index.digest();
            let index_bytes = Bytes::from(built.index.bytes.clone());
            still_claimed()?;
            remote
                .put_manifest(
                    &repo,
                    &index_digest.to_string(),
                    index_bytes.clone(),
                    INDEX_TYPE,
                )
                .await?;
            (index_bytes, index_digest)
        }
    };

    // Tags last: the digest tag, head, then the user's. A re-publication
    // keeps head where it was unless it named the old index.
    still_claimed()?;
    let mut all_tags = vec![digest_tag];
    if republish.is_none() {
        all_tags.push(head_tag());
    }
    for t in old_tags.into_iter().chain(tags) {
        if !all_tags.contains(&t) {
            all_tags.push(t);
        }
    }
    for t in &all_tags {
        remote
            .put_manifest(&repo, t.as_str(), index_bytes.clone(), INDEX_TYPE)
            .await?;
    }
    progress.finish();
    report.index_digest = index_digest;
    report.tags = all_tags
        .iter()
        .filter(|t| !t.is_digest_tag())
        .map(|t| t.as_str().to_string())
        .collect();
    Ok(report)
}

/// The small blobs of a built version (tree index, configs, view layer)
/// that `repo` lacks; returns the bytes sent.
pub(crate) async fn put_small_blobs(
    remote: &Remote,
    repo: &str,
    built: &oci::BuiltVersion,
    jobs: usize,
) -> Result<u64, Error> {
    let sent = AtomicU64::new(0);
    stream::iter(&built.blobs)
        .map(|c| async {
            let d = c.digest();
            if !remote.has_blob(repo, &d).await? {
                remote
                    .put_blob(repo, &d, Bytes::from(c.bytes.clone()))
                    .await?;
                sent.fetch_add(c.bytes.len() as u64, Ordering::Relaxed);
            }
            Ok::<_, Error>(())
        })
        .buffer_unordered(jobs.max(1))
        .try_collect::<()>()
        .await?;
    Ok(sent.into_inner())
}

/// The manifests under a built version's index, by digest (each after what
/// it references: the blobs are stored first).
pub(crate) async fn put_manifests(
    remote: &Remote,
    repo: &str,
    built: &oci::BuiltVersion,
    jobs: usize,
) -> Result<(), TransportError> {
    stream::iter(&built.manifests)
        .map(|m| async {
            let digest = m.digest().to_string();
            let media_type = m.descriptor.media_type().to_string();
            remote
                .put_manifest(repo, &digest, Bytes::from(m.bytes.clone()), &media_type)
                .await
        })
        .buffer_unordered(jobs.max(1))
        .try_collect::<()>()
        .await
}

/// The tags of `repo` (digest tags aside) that name the manifest `index`.
pub(crate) async fn tags_naming(
    remote: &Remote,
    repo: &str,
    index: &Sha256Digest,
) -> Result<Vec<Tag>, Error> {
    let mut out = Vec::new();
    for t in remote.tags(repo).await? {
        let Ok(tag) = t.parse::<Tag>() else { continue };
        if tag.is_digest_tag() {
            continue;
        }
        match remote.manifest(repo, tag.as_str()).await {
            Ok((_, d)) if d == *index => out.push(tag),
            Ok(_) | Err(TransportError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// The media type of a version index.
pub const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";

fn head_tag() -> Tag {
    sealvol_spec::reference::HEAD
        .parse()
        .expect("`head` is a valid tag")
}

#[derive(Default)]
struct Counters {
    /// Chunks taken as present because this client saw them there before.
    trusted: AtomicU64,
    uploaded: AtomicU64,
    bytes: AtomicU64,
    mounted: AtomicU64,
}

fn report_bytes(c: &Counters, n: usize) {
    c.bytes.fetch_add(n as u64, Ordering::Relaxed);
}

/// A chunk to send, with where its bytes are.
struct Chunk {
    sha256: Sha256Digest,
    length: u32,
    bytes: ChunkBytes,
}

enum ChunkBytes {
    /// In hand: hashed by the sealer a moment ago.
    Memory(Bytes),
    /// To be read from the file and checked again.
    File(ChunkLocation),
}

impl Chunk {
    fn at(loc: ChunkLocation) -> Chunk {
        Chunk {
            sha256: loc.sha256,
            length: loc.length,
            bytes: ChunkBytes::File(loc),
        }
    }
}

/// Makes sure the registry holds one chunk: seen there before (when
/// `trust_seen`), present, mounted from another volume, or uploaded (from
/// memory, or read from its file and checked).
#[allow(clippy::too_many_arguments)]
async fn send_chunk(
    remote: &Remote,
    repo: &str,
    seen: Option<&SeenBlobs>,
    trust_seen: bool,
    chunk: Chunk,
    counters: &Counters,
    progress: Option<&dyn Progress>,
) -> Result<(), Error> {
    let digest = chunk.sha256;
    let length = u64::from(chunk.length);
    let advance = |n| {
        if let Some(p) = progress {
            p.advance(n)
        }
    };
    let known = seen.map(|s| s.repos(&digest)).unwrap_or_default();
    if trust_seen && known.iter().any(|r| r == repo) {
        counters.trusted.fetch_add(1, Ordering::Relaxed);
        advance(length);
        return Ok(());
    }
    if remote.has_blob(repo, &digest).await? {
        if let Some(s) = seen {
            s.record(&digest, repo);
        }
        advance(length);
        return Ok(());
    }
    if let Some(s) = seen {
        if known.iter().any(|r| r == repo) {
            s.forget(&digest, repo);
        }
        for from in known.into_iter().filter(|r| r != repo) {
            if remote.mount_blob(repo, &from, &digest).await {
                counters.mounted.fetch_add(1, Ordering::Relaxed);
                s.record(&digest, repo);
                advance(length);
                return Ok(());
            }
            s.forget(&digest, &from);
        }
    }
    let bytes = match chunk.bytes {
        ChunkBytes::Memory(bytes) => bytes,
        ChunkBytes::File(loc) => tokio::task::spawn_blocking(move || read_chunk(&loc))
            .await
            .expect("chunk reader panicked")?,
    };
    remote.put_blob(repo, &digest, bytes).await?;
    counters.uploaded.fetch_add(1, Ordering::Relaxed);
    counters.bytes.fetch_add(length, Ordering::Relaxed);
    if let Some(s) = seen {
        s.record(&digest, repo);
    }
    advance(length);
    Ok(())
}

/// Reads a chunk back from its file and checks it is still what was sealed
/// (its sha256, the only per-chunk hash since tree format 2), so a file
/// changed since sealing is named as such rather than refused by the
/// registry as a bad digest.
fn read_chunk(loc: &ChunkLocation) -> Result<Bytes, Error> {
    use std::io::{Read as _, Seek as _};
    let io = |e| Error::io(&loc.path, e);
    let mut file = std::fs::File::open(&loc.path).map_err(io)?;
    file.seek(std::io::SeekFrom::Start(loc.offset))
        .map_err(io)?;
    // read_to_end fills spare capacity directly: no zeroing pass first.
    let mut buf = Vec::with_capacity(loc.length as usize);
    file.take(u64::from(loc.length))
        .read_to_end(&mut buf)
        .map_err(io)?;
    if buf.len() != loc.length as usize || Sha256Digest::of(&buf) != loc.sha256 {
        return Err(Error::Seal(crate::SealError::Changed(loc.path.clone())));
    }
    Ok(Bytes::from(buf))
}
