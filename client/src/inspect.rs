//! Reading a registry without pulling: namespaces, volumes, a version's
//! entries, one entry's facts, a file's bytes, a volume's versions, tags,
//! and what changed between two versions. Everything here works on any OCI
//! registry, from tags, index annotations and tree indexes alone; where the
//! registry has the volume API (SPEC.md §7), version lists come from it,
//! with sequence numbers and deleted versions, and tags may expire.

use std::collections::BTreeMap;
use std::io::Write;

use futures_util::{stream, StreamExt, TryStreamExt};
use sealvol_spec::chain;
use sealvol_spec::oci::VersionIndex;
use sealvol_spec::reference::{Tag, VolumeRef, HEAD};
use sealvol_spec::tree::{EntryData, TreeIndex};
use sealvol_spec::{B3Digest, Sha256Digest};
use serde::Serialize;

use crate::cache::ChunkCache;
use crate::pull::{fetch_chunk_as, FetchStats};
use crate::remote::{BlobCheck, Remote};
use crate::resolve::{display_ref, load_tree, resolve, Resolved};
use crate::verified::InOrder;
use crate::volumes::{self, Lifecycle};
use crate::{Error, TransportError};

/// Namespaces of a registry: the first components of its repositories.
pub async fn namespaces(remote: &Remote) -> Result<Vec<String>, Error> {
    let mut out: Vec<String> = remote
        .catalog()
        .await?
        .iter()
        .filter_map(|r| r.rsplit_once('/').map(|(ns, _)| ns.to_string()))
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// Volumes of a namespace, as `namespace/volume`.
pub async fn volumes(remote: &Remote, namespace: &str) -> Result<Vec<String>, Error> {
    let prefix = format!("{namespace}/");
    let mut out: Vec<String> = remote
        .catalog()
        .await?
        .into_iter()
        .filter(|r| {
            r.strip_prefix(&prefix)
                .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// One entry as `ls` and `stat` show it (the registry's wire type).
pub use sealvol_spec::api::{EntryInfo, EntryKind};

/// A version with its tree, resolved from a ref.
pub struct Opened {
    pub version: Resolved,
    pub tree: TreeIndex,
}

pub async fn open(remote: &Remote, vref: &VolumeRef) -> Result<Opened, Error> {
    let version = resolve(remote, vref).await?;
    let tree = load_tree(remote, &version).await?;
    Ok(Opened { version, tree })
}

/// Entries under the ref's path: immediate children, or all descendants
/// with `recursive`. A path that names a file lists that file.
pub fn list(opened: &Opened, path: Option<&str>, recursive: bool) -> Result<Vec<EntryInfo>, Error> {
    let tree = &opened.tree;
    if let Some(p) = path {
        let e = tree.get(p).ok_or_else(|| {
            Error::NotFound(format!("{}: no such file or directory in this version", p))
        })?;
        if !e.is_dir() {
            return Ok(vec![e.into()]);
        }
    }
    Ok(if recursive {
        let sub = tree.subtree(path);
        let skip = usize::from(path.is_some());
        sub.iter().skip(skip).map(EntryInfo::from).collect()
    } else {
        tree.children(path).map(EntryInfo::from).collect()
    })
}

/// What `stat` says about a version (and an entry, with a path).
#[derive(Clone, Debug, Serialize)]
pub struct Stat {
    #[serde(rename = "ref")]
    pub reference: String,
    pub digest: B3Digest,
    pub index_digest: Sha256Digest,
    /// The version index as an OCI image reference
    /// (`HOST/NAMESPACE/VOLUME@sha256:<hex>`): what a runtime pulls, a
    /// Kubernetes image volume names.
    pub oci_ref: String,
    pub created: Option<String>,
    #[serde(flatten)]
    pub stats: sealvol_spec::tree::TreeStats,
    pub source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

pub fn stat(remote: &Remote, opened: &Opened, path: Option<&str>) -> Result<Stat, Error> {
    let s = opened.tree.stats();
    let entry = match path {
        None => None,
        Some(p) => Some(
            opened
                .tree
                .get(p)
                .ok_or_else(|| {
                    Error::NotFound(format!("{p}: no such file or directory in this version"))
                })?
                .into(),
        ),
    };
    let ix = &opened.version.index;
    Ok(Stat {
        reference: display_ref(remote, &opened.version.pinned.without_path()),
        digest: ix.digest,
        index_digest: opened.version.index_digest,
        oci_ref: format!(
            "{}/{}@{}",
            remote.registry(),
            opened.version.pinned.repository(),
            opened.version.index_digest
        ),
        created: ix.created.clone(),
        stats: s,
        source: ix.source.clone(),
        entry,
    })
}

/// Writes a file of the version to `out` in order, fetching up to `jobs`
/// chunks ahead. Each 1 MiB piece is checked through the chain before a
/// byte of it is written ([`crate::verified`]), so a forged chunk list ends
/// the command before any wrong byte reaches `out`. That check is the only
/// hash of a format 2 tree's bytes (SPEC.md §2.5): when it rejects a piece,
/// the chunks covering it are dropped from the cache and the rest of the
/// file is fetched checked by sha256, from that piece on; only a piece of
/// sha256-checked chunks that fails is an error. A format 1 tree's chunks
/// are checked by sha256, and the whole file at the end.
pub async fn cat(
    remote: &Remote,
    opened: &Opened,
    path: &str,
    jobs: usize,
    cache: Option<&ChunkCache>,
    out: &mut dyn Write,
) -> Result<u64, Error> {
    let e = opened
        .tree
        .get(path)
        .ok_or_else(|| Error::NotFound(format!("{path}: no such file in this version")))?;
    let EntryData::File { chunks, .. } = &e.data else {
        return Err(Error::Usage(format!(
            "{path} is a {}, not a file",
            EntryInfo::from(e).kind
        )));
    };
    let verifiable = opened.tree.is_verifiable();
    let mut check = InOrder::new(path, &e.data, verifiable).expect("a file entry");
    let stats = FetchStats::default();
    let repo = opened.version.repo.as_str();
    let mut written = 0u64;
    let mut write = |b: &[u8]| {
        written += b.len() as u64;
        out.write_all(b)
            .map_err(|e| Error::io(std::path::Path::new("<stdout>"), e))
    };
    let mut how = if verifiable {
        BlobCheck::Length
    } else {
        BlobCheck::Sha256
    };
    // Where the bytes still to pass on start: the whole file, then after a
    // rejected piece that piece's start.
    let mut from = 0u64;
    loop {
        let first = chunks.partition_point(|c| c.offset + u64::from(c.length) <= from);
        let (stats, now) = (&stats, how);
        let mut fetched = stream::iter(chunks[first..].iter())
            .map(move |c| async move {
                let bytes = fetch_chunk_as(remote, repo, c, cache, stats, now).await?;
                Ok::<_, Error>((c.offset, bytes))
            })
            .buffered(jobs.max(1));
        let mut rejected = false;
        while let Some((offset, bytes)) = fetched.try_next().await? {
            let skip = from.saturating_sub(offset) as usize;
            match check.push(&bytes[skip.min(bytes.len())..], &mut write) {
                Err(Error::Corrupt(_)) if how == BlobCheck::Length => {
                    rejected = true;
                    break;
                }
                r => r?,
            }
        }
        if !rejected {
            break;
        }
        from = check.verified();
        check.rewind();
        tracing::info!(
            path,
            offset = from,
            "bytes failed the chain check; fetching again, checked by sha256"
        );
        if let Some(cache) = cache {
            let end = from + chain::PIECE;
            for c in chunks
                .iter()
                .filter(|c| c.offset < end && from < c.offset + u64::from(c.length))
            {
                cache.drop_rejected(&c.sha256);
            }
        }
        how = BlobCheck::Sha256;
    }
    check.finish()?;
    out.flush()
        .map_err(|e| Error::io(std::path::Path::new("<stdout>"), e))?;
    Ok(written)
}

/// One version of a volume as `versions` lists it. In JSON:
///
/// ```json
/// {"ref":"bdn:ns/vol@b3:<hex>","digest":"b3:<hex>","index_digest":"sha256:<hex>",
///  "created":"2026-12-02T18:40:00Z","size":123,"files":4,"is_head":true,"tags":["prod"],
///  "sequence":3,"lifecycle":"ALIVE"}
/// ```
///
/// `sequence`, `lifecycle`, `tombstoned_at` and `restorable_until` come
/// only from a registry with the volume API, and the last two only for a
/// deleted version. `created` is then when the registry recorded the
/// version; from tags alone it is the index's creation annotation.
#[derive(Clone, Debug, Serialize)]
pub struct VersionInfo {
    #[serde(rename = "ref")]
    pub reference: String,
    pub digest: B3Digest,
    pub index_digest: Sha256Digest,
    pub created: Option<String>,
    pub size: Option<u64>,
    pub files: Option<u64>,
    pub is_head: bool,
    pub tags: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tombstoned_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restorable_until: Option<String>,
}

impl VersionInfo {
    /// A version as the volume API records it.
    pub fn from_api(remote: &Remote, volume: &VolumeRef, v: volumes::Version) -> VersionInfo {
        VersionInfo {
            reference: display_ref(
                remote,
                &volume.with_selector(sealvol_spec::reference::Selector::Digest(
                    sealvol_spec::DigestSelector::B3(v.digest),
                )),
            ),
            digest: v.digest,
            index_digest: v.index_digest,
            created: v.created_at,
            size: v.size,
            files: v.files,
            is_head: v.is_head,
            tags: v
                .tags
                .into_iter()
                .filter(|t| t != HEAD && !t.starts_with("b3-"))
                .collect(),
            sequence: Some(v.sequence),
            lifecycle: Some(v.lifecycle),
            tombstoned_at: v.tombstoned_at,
            restorable_until: v.restorable_until,
        }
    }
}

/// Every version of a volume, newest first. From the volume API where the
/// registry has it (highest sequence first; deleted versions too with
/// `include_tombstoned`), else from the `b3-` tags and the index
/// annotations, which works on any registry but knows nothing of deleted
/// versions: `include_tombstoned` is then an error.
pub async fn versions(
    remote: &Remote,
    volume: &VolumeRef,
    jobs: usize,
    include_tombstoned: bool,
) -> Result<Vec<VersionInfo>, Error> {
    if crate::api::supported(remote).await? {
        return Ok(volumes::versions(remote, volume, include_tombstoned)
            .await?
            .into_iter()
            .map(|v| VersionInfo::from_api(remote, volume, v))
            .collect());
    }
    if include_tombstoned {
        crate::api::require(remote, "listing deleted versions").await?;
    }
    let repo = volume.repository();
    let tags = remote.tags(&repo).await?;
    if tags.is_empty() {
        return Err(Error::NotFound(format!(
            "{}: no such volume (the repository has no tags)",
            display_ref(remote, &volume.without_path())
        )));
    }
    // Every tag's index digest: digest tags name versions, the others point
    // at them.
    let looked_up: Vec<(String, Option<(bytes::Bytes, Sha256Digest)>)> = stream::iter(tags)
        .map(|t| {
            let repo = repo.clone();
            async move {
                match remote.manifest(&repo, &t).await {
                    Ok(found) => Ok((t, Some(found))),
                    Err(TransportError::NotFound(_)) => Ok((t, None)),
                    Err(e) => Err(Error::from(e)),
                }
            }
        })
        .buffer_unordered(jobs.max(1))
        .try_collect()
        .await?;
    let mut by_index: BTreeMap<Sha256Digest, (VersionIndex, Vec<String>)> = BTreeMap::new();
    let mut pointers: Vec<(String, Sha256Digest)> = Vec::new();
    for (tag, found) in looked_up {
        let Some((bytes, digest)) = found else {
            continue;
        };
        if tag.starts_with("b3-") {
            if let Ok(ix) = VersionIndex::parse(&bytes) {
                by_index.entry(digest).or_insert((ix, Vec::new()));
            }
        } else {
            pointers.push((tag, digest));
        }
    }
    for (tag, digest) in pointers {
        if let Some((_, tags)) = by_index.get_mut(&digest) {
            tags.push(tag);
        }
    }
    let mut out: Vec<VersionInfo> = by_index
        .into_iter()
        .map(|(index_digest, (ix, mut tags))| {
            tags.sort();
            let is_head = tags.iter().any(|t| t == HEAD);
            tags.retain(|t| t != HEAD);
            VersionInfo {
                reference: display_ref(
                    remote,
                    &volume.with_selector(sealvol_spec::reference::Selector::Digest(
                        sealvol_spec::DigestSelector::B3(ix.digest),
                    )),
                ),
                digest: ix.digest,
                index_digest,
                created: ix.created,
                size: ix.size,
                files: ix.files,
                is_head,
                tags,
                sequence: None,
                lifecycle: None,
                tombstoned_at: None,
                restorable_until: None,
            }
        })
        .collect();
    // RFC 3339 UTC times sort as strings; head breaks ties.
    out.sort_by(|a, b| {
        b.created
            .cmp(&a.created)
            .then(b.is_head.cmp(&a.is_head))
            .then(a.digest.cmp(&b.digest))
    });
    Ok(out)
}

/// Points `tag` at the version `vref` names (creating or moving it). With
/// `expires_at` the tag is set through the volume API and removed by the
/// registry's garbage collection once that time passes; a registry without
/// the API cannot do that, and says so. Without it the tag is an OCI tag
/// PUT, on any registry (and any earlier expiry is cleared).
pub async fn tag_set(
    remote: &Remote,
    vref: &VolumeRef,
    tag: &str,
    expires_at: Option<std::time::SystemTime>,
) -> Result<VersionInfoShort, Error> {
    let tag = user_tag(tag)?;
    if expires_at.is_some() {
        crate::api::require(remote, "tag expiry").await?;
    }
    let version = resolve(remote, vref).await?;
    let reference = display_ref(remote, &version.pinned.without_path());
    if let Some(at) = expires_at {
        let set = volumes::set_tag(remote, vref, &tag, &version.index.digest, Some(at)).await?;
        return Ok(VersionInfoShort {
            reference,
            digest: set.digest,
            tag: set.tag,
            expires_at: set.expires_at,
        });
    }
    remote
        .put_manifest(
            &version.repo,
            tag.as_str(),
            version.index_bytes.clone(),
            crate::push::INDEX_TYPE,
        )
        .await?;
    Ok(VersionInfoShort {
        reference,
        digest: version.index.digest,
        tag: tag.as_str().to_string(),
        expires_at: None,
    })
}

/// Removes a tag (never a version).
pub async fn tag_delete(remote: &Remote, volume: &VolumeRef, tag: &str) -> Result<(), Error> {
    let tag = user_tag(tag)?;
    remote
        .delete_tag(&volume.repository(), tag.as_str())
        .await
        .map_err(|e| match e {
            TransportError::NotFound(_) => Error::NotFound(format!(
                "{}: no tag {:?} on this volume",
                display_ref(remote, &volume.without_path()),
                tag.as_str()
            )),
            e => e.into(),
        })
}

/// Tags users may set or delete: not `head` (it follows pushes) and not a
/// `b3-<hex>` digest tag (it names a version forever).
pub fn user_tag(tag: &str) -> Result<Tag, Error> {
    let t = Tag::parse_user(tag).map_err(|e| Error::Usage(e.to_string()))?;
    if t.as_str() == HEAD {
        return Err(Error::Usage(
            "`head` is reserved: it always names the newest version and moves with every push"
                .into(),
        ));
    }
    Ok(t)
}

/// What `tag set` did. In JSON: `{"ref":"bdn:ns/vol@b3:<hex>",
/// "digest":"b3:<hex>","tag":"prod"}`, plus `"expires_at":"<RFC 3339>"`
/// for a tag that expires.
#[derive(Clone, Debug, Serialize)]
pub struct VersionInfoShort {
    #[serde(rename = "ref")]
    pub reference: String,
    pub digest: B3Digest,
    pub tag: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// What changed from version A to version B, computed as the registry
/// computes it.
pub use sealvol_spec::diff::{diff, Changed, Diff};
