//! Property tests of the format: parsers round-trip, the version digest
//! ignores entry order and chunking, the chunker is deterministic and local,
//! every rejection rule of SPEC.md §2.3 holds, and the verification chain
//! (§2.5) ties every byte range of a tree to its version digest.

use std::ops::Range;

use proptest::prelude::*;
use sealvol_spec::chain::{self, PIECE};
use sealvol_spec::digest::DigestSelector;
use sealvol_spec::tree::{Entry, EntryData, TreeError};
use sealvol_spec::{
    B3Digest, ChunkingParams, Selector, Sha256Digest, Tag, TreeFormat, TreeIndex, VolumeRef,
};

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
    Entry {
        path,
        mode: 0o644,
        data: EntryData::file_of(data, &[]),
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
        prop_assert_eq!(a.encode().unwrap(), b.encode().unwrap());
        prop_assert_eq!(TreeIndex::decode(&a.encode().unwrap()).unwrap(), a);
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
    let enc = t.encode().unwrap();
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

// --- The verification chain at the tree level (§2.5). ---

const P: usize = PIECE as usize;

/// Valid chunking parameters with `max` from 1 KiB to 1 MiB, so that files
/// of a few MiB have chunks that straddle piece boundaries.
fn chunking_params() -> impl Strategy<Value = ChunkingParams> {
    let half_max = prop_oneof![512u32..(1 << 15), 512u32..=(1 << 19)];
    (half_max, any::<u32>(), any::<u32>()).prop_map(|(half_max, a, b)| {
        let max = half_max * 2;
        let avg = (256 + a % (max - 255)) & !1;
        let min = (64 + b % (avg.min(1 << 20) - 63)) & !1;
        let p = ChunkingParams { min, avg, max };
        p.validate().unwrap();
        p
    })
}

/// Sizes of up to about 4 MiB, often near a piece boundary.
fn file_size() -> impl Strategy<Value = usize> {
    prop_oneof![
        1 => 0usize..4096,
        1 => (P - 2048)..(P + 2048),
        1 => (2 * P - 1024)..(2 * P + 1024),
        4 => 0usize..(4 * P + 4096),
    ]
}

/// A file as (size, seed of its bytes): the bytes themselves are made in the
/// test body, so that a failing case prints small.
fn file_specs() -> impl Strategy<Value = Vec<(usize, u64)>> {
    prop::collection::vec((file_size(), any::<u64>()), 1..4)
}

/// Like [`file_specs`], with a first file of several pieces.
fn file_specs_with_pieces() -> impl Strategy<Value = Vec<(usize, u64)>> {
    (
        ((P + 1)..(4 * P + 4096), any::<u64>()),
        prop::collection::vec((file_size(), any::<u64>()), 0..3),
    )
        .prop_map(|(big, mut rest)| {
            rest.insert(0, big);
            rest
        })
}

/// Random cut lengths of 1..=max covering exactly `len` bytes.
fn cuts(len: usize, max: u32, seed: u64) -> Vec<usize> {
    let mut x = seed | 1;
    let mut out = Vec::new();
    let mut left = len;
    while left > 0 {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 16;
        let n = (1 + r % u64::from(max)) as usize;
        out.push(n.min(left));
        left -= n.min(left);
    }
    out
}

/// A tree of the given files (half of them under a directory) cut at random
/// lengths, with each file's path and bytes.
fn chained_tree(
    params: ChunkingParams,
    specs: &[(usize, u64)],
    cut_seed: u64,
) -> (TreeIndex, Vec<(String, Vec<u8>)>) {
    let files: Vec<(String, Vec<u8>)> = specs
        .iter()
        .enumerate()
        .map(|(i, &(len, seed))| {
            let path = if i % 2 == 0 {
                format!("f{i}")
            } else {
                format!("d/f{i}")
            };
            (path, pseudo_random(len, seed))
        })
        .collect();
    let mut entries = vec![
        dir("d"),
        Entry {
            path: "d/link".into(),
            mode: 0o777,
            data: EntryData::Symlink {
                target: "../f0".into(),
            },
        },
    ];
    for (i, (path, data)) in files.iter().enumerate() {
        let lengths = cuts(data.len(), params.max, cut_seed ^ i as u64);
        entries.push(Entry {
            path: path.clone(),
            mode: 0o644,
            data: EntryData::file_of(data, &lengths),
        });
    }
    (TreeIndex::new(params, entries).unwrap(), files)
}

struct FileView<'a> {
    size: u64,
    blake3: &'a B3Digest,
    chunks: &'a [sealvol_spec::ChunkRef],
    pieces: &'a [chain::PieceCv],
}

