//! What the registry keeps across restarts, and [`open`], which opens it
//! as `registry.toml`'s `[storage]` and `[metadata]` say (`config`).
//!
//! Bytes are behind the [`BlobStore`] trait and its implementations, as
//! CNCF distribution keeps its storage drivers:
//!
//! - [`blobs::fs::FsBlobStore`]: files under the data folder (the embedded
//!   default);
//! - [`blobs::object::ObjectBlobStore`]: an S3-compatible bucket through
//!   `object_store`, so that several registry processes can share the
//!   blobs.
//!
//! Blobs are content-addressed and stored once for every repository:
//! which repository may see which blob is metadata (`meta`), not storage.
//! Upload sessions keep their bytes here too, so a session's data lives
//! where its blob will.

pub mod blobs;
pub mod config;
pub mod meta;

pub use blobs::{
    AppendError, Appended, BlobBody, BlobReader, BlobStore, BodyError, BodyStream, StoredBlob,
};

pub use config::{MetadataConfig, MetadataKind, StorageConfig, StorageKind};

use std::path::Path;
use std::sync::Arc;

use meta::secrets::SecretKey;
use meta::MetaStore;

impl StorageConfig {
    /// The blob store this section describes; `fs` keeps its files under
    /// `root`.
    pub fn open(&self, root: &Path) -> Result<Arc<dyn BlobStore>, String> {
        match self.kind {
            StorageKind::Fs if self.redirect => {
                Err("[storage] redirect needs kind = \"s3\": a data folder has no URLs to hand out".into())
            }
            StorageKind::Fs => Ok(Arc::new(blobs::fs::FsBlobStore::open(root).map_err(|e| e.to_string())?)),
            StorageKind::S3 => Ok(Arc::new(blobs::object::ObjectBlobStore::s3(self)?)),
            StorageKind::Azure => Ok(Arc::new(blobs::object::ObjectBlobStore::azure(self)?)),
            StorageKind::Gcs => Err(
                "[storage] kind = \"gcs\" is not supported yet; use \"fs\", \"s3\" (S3-compatible stores included) or \"azure\"".into(),
            ),
        }
    }
}

/// What the registry keeps across restarts, opened.
pub struct Stores {
    pub blobs: Arc<dyn BlobStore>,
    pub meta: MetaStore,
    /// The key that seals sync secrets at rest.
    pub key: SecretKey,
}

/// Opens the data folder `root` (made if missing, and made its owner's
/// alone), the secrets key in `secrets_key` (made at first start), the
/// blob store `storage` names and the metadata `metadata` names: redb in
/// `root`, with any secrets an earlier release kept in plaintext sealed,
/// or PostgreSQL. `sealvol serve` and `sealvol serve migrate` open their
/// stores here alike (`crate::server`). The error is a message about
/// `root`.
pub fn open(
    root: &Path,
    secrets_key: &Path,
    storage: &StorageConfig,
    metadata: &MetadataConfig,
) -> Result<Stores, String> {
    let failed = |e: &dyn std::fmt::Display| e.to_string();
    std::fs::create_dir_all(root).map_err(|e| failed(&e))?;
    make_private(root).map_err(|e| failed(&e))?;
    let key = SecretKey::load_or_create(secrets_key).map_err(|e| failed(&e))?;
    let blobs = storage.open(root).map_err(|e| failed(&e))?;
    let meta = match metadata.kind {
        MetadataKind::Redb => MetaStore::open_sealing_secrets(&root.join("meta.redb"), &key),
        MetadataKind::Postgres => {
            let url = (metadata.url.as_deref())
                .ok_or_else(|| failed(&"[metadata] kind = \"postgres\" needs url"))?;
            let password = metadata.password().map_err(|e| failed(&e))?;
            MetaStore::open_postgres(url, password.as_deref())
        }
    }
    .map_err(|e| failed(&e))?;
    Ok(Stores { blobs, meta, key })
}

/// Makes the data folder the owner's alone (0700, its files 0600): it
/// holds the metadata database, API keys and the secrets key. A folder
/// already 0700 was made so by this release and is not walked again, so a
/// large blob store costs one walk, at the first start.
fn make_private(root: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(root)?.permissions().mode() & 0o777;
    if mode == 0o700 {
        return Ok(());
    }
    for entry in walkdir::WalkDir::new(root).follow_links(false) {
        let entry = entry.map_err(std::io::Error::other)?;
        let ft = entry.file_type();
        let want = if ft.is_dir() {
            0o700
        } else if ft.is_file() {
            0o600
        } else {
            continue;
        };
        if entry.path() != root {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(want))?;
        }
    }
    // The folder itself last: its mode marks the walk as done.
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))?;
    tracing::info!("made {} readable by its owner only", root.display());
    Ok(())
}
