//! Property tests of the format: parsers round-trip, the version digest
//! ignores entry order and chunking, the chunker is deterministic and local,
//! and every rejection rule of SPEC.md §2.3 holds.

use proptest::prelude::*;
use sealvol_spec::digest::DigestSelector;
use sealvol_spec::tree::{ChunkRef, Entry, EntryData, TreeError};
use sealvol_spec::{B3Digest, ChunkingParams, Selector, Sha256Digest, Tag, TreeIndex, VolumeRef};

fn component() -> impl Strategy<Value = String> {
    "[a-z0-9]{1,6}((\\.|_|__|-{1,2})[a-z0-9]{1,6}){0,2}"
}

fn tag() -> impl Strategy<Value = Tag> {
    "[A-Za-z0-9_][A-Za-z0-9._-]{0,20}".prop_map(|s| s.parse().unwrap())
}

fn selector() -> impl Strategy<Value = Selector> {
    prop_oneof![
        Just(Selector::Head),
        tag().prop_map(Selector::Tag),
        any::<[u8; 32]>().prop_map(|b| Selector::Digest(DigestSelector::B3(B3Digest(b)))),
        "[0-9a-f]{12,63}".prop_map(|p| Selector::Digest(DigestSelector::B3Prefix(p))),
        any::<[u8; 32]>().prop_map(|b| Selector::Digest(DigestSelector::Sha256(Sha256Digest(b)))),
    ]
}

fn rel_path() -> impl Strategy<Value = String> {
    prop::collection::vec("[A-Za-z0-9._ -]{1,8}", 1..4)
        .prop_filter("no dot components", |v| {
            v.iter().all(|c| c != "." && c != "..")
        })
        .prop_map(|v| v.join("/"))
}

fn volume_ref() -> impl Strategy<Value = VolumeRef> {
    (
        prop::option::of(prop_oneof![
            Just("127.0.0.1:5000".to_string()),
            Just("localhost".to_string()),
            Just("registry.example.com".to_string())
        ]),
        prop::collection::vec(component(), 1..3),
        component(),
        selector(),
        prop::option::of(rel_path()),
    )
        .prop_map(|(registry, ns, volume, selector, path)| {
            // bdn: refs have a one-component namespace; a qualified ref
            // without a selector cannot carry a path.
            let namespace = if registry.is_none() {
                ns[0].clone()
            } else {
                ns.join("/")
            };
            let path = if registry.is_some() && selector == Selector::Head {
                None
            } else {
                path
            };
            VolumeRef {
                registry,
                namespace,
                volume,
                selector,
                path,
            }
        })
}

fn file_entry(path: String, data: &[u8]) -> Entry {
    let chunks = if data.is_empty() {
        vec![]
    } else {
        vec![ChunkRef {
            offset: 0,
            length: data.len() as u32,
            sha256: Sha256Digest::of(data),
            blake3: B3Digest::of(data),
        }]
    };
    Entry {
        path,
        mode: 0o644,
        data: EntryData::File {
            size: data.len() as u64,
            blake3: B3Digest::of(data),
            chunks,
        },
    }
}

/// A valid set of entries: every file path's parents exist as directories.
fn entries() -> impl Strategy<Value = Vec<Entry>> {
    prop::collection::btree_map(rel_path(), prop::collection::vec(any::<u8>(), 0..64), 0..12)
        .prop_map(|files| {
            let mut dirs = std::collections::BTreeSet::new();
            let mut out = Vec::new();
            for (p, data) in &files {
                let mut acc = String::new();
                for c in p.split('/').collect::<Vec<_>>().split_last().unwrap().1 {
                    if !acc.is_empty() {
                        acc.push('/');
                    }
                    acc.push_str(c);
                    dirs.insert(acc.clone());
                }
                out.push(file_entry(p.clone(), data));
            }
            // A path cannot be both a file and a directory.
            out.retain(|e| !dirs.contains(&e.path));
            out.extend(dirs.into_iter().map(|d| Entry {
                path: d,
                mode: 0o755,
                data: EntryData::Dir,
            }));
            out
        })
}

fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; len];
    blake3::Hasher::new_keyed(&B3Digest::of(&seed.to_le_bytes()).0)
        .finalize_xof()
        .fill(&mut out);
    out
}

