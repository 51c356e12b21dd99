//! What every source is (SPEC.md §8.1): the [`Source`] trait, the
//! [`SourceOptions`] each is opened with, and the check that a key makes a
//! valid tree path. Which module opens which URI scheme is
//! [`crate::schemes`]'s, above every source.
//!
//! Not where bytes are chunked or checked against the listing: that is
//! [`crate::sealer`], which every source's bytes go through alike.

use async_trait::async_trait;

use crate::{ByteStream, ErrorKind, Object, SyncError};

/// A place files are copied from.
#[async_trait]
pub trait Source: Send + Sync {
    /// The URI the job was given, for messages.
    fn uri(&self) -> &str;
    /// Every file under the source, pinned to the version each had when
    /// listed. Paths are unique and valid tree paths.
    async fn list(&self) -> Result<Vec<Object>, SyncError>;
    /// The bytes of one listed object, as the listing saw it.
    async fn open(&self, object: &Object) -> Result<ByteStream, SyncError>;
    /// The URI of this source pinned to what `listed` was read from, when
    /// the URI names something that moves (a Hub branch): a job that
    /// resumes reads the same content, and the version records it.
    fn pinned(&self, _listed: &[Object]) -> Option<String> {
        None
    }
    /// Where this source's [`Object::identity`] values are unique: its
    /// endpoint and bucket (or repository host, or folder). Identities are
    /// only compared within one scope, so a source at another endpoint
    /// cannot name, and so take, what this one sealed. `None`: no reuse.
    fn reuse_scope(&self) -> Option<String> {
        None
    }
}

/// What a source needs besides its URI.
#[derive(Clone, Debug, Default)]
pub struct SourceOptions {
    /// The value of the secret the job names (SPEC.md §8.1), if any: the
    /// caller has checked that it is bound to this source.
    pub secret: Option<String>,
    /// Where the source may connect (SPEC.md §8.4). The default refuses
    /// loopback, link-local and metadata addresses.
    pub net: crate::net::NetPolicy,
}

/// Checks a path built from a source key and says which key broke the
/// rules when it is not a valid tree path.
pub fn tree_path(uri: &str, key: &str, rel: &str) -> Result<String, SyncError> {
    sealvol_spec::path::validate(rel).map_err(|e| {
        SyncError::new(
            ErrorKind::InvalidSource,
            format!("{uri}: object {key} cannot be a file of a version: {e}"),
        )
    })?;
    Ok(rel.to_string())
}
