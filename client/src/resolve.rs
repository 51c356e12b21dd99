//! From a ref to a verified version on any registry (SPEC.md §5.3, §5.7):
//! `head` and user tags are tags, `@b3:<hex>` is the `b3-<hex>` tag, a
//! prefix is matched against the repository's `b3-` tags, and `@sha256:` is
//! the index itself. The tree index is fetched, decoded, validated and
//! checked against the version digest before anyone reads a file.

use bytes::Bytes;
use sealvol_spec::oci::{self, VersionIndex};
use sealvol_spec::reference::{Selector, Tag, VolumeRef};
use sealvol_spec::tree::{TreeIndex, MAX_TREE_BYTES};
use sealvol_spec::{B3Digest, DigestSelector, Sha256Digest};

use crate::remote::Remote;
use crate::{Error, TransportError};

/// A version found on a registry.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The repository, `namespace/volume`.
    pub repo: String,
    /// The OCI digest of the version index.
    pub index_digest: Sha256Digest,
    pub index_bytes: Bytes,
    pub index: VersionIndex,
    /// The ref as given, with its selector replaced by the full digest.
    pub pinned: VolumeRef,
}

/// The `b3-<hex>` tags of a repository, as version digests.
pub async fn version_digests(remote: &Remote, repo: &str) -> Result<Vec<B3Digest>, Error> {
    Ok(remote
        .tags(repo)
        .await?
        .iter()
        .filter_map(|t| t.strip_prefix("b3-"))
        .filter_map(|hex| format!("b3:{hex}").parse().ok())
        .collect())
}

/// Finds the version `vref` names.
pub async fn resolve(remote: &Remote, vref: &VolumeRef) -> Result<Resolved, Error> {
    let repo = vref.repository();
    let volume = vref.with_selector(Selector::Head);
    let (reference, wanted): (String, Option<B3Digest>) = match &vref.selector {
        Selector::Head => ("head".to_string(), None),
        Selector::Tag(t) => (t.as_str().to_string(), None),
        Selector::Digest(DigestSelector::B3(d)) => {
            (Tag::for_digest(d).as_str().to_string(), Some(*d))
        }
        Selector::Digest(DigestSelector::Sha256(d)) => (d.to_string(), None),
        Selector::Digest(sel @ DigestSelector::B3Prefix(_)) => {
            let candidates = version_digests(remote, &repo).await?;
            let d = sel
                .resolve(candidates.iter())
                .map_err(|e| Error::NotFound(format!("{}: {e}", display_ref(remote, &volume))))?;
            (Tag::for_digest(&d).as_str().to_string(), Some(d))
        }
    };
    let (index_bytes, index_digest) = match remote.manifest(&repo, &reference).await {
        Ok(found) => found,
        Err(TransportError::NotFound(_)) => {
            let shown = display_ref(remote, &vref.without_path());
            return Err(Error::NotFound(match &vref.selector {
                Selector::Head => format!("{shown}: no such volume, or it has no versions yet"),
                Selector::Tag(t) => format!("{shown}: no tag {:?} on this volume", t.as_str()),
                _ => format!("{shown}: no version of this volume matches that digest"),
            }));
        }
        Err(e) => return Err(e.into()),
    };
    let index = VersionIndex::parse(&index_bytes).map_err(|e| {
        Error::NotAVersion(format!(
            "{}: {e}",
            display_ref(remote, &vref.without_path())
        ))
    })?;
    if let Some(w) = wanted {
        if index.digest != w {
            return Err(Error::Corrupt(format!(
                "tag {reference} of {repo} points at version {} instead of {w}",
                index.digest
            )));
        }
    }
    let pinned = VolumeRef {
        selector: Selector::Digest(DigestSelector::B3(index.digest)),
        ..vref.clone()
    };
    Ok(Resolved {
        repo,
        index_digest,
        index_bytes,
        index,
        pinned,
    })
}

