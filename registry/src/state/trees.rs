//! Decoded trees kept in memory for the API's next page
//! (`service::trees` reads them).

use std::sync::{Arc, Mutex};

use sealvol_spec::tree::TreeIndex;
use sealvol_spec::Sha256Digest;

/// How many decoded trees stay in memory: a web view pages through one
/// version or compares two, and a tree of 100,000 files decodes to some
/// tens of MiB.
const KEPT: usize = 4;

/// Recently read trees by tree blob digest, the most recent last.
#[derive(Default)]
pub struct TreeCache(Mutex<Vec<(Sha256Digest, Arc<TreeIndex>)>>);

impl TreeCache {
    pub(crate) fn get(&self, d: &Sha256Digest) -> Option<Arc<TreeIndex>> {
        let mut kept = self.0.lock().expect("tree cache lock");
        let i = kept.iter().position(|(k, _)| k == d)?;
        let hit = kept.remove(i);
        let tree = hit.1.clone();
        kept.push(hit);
        Some(tree)
    }

    pub(crate) fn put(&self, d: Sha256Digest, tree: Arc<TreeIndex>) {
        let mut kept = self.0.lock().expect("tree cache lock");
        kept.retain(|(k, _)| *k != d);
        if kept.len() >= KEPT {
            kept.remove(0);
        }
        kept.push((d, tree));
    }
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
