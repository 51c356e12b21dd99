//! A version's file tree, read by the registry for the API that shows it
//! (`…/versions/D/entries`, `…/versions/A/diff/B`, SPEC.md §7.3): its
//! tree index, found through the version's index and tree manifest and
//! decoded once, then kept for the next page.
//!
//! The registry stores the tree blob under its sha256 and checks every
//! upload against it, so the bytes it reads are the ones the pusher sealed;
//! decoding checks every rule of SPEC.md §2.3. It does not check them
//! against the version digest: that is the client's trust chain, and the
//! registry answers what it stores either way.

use std::sync::{Arc, Mutex};

use sealvol_spec::oci::{artifact_layers, sha256_of, MT_TREE_MANIFEST};
use sealvol_spec::tree::{TreeIndex, MAX_TREE_BYTES};
use sealvol_spec::Sha256Digest;

use crate::app::App;
use sealvol_spec::api;

use crate::error::{Code, RegistryError, Result};

/// How many decoded trees stay in memory: a web view pages through one
/// version or compares two, and a tree of 100,000 files decodes to some
/// tens of MiB.
const KEPT: usize = 4;

/// Recently read trees by tree blob digest, the most recent last.
#[derive(Default)]
pub struct TreeCache(Mutex<Vec<(Sha256Digest, Arc<TreeIndex>)>>);

impl TreeCache {
    fn get(&self, d: &Sha256Digest) -> Option<Arc<TreeIndex>> {
        let mut kept = self.0.lock().expect("tree cache lock");
        let i = kept.iter().position(|(k, _)| k == d)?;
        let hit = kept.remove(i);
        let tree = hit.1.clone();
        kept.push(hit);
        Some(tree)
    }

    fn put(&self, d: Sha256Digest, tree: Arc<TreeIndex>) {
        let mut kept = self.0.lock().expect("tree cache lock");
        kept.retain(|(k, _)| *k != d);
        if kept.len() >= KEPT {
            kept.remove(0);
        }
        kept.push((d, tree));
    }
}

/// The tree of the version of `repo` that `digest` names (its `b3:`
/// digest or an index's `sha256:`), alive or restorable.
pub(crate) async fn tree_of(app: &App, repo: &str, digest: &str) -> Result<Arc<TreeIndex>> {
    let retention = app.policy.retention_seconds;
    let (r, d) = (repo.to_string(), digest.to_string());
    let version = app.lifecycle(move |m| m.version(&r, &d, retention)).await?;
    let index = version.index_digest.to_string();
    let ix = crate::stats::read_index(app, &index).await?;
    let damaged = |why: String| RegistryError::internal(format!("version {digest}: {why}"));
    let manifest_digest = sha256_of(&ix.tree_manifest)
        .ok_or_else(|| damaged("its tree manifest's digest is not sha256".into()))?;
    let manifest = app
        .blobs
        .get(&manifest_digest)
        .await?
        .ok_or_else(|| damaged(format!("tree manifest {manifest_digest} is not stored")))?;
    let layers =
        artifact_layers(&manifest, MT_TREE_MANIFEST).map_err(|e| damaged(e.to_string()))?;
    let [layer] = layers.as_slice() else {
        return Err(damaged("its tree manifest has more than one layer".into()));
    };
    let blob =
        sha256_of(layer).ok_or_else(|| damaged("its tree blob's digest is not sha256".into()))?;
    if let Some(tree) = app.trees.get(&blob) {
        return Ok(tree);
    }
    if layer.size() > MAX_TREE_BYTES {
        return Err(damaged(format!(
            "its tree index is {} bytes, over the format's {MAX_TREE_BYTES}",
            layer.size()
        )));
    }
    let bytes = app
        .blobs
        .get(&blob)
        .await?
        .ok_or_else(|| damaged(format!("tree blob {blob} is not stored")))?;
    let tree = tokio::task::spawn_blocking(move || TreeIndex::decode(&bytes))
        .await
        .map_err(RegistryError::internal)?
        .map_err(|e| damaged(format!("its tree index does not decode: {e}")))?;
    let tree = Arc::new(tree);
    app.trees.put(blob, tree.clone());
    Ok(tree)
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

#[cfg(test)]
mod tests {
    use super::*;
    use sealvol_spec::ChunkingParams;

    #[test]
    fn the_cache_keeps_the_most_recent_trees() {
        let cache = TreeCache::default();
        let tree = Arc::new(TreeIndex::new(ChunkingParams::default(), Vec::new()).unwrap());
        let d = |b: u8| Sha256Digest([b; 32]);
        for b in 0..KEPT as u8 {
            cache.put(d(b), tree.clone());
        }
        // Reading the oldest makes it the newest; the next put drops the
        // second oldest instead.
        assert!(cache.get(&d(0)).is_some());
        cache.put(d(9), tree.clone());
        assert!(cache.get(&d(0)).is_some());
        assert!(cache.get(&d(1)).is_none());
        assert!(cache.get(&d(9)).is_some());
    }
}
