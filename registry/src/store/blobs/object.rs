//! Blobs and upload data in an object store (S3 and S3-compatible stores:
//! MinIO, R2, Ceph, CoreWeave) through `object_store`, so that registry
//! replicas share them.
//!
//! Layout under the configured prefix, as distribution's S3 driver lays
//! out its own:
//! - `blobs/sha256/<2 hex>/<64 hex>`: a blob, written by one atomic PUT or
//!   one completed multipart upload, only after its sha256 was checked;
//! - `uploads/<id>/started`: an empty marker, so a session with no bytes
//!   yet still has data;
//! - `uploads/<id>/<offset, 20 digits>`: one segment per request that
//!   appended to the session, streamed into the store as it arrives (one
//!   part of [`PART_BYTES`] held at a time, never a local file).
//!
//! Completing an upload copies its one segment to the blob's key inside
//! the store (S3 `CopyObject`), or streams its segments there in order,
//! checking the sha256 again, when a client appended in several requests.

use std::io;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures_util::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path;
use object_store::signer::Signer;
use object_store::{
    GetOptions, GetRange, ObjectStore, ObjectStoreExt as _, PutPayload, WriteMultipart,
};
use sealvol_spec::Sha256Digest;
use sha2::{Digest as _, Sha256};

use super::{AppendError, Appended, BlobBody, BlobStore, BodyStream, StoredBlob};

/// The size of a multipart upload's parts (S3's minimum is 5 MiB; R2 wants
/// them equal but for the last). A body shorter than this is one PUT.
pub const PART_BYTES: usize = 8 << 20;

/// Parts in flight at once per upload, beside the one being filled: what
/// bounds an upload's memory (3 × [`PART_BYTES`]).
const PARTS_IN_FLIGHT: usize = 2;

/// Ranges up to this size are fetched whole rather than streamed.
const SMALL_RANGE: u64 = 1 << 20;

/// S3's largest single `CopyObject`; a larger segment is streamed instead.
const MAX_COPY_BYTES: u64 = 5 << 30;

/// How long a presigned blob URL stays valid (distribution's default).
const REDIRECT_TTL: std::time::Duration = std::time::Duration::from_secs(20 * 60);

pub struct ObjectBlobStore {
    store: Arc<dyn ObjectStore>,
    /// Signs blob URLs for clients when `[storage] redirect` is on.
    signer: Option<Arc<dyn Signer>>,
    /// `""` or the configured prefix with a trailing `/`.
    prefix: String,
}

impl ObjectBlobStore {
    /// Blobs in `store`, under `prefix` (may be empty); blob GETs redirect
    /// to URLs `signer` signs, when given.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        signer: Option<Arc<dyn Signer>>,
    ) -> ObjectBlobStore {
        let prefix = prefix.trim_matches('/');
        ObjectBlobStore {
            store,
            signer,
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
        }
    }

    fn key(&self, rest: &str) -> Path {
        Path::from(format!("{}{rest}", self.prefix))
    }

    fn blob_key(&self, d: &Sha256Digest) -> Path {
        let hex = d.hex();
        self.key(&format!("blobs/sha256/{}/{hex}", &hex[..2]))
    }

    fn upload_dir(&self, id: &str) -> Path {
        self.key(&format!("uploads/{id}"))
    }

    fn segment_key(&self, id: &str, offset: u64) -> Path {
        self.key(&format!("uploads/{id}/{offset:020}"))
    }

    /// The segments of session `id` in order, as (key, size); an error
    /// when they do not join up (a store that lost one).
    async fn segments(&self, id: &str) -> io::Result<Option<Vec<(Path, u64)>>> {
        let dir = self.upload_dir(id);
        let mut found = false;
        let mut segments = Vec::new();
        let mut listing = self.store.list(Some(&dir));
        while let Some(meta) = listing.try_next().await.map_err(to_io)? {
            found = true;
            let name = meta.location.filename().unwrap_or_default();
            if let Ok(offset) = name.parse::<u64>() {
                segments.push((offset, meta.location, meta.size));
            }
        }
        if !found {
            return Ok(None);
        }
        segments.sort_by_key(|s| s.0);
        let mut next = 0;
        for (offset, key, size) in &segments {
            if *offset != next {
                return Err(io::Error::other(format!(
                    "upload {id}: segment {key} starts at {offset}, expected {next}"
                )));
            }
            next += size;
        }
        Ok(Some(segments.into_iter().map(|(_, k, s)| (k, s)).collect()))
    }

    /// The bytes of `keys` in order, as one stream.
    fn concat(&self, keys: Vec<Path>) -> futures_util::stream::BoxStream<'_, io::Result<Bytes>> {
        futures_util::stream::iter(keys)
            .then(move |k| async move {
                let got = self.store.get(&k).await.map_err(to_io)?;
                Ok::<_, io::Error>(got.into_stream().map_err(to_io))
            })
            .try_flatten()
            .boxed()
    }
}