const SMALL: ChunkingParams = ChunkingParams {
    min: 1024,
    avg: 4096,
    max: 16384,
};

proptest! {
    #[test]
    fn ref_print_parse_round_trip(r in volume_ref()) {
        let printed = r.to_string();
        let back: VolumeRef = printed.parse().map_err(|e| TestCaseError::fail(format!("{printed}: {e}")))?;
        prop_assert_eq!(&back, &r);
        prop_assert_eq!(back.to_string(), printed);
    }

    #[test]
    fn ref_parser_never_panics(s in "\\PC{0,40}") {
        let _ = s.parse::<VolumeRef>();
    }

    #[test]
    fn canonical_encoding_ignores_entry_order(es in entries(), seed in any::<u64>()) {
        let a = TreeIndex::new(ChunkingParams::default(), es.clone()).unwrap();
        let mut shuffled = es;
        let n = shuffled.len();
        for i in 0..n {
            shuffled.swap(i, (seed as usize).wrapping_mul(i + 7) % n.max(1));
        }
        let b = TreeIndex::new(ChunkingParams::default(), shuffled).unwrap();
        prop_assert_eq!(a.version_digest(), b.version_digest());
        prop_assert_eq!(a.encode(), b.encode());
        prop_assert_eq!(TreeIndex::decode(&a.encode()).unwrap(), a);
    }

    #[test]
    fn version_digest_ignores_chunking_params(es in entries()) {
        let a = TreeIndex::new(ChunkingParams::default(), es.clone()).unwrap();
        let b = TreeIndex::new(ChunkingParams { min: 64, avg: 256, max: 1024 }, es).unwrap();
        prop_assert_eq!(a.version_digest(), b.version_digest());
    }

    #[test]
    fn version_digest_sees_every_observable_change(es in entries(), which in any::<prop::sample::Index>()) {
        let base = TreeIndex::new(ChunkingParams::default(), es.clone()).unwrap();
        prop_assume!(!es.is_empty());
        let i = which.index(es.len());
        let mut moded = es.clone();
        moded[i].mode ^= 0o100;
        prop_assert_ne!(TreeIndex::new(ChunkingParams::default(), moded).unwrap().version_digest(), base.version_digest());
        if let EntryData::File { .. } = &es[i].data {
            let mut renamed = es.clone();
            renamed[i].path.push_str(".renamed");
            if let Ok(t) = TreeIndex::new(ChunkingParams::default(), renamed) {
                prop_assert_ne!(t.version_digest(), base.version_digest());
            }
            let mut changed = es.clone();
            changed[i] = file_entry(es[i].path.clone(), b"different bytes");
            let t = TreeIndex::new(ChunkingParams::default(), changed).unwrap();
            if t.entries() != base.entries() {
                prop_assert_ne!(t.version_digest(), base.version_digest());
            }
        }
    }

    #[test]
    fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut input = sealvol_spec::tree::MAGIC.to_vec();
        input.extend_from_slice(&bytes);
        let _ = TreeIndex::decode(&input);
        let _ = TreeIndex::decode(&bytes);
    }

    #[test]
    fn chunker_is_deterministic(len in 0usize..200_000, seed in any::<u64>()) {
        let data = pseudo_random(len, seed);
        let cutter = SMALL.cutter().unwrap();
        let a = cutter.chunk_lengths(&data);
        prop_assert_eq!(&a, &cutter.chunk_lengths(&data));
        prop_assert_eq!(a.iter().sum::<usize>(), len);
        prop_assert!(a.iter().all(|&l| l <= SMALL.max as usize));
        prop_assert!(a.iter().rev().skip(1).all(|&l| l >= SMALL.min as usize));
    }

    #[test]
    fn insertion_changes_only_nearby_chunks(seed in any::<u64>(), at in 0usize..4096, insert in prop::collection::vec(any::<u8>(), 1..64)) {
        let data = pseudo_random(400_000, seed);
        let mut edited = data.clone();
        edited.splice(at..at, insert.iter().copied());
        let cutter = SMALL.cutter().unwrap();
        let hashes = |d: &[u8]| {
            let mut off = 0;
            cutter.chunk_lengths(d).into_iter().map(|l| { let h = B3Digest::of(&d[off..off + l]); off += l; h }).collect::<Vec<_>>()
        };
        let (a, b) = (hashes(&data), hashes(&edited));
        // Chunks resynchronize after the edit: a cut depends only on the
        // bytes since the previous cut, so chunks before the edit stay, and
        // once a cut point lines up again every later chunk is shared. How
        // many chunks realigning takes varies (min-size skipping can carry
        // the misalignment a few cuts on), so the property is one run of
        // changed chunks, at the edit, well inside the data.
        let changed: Vec<usize> = (0..b.len()).filter(|&i| !a.contains(&b[i])).collect();
        prop_assert!(!changed.is_empty(), "an insertion changed no chunk");
        let (first, last) = (changed[0], *changed.last().unwrap());
        prop_assert_eq!(last - first + 1, changed.len(), "changed chunks are not one run: {:?}", changed);
        prop_assert!(last < b.len() / 4, "resynchronized only after chunk {} of {}", last, b.len());
        prop_assert!(a.len() > 40);
    }
}

