//! A version's file tree, read by the registry for the API that shows it
//! (`…/versions/D/entries`, `…/versions/A/diff/B`, SPEC.md §7.3): its
//! tree index, found through the version's index and tree manifest and
//! decoded once, then kept for the next page.
//!
//! The registry stores the tree blob under its sha256 and checks every
//! upload against it, so the bytes it reads are the ones the pusher
//! sealed, and it seals a version only after `read_tree` decoded its
//! tree and found the version digest the index claims (`manifests`).
//! Clients still check everything themselves: that is their trust chain.

use std::sync::Arc;

use sealvol_spec::oci::{
    artifact_layers, sha256_of, VersionIndex, MT_TREE_BLOB, MT_TREE_BLOB_V1, MT_TREE_MANIFEST,
};
use sealvol_spec::tree::{TreeIndex, MAX_TREE_BYTES};
use sealvol_spec::{Sha256Digest, TreeFormat};

use crate::state::app::App;
use sealvol_spec::api;

use crate::error::{Code, RegistryError, Result};

/// Why the tree of a version index cannot be read. The write path
/// (`manifests`) refuses such an index; the read path answers it as a
/// damaged version.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unreadable {
    /// A manifest or blob it names is not stored.
    #[error("{0} is not stored")]
    Missing(String),
    /// What is stored is not what a version needs.
    #[error("{0}")]
    Invalid(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] RegistryError),
}

impl From<std::io::Error> for Unreadable {
    fn from(e: std::io::Error) -> Self {
        Unreadable::Store(e.into())
    }
}

/// A version's tree as its index names it: the tree index decoded and
/// checked (SPEC.md §2.3), and its format.
pub(crate) struct Found {
    pub tree: Arc<TreeIndex>,
    pub format: TreeFormat,
}

/// Reads the tree of version index `ix`: its tree manifest, that
/// manifest's one layer, the tree blob, decoded (or taken from the cache
/// of decoded trees). The tree blob's media type must name the format its
/// bytes hold.
pub(crate) async fn read_tree(
    app: &App,
    ix: &VersionIndex,
) -> std::result::Result<Found, Unreadable> {
    let invalid = |why: String| Unreadable::Invalid(why);
    let manifest_digest = sha256_of(&ix.tree_manifest)
        .ok_or_else(|| invalid("its tree manifest's digest is not sha256".into()))?;
    let manifest = app
        .blobs
        .get(&manifest_digest)
        .await?
        .ok_or_else(|| Unreadable::Missing(format!("tree manifest {manifest_digest}")))?;
    let layers = artifact_layers(&manifest, MT_TREE_MANIFEST).map_err(|e| {
        invalid(format!(
            "its tree manifest {manifest_digest} is not a tree manifest: {e}"
        ))
    })?;
    let [layer] = layers.as_slice() else {
        return Err(invalid(format!(
            "its tree manifest {manifest_digest} has {} layers, not one",
            layers.len()
        )));
    };
    let format = match layer.media_type().to_string().as_str() {
        MT_TREE_BLOB => TreeFormat::V2,
        MT_TREE_BLOB_V1 => TreeFormat::V1,
        other => {
            return Err(invalid(format!(
                "its tree blob's media type is {other:?}, not {MT_TREE_BLOB}"
            )))
        }
    };
    let blob =
        sha256_of(layer).ok_or_else(|| invalid("its tree blob's digest is not sha256".into()))?;
    let tree = match app.trees.get(&blob) {
        Some(tree) => tree,
        None => {
            if layer.size() > MAX_TREE_BYTES {
                return Err(invalid(format!(
                    "its tree index is {} bytes, over the format's {MAX_TREE_BYTES}",
                    layer.size()
                )));
            }
            let bytes = app
                .blobs
                .get(&blob)
                .await?
                .ok_or_else(|| Unreadable::Missing(format!("tree blob {blob}")))?;
            if bytes.len() as u64 != layer.size() {
                return Err(invalid(format!(
                    "its tree blob {blob} is {} bytes, its descriptor says {}",
                    bytes.len(),
                    layer.size()
                )));
            }
            let tree = tokio::task::spawn_blocking(move || TreeIndex::decode(&bytes))
                .await
                .map_err(RegistryError::internal)?
                .map_err(|e| invalid(format!("its tree index does not decode: {e}")))?;
            let tree = Arc::new(tree);
            app.trees.put(blob, tree.clone());
            tree
        }
    };
    if tree.format() != format {
        return Err(invalid(format!(
            "its tree blob is labelled {}, but holds a {} tree index",
            layer.media_type(),
            tree.format().media_type()
        )));
    }
    Ok(Found { tree, format })
}

/// The tree of the version of `repo` that `digest` names (its `b3:`
/// digest or an index's `sha256:`), alive or restorable. A version whose
/// stored tree cannot be read is answered as damaged, that version alone.
pub(crate) async fn tree_of(app: &App, repo: &str, digest: &str) -> Result<Arc<TreeIndex>> {
    let retention = app.lifetimes.retention_seconds;
    let (r, d) = (repo.to_string(), digest.to_string());
    let version = app.meta(move |m| m.version(&r, &d, retention)).await?;
    let index = version.index_digest.to_string();
    let index: Sha256Digest = index
        .parse()
        .map_err(|_| damaged(repo, digest, &format!("its index {index:?} is not sha256")))?;
    let bytes = (app.blobs.get(&index).await?)
        .ok_or_else(|| damaged(repo, digest, &format!("its index {index} is not stored")))?;
    let ix = VersionIndex::parse(&bytes).map_err(|e| {
        damaged(
            repo,
            digest,
            &format!("its index {index} is not a version: {e}"),
        )
    })?;
    match read_tree(app, &ix).await {
        Ok(found) => Ok(found.tree),
        Err(Unreadable::Store(e)) => Err(e),
        Err(e) => Err(damaged(repo, digest, &e.to_string())),
    }
}

/// The answer for a version whose stored content is not a version: a
/// 500 (the registry holds it, the client did nothing wrong) that says
/// which version and what to do, and leaves the rest of the volume
/// readable.
pub(crate) fn damaged(repo: &str, digest: &str, why: &str) -> RegistryError {
    RegistryError::Damaged(format!(
        "version {digest} of {repo} is damaged ({why}); push the version again, or delete it"
    ))
}

/// The entries directly inside directory `dir` of `tree` ("" for the
/// root), in canonical order; a file or symlink lists itself, as `ls`
/// does.
pub(crate) fn entries_in(tree: &sealvol_spec::TreeIndex, dir: &str) -> Result<Vec<api::EntryInfo>> {
    let dir = dir.trim_matches('/');
    if dir.is_empty() {
        return Ok(tree.children(None).map(api::EntryInfo::from).collect());
    }
    let e = tree.get(dir).ok_or_else(|| {
        RegistryError::new(
            Code::PathUnknown,
            format!("{dir}: no such file or directory in this version"),
        )
    })?;
    if !e.is_dir() {
        return Ok(vec![api::EntryInfo::from(e)]);
    }
    Ok(tree.children(Some(dir)).map(api::EntryInfo::from).collect())
}
