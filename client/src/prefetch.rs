//! Recorded prefetch lists on a registry (SPEC.md §5.8): pushed as a
//! referrer of the version index, found again as the newest such referrer,
//! and checked against the version's tree before anything it names is
//! fetched. Where the registry has no referrers API, both sides use the
//! referrers tag schema (`sha256-<hex>` of the index).
//!
//! What a list says is only an order: a reader fetches the chunks under
//! the pieces it names and checks them through the chain when they are read,
//! like any other fetch. A list that breaks a rule is refused whole.

use sealvol_spec::oci::{
    build_prefetch, prefetch_candidate, prefetch_layer, sha256_of, MT_PREFETCH,
};
use sealvol_spec::prefetch::PrefetchList;
use sealvol_spec::tree::TreeIndex;
use sealvol_spec::Sha256Digest;

use crate::resolve::Resolved;
use crate::{Error, Remote};

/// A prefetch list pushed.
#[derive(Clone, Debug)]
pub struct Pushed {
    /// The referrer manifest's digest.
    pub manifest: Sha256Digest,
    /// Whether the registry lists referrers itself; `false` when the list
    /// was added to the referrers tag schema's index instead.
    pub referrers_api: bool,
}

/// A prefetch list found for a version and checked against its tree.
#[derive(Clone, Debug)]
pub struct Found {
    /// The referrer manifest it came from.
    pub manifest: Sha256Digest,
    /// When it was recorded (RFC 3339), as its manifest says.
    pub created: String,
    pub list: PrefetchList,
}

/// Pushes `list`, recorded on `version` at `created` (RFC 3339), as a
/// referrer of the version index: the empty config and the list blob, the
/// manifest by digest, and, on a registry without the referrers API, the
/// updated referrers tag schema index.
pub async fn push_list(
    remote: &Remote,
    version: &Resolved,
    list: &PrefetchList,
    created: &str,
) -> Result<Pushed, Error> {
    let bytes = list
        .encode()
        .map_err(|e| Error::Usage(format!("cannot encode the prefetch list: {e}")))?;
    let built = build_prefetch(
        bytes,
        &version.index.digest,
        &version.index_digest,
        version.index_bytes.len() as u64,
        created,
    )
    .map_err(|e| Error::Usage(format!("cannot lay out the prefetch list: {e}")))?;
    let api = crate::referrer::push(remote, version, &built).await?;
    let manifest = built.manifest.digest();
    Ok(Pushed {
        manifest,
        referrers_api: api,
    })
}

/// The newest prefetch list recorded on `version` (whose tree is `tree`),
/// checked (SPEC.md §5.8); `None` when it has none. A newest list that
/// breaks a rule is an error ([`Error::InvalidPrefetch`]), and no older one
/// is tried in its place.
pub async fn find_list(
    remote: &Remote,
    version: &Resolved,
    tree: &TreeIndex,
) -> Result<Option<Found>, Error> {
    let repo = &version.repo;
    let v = version.index.digest;
    let (referrers, _) = remote
        .referrers(repo, &version.index_digest, MT_PREFETCH)
        .await?;
    let newest = referrers
        .iter()
        .filter_map(|d| Some((prefetch_candidate(d, &v)?, sha256_of(d)?)))
        .max();
    let Some((created, manifest)) = newest else {
        return Ok(None);
    };
    let invalid = |why: String| Error::InvalidPrefetch(format!("{repo}@{manifest}: {why}"));
    let (bytes, _) = remote.manifest(repo, &manifest.to_string()).await?;
    let layer =
        prefetch_layer(&bytes, &v, &version.index_digest).map_err(|e| invalid(e.to_string()))?;
    let digest = sha256_of(&layer).ok_or_else(|| invalid("no sha256 layer".into()))?;
    let blob = remote.get_blob(repo, &digest, layer.size()).await?;
    let list = PrefetchList::decode(&blob).map_err(|e| invalid(e.to_string()))?;
    list.check(&v, tree).map_err(|e| invalid(e.to_string()))?;
    Ok(Some(Found {
        manifest,
        created,
        list,
    }))
}
