//! Writes the test vectors in `spec/vectors/` from the inputs below. Run it
//! only when the format changes on purpose (and bump the format version):
//! `cargo run -p sealvol-spec --example gen_vectors`. The tests in
//! `spec/tests/vectors.rs` recompute every value from the same inputs.

use std::path::Path;

use sealvol_spec::oci::{build_prefetch, build_signature, build_version, VersionMeta};
use sealvol_spec::prefetch::PrefetchList;
use sealvol_spec::tree::{Entry, EntryData};
use sealvol_spec::{ChunkingParams, Sha256Digest, TreeIndex, VolumeRef};
use serde_json::json;

fn file(path: &str, mode: u32, data: &[u8], params: &ChunkingParams) -> Entry {
    let lengths = params.cutter().unwrap().chunk_lengths(data);
    Entry {
        path: path.into(),
        mode,
        data: EntryData::file_of(data, &lengths),
    }
}

fn dir(path: &str) -> Entry {
    Entry {
        path: path.into(),
        mode: 0o755,
        data: EntryData::Dir,
    }
}

fn link(path: &str, target: &str) -> Entry {
    Entry {
        path: path.into(),
        mode: 0o777,
        data: EntryData::Symlink {
            target: target.into(),
        },
    }
}

/// The input of the chunking vectors: BLAKE3 XOF output in derive-key mode.
fn xof(context: &str, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    blake3::Hasher::new_derive_key(context)
        .finalize_xof()
        .fill(&mut out);
    out
}

/// The basic tree keeps the parameters it was first written with (the
/// earlier default), so its encoding and OCI vectors stay as published.
fn basic_tree() -> TreeIndex {
    let p = ChunkingParams::EARLIER_DEFAULT;
    TreeIndex::new(
        p,
        vec![
            file("README.md", 0o644, b"hello\n", &p),
            dir("empty"),
            dir("models"),
            file("models/config.json", 0o644, b"{\"hidden_size\":4096}\n", &p),
            file("models/empty.bin", 0o600, b"", &p),
            link("latest", "models"),
            link("models/readme", "../README.md"),
            file("run.sh", 0o755, b"#!/bin/sh\necho run\n", &p),
        ],
    )
    .unwrap()
}

