//! What the volume API and the web view do to volumes (SPEC.md §7.3):
//! read, list, delete and restore versions, set tags and expiries, each
//! one metadata transaction; a volume's stats, rebuilt from its versions'
//! chunk manifests when unknown; the chunk sizes a version brings, read
//! when it is sealed; and the check of a volume's name.

use std::collections::BTreeMap;

use sealvol_spec::api;
use sealvol_spec::Sha256Digest;

use crate::error::{Code, RegistryError, Result};
use crate::service::trees::Unreadable;
use crate::state::app::App;
use crate::store::meta::volumes::stats::ChunkSizes;

/// The distinct chunks of a version index, with their sizes, from its
/// chunk manifests; why not when one is not stored or not a chunk
/// manifest.
pub(crate) async fn chunk_sizes(
    app: &App,
    ix: &sealvol_spec::oci::VersionIndex,
) -> std::result::Result<ChunkSizes, Unreadable> {
    use sealvol_spec::oci::{artifact_layers, sha256_of, MT_CHUNKS_MANIFEST};
    let mut out = BTreeMap::new();
    for m in &ix.chunk_manifests {
        let d = sha256_of(m).ok_or_else(|| {
            Unreadable::Invalid(format!("chunk manifest {} is not sha256", m.digest()))
        })?;
        let bytes = (app.blobs.get(&d).await?)
            .ok_or_else(|| Unreadable::Missing(format!("chunk manifest {d}")))?;
        let layers = artifact_layers(&bytes, MT_CHUNKS_MANIFEST)
            .map_err(|e| Unreadable::Invalid(format!("{d} is not a chunk manifest: {e}")))?;
        for layer in layers {
            let chunk = sha256_of(&layer).ok_or_else(|| {
                Unreadable::Invalid(format!("chunk {} of {d} is not sha256", layer.digest()))
            })?;
            out.insert(chunk, layer.size());
        }
    }
    Ok(out.into_iter().collect())
}