/// Fetches and checks the version's tree index.
pub async fn load_tree(remote: &Remote, version: &Resolved) -> Result<TreeIndex, Error> {
    let d = oci::sha256_of(&version.index.tree_manifest)
        .ok_or_else(|| Error::NotAVersion("the tree manifest digest is not sha256".into()))?;
    let (bytes, _) = remote.manifest(&version.repo, &d.to_string()).await?;
    let layers = oci::artifact_layers(&bytes, oci::MT_TREE_MANIFEST)
        .map_err(|e| Error::NotAVersion(format!("tree manifest {d}: {e}")))?;
    let [layer] = layers.as_slice() else {
        return Err(Error::NotAVersion(format!(
            "tree manifest {d} has {} layers, not 1",
            layers.len()
        )));
    };
    let blob = oci::sha256_of(layer)
        .ok_or_else(|| Error::NotAVersion("the tree blob digest is not sha256".into()))?;
    // A size from the registry: bounded before anything is allocated for it.
    if layer.size() > MAX_TREE_BYTES {
        return Err(Error::Corrupt(format!(
            "tree index {blob} is {} bytes, over the 1 GiB limit (SPEC.md §2.4)",
            layer.size()
        )));
    }
    let bytes = remote.get_blob(&version.repo, &blob, layer.size()).await?;
    let tree = TreeIndex::decode(&bytes)
        .map_err(|e| Error::InvalidTree(format!("{e} (tree index {blob})")))?;
    let actual = tree.version_digest();
    if actual != version.index.digest {
        return Err(Error::Corrupt(format!(
            "tree index {blob} has version digest {actual}, but the index says {}",
            version.index.digest
        )));
    }
    Ok(tree)
}

/// The format of a version's tree index, from its tree manifest's layer
/// media type (one manifest GET; the tree itself is not fetched). A media
/// type neither format has is `None`.
pub async fn tree_format(
    remote: &Remote,
    repo: &str,
    index: &VersionIndex,
) -> Result<Option<sealvol_spec::TreeFormat>, Error> {
    let d = oci::sha256_of(&index.tree_manifest)
        .ok_or_else(|| Error::NotAVersion("the tree manifest digest is not sha256".into()))?;
    let (bytes, _) = remote.manifest(repo, &d.to_string()).await?;
    let layers = oci::artifact_layers(&bytes, oci::MT_TREE_MANIFEST)
        .map_err(|e| Error::NotAVersion(format!("tree manifest {d}: {e}")))?;
    Ok(match layers.first().map(|l| l.media_type().to_string()) {
        Some(t) if t == oci::MT_TREE_BLOB => Some(sealvol_spec::TreeFormat::V2),
        Some(t) if t == oci::MT_TREE_BLOB_V1 => Some(sealvol_spec::TreeFormat::V1),
        _ => None,
    })
}

/// What a reader does with a format 1 tree index, whose chunk lists are not
/// tied to the version digest (SPEC.md §2.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Legacy {
    /// Read it, with a warning ([`legacy_warning`]).
    #[default]
    Warn,
    /// Refuse it (`--require-verified`).
    Refuse,
}

/// The one-line warning for reading a format 1 version.
pub fn legacy_warning(shown: &str) -> String {
    format!(
        "warning: {shown} has a format 1 tree index: its bytes are not verified against the version digest until it is re-published (`sealvol upgrade {shown}`, or push it again)"
    )
}

/// Checks `tree` against the legacy policy: `Ok(true)` when every byte it
/// serves can be verified against the digest, `Ok(false)` when it is a
/// format 1 tree to read with a warning.
pub fn check_legacy(tree: &TreeIndex, policy: Legacy, shown: &str) -> Result<bool, Error> {
    if tree.is_verifiable() {
        return Ok(true);
    }
    match policy {
        Legacy::Warn => Ok(false),
        Legacy::Refuse => Err(Error::Unverified(format!(
            "{shown} has a format 1 tree index, whose bytes cannot be verified against the version digest (--require-verified); re-publish it with `sealvol upgrade {shown}` or push it again"
        ))),
    }
}

/// How to print a ref on this remote: `bdn:` form on the default registry,
/// qualified elsewhere.
pub fn display_ref(remote: &Remote, vref: &VolumeRef) -> String {
    let mut shown = vref.clone();
    // `bdn:` refs have a one-component namespace (SPEC.md §1.1).
    shown.registry =
        if remote.registry() == VolumeRef::default_registry() && !vref.namespace.contains('/') {
            None
        } else {
            Some(remote.registry().to_string())
        };
    shown.to_string()
}