fn main() {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors");
    std::fs::create_dir_all(&out).unwrap();

    // Refs.
    let valid = [
        "bdn:weights/qwen3-8b",
        "bdn:weights/qwen3-8b:prod",
        "bdn:weights/llama:prod/config/model.json",
        "bdn:weights/llama/config",
        "bdn:weights/qwen3-8b@b3:9f3c2a1b0d4e",
        "bdn:weights/qwen3-8b@b3:9f3c2a1b0d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5061728394a5b6c7d8e",
        "bdn:a.b/c__d@sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        "127.0.0.1:5000/weights/qwen3-8b:prod",
        "localhost/weights/qwen3-8b",
        "registry.example.com/org/team/vol@b3:0123456789abcdef/dir/file",
    ];
    let aliases = [
        (
            "bdn:weights/qwen3-8b@9f3c2a1b0d4e",
            "bdn:weights/qwen3-8b@b3:9f3c2a1b0d4e",
        ),
        (
            "bdn:weights/llama:prod/config/",
            "bdn:weights/llama:prod/config",
        ),
    ];
    let invalid = [
        "weights/qwen3-8b",
        "bdn:weights",
        "bdn:Weights/x",
        "bdn:w/x:",
        "bdn:w/x:-tag",
        "bdn:w/x@b3:9f3c2a1b0d4",
        "bdn:w/x@b3:9F3C2A1B0D4E",
        "bdn:w/x:prod/../secret",
        "bdn:w/x:prod//a",
        "bdn:w/x_-y",
        "host.example.com/vol",
        "host.example.com:port/ns/vol",
    ];
    let refs_json = json!({
        "valid": valid.iter().map(|s| {
            let r: VolumeRef = s.parse().unwrap();
            let (tag, digest) = match &r.selector {
                sealvol_spec::Selector::Head => (None, None),
                sealvol_spec::Selector::Tag(t) => (Some(t.to_string()), None),
                sealvol_spec::Selector::Digest(d) => (None, Some(d.to_string())),
            };
            json!({"input": s, "registry": r.registry, "namespace": r.namespace, "volume": r.volume,
                   "tag": tag, "digest": digest, "path": r.path, "printed": r.to_string()})
        }).collect::<Vec<_>>(),
        "aliases": aliases.iter().map(|(a, b)| json!({"input": a, "printed": b})).collect::<Vec<_>>(),
        "invalid": invalid,
    });
    write(&out.join("refs.json"), &refs_json);

    // Trees and version digests. `chained` has a file of several pieces,
    // cut by small parameters so that chunks and pieces straddle.
    let t = basic_tree();
    let encoded = t.encode().unwrap();
    let small = ChunkingParams {
        min: 4096,
        avg: 16384,
        max: 65536,
    };
    let chained = TreeIndex::new(
        small,
        vec![
            file(
                "weights.bin",
                0o644,
                &xof("sealvol chain vector", (3 << 20) + 12345),
                &small,
            ),
            file(
                "piece.bin",
                0o644,
                &xof("sealvol chain vector one piece", 1 << 20),
                &small,
            ),
        ],
    )
    .unwrap();
    let chained_enc = chained.encode().unwrap();
    let trees = json!({
        "chained": {
            "params": chained.params(),
            "entries": chained.entries(),
            "version_digest": chained.version_digest().to_string(),
            "encoded_sha256": Sha256Digest::of(&chained_enc).to_string(),
            "encoded_len": chained_enc.len(),
        },
        "basic": {
            "params": t.params(),
            "entries": t.entries(),
            "version_digest": t.version_digest().to_string(),
            "encoded_sha256": Sha256Digest::of(&encoded).to_string(),
            "encoded_len": encoded.len(),
        },
        "empty": {
            "params": ChunkingParams::EARLIER_DEFAULT,
            "entries": [],
            "version_digest": TreeIndex::new(ChunkingParams::EARLIER_DEFAULT, vec![]).unwrap().version_digest().to_string(),
        },
    });
    write(&out.join("trees.json"), &trees);
    std::fs::write(out.join("basic.tree"), &encoded).unwrap();

    let p = ChunkingParams::default();
    // Validation (§2.3): trees a reader accepts and trees it refuses, with
    // the rule each breaks. Written as entries, since `TreeIndex::new`
    // refuses the invalid ones.
    let blob = |size: u32, sha: &Sha256Digest| EntryData::File {
        size: u64::from(size),
        blake3: sealvol_spec::B3Digest(*blake3::hash(&vec![0u8; size as usize]).as_bytes()),
        chunks: vec![sealvol_spec::tree::ChunkRef {
            offset: 0,
            length: size,
            sha256: *sha,
        }],
        pieces: vec![],
    };
    let one = Sha256Digest::of(b"x");
    let clash = vec![
        Entry {
            path: "a.bin".into(),
            mode: 0o644,
            data: blob(1, &one),
        },
        Entry {
            path: "b.bin".into(),
            mode: 0o644,
            data: blob(2, &one),
        },
    ];
    let valid = [
        (
            "links through directories and links",
            vec![
                dir("m"),
                link("m/cur", "v2"),
                dir("m/v2"),
                file("m/v2/w.bin", 0o644, b"w", &p),
                link("w", "m/cur/w.bin"),
                link("x", "m/../m/cur/./w.bin"),
                link("y", "missing/../w"),
                link("z", "m/cur"),
            ],
        ),
        ("a link to the root", vec![link("root", ".")]),
    ];
    let invalid = [
        (
            "climbs out through a link to the root",
            5,
            vec![link("l", "."), link("up", "l/..")],
        ),
        (
            "reads /etc/passwd through a chain of links",
            5,
            vec![link("l", "."), link("passwd", "l/l/../../etc/passwd")],
        ),
        (
            "climbs out through a link that climbs",
            5,
            vec![dir("d"), link("d/x", ".."), link("y", "d/x/..")],
        ),
        (
            "goes up after a link that goes down",
            5,
            vec![
                dir("d"),
                dir("d/e"),
                link("deep", "d/e"),
                link("up", "deep/../.."),
            ],
        ),
        (
            "climbs above the root lexically",
            5,
            vec![link("up", "../x")],
        ),
        ("one blob at two lengths", 9, clash),
    ];
    for (name, entries) in &valid {
        TreeIndex::new(p, entries.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for (name, _, entries) in &invalid {
        assert!(TreeIndex::new(p, entries.clone()).is_err(), "{name}");
    }
    let validation = json!({
        "params": p,
        "valid": valid.iter().map(|(name, entries)| json!({"name": name, "entries": entries})).collect::<Vec<_>>(),
        "invalid": invalid.iter().map(|(name, rule, entries)| json!({"name": name, "rule": rule, "entries": entries})).collect::<Vec<_>>(),
    });
    write(&out.join("validation.json"), &validation);

    // Chunking.
    let mut chunking = Vec::new();
    for (params, context, len) in [
        (small, "sealvol chunking vector small", 1 << 20),
        // The earlier default (SPEC.md §4.1), which older volumes keep.
        (
            ChunkingParams::EARLIER_DEFAULT,
            "sealvol chunking vector default",
            40 << 20,
        ),
        (
            ChunkingParams::default(),
            "sealvol chunking vector default 2026-12",
            40 << 20,
        ),
    ] {
        let data = xof(context, len);
        let e = file("f", 0o644, &data, &params);
        let EntryData::File {
            blake3,
            chunks,
            pieces,
            ..
        } = e.data
        else {
            unreachable!()
        };
        chunking.push(json!({
            "params": params,
            "input": {"blake3_derive_key_context": context, "length": len},
            "file_blake3": blake3.to_string(),
            "chunks": chunks,
            "pieces": pieces.iter().map(hex::encode).collect::<Vec<_>>(),
        }));
    }
    write(&out.join("chunking.json"), &json!(chunking));

    // OCI layout of the basic tree.
    let meta = VersionMeta {
        created: "2026-10-26T00:00:00Z".into(),
        source: Some("hf://Qwen/Qwen3-8B".into()),
    };
    let v = build_version(&t, &meta).unwrap();
    std::fs::write(out.join("basic.index.json"), &v.index.bytes).unwrap();
    std::fs::write(out.join("basic.view.json"), &v.manifests[0].bytes).unwrap();
    let oci = json!({
        "created": meta.created,
        "source": meta.source,
        "index_digest": v.index.digest().to_string(),
        "blobs": v.blobs.iter().map(|c| json!({"digest": c.digest().to_string(), "size": c.bytes.len()})).collect::<Vec<_>>(),
        "manifests": v.manifests.iter().map(|c| json!({"digest": c.digest().to_string(), "size": c.bytes.len()})).collect::<Vec<_>>(),
    });
    write(&out.join("oci.json"), &oci);

    // A recorded prefetch list of `chained` (SPEC.md §5.8), as a referrer of
    // that version's index, and lists a reader refuses, with the rule each
    // breaks.
    let chained_v = build_version(&chained, &meta).unwrap();
    let reads = [
        ("weights.bin", 2),
        ("piece.bin", 0),
        ("weights.bin", 0),
        ("weights.bin", 1),
        ("weights.bin", 2),
        ("weights.bin", 3),
    ];
    let list = PrefetchList::from_reads(chained.version_digest(), reads);
    let list_bytes = list.encode().unwrap();
    let built = build_prefetch(
        list_bytes.clone(),
        &chained.version_digest(),
        &chained_v.index.digest(),
        chained_v.index.bytes.len() as u64,
        "2026-10-26T00:00:00Z",
    )
    .unwrap();
    let hostile = |files: &[&str], runs: &[(u32, u64, u64)]| {
        let mut l = list.clone();
        l.files = files.iter().map(|f| f.to_string()).collect();
        l.runs = runs.iter().map(|&r| r.into()).collect();
        l
    };
    let mut other = list.clone();
    other.version = t.version_digest();
    let invalid = [
        (
            "names a path the version lacks",
            "path",
            hostile(&["nope.bin"], &[(0, 0, 1)]),
        ),
        (
            "asks for a piece past the end",
            "range",
            hostile(&["weights.bin"], &[(0, 3, 2)]),
        ),
        (
            "names a piece twice",
            "repeat",
            hostile(&["weights.bin"], &[(0, 0, 2), (0, 1, 1)]),
        ),
        (
            "names a file index it does not list",
            "file",
            hostile(&["weights.bin"], &[(1, 0, 1)]),
        ),
        ("is for another version", "version", other),
    ];
    for (name, _, l) in &invalid {
        assert!(
            l.check(&chained.version_digest(), &chained).is_err(),
            "{name}"
        );
    }
    let prefetch = json!({
        "tree": "chained",
        "reads": reads,
        "list": String::from_utf8(list_bytes).unwrap(),
        "index_digest": chained_v.index.digest().to_string(),
        "index_size": chained_v.index.bytes.len(),
        "manifest": String::from_utf8(built.manifest.bytes.clone()).unwrap(),
        "manifest_digest": built.manifest.digest().to_string(),
        "invalid": invalid.iter().map(|(name, rule, l)| json!({
            "name": name, "rule": rule, "list": String::from_utf8(l.encode().unwrap()).unwrap(),
        })).collect::<Vec<_>>(),
    });
    write(&out.join("prefetch.json"), &prefetch);

    // A signature of `basic` (SPEC.md §5.9): its OMS statement, signed by
    // an Ed25519 key of a fixed seed (Ed25519 is deterministic, so the
    // bundle is too), the referrer manifest that carries it, and
    // statements a reader refuses, with the rule each breaks.
    use aws_lc_rs::encoding::AsDer as _;
    use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair as _};
    use sealvol_spec::signature::{self as sig, Statement};
    let seed = [7u8; 32];
    let key = Ed25519KeyPair::from_seed_unchecked(&seed).unwrap();
    let spki = key.public_key().as_der().unwrap().as_ref().to_vec();
    let statement = sig::oms_statement(&t);
    let payload = statement.encode();
    let signature = key.sign(&sig::pae(sig::PAYLOAD_TYPE, &payload));
    let bundle = sig::Bundle::new(&payload, signature.as_ref(), sig::oms_hint(&spki)).encode();
    let signed = build_signature(
        bundle.clone(),
        sig::PREDICATE_OMS,
        Some(&t.version_digest()),
        &v.index.digest(),
        v.index.bytes.len() as u64,
        "2026-10-26T00:00:00Z",
    )
    .unwrap();
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut s = serde_json::to_value(&statement).unwrap();
        f(&mut s);
        // Keep the subject digest that of the resources, so that only the
        // rule named is broken.
        let mut h = <sha2::Sha256 as sha2::Digest>::new();
        for r in s["predicate"]["resources"].as_array().unwrap() {
            sha2::Digest::update(&mut h, hex::decode(r["digest"].as_str().unwrap()).unwrap());
        }
        s["subject"][0]["digest"]["sha256"] = json!(hex::encode(sha2::Digest::finalize(h)));
        serde_json::from_value::<Statement>(s).unwrap()
    };
    let invalid: Vec<(&str, &str, Statement)> = vec![
        (
            "names another version",
            "version",
            edit(&|s| {
                s["subject"][0]["name"] = json!(chained.version_digest().to_string());
            }),
        ),
        (
            "lists a file's BLAKE3 changed",
            "changed",
            edit(&|s| {
                s["predicate"]["resources"][0]["digest"] =
                    json!(sealvol_spec::B3Digest::of(b"x").hex());
            }),
        ),
        (
            "leaves a file out",
            "missing",
            edit(&|s| {
                s["predicate"]["resources"]
                    .as_array_mut()
                    .unwrap()
                    .remove(1);
            }),
        ),
        (
            "lists a file the version lacks",
            "extra",
            edit(&|s| {
                s["predicate"]["resources"].as_array_mut().unwrap().push(json!({
                "name": "extra.bin", "algorithm": "blake3", "digest": sealvol_spec::B3Digest::of(b"").hex(),
            }));
            }),
        ),
        ("has a subject digest not of its resources", "subject", {
            let mut s = statement.clone();
            s.subject[0].digest.insert("sha256".into(), "00".repeat(32));
            s
        }),
        (
            "allows no symlinks, and the version has two",
            "symlinks",
            edit(&|s| {
                s["predicate"]["serialization"]["allow_symlinks"] = json!(false);
                s["predicate"]["resources"]
                    .as_array_mut()
                    .unwrap()
                    .retain(|r| r["name"] != "models/readme");
            }),
        ),
        (
            "hashes with sha256",
            "algorithm",
            edit(&|s| {
                s["predicate"]["resources"][0]["algorithm"] = json!("sha256");
            }),
        ),
    ];
    for (name, _, s) in &invalid {
        assert!(sig::check_oms(s, &t).is_err(), "{name}");
    }
    let signature_v = json!({
        "tree": "basic",
        "index_digest": v.index.digest().to_string(),
        "index_size": v.index.bytes.len(),
        "ed25519_seed": hex::encode(seed),
        "public_key_pem": sig::spki_pem(&spki),
        "oms_hint": sig::oms_hint(&spki),
        "cosign_hint": sig::cosign_hint(&spki),
        "statement": String::from_utf8(payload).unwrap(),
        "bundle": String::from_utf8(bundle).unwrap(),
        "manifest": String::from_utf8(signed.manifest.bytes.clone()).unwrap(),
        "manifest_digest": signed.manifest.digest().to_string(),
        "invalid": invalid.iter().map(|(name, rule, s)| json!({
            "name": name, "rule": rule, "statement": String::from_utf8(s.encode()).unwrap(),
        })).collect::<Vec<_>>(),
    });
    write(&out.join("signature.json"), &signature_v);
}

fn write(path: &Path, v: &serde_json::Value) {
    let mut s = serde_json::to_string_pretty(v).unwrap();
    s.push('\n');
    std::fs::write(path, s).unwrap();
}
