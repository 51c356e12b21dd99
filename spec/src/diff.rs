//! What changed between two versions' trees, as `sealvol diff` prints it
//! and `GET /api/v1/volumes/NAME/-/versions/A/diff/B` answers it (SPEC.md
//! §7.3): computed here once, from the two tree indexes, so the client and
//! the registry say the same.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::api::EntryInfo;
use crate::tree::{Entry, EntryData, TreeIndex};
use crate::Sha256Digest;

/// What changed from version A (`from`) to version B (`to`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    pub from: String,
    pub to: String,
    /// Entries of B that A lacks, in B's order.
    pub added: Vec<EntryInfo>,
    /// Entries of A that B lacks, in A's order.
    pub removed: Vec<EntryInfo>,
    /// Entries whose content, kind, mode or target changed.
    pub changed: Vec<Changed>,
    pub unchanged_files: u64,
    pub bytes_added: u64,
    pub bytes_removed: u64,
    /// Bytes of B's distinct chunks that A does not have: what a pull of B
    /// over a cache of A transfers.
    pub new_chunk_bytes: u64,
    /// Share of B's distinct chunk bytes that A already has (0..1; 1 when
    /// B has no chunks).
    pub shared_chunk_fraction: f64,
}

/// One path in both versions, with something changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changed {
    pub path: String,
    pub from: EntryInfo,
    pub to: EntryInfo,
}

/// The difference from `a` (named `a_name`) to `b` (named `b_name`).
pub fn diff(a_name: String, a: &TreeIndex, b_name: String, b: &TreeIndex) -> Diff {
    let a_map: HashMap<&str, &Entry> = a.entries().iter().map(|e| (e.path.as_str(), e)).collect();
    let b_map: HashMap<&str, &Entry> = b.entries().iter().map(|e| (e.path.as_str(), e)).collect();
    let mut d = Diff {
        from: a_name,
        to: b_name,
        added: Vec::new(),
        removed: Vec::new(),
        changed: Vec::new(),
        unchanged_files: 0,
        bytes_added: 0,
        bytes_removed: 0,
        new_chunk_bytes: 0,
        shared_chunk_fraction: 1.0,
    };
    for e in b.entries() {
        match a_map.get(e.path.as_str()) {
            None => {
                d.bytes_added += e.data.size();
                d.added.push(e.into());
            }
            Some(old) if old.mode != e.mode || !same_content(&old.data, &e.data) => {
                d.changed.push(Changed {
                    path: e.path.clone(),
                    from: (*old).into(),
                    to: e.into(),
                });
            }
            Some(_) => {
                if matches!(e.data, EntryData::File { .. }) {
                    d.unchanged_files += 1;
                }
            }
        }
    }
    for e in a.entries() {
        if !b_map.contains_key(e.path.as_str()) {
            d.bytes_removed += e.data.size();
            d.removed.push(e.into());
        }
    }
    let a_chunks: HashSet<Sha256Digest> = chunks_of(a).map(|(d, _)| d).collect();
    let mut seen = HashSet::new();
    let (mut total, mut new) = (0u64, 0u64);
    for (digest, len) in chunks_of(b) {
        if seen.insert(digest) {
            total += len;
            if !a_chunks.contains(&digest) {
                new += len;
            }
        }
    }
    d.new_chunk_bytes = new;
    if total > 0 {
        d.shared_chunk_fraction = (total - new) as f64 / total as f64;
    }
    d
}

fn same_content(a: &EntryData, b: &EntryData) -> bool {
    match (a, b) {
        (EntryData::Dir, EntryData::Dir) => true,
        (EntryData::File { blake3: x, .. }, EntryData::File { blake3: y, .. }) => x == y,
        (EntryData::Symlink { target: x }, EntryData::Symlink { target: y }) => x == y,
        _ => false,
    }
}

/// Every chunk reference of `t`'s files, repeats included.
pub fn chunks_of(t: &TreeIndex) -> impl Iterator<Item = (Sha256Digest, u64)> + '_ {
    t.entries().iter().flat_map(|e| match &e.data {
        EntryData::File { chunks, .. } => chunks
            .iter()
            .map(|c| (c.sha256, u64::from(c.length)))
            .collect::<Vec<_>>(),
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChunkingParams;

    /// A file of `parts`, each `(byte, length)` one chunk of that byte.
    fn file(path: &str, parts: &[(u8, usize)]) -> Entry {
        let data: Vec<u8> = parts
            .iter()
            .flat_map(|&(b, n)| std::iter::repeat_n(b, n))
            .collect();
        let lengths: Vec<usize> = parts.iter().map(|&(_, n)| n).collect();
        Entry {
            path: path.into(),
            mode: 0o644,
            data: EntryData::file_of(&data, &lengths),
        }
    }

    #[test]
    fn added_removed_changed_and_shared_chunk_bytes() {
        let a = TreeIndex::new(
            ChunkingParams::default(),
            vec![
                file("a", &[(1, 100), (2, 100)]),
                file("gone", &[(3, 50)]),
                file("same", &[(4, 10)]),
            ],
        )
        .unwrap();
        let b = TreeIndex::new(
            ChunkingParams::default(),
            vec![
                file("a", &[(1, 100), (5, 300)]),
                file("new", &[(1, 100)]),
                file("same", &[(4, 10)]),
            ],
        )
        .unwrap();
        let d = diff("A".into(), &a, "B".into(), &b);
        let paths = |v: &[EntryInfo]| v.iter().map(|e| e.path.clone()).collect::<Vec<_>>();
        assert_eq!(paths(&d.added), ["new"]);
        assert_eq!(paths(&d.removed), ["gone"]);
        assert_eq!(d.changed.len(), 1);
        assert_eq!(d.changed[0].path, "a");
        assert_eq!((d.changed[0].from.size, d.changed[0].to.size), (200, 400));
        assert_eq!(d.unchanged_files, 1);
        assert_eq!((d.bytes_added, d.bytes_removed), (100, 50));
        // B's distinct chunks: 100 of 1, 300 of 5, 10 of 4; A has the
        // first and the last.
        assert_eq!(d.new_chunk_bytes, 300);
        assert!((d.shared_chunk_fraction - 110.0 / 410.0).abs() < 1e-9);
        let back: Diff = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back, d);
    }
}
