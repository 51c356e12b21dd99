//! The version digest's canonical encoding (SPEC.md §3).
//!
//! It covers what a reader of the files can observe (paths, kinds, modes,
//! sizes, contents, link targets) and nothing about how the bytes were
//! chunked or stored, so the same files give the same digest on every
//! registry and with any chunking parameters.

use crate::tree::{Entry, EntryData};

/// Domain separation for the version digest, format version 1.
pub const CANONICAL_MAGIC: &[u8] = b"sealvol.version.v1\n";

/// The version digest of `entries` as given, in their order, valid or
/// not: what [`crate::TreeIndex::version_digest`] is over a valid tree,
/// and what a hostile publisher computes over an invalid one (which is why
/// readers validate the tree and do not trust the digest alone).
pub fn digest_of(entries: &[Entry]) -> crate::B3Digest {
    let mut h = blake3::Hasher::new();
    h.update(CANONICAL_MAGIC);
    for e in entries {
        canonical_entry(&mut h, e);
    }
    h.finalize().into()
}

/// Feeds one entry's canonical record to `h`:
/// `kind u8 | path_len u32le | path | mode u32le | size u64le | blake3 (files) or target (symlinks)`.
pub(crate) fn canonical_entry(h: &mut blake3::Hasher, e: &Entry) {
    let kind: u8 = match e.data {
        EntryData::Dir => 1,
        EntryData::File { .. } => 2,
        EntryData::Symlink { .. } => 3,
    };
    h.update(&[kind]);
    h.update(&(e.path.len() as u32).to_le_bytes());
    h.update(e.path.as_bytes());
    h.update(&e.mode.to_le_bytes());
    h.update(&e.data.size().to_le_bytes());
    match &e.data {
        EntryData::Dir => {}
        EntryData::File { blake3, .. } => {
            h.update(&blake3.0);
        }
        EntryData::Symlink { target } => {
            h.update(target.as_bytes());
        }
    }
}