fn to_io(e: object_store::Error) -> io::Error {
    match e {
        object_store::Error::NotFound { .. } => io::Error::new(io::ErrorKind::NotFound, e),
        e => io::Error::other(e),
    }
}

fn not_found(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::NotFound { .. })
}

/// Writes `body` to `key`: one PUT when it fits in a part, a multipart
/// upload otherwise, holding one part plus [`PARTS_IN_FLIGHT`] at a time.
/// Every byte goes through `hasher`; with `expect`, the object is only
/// completed when the bytes hash to it. With `keep_partial`, a body that
/// breaks off still stores what arrived (an upload session counts those
/// bytes); otherwise nothing is stored. Returns how many bytes were
/// stored and how the body ended.
async fn write_object<E>(
    store: &dyn ObjectStore,
    key: &Path,
    mut body: futures_util::stream::BoxStream<'_, Result<Bytes, E>>,
    hasher: &mut Option<Sha256>,
    expect: Option<&Sha256Digest>,
    keep_partial: bool,
) -> (u64, Result<(), AppendError>)
where
    AppendError: From<E>,
{
    let mut first = BytesMut::new();
    let mut ended: Result<(), AppendError> = Ok(());
    // The first part decides: a short body is one PUT.
    while first.len() < PART_BYTES {
        match body.next().await {
            None => break,
            Some(Ok(b)) => {
                if let Some(h) = hasher.as_mut() {
                    h.update(&b);
                }
                first.extend_from_slice(&b);
            }
            Some(Err(e)) => {
                ended = Err(e.into());
                break;
            }
        }
    }
    let mismatch = |hasher: &Option<Sha256>| match (expect, hasher) {
        (None, _) => None,
        (Some(want), Some(h)) if Sha256Digest(h.clone().finalize().into()) == *want => None,
        (Some(want), _) => Some(AppendError::Store(io::Error::other(format!(
            "the bytes no longer hash to {want}"
        )))),
    };
    if first.len() < PART_BYTES || ended.is_err() {
        if first.is_empty() || (ended.is_err() && !keep_partial) {
            return (0, ended);
        }
        if let Some(e) = ended.is_ok().then(|| mismatch(hasher)).flatten() {
            return (0, Err(e));
        }
        let n = first.len() as u64;
        return match store.put(key, PutPayload::from(first.freeze())).await {
            Ok(_) => (n, ended),
            Err(e) => (0, Err(to_io(e).into())),
        };
    }
    let upload = match store.put_multipart(key).await {
        Ok(u) => u,
        Err(e) => return (0, Err(to_io(e).into())),
    };
    let mut w = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
    let mut n = first.len() as u64;
    w.put(first.freeze());
    loop {
        if let Err(e) = w.wait_for_capacity(PARTS_IN_FLIGHT).await {
            let _ = w.abort().await;
            return (0, Err(to_io(e).into()));
        }
        match body.next().await {
            None => break,
            Some(Ok(b)) => {
                if let Some(h) = hasher.as_mut() {
                    h.update(&b);
                }
                n += b.len() as u64;
                w.put(b);
            }
            Some(Err(e)) => {
                ended = Err(e.into());
                break;
            }
        }
    }
    if ended.is_err() && !keep_partial {
        let _ = w.abort().await;
        return (0, ended);
    }
    if let Some(e) = ended.is_ok().then(|| mismatch(hasher)).flatten() {
        let _ = w.abort().await;
        return (0, Err(e));
    }
    match w.finish().await {
        Ok(_) => (n, ended),
        Err(e) => (0, Err(to_io(e).into())),
    }
}

