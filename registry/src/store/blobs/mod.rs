//! The [`BlobStore`] trait and the types its implementations share.

pub mod fs;
pub mod object;

use std::io;
use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::BoxStream;
use sealvol_spec::Sha256Digest;
use sha2::Sha256;
use tokio::io::AsyncRead;

/// A stream of blob bytes.
pub type BlobReader = Pin<Box<dyn AsyncRead + Send>>;

/// Blob bytes ready to send: whole (in memory or mapped), or as a stream.
pub enum BlobBody {
    Bytes(Bytes),
    Stream(BlobReader),
}

/// A request body broke off: the client's fault, not the store's.
#[derive(Debug, thiserror::Error)]
#[error("reading the request body: {0}")]
pub struct BodyError(pub String);

/// A request body on its way into an upload session.
pub type BodyStream = BoxStream<'static, Result<Bytes, BodyError>>;

/// What [`BlobStore::append_upload`] did.
pub struct Appended {
    /// The session's size afterwards: every byte that reached storage
    /// counts, even when the body broke off, so that a client can resume
    /// from the size the upload status reports.
    pub size: u64,
    /// The running hash, when it saw exactly the stored bytes; `None` when
    /// bytes may have been lost (the data is hashed again at the end).
    pub hasher: Option<Sha256>,
    pub result: Result<(), AppendError>,
}

#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error(transparent)]
    Body(#[from] BodyError),
    #[error(transparent)]
    Store(#[from] io::Error),
}

/// A stored blob as garbage collection sees it.
#[derive(Clone, Debug)]
pub struct StoredBlob {
    pub digest: Sha256Digest,
    pub size: u64,
    /// When its bytes were stored, Unix seconds.
    pub modified: u64,
}

/// Content-addressed blob bytes, and the data of upload sessions.
///
/// A blob appears under its digest only whole and only once its sha256 was
/// checked, never partly written; storing a blob that exists is a no-op.
#[async_trait]
pub trait BlobStore: Send + Sync + 'static {
    /// The blob's size, `None` when it is not stored.
    async fn size(&self, digest: &Sha256Digest) -> io::Result<Option<u64>>;
    /// `len` bytes of the blob from `offset`; `None` when it is not stored.
    async fn body(
        &self,
        digest: &Sha256Digest,
        offset: u64,
        len: u64,
    ) -> io::Result<Option<BlobBody>>;
    /// A URL the client may fetch the blob from directly, bypassing the
    /// registry (`[storage] redirect`), valid for a few minutes; `None`
    /// when the registry serves the bytes itself.
    async fn redirect_url(&self, _digest: &Sha256Digest) -> io::Result<Option<String>> {
        Ok(None)
    }
    /// The whole blob in memory (for manifests and tree indexes; callers
    /// bound the size first).
    async fn get(&self, digest: &Sha256Digest) -> io::Result<Option<Bytes>>;
    /// Stores bytes that hash to `digest` (the caller has checked).
    async fn put(&self, digest: &Sha256Digest, bytes: Bytes) -> io::Result<()>;
    async fn delete(&self, digest: &Sha256Digest) -> io::Result<()>;
    /// Every stored blob (for garbage collection).
    async fn list(&self) -> io::Result<Vec<StoredBlob>>;

    /// Creates the empty data of upload session `id`.
    async fn create_upload(&self, id: &str) -> io::Result<()>;
    /// Appends `body` to the data of session `id`, which holds `offset`
    /// bytes (the caller checked the request against it), feeding `hasher`
    /// as the bytes go.
    async fn append_upload(
        &self,
        id: &str,
        offset: u64,
        body: BodyStream,
        hasher: Option<Sha256>,
    ) -> Appended;
    /// The size of the data of session `id`; `None` when it has none.
    async fn upload_size(&self, id: &str) -> io::Result<Option<u64>>;
    /// The sha256 of the data of session `id`, read back (a restart lost
    /// the running hash).
    async fn hash_upload(&self, id: &str) -> io::Result<Sha256Digest>;
    /// Makes the data of session `id` blob `digest` (the caller checked
    /// that it hashes to it) and removes it from the session.
    async fn commit_upload(&self, id: &str, digest: &Sha256Digest) -> io::Result<()>;
    /// Removes the data of session `id`, if any.
    async fn remove_upload(&self, id: &str) -> io::Result<()>;
    /// Whether other registry processes may write here too (replicas on
    /// one bucket): then data this process does not know of may be theirs.
    fn shared(&self) -> bool {
        false
    }
    /// The sessions that have data, with when it was last written (Unix
    /// seconds), to clear what no session owns.
    async fn uploads(&self) -> io::Result<Vec<(String, u64)>>;
}