fn file_view<'a>(t: &'a TreeIndex, path: &str) -> FileView<'a> {
    match &t.get(path).unwrap().data {
        EntryData::File {
            size,
            blake3,
            chunks,
            pieces,
        } => FileView {
            size: *size,
            blake3,
            chunks,
            pieces,
        },
        other => panic!("{path} is not a file: {other:?}"),
    }
}

fn piece_bytes(data: &[u8], size: u64, index: u64) -> &[u8] {
    let r = chain::piece_range(size, index);
    &data[r.start as usize..r.end as usize]
}

/// Where, in `enc`, the format 2 encoding of `t`, each file's chunk sha256s
/// and chaining values lie, walking the layout of §2.4.
fn file_spans(t: &TreeIndex, enc: &[u8]) -> Vec<(Vec<usize>, Range<usize>)> {
    let mut pos = 8 + 12 + 8;
    let mut out = Vec::new();
    for e in t.entries() {
        pos += 1 + 4 + 4 + e.path.len();
        match &e.data {
            EntryData::Dir => {}
            EntryData::Symlink { target } => pos += 4 + target.len(),
            EntryData::File { chunks, pieces, .. } => {
                pos += 8 + 32 + 4;
                let shas = (0..chunks.len()).map(|i| pos + i * 44 + 12).collect();
                pos += chunks.len() * 44;
                out.push((shas, pos..pos + pieces.len() * 32));
                pos += pieces.len() * 32;
            }
        }
    }
    assert_eq!(pos, enc.len(), "the walk ends where the encoding does");
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Any byte range of any file of a decoded tree verifies piece by
    /// piece, and the pieces cover the range.
    #[test]
    fn any_range_verifies_piece_by_piece(
        params in chunking_params(), specs in file_specs(), cut_seed in any::<u64>(),
        a in any::<u64>(), b in any::<u64>(),
    ) {
        let (built, files) = chained_tree(params, &specs, cut_seed);
        let t = TreeIndex::decode(&built.encode().unwrap()).unwrap();
        prop_assert_eq!(&t, &built);
        for (k, (path, data)) in files.iter().enumerate() {
            let f = file_view(&t, path);
            prop_assert_eq!(f.pieces.len() as u64, chain::piece_count(f.size));
            let offset = a.rotate_left(k as u32 * 7) % (f.size + 1);
            let end = offset + b.rotate_left(k as u32 * 13) % (f.size - offset + 1);
            let pieces = chain::pieces_of(offset, end);
            if offset < end {
                prop_assert!(chain::piece_range(f.size, pieces.start).start <= offset);
                prop_assert!(chain::piece_range(f.size, pieces.end - 1).end >= end);
            }
            for i in pieces {
                let piece = piece_bytes(data, f.size, i);
                prop_assert!(
                    chain::verify_piece(f.size, f.blake3, f.pieces, i, piece),
                    "{} piece {} of {}..{}", path, i, offset, end
                );
            }
        }
    }

    /// A flipped byte in a chunk's bytes fails the piece that holds it (and
    /// the chunk's sha256); a whole piece offered as another fails too.
    #[test]
    fn a_flipped_chunk_byte_fails_its_piece(
        params in chunking_params(), specs in file_specs(), cut_seed in any::<u64>(),
        which in any::<prop::sample::Index>(), chunk in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(), bit in 0u8..8,
    ) {
        let (t, files) = chained_tree(params, &specs, cut_seed);
        let nonempty: Vec<_> = files.iter().filter(|(_, d)| !d.is_empty()).collect();
        prop_assume!(!nonempty.is_empty());
        let (path, data) = nonempty[which.index(nonempty.len())];
        let f = file_view(&t, path);
        let c = f.chunks[chunk.index(f.chunks.len())];
        let pos = c.offset + at.index(c.length as usize) as u64;
        let i = chain::pieces_of(pos, pos + 1).start;
        let mut bad = data.clone();
        bad[pos as usize] ^= 1 << bit;
        prop_assert!(chain::verify_piece(f.size, f.blake3, f.pieces, i, piece_bytes(data, f.size, i)));
        prop_assert!(!chain::verify_piece(f.size, f.blake3, f.pieces, i, piece_bytes(&bad, f.size, i)));
        let chunk_bytes = &bad[c.offset as usize..(c.offset + u64::from(c.length)) as usize];
        prop_assert_ne!(Sha256Digest::of(chunk_bytes), c.sha256);
        // Piece i's own bytes under the index of a piece of the same length.
        let n = chain::piece_count(f.size);
        for j in [i.wrapping_sub(1), i + 1] {
            if j < n && chain::piece_range(f.size, j).end - chain::piece_range(f.size, j).start
                == chain::piece_range(f.size, i).end - chain::piece_range(f.size, i).start
            {
                prop_assert!(!chain::verify_piece(f.size, f.blake3, f.pieces, j, piece_bytes(data, f.size, i)));
            }
        }
    }

    /// The chaining values in an encoding are bound to the files' BLAKE3: a
    /// flipped byte or two swapped values fail the decode. A flipped chunk
    /// sha256 decodes to a different tree (the download's sha256 catches it).
    #[test]
    fn the_encoding_binds_the_chaining_values(
        params in chunking_params(), specs in file_specs_with_pieces(), cut_seed in any::<u64>(),
        cv_byte in any::<prop::sample::Index>(), bit in 0u8..8,
        swap in any::<(prop::sample::Index, prop::sample::Index)>(),
        sha in any::<prop::sample::Index>(),
    ) {
        let (t, _) = chained_tree(params, &specs, cut_seed);
        let enc = t.encode().unwrap();
        let spans = file_spans(&t, &enc);
        let files: Vec<_> = t.entries().iter().filter_map(|e| match &e.data {
            EntryData::File { chunks, pieces, .. } => Some((chunks, pieces)),
            _ => None,
        }).collect();
        prop_assert_eq!(files.len(), spans.len());
        for ((chunks, pieces), (shas, cvs)) in files.iter().zip(&spans) {
            let want = pieces.concat();
            prop_assert_eq!(&enc[cvs.clone()], want.as_slice());
            for (c, &at) in chunks.iter().zip(shas) {
                prop_assert_eq!(&enc[at..at + 32], &c.sha256.0[..]);
            }
        }

        let cv_bytes: Vec<usize> = spans.iter().flat_map(|(_, r)| r.clone()).collect();
        prop_assert!(!cv_bytes.is_empty());
        let mut bad = enc.clone();
        bad[cv_bytes[cv_byte.index(cv_bytes.len())]] ^= 1 << bit;
        let got = TreeIndex::decode(&bad);
        prop_assert!(matches!(got, Err(TreeError::Chain { .. })), "{:?}", got);

        let with_pieces: Vec<&Range<usize>> = spans.iter().map(|(_, r)| r).filter(|r| r.len() >= 64).collect();
        let r = with_pieces[swap.0.index(with_pieces.len())];
        let n = r.len() / 32;
        let i = swap.0.index(n);
        let j = (i + 1 + swap.1.index(n - 1)) % n;
        let (x, y) = (r.start + i * 32, r.start + j * 32);
        prop_assume!(enc[x..x + 32] != enc[y..y + 32]);
        let mut swapped = enc.clone();
        for k in 0..32 {
            swapped.swap(x + k, y + k);
        }
        let got = TreeIndex::decode(&swapped);
        prop_assert!(matches!(got, Err(TreeError::Chain { .. })), "{:?}", got);

        let sha_bytes: Vec<usize> = spans.iter().flat_map(|(s, _)| s.iter().flat_map(|&at| at..at + 32)).collect();
        let mut bad = enc.clone();
        bad[sha_bytes[sha.index(sha_bytes.len())]] ^= 1 << bit;
        let changed = TreeIndex::decode(&bad).unwrap();
        prop_assert_ne!(&changed, &t);
        prop_assert_eq!(changed.version_digest(), t.version_digest());
    }

    /// The version digest and the chaining values depend on the files only,
    /// not on the chunking parameters or where the chunks were cut.
    #[test]
    fn digest_and_pieces_ignore_chunking(
        specs in file_specs(),
        p1 in chunking_params(), c1 in any::<u64>(),
        p2 in chunking_params(), c2 in any::<u64>(),
    ) {
        let (a, files) = chained_tree(p1, &specs, c1);
        let (b, _) = chained_tree(p2, &specs, c2);
        prop_assert_eq!(a.version_digest(), b.version_digest());
        for (path, data) in &files {
            let (fa, fb) = (file_view(&a, path), file_view(&b, path));
            prop_assert_eq!(fa.blake3, &B3Digest::of(data));
            prop_assert_eq!(fa.blake3, fb.blake3);
            prop_assert_eq!(fa.pieces, fb.pieces);
        }
    }
}

