//! Recorded prefetch (SPEC.md §5.8): noting which pieces a cold start reads
//! first, and turning a recorded list back into the chunks to fetch, in
//! that order, ahead of the reader.
//!
//! Recording: a [`Recorder`] handed to [`record_next_mount`] is taken by the
//! next mount this process makes, whose file reader calls
//! [`Recorder::read`] on every read it serves (one lock, one set lookup per
//! read; nothing when no recorder is installed). It keeps each (file,
//! piece) the first time it is read, whichever engine serves the reads:
//! FUSE reads and fanotify fills both go through the file reader. Read-ahead
//! the mount does on its own (chunks and pieces verified ahead) is not a
//! read and is not recorded; what the kernel reads ahead is.
//!
//! Replaying: [`find_plan`] finds the version's newest list on its registry
//! and checks it against the tree ([`sealvol_spec::prefetch`]), and
//! [`plan`] maps its pieces to the chunks that cover them, each chunk once,
//! for the prefetcher (`Prefetch::Recorded`). A list that breaks a rule is
//! refused whole: nothing it names is fetched.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Mutex};

use sealvol_client::resolve::Resolved;
use sealvol_client::Remote;
use sealvol_spec::chain::piece_range;
use sealvol_spec::prefetch::{PrefetchError, PrefetchList};
use sealvol_spec::tree::{ChunkRef, TreeIndex};
use sealvol_spec::B3Digest;

use crate::inodes::Inodes;
use crate::prefetch::Prefetcher;
use crate::reader::{touched, ChunkReader};

/// The (file, piece) reads of a mount, first reads only, in order.
#[derive(Debug, Default)]
pub struct Recorder {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Each file's path in the version, by inode.
    paths: HashMap<u64, String>,
    seen: HashSet<(u64, u64)>,
    order: Vec<(u64, u64)>,
}

