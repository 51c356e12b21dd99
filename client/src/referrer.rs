//! Content attached to a version as an OCI referrer of its index
//! (distribution-spec 1.1): prefetch lists (SPEC.md §5.8) and signatures
//! (§5.9). Where the registry has no referrers API, the referrers tag
//! schema's index (`sha256-<hex>` of the version index) is kept instead.

use bytes::Bytes;
use sealvol_spec::oci::{add_referrer, BuiltReferrer};

use crate::push::INDEX_TYPE;
use crate::remote::referrers_tag;
use crate::resolve::Resolved;
use crate::{Error, Remote, TransportError};

/// Media type of an image manifest.
const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// Pushes a referrer of the version index: its blobs, its manifest by
/// digest, and, on a registry without the referrers API, the referrers tag
/// schema's index. Whether the registry has the API.
pub(crate) async fn push(
    remote: &Remote,
    version: &Resolved,
    built: &BuiltReferrer,
) -> Result<bool, Error> {
    let repo = &version.repo;
    remote.prepare(repo, true).await;
    for blob in &built.blobs {
        let d = blob.digest();
        if !remote.has_blob(repo, &d).await? {
            remote
                .put_blob(repo, &d, Bytes::from(blob.bytes.clone()))
                .await?;
        }
    }
    let manifest = built.manifest.digest();
    remote
        .put_manifest(
            repo,
            &manifest.to_string(),
            Bytes::from(built.manifest.bytes.clone()),
            MANIFEST_TYPE,
        )
        .await?;
    let artifact = built
        .referrer
        .artifact_type()
        .as_ref()
        .map(|t| t.to_string())
        .unwrap_or_default();
    let (_, api) = remote
        .referrers(repo, &version.index_digest, &artifact)
        .await?;
    if !api {
        let tag = referrers_tag(&version.index_digest);
        let existing = match remote.manifest(repo, &tag).await {
            Ok((b, _)) => Some(b),
            Err(TransportError::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        };
        let index = add_referrer(existing.as_deref(), built.referrer.clone())
            .map_err(|e| Error::Corrupt(format!("the referrers index {repo}:{tag}: {e}")))?;
        remote
            .put_manifest(repo, &tag, Bytes::from(index.bytes), INDEX_TYPE)
            .await?;
    }
    Ok(api)
}