#[async_trait]
impl BlobStore for ObjectBlobStore {
    async fn size(&self, digest: &Sha256Digest) -> io::Result<Option<u64>> {
        match self.store.head(&self.blob_key(digest)).await {
            Ok(m) => Ok(Some(m.size)),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(to_io(e)),
        }
    }

    async fn body(
        &self,
        digest: &Sha256Digest,
        offset: u64,
        len: u64,
    ) -> io::Result<Option<BlobBody>> {
        let key = self.blob_key(digest);
        if len == 0 {
            return Ok(self
                .size(digest)
                .await?
                .map(|_| BlobBody::Bytes(Bytes::new())));
        }
        let opts = GetOptions {
            range: Some(GetRange::Bounded(offset..offset + len)),
            ..Default::default()
        };
        let got = match self.store.get_opts(&key, opts).await {
            Ok(g) => g,
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(to_io(e)),
        };
        if len <= SMALL_RANGE {
            return Ok(Some(BlobBody::Bytes(got.bytes().await.map_err(to_io)?)));
        }
        let stream = got.into_stream().map_err(to_io);
        Ok(Some(BlobBody::Stream(Box::pin(
            tokio_util::io::StreamReader::new(stream),
        ))))
    }

    async fn redirect_url(&self, digest: &Sha256Digest) -> io::Result<Option<String>> {
        let Some(signer) = &self.signer else {
            return Ok(None);
        };
        let url = signer
            .signed_url(
                object_store::signer::Method::GET,
                &self.blob_key(digest),
                REDIRECT_TTL,
            )
            .await
            .map_err(to_io)?;
        Ok(Some(url.to_string()))
    }

    async fn get(&self, digest: &Sha256Digest) -> io::Result<Option<Bytes>> {
        match self.store.get(&self.blob_key(digest)).await {
            Ok(g) => Ok(Some(g.bytes().await.map_err(to_io)?)),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(to_io(e)),
        }
    }

    async fn put(&self, digest: &Sha256Digest, bytes: Bytes) -> io::Result<()> {
        if self.size(digest).await?.is_some() {
            return Ok(());
        }
        let key = self.blob_key(digest);
        let body = futures_util::stream::iter([Ok::<_, AppendError>(bytes)]).boxed();
        match write_object(self.store.as_ref(), &key, body, &mut None, None, false).await {
            (_, Ok(())) => Ok(()),
            (_, Err(AppendError::Store(e))) => Err(e),
            (_, Err(e)) => Err(io::Error::other(e)),
        }
    }

    async fn delete(&self, digest: &Sha256Digest) -> io::Result<()> {
        match self.store.delete(&self.blob_key(digest)).await {
            Err(e) if !not_found(&e) => Err(to_io(e)),
            _ => Ok(()),
        }
    }

    async fn list(&self) -> io::Result<Vec<StoredBlob>> {
        let root = self.key("blobs/sha256");
        let mut out = Vec::new();
        let mut listing = self.store.list(Some(&root));
        while let Some(meta) = listing.try_next().await.map_err(to_io)? {
            // Anything that is not a digest-named object is not a blob.
            let Some(digest) = meta
                .location
                .filename()
                .and_then(|n| format!("sha256:{n}").parse::<Sha256Digest>().ok())
            else {
                continue;
            };
            out.push(StoredBlob {
                digest,
                size: meta.size,
                modified: u64::try_from(meta.last_modified.timestamp()).unwrap_or(0),
            });
        }
        Ok(out)
    }