/// The format 1 encoding (§2.6) of `t`, by hand: chunk records carry the
/// chunk's BLAKE3, and there are no chaining values.
fn encode_v1(t: &TreeIndex, data_of: impl Fn(&str) -> Vec<u8>) -> Vec<u8> {
    let mut out = sealvol_spec::tree::MAGIC_V1.to_vec();
    let p = t.params();
    for v in [p.min, p.avg, p.max] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&(t.entries().len() as u64).to_le_bytes());
    for e in t.entries() {
        let kind = match e.data {
            EntryData::Dir => 1u8,
            EntryData::File { .. } => 2,
            EntryData::Symlink { .. } => 3,
        };
        out.push(kind);
        out.extend_from_slice(&e.mode.to_le_bytes());
        out.extend_from_slice(&(e.path.len() as u32).to_le_bytes());
        out.extend_from_slice(e.path.as_bytes());
        match &e.data {
            EntryData::Dir => {}
            EntryData::Symlink { target } => {
                out.extend_from_slice(&(target.len() as u32).to_le_bytes());
                out.extend_from_slice(target.as_bytes());
            }
            EntryData::File {
                size,
                blake3,
                chunks,
                ..
            } => {
                let data = data_of(&e.path);
                out.extend_from_slice(&size.to_le_bytes());
                out.extend_from_slice(&blake3.0);
                out.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
                for c in chunks {
                    out.extend_from_slice(&c.offset.to_le_bytes());
                    out.extend_from_slice(&c.length.to_le_bytes());
                    out.extend_from_slice(&c.sha256.0);
                    let bytes = &data[c.offset as usize..(c.offset + u64::from(c.length)) as usize];
                    out.extend_from_slice(&B3Digest::of(bytes).0);
                }
            }
        }
    }
    out
}