/// `GET /api/v1/volumes/NAME/-/stats`: the totals as recorded, rebuilt
/// first when unknown.
pub(crate) async fn volume_stats(app: &App, repo: &str) -> Result<api::VolumeStats> {
    let (retention, now) = (app.lifetimes.retention_seconds, app.now());
    let name = repo.to_string();
    let read = app
        .meta(move |m| m.read_stats(&name, retention, now))
        .await?;
    if read.totals.is_some() {
        return Ok(read.stats);
    }
    // A version that cannot be read (sealed by an earlier release that
    // did not check it) leaves the totals short; they are answered, so the
    // rest of the volume stays readable, but not kept, and the next read
    // tries again.
    let mut set = BTreeMap::new();
    let mut unread = Vec::new();
    for index in &read.indexes {
        let chunks = match read_index(app, index).await {
            Ok(ix) => chunk_sizes(app, &ix).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match chunks {
            Ok(chunks) => set.extend(chunks),
            Err(why) => unread.push(format!("{index}: {why}")),
        }
    }
    let mut stats = read.stats;
    stats.stored_bytes = set.values().sum();
    stats.chunks = set.len() as u64;
    if !unread.is_empty() {
        tracing::warn!(
            "the stats of {repo} leave out versions whose chunk manifests cannot be read: {}",
            unread.join("; ")
        );
        return Ok(stats);
    }
    let (name, stamp) = (repo.to_string(), read.stamp);
    app.meta(move |m| m.store_stats(&name, stamp, &set)).await?;
    Ok(stats)
}

/// A version index stored in the registry, parsed.
pub(crate) async fn read_index(app: &App, index: &str) -> Result<sealvol_spec::oci::VersionIndex> {
    let digest: Sha256Digest = index.parse().map_err(RegistryError::internal)?;
    let bytes =
        app.blobs.get(&digest).await?.ok_or_else(|| {
            RegistryError::internal(format!("version index {index} is not stored"))
        })?;
    sealvol_spec::oci::VersionIndex::parse(&bytes).map_err(RegistryError::internal)
}

/// A volume's name (SPEC.md §1.1: `namespace/volume`, each component a
/// name component), or `NAME_INVALID`.
pub(crate) fn check_volume_name(name: &str) -> Result<()> {
    match name.parse::<sealvol_spec::reference::VolumeName>() {
        Ok(_) => Ok(()),
        Err(_) => Err(RegistryError::new(
            Code::NameInvalid,
            format!("invalid volume name {name:?} (namespace/volume)"),
        )),
    }
}

// What the volume API and the web view ask of volumes, one metadata
// transaction each, with the registry's clock and retention.

/// The namespaces holding a volume `visible` lets the caller see.
pub(crate) async fn namespaces(
    app: &App,
    visible: impl Fn(&str) -> bool + Send + 'static,
) -> Result<Vec<String>> {
    app.meta(move |m| m.namespaces(visible)).await
}

/// Every volume, or those of `namespace`.
pub(crate) async fn list(app: &App, namespace: Option<String>) -> Result<Vec<api::Volume>> {
    app.meta(move |m| m.volumes(namespace.as_deref())).await
}

pub(crate) async fn get(app: &App, name: &str) -> Result<api::Volume> {
    let name = name.to_string();
    app.meta(move |m| m.volume(&name)).await
}

/// Sets (or, with `None`, clears) when volume `name` expires.
pub(crate) async fn set_expiry(app: &App, name: &str, at: Option<u64>) -> Result<api::Volume> {
    let (name, now) = (name.to_string(), app.now());
    app.meta(move |m| m.set_volume_expiry(&name, at, now)).await
}

/// Deletes every version of `name` (restorable for the retention): the
/// versions tombstoned.
pub(crate) async fn delete(app: &App, name: &str) -> Result<Vec<api::Version>> {
    let (name, now, retention) = (name.to_string(), app.now(), app.lifetimes.retention_seconds);
    app.meta(move |m| m.delete_volume(&name, now, retention))
        .await
}

/// The versions of `name`, the deleted ones too with `all`.
pub(crate) async fn versions(app: &App, name: &str, all: bool) -> Result<Vec<api::Version>> {
    let (name, retention) = (name.to_string(), app.lifetimes.retention_seconds);
    app.meta(move |m| m.versions(&name, all, retention)).await
}

pub(crate) async fn version(app: &App, name: &str, digest: &str) -> Result<api::Version> {
    let (name, digest) = (name.to_string(), digest.to_string());
    let retention = app.lifetimes.retention_seconds;
    app.meta(move |m| m.version(&name, &digest, retention))
        .await
}

/// Deletes version `digest` of `name`, restorable for the retention.
pub(crate) async fn delete_version(app: &App, name: &str, digest: &str) -> Result<api::Version> {
    let (name, digest) = (name.to_string(), digest.to_string());
    let (now, retention) = (app.now(), app.lifetimes.retention_seconds);
    app.meta(move |m| m.delete_version(&name, &digest, now, retention))
        .await
}

/// Restores deleted version `digest` of `name`.
pub(crate) async fn restore_version(app: &App, name: &str, digest: &str) -> Result<api::Version> {
    let (name, digest) = (name.to_string(), digest.to_string());
    let (now, retention) = (app.now(), app.lifetimes.retention_seconds);
    app.meta(move |m| m.restore_version(&name, &digest, now, retention))
        .await
}

/// Points tag `tag` of `name` at version `digest`, until `at` if given.
pub(crate) async fn set_tag(
    app: &App,
    name: &str,
    tag: &str,
    digest: &str,
    at: Option<u64>,
) -> Result<api::TagInfo> {
    let (name, tag, digest, now) = (
        name.to_string(),
        tag.to_string(),
        digest.to_string(),
        app.now(),
    );
    app.meta(move |m| m.set_tag(&name, &tag, &digest, at, now))
        .await
}

/// Removes user tag `tag` of `name`.
pub(crate) async fn remove_tag(app: &App, name: &str, tag: &str) -> Result<()> {
    let (name, tag, now) = (name.to_string(), tag.to_string(), app.now());
    app.meta(move |m| m.remove_user_tag(&name, &tag, now)).await
}