fn reject(es: Vec<Entry>) -> TreeError {
    TreeIndex::new(ChunkingParams::default(), es).unwrap_err()
}

fn dir(p: &str) -> Entry {
    Entry {
        path: p.into(),
        mode: 0o755,
        data: EntryData::Dir,
    }
}

#[test]
fn rejection_rules() {
    use sealvol_spec::path::PathError;
    assert!(matches!(
        reject(vec![file_entry("/abs".into(), b"x")]),
        TreeError::Path(PathError::Absolute(_))
    ));
    assert!(matches!(
        reject(vec![dir("a"), file_entry("a/../b".into(), b"x")]),
        TreeError::Path(PathError::DotDot(_))
    ));
    assert!(matches!(
        reject(vec![file_entry("a\0b".into(), b"x")]),
        TreeError::Path(PathError::Nul(_))
    ));
    assert!(matches!(
        reject(vec![file_entry("a//b".into(), b"x")]),
        TreeError::Path(PathError::NotNormal(_))
    ));
    assert!(matches!(
        reject(vec![file_entry("a".into(), b"x"), dir("a")]),
        TreeError::Duplicate(_)
    ));
    assert!(matches!(
        reject(vec![file_entry("a/b".into(), b"x")]),
        TreeError::MissingParent { .. }
    ));
    assert!(matches!(
        reject(vec![
            file_entry("a".into(), b"x"),
            file_entry("a/b".into(), b"y")
        ]),
        TreeError::ParentNotDir { .. }
    ));
    let link = |t: &str| Entry {
        path: "d/l".into(),
        mode: 0o777,
        data: EntryData::Symlink { target: t.into() },
    };
    assert!(matches!(
        reject(vec![dir("d"), link("../../x")]),
        TreeError::SymlinkEscapes { .. }
    ));
    assert!(matches!(
        reject(vec![dir("d"), link("/etc/passwd")]),
        TreeError::SymlinkEscapes { .. }
    ));
    TreeIndex::new(ChunkingParams::default(), vec![dir("d"), link("../x")]).unwrap();
    let mut bad = file_entry("f".into(), b"hello");
    if let EntryData::File { size, .. } = &mut bad.data {
        *size = 6;
    }
    assert!(matches!(reject(vec![bad]), TreeError::Sizes { .. }));
    let mut gap = file_entry("f".into(), b"hello");
    if let EntryData::File { chunks, .. } = &mut gap.data {
        chunks[0].offset = 1;
    }
    assert!(matches!(reject(vec![gap]), TreeError::Sizes { .. }));
    let mut m = dir("d");
    m.mode = 0o10755;
    assert!(matches!(reject(vec![m]), TreeError::Mode { .. }));
    // Decoding checks order too: swap two encoded entries by re-encoding
    // them in the wrong order by hand.
    let t = TreeIndex::new(ChunkingParams::default(), vec![dir("a"), dir("b")]).unwrap();
    let enc = t.encode();
    let rec = 1 + 4 + 4 + 1; // kind, mode, path length, one-byte path
    let (head, body) = enc.split_at(enc.len() - 2 * rec);
    let mut swapped = head.to_vec();
    swapped.extend_from_slice(&body[rec..]);
    swapped.extend_from_slice(&body[..rec]);
    assert!(matches!(
        TreeIndex::decode(&swapped),
        Err(TreeError::Order(_))
    ));
}
