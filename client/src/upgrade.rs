//! `sealvol upgrade REF`: re-publishes a version whose tree index is format
//! 1 with a format 2 tree (SPEC.md §2.6), from the registry's own chunks,
//! for versions whose source folder is gone. Every file is read through its
//! chunks in order and checked against its whole-file BLAKE3 (which the
//! version digest covers) while its chaining values are computed, so the
//! new tree states only what the old digest already promised. The version
//! digest, its tags and (on a registry with the volume API) its sequence
//! and `head` stay as they were.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{stream, StreamExt, TryStreamExt};
use sealvol_spec::chain::PieceHasher;
use sealvol_spec::oci::{self, VersionMeta};
use sealvol_spec::reference::{Tag, VolumeRef};
use sealvol_spec::tree::{Entry, EntryData, TreeIndex};
use sealvol_spec::{B3Digest, Sha256Digest};
use serde::Serialize;

use crate::cache::ChunkCache;
use crate::pull::{fetch_chunk, FetchStats};
use crate::push::{put_manifests, put_small_blobs, tags_naming, INDEX_TYPE};
use crate::remote::Remote;
use crate::resolve::{display_ref, load_tree, resolve};
use crate::{Error, Progress};

/// What an upgrade did.
#[derive(Clone, Debug, Serialize)]
pub struct UpgradeReport {
    #[serde(rename = "ref")]
    pub reference: String,
    pub digest: B3Digest,
    /// The index readers now find under the digest.
    pub index_digest: Sha256Digest,
    /// `false` when the version already had a format 2 tree.
    pub upgraded: bool,
    pub files: u64,
    pub bytes_read: u64,
    /// Tags moved to the new index (`head` among them when it named it).
    pub tags: Vec<String>,
    pub duration_seconds: f64,
}

/// Upgrades the version `vref` names; see the module documentation.
pub async fn upgrade(
    remote: &Remote,
    vref: &VolumeRef,
    jobs: usize,
    cache: Option<&ChunkCache>,
    progress: &dyn Progress,
) -> Result<UpgradeReport, Error> {
    let started = Instant::now();
    if vref.path.is_some() {
        return Err(Error::Usage(format!(
            "{vref}: upgrade names a version, not a path inside it"
        )));
    }
    remote.prepare(&vref.repository(), true).await;
    let version = resolve(remote, vref).await?;
    let tree = load_tree(remote, &version).await?;
    let shown = display_ref(remote, &version.pinned);
    let mut report = UpgradeReport {
        reference: shown.clone(),
        digest: version.index.digest,
        index_digest: version.index_digest,
        upgraded: false,
        files: tree.stats().files,
        bytes_read: 0,
        tags: Vec::new(),
        duration_seconds: 0.0,
    };
    if tree.is_verifiable() {
        report.duration_seconds = started.elapsed().as_secs_f64();
        return Ok(report);
    }

    progress.phase("reading", tree.stats().bytes);
    let stats = FetchStats::default();
    let mut entries = Vec::with_capacity(tree.entries().len());
    for e in tree.entries() {
        let data = match &e.data {
            EntryData::File {
                size,
                blake3,
                chunks,
                ..
            } => {
                let mut h = PieceHasher::new();
                let mut fetched = stream::iter(chunks.iter())
                    .map(|c| fetch_chunk(remote, &version.repo, c, cache, &stats))
                    .buffered(jobs.max(1));
                while let Some(bytes) = fetched.try_next().await? {
                    h.update(&bytes);
                    progress.advance(bytes.len() as u64);
                    report.bytes_read += bytes.len() as u64;
                }
                let (root, pieces) = h.finish();
                if root != *blake3 {
                    return Err(Error::Corrupt(format!(
                        "{}: its chunks hold other bytes than the version digest covers (BLAKE3 {root}, expected {blake3})",
                        e.path
                    )));
                }
                EntryData::File {
                    size: *size,
                    blake3: *blake3,
                    chunks: chunks.clone(),
                    pieces,
                }
            }
            other => other.clone(),
        };
        entries.push(Entry {
            path: e.path.clone(),
            mode: e.mode,
            data,
        });
    }
    progress.finish();
    let upgraded = TreeIndex::new(tree.params(), entries)
        .map_err(|e| Error::InvalidTree(format!("{e} ({shown})")))?;
    debug_assert_eq!(upgraded.version_digest(), version.index.digest);
    let built = oci::build_version(
        &upgraded,
        &VersionMeta {
            // The version keeps its creation time and where it came from.
            created: version.index.created.clone().unwrap_or_else(|| {
                humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
            }),
            source: version.index.source.clone(),
        },
    )
    .map_err(|e| Error::Usage(format!("{shown}: {e}")))?;

    let claim = crate::claim::hold_push_claim(remote, vref, &crate::claim::push_holder()).await?;
    let result = async {
        let old_tags = tags_naming(remote, &version.repo, &version.index_digest).await?;
        put_small_blobs(remote, &version.repo, &built, jobs).await?;
        put_manifests(remote, &version.repo, &built, jobs).await?;
        if let Some(c) = &claim {
            c.check()?;
        }
        let index = Bytes::from(built.index.bytes.clone());
        let digest_tag = Tag::for_digest(&version.index.digest);
        remote
            .put_manifest(
                &version.repo,
                &built.index.digest().to_string(),
                index.clone(),
                INDEX_TYPE,
            )
            .await?;
        let mut moved = Vec::new();
        for t in std::iter::once(digest_tag).chain(old_tags) {
            remote
                .put_manifest(&version.repo, t.as_str(), index.clone(), INDEX_TYPE)
                .await?;
            if !t.is_digest_tag() {
                moved.push(t.as_str().to_string());
            }
        }
        Ok::<_, Error>(moved)
    }
    .await;
    if let Some(c) = claim {
        c.release().await;
    }
    report.tags = result?;
    report.upgraded = true;
    report.index_digest = built.index.digest();
    report.duration_seconds = started
        .elapsed()
        .max(Duration::from_micros(1))
        .as_secs_f64();
    Ok(report)
}
