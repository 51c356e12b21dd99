//! Fakes for the unit tests: a chunk source with a registry and a disk
//! cache that can hold damaged copies, and tree indexes built in memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::future::{BoxFuture, FutureExt as _};
use sealvol_spec::tree::{ChunkRef, Entry, EntryData, TreeIndex};
use sealvol_spec::{ChunkingParams, Sha256Digest};

use crate::inodes::{Inodes, Owner};
use crate::reader::{Check, ChunkSource, Fetched, ReadError};

/// A source serving chunks after a pause: from its disk copies (unhashed
/// under [`Check::Chain`], like `ChunkCache::get_unverified`; hashed and
/// dropped when damaged under [`Check::Sha256`], like `ChunkCache::get`),
/// else from its registry, which only ever serves bytes that match their
/// sha256 (like the transport). Counts everything.
#[derive(Default)]
pub(crate) struct Fake {
    pub registry: HashMap<Sha256Digest, Vec<u8>>,
    pub disk: Mutex<HashMap<Sha256Digest, Vec<u8>>>,
    pub pause: Duration,
    /// Fetches asked of the source.
    pub fetches: AtomicUsize,
    /// Fetches that went to the registry.
    pub downloads: AtomicUsize,
    /// Disk copies removed by `discard`.
    pub discarded: AtomicUsize,
    /// A chunk the registry serves corrupt.
    pub bad: Option<Sha256Digest>,
}

impl Fake {
    /// A registry holding `blobs`, nothing on disk.
    pub fn new<'a>(blobs: impl IntoIterator<Item = &'a [u8]>, pause: Duration) -> Fake {
        Fake {
            registry: blobs
                .into_iter()
                .map(|b| (Sha256Digest::of(b), b.to_vec()))
                .collect(),
            pause,
            ..Fake::default()
        }
    }

    /// A registry holding every chunk of the files of `data`.
    pub fn of_files(files: &[(&[u8], &EntryData)], pause: Duration) -> Fake {
        let mut blobs: Vec<&[u8]> = Vec::new();
        for (bytes, e) in files {
            if let EntryData::File { chunks, .. } = e {
                for c in chunks {
                    blobs
                        .push(&bytes[c.offset as usize..(c.offset + u64::from(c.length)) as usize]);
                }
            }
        }
        Fake::new(blobs, pause)
    }

    pub fn disk(&self) -> std::sync::MutexGuard<'_, HashMap<Sha256Digest, Vec<u8>>> {
        self.disk.lock().unwrap()
    }
}

impl ChunkSource for Fake {
    fn fetch(
        self: Arc<Self>,
        c: ChunkRef,
        check: Check,
    ) -> BoxFuture<'static, Result<Fetched, ReadError>> {
        async move {
            self.fetches.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.pause).await;
            let local = self.disk().get(&c.sha256).cloned();
            if let Some(d) = local {
                if d.len() == c.length as usize {
                    match check {
                        Check::Chain => {
                            return Ok(Fetched {
                                bytes: d.into(),
                                checked: false,
                            })
                        }
                        Check::Sha256 if Sha256Digest::of(&d) == c.sha256 => {
                            return Ok(Fetched {
                                bytes: d.into(),
                                checked: true,
                            })
                        }
                        Check::Sha256 => {}
                    }
                }
                self.disk().remove(&c.sha256);
            }
            self.downloads.fetch_add(1, Ordering::SeqCst);
            if self.bad == Some(c.sha256) {
                return Err(ReadError::Corrupt {
                    chunk: c.sha256,
                    message: "flipped".into(),
                });
            }
            match self.registry.get(&c.sha256) {
                Some(b) if b.len() == c.length as usize => {
                    self.disk().insert(c.sha256, b.clone());
                    Ok(Fetched {
                        bytes: Bytes::from(b.clone()),
                        checked: true,
                    })
                }
                _ => Err(ReadError::Unavailable {
                    chunk: c.sha256,
                    message: "not there".into(),
                }),
            }
        }
        .boxed()
    }

    fn is_local(&self, c: &ChunkRef) -> bool {
        self.disk().contains_key(&c.sha256)
    }

    fn discard(&self, c: &ChunkRef) {
        if self.disk().remove(&c.sha256).is_some() {
            self.discarded.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Bytes that differ from file to file (`seed`) and from MiB to MiB.
pub(crate) fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(seed | 1) ^ (i >> 11) as u8 ^ seed)
        .collect()
}

/// `EntryData::file_of` with chunks of `lengths`, then one of the rest.
pub(crate) fn file_of(data: &[u8], lengths: &[usize]) -> EntryData {
    let mut all = lengths.to_vec();
    all.push(data.len() - lengths.iter().sum::<usize>());
    EntryData::file_of(data, &all)
}

pub(crate) fn file(path: &str, data: EntryData) -> Entry {
    Entry {
        path: path.into(),
        mode: 0o644,
        data,
    }
}

/// The inode table of `entries` (format 2).
pub(crate) fn inodes(entries: Vec<Entry>) -> Arc<Inodes> {
    let tree = TreeIndex::new(ChunkingParams::default(), entries).unwrap();
    Arc::new(Inodes::new(tree, None, owner()).unwrap())
}

pub(crate) fn owner() -> Owner {
    Owner {
        uid: 0,
        gid: 0,
        time: SystemTime::UNIX_EPOCH,
    }
}

/// `entries` encoded as a format 1 tree index (SPEC.md §2.6) and decoded:
/// chunk records carry a BLAKE3, files no chaining values.
pub(crate) fn v1_tree(entries: &[Entry]) -> TreeIndex {
    let out = sealvol_spec::tree::encode_entries(
        sealvol_spec::TreeFormat::V1,
        ChunkingParams::default(),
        entries,
        // The chunk's BLAKE3, which format 1 carried and readers skip.
        &|_, _| sealvol_spec::B3Digest([0; 32]),
    );
    let tree = TreeIndex::decode(&out).unwrap();
    assert!(!tree.is_verifiable());
    tree
}
