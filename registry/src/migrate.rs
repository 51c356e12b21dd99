//! `sealvol serve migrate --from A.toml --to B.toml`: copies a registry's
//! whole state from one pair of backends to another (say the embedded
//! data folder and redb to a bucket and PostgreSQL), which an OCI copy
//! (skopeo) cannot: besides blobs, manifests and tags it keeps tag
//! expiry, versions with their sequences, tombstones and restore windows,
//! referrers, sync jobs and their progress, API keys and secrets.
//!
//! Blobs are streamed through the destination's upload path, so each is
//! checked against its digest on the way in; metadata rows are copied in
//! one transaction; secrets are opened with the source's key and sealed
//! again with the destination's. Upload sessions and push claims are
//! transient and not copied. The destination must be empty, and neither
//! registry should be serving while it runs.

use std::sync::Arc;

use futures_util::{StreamExt as _, TryStreamExt as _};
use sha2::{Digest as _, Sha256};

use crate::config::Config;
use crate::server::ServeError;
use crate::state::app::App;
use crate::store::meta::MetaError;
use crate::store::{AppendError, BlobBody, BodyError, StoredBlob};

/// What a migration copied.
#[derive(Debug, Default, serde::Serialize)]
pub struct MigrateReport {
    pub blobs: u64,
    pub blob_bytes: u64,
    /// Blobs the destination held already.
    pub blobs_present: u64,
    pub rows: u64,
    pub secrets: u64,
}

/// Copies everything `from` holds into `to`.
pub async fn migrate(from: &Config, to: &Config) -> Result<MigrateReport, ServeError> {
    let src = open(from).await?;
    let dst = open(to).await?;
    let failed = |e: &dyn std::fmt::Display| ServeError::Storage {
        path: to.root.clone(),
        message: e.to_string(),
    };
    let dst_meta = Arc::clone(&dst.meta);
    if !tokio::task::spawn_blocking(move || dst_meta.is_empty())
        .await
        .map_err(|e| failed(&e))?
        .map_err(|e| failed(&e))?
    {
        return Err(ServeError::Unsafe(format!(
            "the destination ({}) already holds repositories, volumes, jobs, keys or secrets; migrate into an empty registry",
            to.root.display()
        )));
    }
    let mut report = MigrateReport::default();
    for b in src.blobs.list().await.map_err(|e| failed(&e))? {
        if dst
            .blobs
            .size(&b.digest)
            .await
            .map_err(|e| failed(&e))?
            .is_some()
        {
            report.blobs_present += 1;
            continue;
        }
        copy_blob(&src, &dst, &b).await.map_err(|e| failed(&e))?;
        report.blobs += 1;
        report.blob_bytes += b.size;
    }
    let (s, d) = (Arc::clone(&src.meta), Arc::clone(&dst.meta));
    report.rows = tokio::task::spawn_blocking(move || s.copy_into(&d))
        .await
        .map_err(|e| failed(&e))?
        .map_err(|e| failed(&e))?;
    let (s, d) = (Arc::clone(&src), Arc::clone(&dst));
    report.secrets = tokio::task::spawn_blocking(move || reseal_secrets(&s, &d))
        .await
        .map_err(|e| failed(&e))?
        .map_err(|e| failed(&e))?;
    Ok(report)
}

async fn open(config: &Config) -> Result<Arc<App>, ServeError> {
    Ok(Arc::new(crate::server::open(config).await?))
}

/// Streams blob `b` from `src` into `dst` through an upload, checking it
/// against its digest.
async fn copy_blob(src: &App, dst: &App, b: &StoredBlob) -> std::io::Result<()> {
    let body = match src.blobs.body(&b.digest, 0, b.size).await? {
        Some(BlobBody::Bytes(bytes)) => futures_util::stream::once(async { Ok(bytes) }).boxed(),
        Some(BlobBody::Stream(reader)) => tokio_util::io::ReaderStream::new(reader)
            .map_err(|e| BodyError(e.to_string()))
            .boxed(),
        // Deleted since it was listed.
        None => return Ok(()),
    };
    let id = uuid::Uuid::new_v4().to_string();
    dst.blobs.create_upload(&id).await?;
    let appended = dst
        .blobs
        .append_upload(&id, 0, body, Some(Sha256::new()))
        .await;
    let checked = match (appended.result, appended.hasher) {
        (Ok(()), Some(h)) => {
            let got = sealvol_spec::Sha256Digest(h.finalize().into());
            if got == b.digest {
                Ok(())
            } else {
                Err(std::io::Error::other(format!(
                    "blob {} of the source hashes to {got}; not copied",
                    b.digest
                )))
            }
        }
        (Ok(()), None) => Err(std::io::Error::other("the copy lost its hash")),
        (Err(AppendError::Store(e)), _) => Err(e),
        (Err(AppendError::Body(e)), _) => Err(std::io::Error::other(e)),
    };
    match checked {
        Ok(()) => dst.blobs.commit_upload(&id, &b.digest).await,
        Err(e) => {
            let _ = dst.blobs.remove_upload(&id).await;
            Err(e)
        }
    }
}

/// Opens every secret with the source's key and seals it with the
/// destination's; how many.
fn reseal_secrets(src: &App, dst: &App) -> Result<u64, MetaError> {
    let (Some(from), Some(to)) = (src.syncs.key.get(), dst.syncs.key.get()) else {
        return Err(MetaError("a registry has no secrets key".into()));
    };
    let mut n = 0;
    for info in src.meta.secrets()? {
        let Some(stored) = src.meta.secret(&info.name)? else {
            continue;
        };
        let value = stored
            .value(from, &info.name)
            .map_err(|e| MetaError(format!("secret {}: {e}", info.name)))?;
        let sealed = crate::store::meta::secrets::StoredSecret::seal(
            to,
            &info.name,
            &value,
            stored.for_sources.clone(),
            stored.dest.clone(),
        );
        dst.meta.set_secret(&info.name, &sealed)?;
        n += 1;
    }
    Ok(n)
}
