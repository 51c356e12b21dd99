//! Recomputes every value in `spec/vectors/` from its inputs. A failure
//! here means the format changed: if on purpose, bump the format version in
//! SPEC.md and regenerate with `cargo run -p sealvol-spec --example gen_vectors`.

use std::path::PathBuf;

use sealvol_spec::oci::{build_version, VersionIndex, VersionMeta};
use sealvol_spec::tree::EntryData;
use sealvol_spec::{ChunkingParams, Entry, Selector, Sha256Digest, TreeIndex, VolumeRef};
use serde_json::Value;

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("vectors")
}

fn load(name: &str) -> Value {
    let text = std::fs::read_to_string(vectors().join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn s(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

#[test]
fn refs() {
    let v = load("refs.json");
    for case in v["valid"].as_array().unwrap() {
        let input = case["input"].as_str().unwrap();
        let r: VolumeRef = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(r.registry, s(&case["registry"]), "{input}");
        assert_eq!(r.namespace, case["namespace"].as_str().unwrap(), "{input}");
        assert_eq!(r.volume, case["volume"].as_str().unwrap(), "{input}");
        assert_eq!(r.path, s(&case["path"]), "{input}");
        let (tag, digest) = match &r.selector {
            Selector::Head => (None, None),
            Selector::Tag(t) => (Some(t.to_string()), None),
            Selector::Digest(d) => (None, Some(d.to_string())),
        };
        assert_eq!(tag, s(&case["tag"]), "{input}");
        assert_eq!(digest, s(&case["digest"]), "{input}");
        assert_eq!(r.to_string(), case["printed"].as_str().unwrap());
    }
    for case in v["aliases"].as_array().unwrap() {
        let r: VolumeRef = case["input"].as_str().unwrap().parse().unwrap();
        assert_eq!(r.to_string(), case["printed"].as_str().unwrap());
    }
    for case in v["invalid"].as_array().unwrap() {
        let input = case.as_str().unwrap();
        assert!(
            input.parse::<VolumeRef>().is_err(),
            "{input} should be rejected"
        );
    }
}

fn tree_from(case: &Value) -> TreeIndex {
    let params: ChunkingParams = serde_json::from_value(case["params"].clone()).unwrap();
    let entries: Vec<Entry> = serde_json::from_value(case["entries"].clone()).unwrap();
    TreeIndex::new(params, entries).unwrap()
}

#[test]
fn trees_and_version_digests() {
    let v = load("trees.json");
    for (name, case) in v.as_object().unwrap() {
        let t = tree_from(case);
        assert_eq!(
            t.version_digest().to_string(),
            case["version_digest"].as_str().unwrap(),
            "{name}"
        );
        if let Some(want) = case["encoded_sha256"].as_str() {
            let enc = t.encode().unwrap();
            assert_eq!(Sha256Digest::of(&enc).to_string(), want, "{name}");
            assert_eq!(enc.len() as u64, case["encoded_len"].as_u64().unwrap());
        }
    }
    let shipped = std::fs::read(vectors().join("basic.tree")).unwrap();
    assert_eq!(TreeIndex::decode(&shipped).unwrap(), tree_from(&v["basic"]));
    // Format 1 still reads (§2.6): the same version, not verifiable.
    let v1 = TreeIndex::decode(&std::fs::read(vectors().join("basic.v1.tree")).unwrap()).unwrap();
    assert_eq!(v1.format(), sealvol_spec::TreeFormat::V1);
    assert!(!v1.is_verifiable());
    assert_eq!(v1.version_digest(), tree_from(&v["basic"]).version_digest());
    assert!(v1.encode().is_err());
}

#[test]
fn chunking() {
    let v = load("chunking.json");
    for case in v.as_array().unwrap() {
        let params: ChunkingParams = serde_json::from_value(case["params"].clone()).unwrap();
        let ctx = case["input"]["blake3_derive_key_context"].as_str().unwrap();
        let mut data = vec![0u8; case["input"]["length"].as_u64().unwrap() as usize];
        blake3::Hasher::new_derive_key(ctx)
            .finalize_xof()
            .fill(&mut data);
        let want: Vec<sealvol_spec::ChunkRef> =
            serde_json::from_value(case["chunks"].clone()).unwrap();
        let lengths = params.cutter().unwrap().chunk_lengths(&data);
        assert_eq!(lengths.len(), want.len(), "{ctx}");
        for (len, c) in lengths.iter().zip(&want) {
            assert_eq!(*len as u32, c.length, "{ctx}");
            let bytes = &data[c.offset as usize..][..c.length as usize];
            assert_eq!(Sha256Digest::of(bytes), c.sha256);
        }
        assert_eq!(
            sealvol_spec::B3Digest::of(&data).to_string(),
            case["file_blake3"].as_str().unwrap()
        );
        let mut h = sealvol_spec::chain::PieceHasher::new();
        h.update(&data);
        let pieces: Vec<String> = h.finish().1.iter().map(hex::encode).collect();
        let want: Vec<String> = serde_json::from_value(case["pieces"].clone()).unwrap();
        assert_eq!(pieces, want, "{ctx}");
    }
}

#[test]
fn oci_layout() {
    let trees = load("trees.json");
    let v = load("oci.json");
    let t = tree_from(&trees["basic"]);
    let meta = VersionMeta {
        created: v["created"].as_str().unwrap().into(),
        source: s(&v["source"]),
    };
    let built = build_version(&t, &meta).unwrap();
    let shipped = std::fs::read(vectors().join("basic.index.json")).unwrap();
    assert_eq!(built.index.bytes, shipped);
    // The first view manifest (linux/amd64), for check_spec.py's reading
    // of the view layer's annotations (SPEC.md §5.4).
    let view = std::fs::read(vectors().join("basic.view.json")).unwrap();
    assert_eq!(built.manifests[0].bytes, view);
    assert_eq!(
        built.index.digest().to_string(),
        v["index_digest"].as_str().unwrap()
    );
    let digests = |c: &[sealvol_spec::oci::Content]| {
        c.iter().map(|c| c.digest().to_string()).collect::<Vec<_>>()
    };
    let want = |k: &str| {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|d| d["digest"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(digests(&built.blobs), want("blobs"));
    assert_eq!(digests(&built.manifests), want("manifests"));
    let idx = VersionIndex::parse(&shipped).unwrap();
    assert_eq!(idx.digest, t.version_digest());
    assert_eq!(idx.source.as_deref(), Some("hf://Qwen/Qwen3-8B"));
    assert_eq!(idx.files, Some(t.stats().files));
    // Every file's chunks are listed in a shard.
    let n_chunks = t
        .entries()
        .iter()
        .filter(|e| matches!(&e.data, EntryData::File { size, .. } if *size > 0))
        .count();
    assert_eq!(idx.chunk_manifests.len(), usize::from(n_chunks > 0));
}

/// §2.3 as `validation.json` fixes it: every valid tree is accepted built
/// and decoded, every invalid one refused both ways, for the rule it names.
#[test]
fn validation() {
    use sealvol_spec::tree::{encode_entries, TreeError, TreeFormat};
    let v = load("validation.json");
    let params: ChunkingParams = serde_json::from_value(v["params"].clone()).unwrap();
    let entries_of = |case: &Value| -> Vec<Entry> {
        let mut e: Vec<Entry> = serde_json::from_value(case["entries"].clone()).unwrap();
        e.sort_by(|a, b| sealvol_spec::path::canonical_cmp(&a.path, &b.path));
        e
    };
    let encoded =
        |entries: &[Entry]| encode_entries(TreeFormat::V2, params, entries, &|_, _| unreachable!());
    for case in v["valid"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let entries = entries_of(case);
        TreeIndex::new(params, entries.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        TreeIndex::decode(&encoded(&entries)).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for case in v["invalid"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let entries = entries_of(case);
        for got in [
            TreeIndex::new(params, entries.clone()),
            TreeIndex::decode(&encoded(&entries)),
        ] {
            let rule = match got {
                Err(TreeError::SymlinkEscapes { .. } | TreeError::SymlinkDotDot { .. }) => 5,
                Err(TreeError::ChunkLength { .. }) => 9,
                other => panic!("{name}: refused for another reason or accepted: {other:?}"),
            };
            assert_eq!(rule, case["rule"].as_u64().unwrap(), "{name}");
        }
    }
}

#[test]
fn prefetch_list() {
    use sealvol_spec::oci::{build_prefetch, prefetch_layer};
    use sealvol_spec::prefetch::PrefetchList;
    let v = load("prefetch.json");
    let tree = tree_from(&load("trees.json")[v["tree"].as_str().unwrap()]);
    let version = tree.version_digest();
    let reads: Vec<(String, u64)> = serde_json::from_value(v["reads"].clone()).unwrap();
    let list = PrefetchList::from_reads(version, reads.iter().map(|(p, i)| (p.as_str(), *i)));
    let bytes = list.encode().unwrap();
    assert_eq!(bytes, v["list"].as_str().unwrap().as_bytes());
    PrefetchList::decode(&bytes)
        .unwrap()
        .check(&version, &tree)
        .unwrap();
    for bad in v["invalid"].as_array().unwrap() {
        let l = PrefetchList::decode(bad["list"].as_str().unwrap().as_bytes()).unwrap();
        assert!(l.check(&version, &tree).is_err(), "{}", bad["name"]);
    }
    let index: Sha256Digest = v["index_digest"].as_str().unwrap().parse().unwrap();
    let built = build_prefetch(
        bytes,
        &version,
        &index,
        v["index_size"].as_u64().unwrap(),
        "2026-10-26T00:00:00Z",
    )
    .unwrap();
    assert_eq!(
        built.manifest.bytes,
        v["manifest"].as_str().unwrap().as_bytes()
    );
    assert_eq!(
        built.manifest.digest().to_string(),
        v["manifest_digest"].as_str().unwrap()
    );
    let layer = prefetch_layer(&built.manifest.bytes, &version, &index).unwrap();
    assert_eq!(layer.size(), built.blobs[1].bytes.len() as u64);
    let other: Sha256Digest = Sha256Digest::of(b"another index");
    assert!(prefetch_layer(&built.manifest.bytes, &version, &other).is_err());
}

#[test]
fn signature() {
    use sealvol_spec::oci::{build_signature, signature_layer};
    use sealvol_spec::signature::{self as sig, Bundle, SignatureError, Statement};
    let v = load("signature.json");
    let tree = tree_from(&load("trees.json")[v["tree"].as_str().unwrap()]);
    let statement = sig::oms_statement(&tree);
    assert_eq!(
        statement.encode(),
        v["statement"].as_str().unwrap().as_bytes()
    );
    sig::check_oms(&statement, &tree).unwrap();
    let bundle = Bundle::decode(v["bundle"].as_str().unwrap().as_bytes()).unwrap();
    let (_, payload, signature) = bundle.signed().unwrap();
    assert_eq!(payload, statement.encode());
    assert_eq!(signature.len(), 64);
    for bad in v["invalid"].as_array().unwrap() {
        let s = Statement::decode(bad["statement"].as_str().unwrap().as_bytes()).unwrap();
        let e = sig::check_oms(&s, &tree).unwrap_err();
        let rule = match (&e, e.to_string()) {
            (SignatureError::Unsupported(_), _) => "algorithm",
            (SignatureError::Statement(_), m) if m.contains("subject digest") => "subject",
            (SignatureError::Mismatch { .. }, m) if m.contains("it signs version") => "version",
            (SignatureError::Mismatch { .. }, m) if m.contains("allows no symlinks") => "symlinks",
            (SignatureError::Mismatch { .. }, m) if m.contains("does not list") => "missing",
            (SignatureError::Mismatch { .. }, m) if m.contains("does not have") => "extra",
            (SignatureError::Mismatch { .. }, m) if m.contains("differs") => "changed",
            other => panic!("{}: {other:?}", bad["name"]),
        };
        assert_eq!(rule, bad["rule"].as_str().unwrap(), "{}", bad["name"]);
    }
    let index: Sha256Digest = v["index_digest"].as_str().unwrap().parse().unwrap();
    let built = build_signature(
        v["bundle"].as_str().unwrap().as_bytes().to_vec(),
        sig::PREDICATE_OMS,
        Some(&tree.version_digest()),
        &index,
        v["index_size"].as_u64().unwrap(),
        "2026-10-26T00:00:00Z",
    )
    .unwrap();
    assert_eq!(
        built.manifest.bytes,
        v["manifest"].as_str().unwrap().as_bytes()
    );
    let layer = signature_layer(&built.manifest.bytes).unwrap();
    assert_eq!(layer.size(), built.blobs[1].bytes.len() as u64);
}
