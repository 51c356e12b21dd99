//! `registry.toml`'s `[storage]` and `[metadata]` sections: where blobs
//! and metadata live. [`super::open`] opens what they name.

use std::path::PathBuf;

use serde::Deserialize;

/// `registry.toml` `[storage]`: where blobs and upload data live.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// `fs` (the data folder, the default), `s3` (an S3-compatible
    /// bucket) or `azure` (a Blob Storage container). `gcs` is not
    /// supported yet.
    #[serde(default)]
    pub kind: StorageKind,
    /// The bucket (`s3`) or container (`azure`).
    pub bucket: Option<String>,
    /// The storage account (`azure`); default `AZURE_STORAGE_ACCOUNT_NAME`.
    pub account: Option<String>,
    /// A key prefix inside the bucket, so several registries can share one.
    pub prefix: Option<String>,
    /// An S3-compatible endpoint (MinIO, R2, Ceph): `https://host[:port]`;
    /// default AWS, or `AWS_ENDPOINT_URL`.
    pub endpoint: Option<String>,
    /// Default `AWS_REGION`, else `us-east-1`.
    pub region: Option<String>,
    /// A file holding `ACCESS_KEY_ID:SECRET_ACCESS_KEY` (`s3`) or the
    /// account key (`azure`); without it the credentials come from the
    /// environment as the cloud's SDKs find them (`AWS_ACCESS_KEY_ID`,
    /// web identity, instance metadata; `AZURE_STORAGE_ACCOUNT_KEY`,
    /// managed identity).
    pub credentials_file: Option<PathBuf>,
    /// Answer blob GETs with a redirect to a presigned URL of the bucket
    /// (valid 20 minutes), so the bytes skip the registry, as
    /// distribution's `redirect` does (`s3` only). Clients then need to
    /// reach the bucket's endpoint themselves.
    #[serde(default)]
    pub redirect: bool,
}

/// `registry.toml` `[metadata]`: where repositories, manifests, tags,
/// volumes, sync jobs and keys live.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetadataConfig {
    /// `redb` (a file in the data folder, the default) or `postgres` (one
    /// database that registry replicas share).
    #[serde(default)]
    pub kind: MetadataKind,
    /// `postgres://USER@HOST:PORT/DATABASE` (`postgres`); no password in it.
    pub url: Option<String>,
    /// A file holding the database password, if it needs one.
    pub password_file: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MetadataKind {
    #[default]
    Redb,
    Postgres,
}

impl MetadataConfig {
    /// The password, read from its file.
    pub fn password(&self) -> Result<Option<String>, String> {
        let Some(file) = &self.password_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(file).map_err(|e| {
            format!(
                "cannot read [metadata] password_file {}: {e}",
                file.display()
            )
        })?;
        Ok(Some(text.trim_end_matches(['\r', '\n']).to_string()))
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StorageKind {
    #[default]
    Fs,
    S3,
    Gcs,
    Azure,
}