#[test]
fn format_1_decodes_without_pieces_and_unknown_formats_ask_for_an_upgrade() {
    let p = ChunkingParams {
        min: 1 << 16,
        avg: 1 << 18,
        max: 1 << 20,
    };
    let specs = [(2 * P + P / 2, 1), (100, 2), (0, 3)];
    let (t, files) = chained_tree(p, &specs, 9);
    let big = file_view(&t, "f0");
    assert_eq!(big.pieces.len(), 3);
    assert!(big.chunks.len() > 1);

    let v1 = encode_v1(&t, |path| {
        files.iter().find(|(p, _)| p == path).unwrap().1.clone()
    });
    let old = TreeIndex::decode(&v1).unwrap();
    assert_eq!(old.format(), TreeFormat::V1);
    assert!(!old.is_verifiable());
    assert_eq!(old.version_digest(), t.version_digest());
    assert!(matches!(old.encode(), Err(TreeError::Legacy)));
    assert_eq!(old.entries().len(), t.entries().len());
    for (o, n) in old.entries().iter().zip(t.entries()) {
        match (&o.data, &n.data) {
            (
                EntryData::File {
                    size,
                    blake3,
                    chunks,
                    pieces,
                },
                EntryData::File {
                    size: s2,
                    blake3: b2,
                    chunks: c2,
                    ..
                },
            ) => {
                assert!(pieces.is_empty(), "{}", o.path);
                assert_eq!((size, blake3, chunks), (s2, b2, c2));
            }
            _ => assert_eq!(o, n),
        }
    }

    let mut v3 = t.encode().unwrap();
    v3[..8].copy_from_slice(b"SVTREE\x00\x03");
    let err = TreeIndex::decode(&v3).unwrap_err();
    assert!(matches!(err, TreeError::Unsupported(_)), "{err:?}");
    assert!(err.to_string().contains("upgrade sealvol"), "{err}");
}