    async fn create_upload(&self, id: &str) -> io::Result<()> {
        let marker = self.key(&format!("uploads/{id}/started"));
        self.store
            .put(&marker, PutPayload::new())
            .await
            .map(drop)
            .map_err(to_io)
    }

    async fn append_upload(
        &self,
        id: &str,
        offset: u64,
        body: BodyStream,
        hasher: Option<Sha256>,
    ) -> Appended {
        let mut hasher = hasher;
        let key = self.segment_key(id, offset);
        let (n, result) =
            write_object(self.store.as_ref(), &key, body, &mut hasher, None, true).await;
        Appended {
            size: offset + n,
            hasher: hasher.filter(|_| result.is_ok()),
            result,
        }
    }

    async fn upload_size(&self, id: &str) -> io::Result<Option<u64>> {
        Ok(self
            .segments(id)
            .await?
            .map(|s| s.iter().map(|(_, size)| size).sum()))
    }

    async fn hash_upload(&self, id: &str) -> io::Result<Sha256Digest> {
        let segments = self
            .segments(id)
            .await?
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "upload has no data"))?;
        let mut h = Sha256::new();
        let mut bytes = self.concat(segments.into_iter().map(|(k, _)| k).collect());
        while let Some(b) = bytes.try_next().await? {
            h.update(&b);
        }
        Ok(Sha256Digest(h.finalize().into()))
    }

    async fn commit_upload(&self, id: &str, digest: &Sha256Digest) -> io::Result<()> {
        if self.size(digest).await?.is_none() {
            let segments = self
                .segments(id)
                .await?
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "upload has no data"))?;
            let dest = self.blob_key(digest);
            match segments.as_slice() {
                [] => {
                    self.store
                        .put(&dest, PutPayload::new())
                        .await
                        .map_err(to_io)?;
                }
                [(key, size)] if *size <= MAX_COPY_BYTES => {
                    self.store.copy(key, &dest).await.map_err(to_io)?;
                }
                _ => {
                    // Joined in order into the blob's key and hashed again
                    // on the way: completed only if the bytes still hash
                    // to the digest.
                    let keys = segments.into_iter().map(|(k, _)| k).collect();
                    let mut h = Some(Sha256::new());
                    let (_, ended) = write_object(
                        self.store.as_ref(),
                        &dest,
                        self.concat(keys),
                        &mut h,
                        Some(digest),
                        false,
                    )
                    .await;
                    ended.map_err(|e| match e {
                        AppendError::Store(e) => e,
                        e => io::Error::other(e),
                    })?;
                }
            }
        }
        self.remove_upload(id).await
    }

    async fn remove_upload(&self, id: &str) -> io::Result<()> {
        let dir = self.upload_dir(id);
        let keys: Vec<Path> = self
            .store
            .list(Some(&dir))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .map_err(to_io)?;
        for k in keys {
            match self.store.delete(&k).await {
                Err(e) if !not_found(&e) => return Err(to_io(e)),
                _ => {}
            }
        }
        Ok(())
    }

    fn shared(&self) -> bool {
        true
    }

    async fn uploads(&self) -> io::Result<Vec<(String, u64)>> {
        let dir = self.key("uploads");
        let mut latest: std::collections::HashMap<String, u64> = Default::default();
        let mut listing = self.store.list(Some(&dir));
        while let Some(meta) = listing.try_next().await.map_err(to_io)? {
            // `uploads/<id>/<segment>`: the id is the part after `uploads`.
            let mut parts = meta.location.prefix_match(&dir).into_iter().flatten();
            let Some(id) = parts.next() else { continue };
            let at = u64::try_from(meta.last_modified.timestamp()).unwrap_or(0);
            let e = latest.entry(id.as_ref().to_string()).or_default();
            *e = (*e).max(at);
        }
        Ok(latest.into_iter().collect())
    }
}

