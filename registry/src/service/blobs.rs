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