impl Recorder {
    pub fn new() -> Arc<Recorder> {
        Arc::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change is one insert or push: consistent after a panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A read of pieces `pieces` of file `ino`, at `path` in the version.
    pub(crate) fn read(&self, ino: u64, path: &str, pieces: Range<u64>) {
        let mut st = self.state();
        for p in pieces {
            if st.seen.insert((ino, p)) {
                st.order.push((ino, p));
                st.paths.entry(ino).or_insert_with(|| path.to_string());
            }
        }
    }

    /// How many (file, piece) reads were recorded.
    pub fn len(&self) -> usize {
        self.state().order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The (path, piece) reads so far, first read first.
    pub fn reads(&self) -> Vec<(String, u64)> {
        let st = self.state();
        st.order
            .iter()
            .map(|(ino, p)| (st.paths[ino].clone(), *p))
            .collect()
    }

    /// The prefetch list of what was read so far, for `version`.
    pub fn list(&self, version: B3Digest) -> PrefetchList {
        let reads = self.reads();
        PrefetchList::from_reads(version, reads.iter().map(|(f, p)| (f.as_str(), *p)))
    }
}

/// The recorder the next mount takes.
static NEXT: Mutex<Option<Arc<Recorder>>> = Mutex::new(None);

/// Makes the next mount this process makes record its reads into `r`
/// (`sealvol record`); later mounts record nothing.
pub fn record_next_mount(r: Arc<Recorder>) {
    *NEXT.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
}

/// The recorder for a mount being made, if one was installed.
pub(crate) fn take_for_mount() -> Option<Arc<Recorder>> {
    NEXT.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// The chunks to fetch for the pieces `list` names, in its order, each
/// chunk once, once the list is found to be valid for `tree` (SPEC.md
/// §5.8). Only files of `inodes` count: a mount of a directory skips the
/// runs of files outside it.
pub fn plan(
    list: &PrefetchList,
    tree: &TreeIndex,
    inodes: &Inodes,
) -> Result<Vec<ChunkRef>, PrefetchError> {
    let reads = list.check(&tree.version_digest(), tree)?;
    let by_path: HashMap<&str, u64> = inodes
        .files()
        .filter_map(|ino| Some((inodes.file(ino)?.path, ino)))
        .collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for r in reads {
        let Some(file) = by_path.get(r.path).and_then(|&ino| inodes.file(ino)) else {
            continue;
        };
        for p in r.pieces {
            let range = piece_range(file.size, p);
            for c in &file.chunks[touched(file.chunks, range.start, range.end)] {
                if seen.insert(c.sha256) {
                    out.push(*c);
                }
            }
        }
    }
    Ok(out)
}

/// A recorded prefetch found for a mount: the list's manifest and the
/// chunks to fetch, in order.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The referrer manifest the list came from.
    pub manifest: sealvol_spec::Sha256Digest,
    /// When it was recorded (RFC 3339).
    pub created: String,
    pub chunks: Vec<ChunkRef>,
}

/// The newest list recorded on `version` (tree `tree`) as chunks of
/// `inodes` to fetch ([`plan`]); `None` when it has none. An invalid list is
/// an error and nothing of it is fetched.
pub async fn find_plan(
    remote: &Remote,
    version: &Resolved,
    tree: &TreeIndex,
    inodes: &Inodes,
) -> Result<Option<Plan>, sealvol_client::Error> {
    let Some(found) = sealvol_client::prefetch::find_list(remote, version, tree).await? else {
        return Ok(None);
    };
    let chunks = plan(&found.list, tree, inodes).map_err(|e| {
        sealvol_client::Error::InvalidPrefetch(format!("{}@{}: {e}", version.repo, found.manifest))
    })?;
    Ok(Some(Plan {
        manifest: found.manifest,
        created: found.created,
        chunks,
    }))
}

/// The prefetcher of a mount with `Prefetch::Recorded`: returned at once,
/// so the mount waits for nothing; a task finds the version's newest list
/// ([`find_plan`]) and hands its chunks to it. No list, or a list refused,
/// is a log line and no prefetch; the mount reads as it would without.
pub(crate) fn start(
    remote: Remote,
    version: Arc<Resolved>,
    tree: Arc<TreeIndex>,
    inodes: Arc<Inodes>,
    chunks: Arc<ChunkReader>,
    jobs: usize,
    rt: tokio::runtime::Handle,
) -> Arc<Prefetcher> {
    let p = Prefetcher::recorded(chunks, Arc::clone(&inodes), jobs, rt.clone());
    let me = Arc::clone(&p);
    rt.spawn(async move {
        let shown = sealvol_client::resolve::display_ref(&remote, &version.pinned);
        match find_plan(&remote, &version, &tree, &inodes).await {
            Ok(Some(plan)) => {
                tracing::info!(
                    version = shown,
                    list = %plan.manifest,
                    recorded = plan.created,
                    chunks = plan.chunks.len(),
                    "prefetching in the recorded order"
                );
                me.follow(plan.chunks);
            }
            Ok(None) => tracing::warn!(
                version = shown,
                "no recorded prefetch list for this version (record one with `sealvol record`); prefetching nothing"
            ),
            Err(e) => tracing::warn!(version = shown, error = %e, "prefetching nothing"),
        }
    });
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{data, file, file_of, owner};
    use sealvol_spec::ChunkingParams;

    const MIB: usize = 1 << 20;

    fn tree() -> TreeIndex {
        // a: 3 MiB + 10 in chunks of 1.5 MiB, so pieces straddle chunks.
        let a = data(3 * MIB + 10, 1);
        let b = data(100, 2);
        TreeIndex::new(
            ChunkingParams::default(),
            vec![
                file("a", file_of(&a, &[MIB + MIB / 2, MIB + MIB / 2 + 5, 5])),
                file("d/b", file_of(&b, &[100])),
                sealvol_spec::Entry {
                    path: "d".into(),
                    mode: 0o755,
                    data: sealvol_spec::EntryData::Dir,
                },
            ],
        )
        .unwrap()
    }

    #[test]
    fn first_reads_are_kept_in_order_and_become_chunks_in_order() {
        let t = tree();
        let inodes = Inodes::new(t.clone(), None, owner()).unwrap();
        let ino = |p: &str| inodes.files().find(|&i| inodes.file(i).unwrap().path == p);
        let (a, b) = (ino("a").unwrap(), ino("d/b").unwrap());
        let r = Recorder::new();
        r.read(a, "a", 2..3);
        r.read(b, "d/b", 0..1);
        r.read(a, "a", 2..3);
        r.read(a, "a", 0..2);
        assert_eq!(
            r.reads(),
            vec![
                ("a".to_string(), 2),
                ("d/b".to_string(), 0),
                ("a".to_string(), 0),
                ("a".to_string(), 1)
            ]
        );
        let list = r.list(t.version_digest());
        let chunks = plan(&list, &t, &inodes).unwrap();
        let a_chunks = inodes.file(a).unwrap().chunks;
        let b_chunks = inodes.file(b).unwrap().chunks;
        // Piece 2 of a (bytes 2..3 MiB) lies in a's second chunk; pieces 0
        // and 1 then add the first.
        assert_eq!(chunks, vec![a_chunks[1], b_chunks[0], a_chunks[0]]);

        // A mount of d/ fetches only what is under it.
        let sub = Inodes::new(t.clone(), Some("d"), owner()).unwrap();
        assert_eq!(plan(&list, &t, &sub).unwrap(), vec![b_chunks[0]]);
    }

    #[test]
    fn a_hostile_list_yields_no_chunks() {
        let t = tree();
        let inodes = Inodes::new(t.clone(), None, owner()).unwrap();
        let mut list = PrefetchList::from_reads(t.version_digest(), [("a", 0)]);
        list.runs[0].count = 99;
        assert!(matches!(
            plan(&list, &t, &inodes),
            Err(PrefetchError::OutOfRange { .. })
        ));
        let list = PrefetchList::from_reads(t.version_digest(), [("d", 0)]);
        assert!(matches!(
            plan(&list, &t, &inodes),
            Err(PrefetchError::UnknownPath(_))
        ));
    }
}
