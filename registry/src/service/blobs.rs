//! Blob bytes as a `GET` serves them: the redirect to the bucket where
//! `[storage] redirect` is on, else the bytes of a range.

use sealvol_spec::Sha256Digest;

use crate::error::Result;
use crate::state::app::App;

pub use crate::store::BlobBody;

/// Where the client fetches `digest` itself (a presigned bucket URL), when
/// the store hands out such links.
pub(crate) async fn redirect_url(app: &App, digest: &Sha256Digest) -> Result<Option<String>> {
    Ok(app.blobs.redirect_url(digest).await?)
}

/// `len` bytes of `digest` from `start`; `None` when it is not stored.
pub(crate) async fn body(
    app: &App,
    digest: &Sha256Digest,
    start: u64,
    len: u64,
) -> Result<Option<BlobBody>> {
    Ok(app.blobs.body(digest, start, len).await?)
}

/// The bytes of `digest` whole (a manifest's), if stored.
pub(crate) async fn get(app: &App, digest: &Sha256Digest) -> Result<Option<bytes::Bytes>> {
    Ok(app.blobs.get(digest).await?)
}

/// The size of `digest` in the blob store, if stored.
pub(crate) async fn stored_size(app: &App, digest: &Sha256Digest) -> Result<Option<u64>> {
    Ok(app.blobs.size(digest).await?)
}

/// The size of blob `digest` if `repo` links it.
pub(crate) async fn linked_size(app: &App, repo: &str, digest: &str) -> Result<Option<u64>> {
    let (repo, digest) = (repo.to_string(), digest.to_string());
    app.meta(move |m| m.blob_size(&repo, &digest)).await
}

/// Links blob `digest` of `size` bytes into `repo`.
pub(crate) async fn link(app: &App, repo: &str, digest: &str, size: u64) -> Result<()> {
    let (repo, digest, now) = (repo.to_string(), digest.to_string(), app.now());
    app.meta(move |m| m.link_blob(&repo, &digest, size, now))
        .await
}

/// Unlinks blob `digest` from `repo`; whether it was linked.
pub(crate) async fn unlink(app: &App, repo: &str, digest: &str) -> Result<bool> {
    let (repo, digest) = (repo.to_string(), digest.to_string());
    app.meta(move |m| m.unlink_blob(&repo, &digest)).await
}