impl ObjectBlobStore {
    /// An S3 or S3-compatible bucket as `[storage]` describes it.
    pub fn s3(config: &crate::store::config::StorageConfig) -> Result<ObjectBlobStore, String> {
        let bucket = (config.bucket.as_deref())
            .filter(|b| !b.is_empty())
            .ok_or("[storage] kind = \"s3\" needs bucket")?;
        let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
        if std::env::var_os("AWS_REGION").is_none()
            && std::env::var_os("AWS_DEFAULT_REGION").is_none()
        {
            b = b.with_region("us-east-1");
        }
        if let Some(r) = &config.region {
            b = b.with_region(r);
        }
        let endpoint = (config.endpoint.clone())
            .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
            .or_else(|| std::env::var("AWS_ENDPOINT").ok());
        if let Some(e) = endpoint {
            b = b
                .with_endpoint(&e)
                .with_allow_http(e.starts_with("http://"))
                // S3-compatible stores name buckets in the path.
                .with_virtual_hosted_style_request(false);
        }
        if let Some(file) = &config.credentials_file {
            // Never echo the file's contents: only where it is and what
            // shape it should have.
            let text = std::fs::read_to_string(file).map_err(|e| {
                format!(
                    "cannot read [storage] credentials_file {}: {e}",
                    file.display()
                )
            })?;
            let (id, secret) = text.trim().split_once(':').ok_or_else(|| {
                format!(
                    "[storage] credentials_file {} must hold ACCESS_KEY_ID:SECRET_ACCESS_KEY",
                    file.display()
                )
            })?;
            b = b.with_access_key_id(id).with_secret_access_key(secret);
        }
        let store = Arc::new(
            b.build()
                .map_err(|e| format!("[storage] bucket {bucket}: {e}"))?,
        );
        let signer = config
            .redirect
            .then(|| Arc::clone(&store) as Arc<dyn Signer>);
        Ok(ObjectBlobStore::new(
            store,
            config.prefix.as_deref().unwrap_or(""),
            signer,
        ))
    }

    /// An Azure Blob Storage container as `[storage]` describes it (the
    /// emulator, azurite, when `AZURITE_BLOB_STORAGE_URL` is set).
    pub fn azure(config: &crate::store::config::StorageConfig) -> Result<ObjectBlobStore, String> {
        let container = (config.bucket.as_deref())
            .filter(|b| !b.is_empty())
            .ok_or("[storage] kind = \"azure\" needs bucket (the container)")?;
        let mut b =
            object_store::azure::MicrosoftAzureBuilder::from_env().with_container_name(container);
        if let Some(a) = &config.account {
            b = b.with_account(a);
        }
        if std::env::var_os("AZURITE_BLOB_STORAGE_URL").is_some() {
            b = b.with_use_emulator(true);
        }
        if let Some(e) = &config.endpoint {
            b = b
                .with_endpoint(e.clone())
                .with_allow_http(e.starts_with("http://"));
        }
        if let Some(file) = &config.credentials_file {
            let key = std::fs::read_to_string(file).map_err(|e| {
                format!(
                    "cannot read [storage] credentials_file {}: {e}",
                    file.display()
                )
            })?;
            b = b.with_access_key(key.trim());
        }
        if config.redirect {
            // Azure signs URLs only with a user delegation key (Entra ID
            // credentials), which an account key cannot make.
            return Err("[storage] redirect is supported with kind = \"s3\" only".into());
        }
        let store = Arc::new(
            b.build()
                .map_err(|e| format!("[storage] container {container}: {e}"))?,
        );
        Ok(ObjectBlobStore::new(
            store,
            config.prefix.as_deref().unwrap_or(""),
            None,
        ))
    }
}
