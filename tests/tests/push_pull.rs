//! `sealvol push` and `sealvol pull` as a user meets them: a tree comes back
//! byte for byte from `sealvol serve` and from CNCF distribution, a re-push
//! sends only what changed, standard tools (skopeo, oras-py) copy and read
//! versions, and every failure is one line that leaves no partial or wrong
//! file behind.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use sealvol_spec::ChunkingParams;
use sealvol_tests::forge::Mirror;
use sealvol_tests::{
    assert_same_tree, closed_addr, fails, host, json, noise, ok, s, sha256, stderr, tree, venv_bin,
    write, DockerRegistry, FlipProxy, Node, Sandbox, Server,
};
use serde_json::Value;

/// Larger than the 16 MiB maximum chunk, so the big file has several chunks.
const BIG: usize = 20 << 20;

/// A small model directory: a big file of `big_len` bytes, JSON files, an
/// empty file, an empty directory, a symlink, a 0600 and a 0755 file and
/// nested directories. Modes are set explicitly, whatever the umask.
fn sample(root: &Path, big_len: usize) {
    write(&root.join("big.bin"), &noise(big_len, 1), 0o644);
    write(&root.join("config.json"), b"{\"hidden_size\": 64}\n", 0o644);
    write(&root.join("tokenizer.json"), &noise(3000, 2), 0o644);
    write(&root.join("empty"), b"", 0o644);
    write(&root.join("secret.key"), b"not for everyone\n", 0o600);
    write(&root.join("run.sh"), b"#!/bin/sh\necho hi\n", 0o755);
    write(&root.join("nested/params.json"), b"{\"lr\": 0.1}\n", 0o644);
    write(&root.join("nested/deeper/notes.txt"), b"deep\n", 0o644);
    std::fs::create_dir_all(root.join("emptydir")).unwrap();
    symlink("nested/params.json", root.join("link")).unwrap();
    for dir in ["", "nested", "nested/deeper", "emptydir"] {
        std::fs::set_permissions(root.join(dir), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Files (not directories or symlinks) in `sample`.
const SAMPLE_FILES: u64 = 8;

fn push(sb: &Sandbox, registry: &str, dir: &Path, reference: &str, extra: &[&str]) -> Value {
    let mut args = vec!["push", s(dir), reference, "--output", "json"];
    args.extend_from_slice(extra);
    json(sb.sealvol(registry, &args), &format!("push {reference}"))
}

fn pull(sb: &Sandbox, registry: &str, reference: &str, dir: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["pull", reference, s(dir), "--output", "json"];
    args.extend_from_slice(extra);
    json(sb.sealvol(registry, &args), &format!("pull {reference}"))
}

/// The 64 hex digits of a `b3:<hex>` JSON value.
fn hex_of(digest: &Value) -> String {
    let d = digest.as_str().expect("digest string");
    let hex = d
        .strip_prefix("b3:")
        .unwrap_or_else(|| panic!("not b3: {d}"));
    assert!(
        hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "{d}"
    );
    hex.to_string()
}

/// After a failed pull into `dest`: no temporary file is left, and every
/// file or symlink there is exactly as in the source.
fn assert_nothing_partial_or_wrong(source: &BTreeMap<String, Node>, dest: &Path, what: &str) {
    if !dest.exists() {
        return;
    }
    for (path, node) in tree(dest) {
        assert!(
            !path.contains(".sealvol-"),
            "{what}: temporary file left behind: {path}"
        );
        if !matches!(node, Node::Dir { .. }) {
            assert_eq!(
                Some(&node),
                source.get(&path),
                "{what}: {path} is left in the destination but differs from the source"
            );
        }
    }
}

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

const INDEX: &str = "application/vnd.oci.image.index.v1+json";

/// The raw manifest `reference` of `repo` at `addr`.
fn manifest_bytes(addr: &str, repo: &str, reference: &str, accept: &str) -> Vec<u8> {
    let r = http()
        .get(format!("http://{addr}/v2/{repo}/manifests/{reference}"))
        .header("accept", accept)
        .send()
        .unwrap();
    assert!(
        r.status().is_success(),
        "GET manifest {reference}: {:?}",
        r.status()
    );
    r.bytes().unwrap().to_vec()
}

#[test]
fn a_tree_round_trips_through_sealvol_serve_and_docker_registry() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src, BIG);
    let serve = Server::start(&sb.path().join("serve"));
    let serve_addr = host(&serve);
    let docker = DockerRegistry::start();

    let printed = ok(
        sb.sealvol(&serve_addr, &["push", s(&src), "bdn:ns/vol"]),
        "push to sealvol serve",
    );
    let hex = printed
        .strip_prefix("bdn:ns/vol@b3:")
        .unwrap_or_else(|| panic!("push printed {printed:?}"))
        .to_string();
    assert_eq!(hex.len(), 64, "{printed}");

    // A qualified ref goes to its own host: the default registry is down.
    let qualified = format!("{}/ns/vol", docker.addr());
    let printed_docker = ok(
        sb.sealvol(&closed_addr(), &["push", s(&src), &qualified]),
        "push to docker-registry",
    );
    assert_eq!(
        printed_docker,
        format!("{qualified}@b3:{hex}"),
        "the same tree gives the same digest on both registries"
    );

    for (registry, reference, full) in [
        (serve_addr.clone(), "bdn:ns/vol".to_string(), &printed),
        (closed_addr(), qualified.clone(), &printed_docker),
    ] {
        let dest = sb
            .path()
            .join(format!("pulled-{}", registry.replace(':', "_")));
        let cache = tempfile::tempdir().unwrap();
        let v = pull(
            &sb,
            &registry,
            &reference,
            &dest,
            &["--cache-dir", s(cache.path())],
        );
        assert_eq!(v["digest"], format!("b3:{hex}"), "{reference}: {v}");
        assert_eq!(v["ref"].as_str(), Some(full.as_str()), "{v}");
        assert_eq!(v["files"], SAMPLE_FILES, "{v}");
        for k in [
            "bytes",
            "bytes_downloaded",
            "files_present",
            "duration_seconds",
            "bandwidth_bytes_per_second",
        ] {
            assert!(v.get(k).is_some(), "pull JSON lacks {k}: {v}");
        }
        assert_eq!(v["chunks_from_cache"], 0, "fresh cache: {v}");
        assert_eq!(v["chunks_downloaded"], v["chunks"], "{v}");
        let big = json(
            sb.sealvol(
                &registry,
                &[
                    "stat",
                    &format!("{reference}:head/big.bin"),
                    "--output",
                    "json",
                ],
            ),
            "stat big.bin",
        );
        assert!(big["entry"]["chunks"].as_u64().unwrap() >= 2, "{big}");
        // big.bin's chunks and one for each of the 6 small non-empty files.
        assert!(v["chunks"].as_u64().unwrap() >= 2 + 6, "{v}");
        assert_same_tree(&src, &dest);
        let stat = ok(
            sb.sealvol(&registry, &["stat", &reference, "--full-ref"]),
            "stat --full-ref",
        );
        assert_eq!(&stat, full, "stat --full-ref {reference}");
    }
}

#[test]
fn a_repush_sends_nothing_and_an_edit_sends_only_its_chunks() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    // Big enough that one chunk is well under 30% of the version.
    sample(&src, 48 << 20);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);

    let v1 = push(&sb, &reg, &src, "bdn:ns/vol", &[]);
    assert_eq!(v1["already_present"], false, "{v1}");
    assert_eq!(v1["chunks_uploaded"], v1["chunks"], "{v1}");
    assert_eq!(v1["files"], SAMPLE_FILES, "{v1}");
    for k in [
        "ref",
        "index_digest",
        "bytes",
        "bytes_uploaded",
        "chunks_mounted",
        "tags",
        "duration_seconds",
        "bandwidth_bytes_per_second",
    ] {
        assert!(v1.get(k).is_some(), "push JSON lacks {k}: {v1}");
    }

    let again = push(&sb, &reg, &src, "bdn:ns/vol", &[]);
    assert_eq!(again["digest"], v1["digest"]);
    assert_eq!(again["already_present"], true, "{again}");
    assert_eq!(again["chunks_uploaded"], 0, "{again}");

    // One small region of the big file changes.
    let big = src.join("big.bin");
    let mut bytes = std::fs::read(&big).unwrap();
    let at = 23 << 20;
    bytes[at..at + 4096].copy_from_slice(&noise(4096, 99));
    std::fs::write(&big, &bytes).unwrap();
    let v2 = push(&sb, &reg, &src, "bdn:ns/vol", &[]);
    assert_ne!(v2["digest"], v1["digest"]);
    assert_eq!(v2["already_present"], false, "{v2}");
    let uploaded = v2["chunks_uploaded"].as_u64().unwrap();
    assert!((1..=2).contains(&uploaded), "{v2}");
    let (sent, total) = (
        v2["bytes_uploaded"].as_f64().unwrap(),
        v2["bytes"].as_f64().unwrap(),
    );
    assert!(
        sent > 0.0 && sent < 0.3 * total,
        "a 4 KiB edit sent {sent} of {total} bytes: {v2}"
    );

    let d = json(
        sb.sealvol(
            &reg,
            &[
                "diff",
                v1["ref"].as_str().unwrap(),
                v2["ref"].as_str().unwrap(),
                "--output",
                "json",
            ],
        ),
        "diff",
    );
    let changed: Vec<&str> = d["changed"]
        .as_array()
        .unwrap_or_else(|| panic!("{d}"))
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["big.bin"], "{d}");
    assert_eq!(d["added"], serde_json::json!([]), "{d}");
    assert_eq!(d["removed"], serde_json::json!([]), "{d}");

    let versions = json(
        sb.sealvol(&reg, &["versions", "bdn:ns/vol", "--output", "json"]),
        "versions",
    );
    let list = versions.as_array().unwrap_or_else(|| panic!("{versions}"));
    assert_eq!(list.len(), 2, "{versions}");
    assert_eq!(list[0]["digest"], v2["digest"], "newest first: {versions}");
    assert_eq!(list[0]["is_head"], true, "{versions}");
    assert_eq!(list[1]["digest"], v1["digest"], "{versions}");
    assert_eq!(list[1]["is_head"], false, "{versions}");
}

/// `skopeo copy --all SRC DST` with TLS off and an accept-anything policy.
fn skopeo_copy(sb: &Sandbox, from: &str, to: &str) {
    let policy = sb.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"default":[{"type":"insecureAcceptAnything"}]}"#,
    )
    .unwrap();
    let out = sb
        .command("skopeo")
        .args([
            "--policy",
            s(&policy),
            "copy",
            "--all",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            from,
            to,
        ])
        .output()
        .expect("run skopeo (installed by scripts/deps.sh)");
    assert!(
        out.status.success(),
        "skopeo copy {from} {to}: {}",
        stderr(&out)
    );
}

#[test]
fn skopeo_copies_of_a_version_pull_back_identical() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src, BIG);
    let origin = Server::start(&sb.path().join("origin"));
    let v = push(&sb, &host(&origin), &src, "bdn:ns/vol", &[]);
    let hex = hex_of(&v["digest"]);
    let tag = format!("b3-{hex}");

    let docker = DockerRegistry::start();
    let fresh = Server::start(&sb.path().join("fresh"));
    let layout = sb.path().join("layout");
    let source = format!("docker://{}/ns/vol:{tag}", host(&origin));
    skopeo_copy(
        &sb,
        &source,
        &format!("docker://{}/ns/vol:{tag}", docker.addr()),
    );
    let oci = format!("oci:{}:{tag}", s(&layout));
    skopeo_copy(&sb, &source, &oci);
    skopeo_copy(
        &sb,
        &oci,
        &format!("docker://{}/ns/vol:{tag}", host(&fresh)),
    );

    for registry in [docker.addr(), host(&fresh)] {
        let dest = sb
            .path()
            .join(format!("from-{}", registry.replace(':', "_")));
        let cache = tempfile::tempdir().unwrap();
        let out = sb.sealvol(
            &closed_addr(),
            &[
                "pull",
                &format!("{registry}/ns/vol@b3:{hex}"),
                s(&dest),
                "--cache-dir",
                s(cache.path()),
                "--output",
                "json",
            ],
        );
        let pulled = json(out, &format!("pull of the skopeo copy on {registry}"));
        assert_eq!(pulled["digest"], v["digest"], "{registry}: {pulled}");
        assert_same_tree(&src, &dest);
        // skopeo 1.9 re-serializes the index (dropping `artifactType`), but
        // the manifests under it arrive unchanged, view manifests included
        // (their layer is already gzipped, so nothing is recompressed).
        let out = sb.sealvol(
            &closed_addr(),
            &[
                "stat",
                &format!("{registry}/ns/vol@b3:{hex}"),
                "--output",
                "json",
            ],
        );
        let stat = json(out, &format!("stat of the skopeo copy on {registry}"));
        assert_eq!(stat["digest"], v["digest"], "{registry}: {stat}");
        let index = |addr: &str| -> Value {
            serde_json::from_slice(&manifest_bytes(addr, "ns/vol", &tag, INDEX)).unwrap()
        };
        let (copy, orig) = (index(&registry), index(&host(&origin)));
        let entries = |ix: &Value| -> Vec<String> {
            ix["manifests"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["digest"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            entries(&copy),
            entries(&orig),
            "{registry}: manifests changed"
        );
    }
}

/// Lists tags, reads the version index and fetches its first chunk with
/// oras-py; prints what it saw as JSON.
const ORAS_SCRIPT: &str = r#"
import hashlib, json, sys
import oras.client

host, repo, tag = sys.argv[1:4]
client = oras.client.OrasClient(hostname=host, insecure=True)
tags = client.get_tags(f"{host}/{repo}")
index = client.get_manifest(
    f"{host}/{repo}:{tag}",
    allowed_media_type=["application/vnd.oci.image.index.v1+json"],
)
shard = next(
    m for m in index["manifests"]
    if m.get("annotations", {}).get("dev.sealvol.role") == "chunks"
)
manifest = client.get_manifest(
    f"{host}/{repo}@{shard['digest']}", allowed_media_type=[shard["mediaType"]]
)
layer = manifest["layers"][0]
response = client.get_blob(f"{host}/{repo}", layer["digest"])
response.raise_for_status()
blob = response.content
print(json.dumps({
    "tags": tags,
    "artifactType": index.get("artifactType"),
    "layer": layer,
    "sha256": "sha256:" + hashlib.sha256(blob).hexdigest(),
    "length": len(blob),
}))
"#;

#[test]
fn oras_py_lists_tags_reads_the_index_and_fetches_a_chunk() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src, BIG);
    let big = std::fs::read(src.join("big.bin")).unwrap();
    let script = sb.path().join("oras_check.py");
    std::fs::write(&script, ORAS_SCRIPT).unwrap();
    let serve = Server::start(&sb.path().join("serve"));
    let docker = DockerRegistry::start();

    for registry in [host(&serve), docker.addr()] {
        let v = push(&sb, &registry, &src, "bdn:ns/vol", &["--tag", "prod"]);
        let tag = format!("b3-{}", hex_of(&v["digest"]));
        let out = sb
            .command(venv_bin("python"))
            .arg(&script)
            .args([registry.as_str(), "ns/vol", tag.as_str()])
            .output()
            .expect("run the venv's python (scripts/deps.sh sets it up)");
        let seen = json(out, &format!("oras-py against {registry}"));
        let tags: Vec<&str> = seen["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        for t in ["head", "prod", tag.as_str()] {
            assert!(
                tags.contains(&t),
                "{registry}: tag {t} missing from {tags:?}"
            );
        }
        assert_eq!(
            seen["artifactType"], "application/vnd.sealvol.version.v1",
            "{registry}: {seen}"
        );
        let layer = &seen["layer"];
        assert_eq!(
            layer["mediaType"], "application/vnd.sealvol.chunk.v1",
            "{seen}"
        );
        assert_eq!(
            seen["sha256"], layer["digest"],
            "blob bytes match their digest"
        );
        assert_eq!(seen["length"], layer["size"], "{seen}");
        // The first chunk in order of first use is the start of big.bin,
        // the first file in canonical order.
        let len = layer["size"].as_u64().unwrap() as usize;
        assert!(len > 1 << 20 && len <= 16 << 20, "{seen}");
        assert_eq!(layer["digest"].as_str().unwrap(), sha256(&big[..len]));
    }
}

#[test]
fn a_digest_prefix_resolves_by_tags_on_docker_registry() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src, 1 << 20);
    let docker = DockerRegistry::start();
    let reg = docker.addr();
    let v1 = push(&sb, &reg, &src, "bdn:ns/vol", &[]);
    write(&src.join("config.json"), b"{\"hidden_size\": 128}\n", 0o644);
    let v2 = push(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let hex1 = hex_of(&v1["digest"]);
    let hex2 = hex_of(&v2["digest"]);

    // The older version, by 12 hex digits, while head is the newer one.
    let dest = sb.path().join("v1");
    let v = pull(
        &sb,
        &reg,
        &format!("bdn:ns/vol@b3:{}", &hex1[..12]),
        &dest,
        &[],
    );
    assert_eq!(v["digest"], v1["digest"], "{v}");
    assert_eq!(
        std::fs::read(dest.join("config.json")).unwrap(),
        b"{\"hidden_size\": 64}\n"
    );
    let full = ok(
        sb.sealvol(
            &reg,
            &["stat", &format!("bdn:ns/vol@{}", &hex2[..12]), "--full-ref"],
        ),
        "stat by bare prefix",
    );
    assert_eq!(full, format!("bdn:ns/vol@b3:{hex2}"));

    // No version starts with this prefix.
    let missing = "0123456789abcdef"
        .chars()
        .map(|c| c.to_string().repeat(12))
        .find(|p| !hex1.starts_with(p.as_str()) && !hex2.starts_with(p.as_str()))
        .unwrap();
    let line = fails(
        sb.sealvol(
            &reg,
            &[
                "pull",
                &format!("bdn:ns/vol@b3:{missing}"),
                s(&sb.path().join("none")),
            ],
        ),
        "pull of a prefix no version has",
    );
    assert!(line.contains("no version matches"), "{line}");
    assert!(
        !sb.path().join("none").exists(),
        "nothing to pull, nothing created"
    );

    // Two digest tags share the first 12 hex digits of v1 (the second tag
    // is planted by hand): the 12-digit prefix is ambiguous, a longer one
    // is not.
    let twin = format!(
        "{}{}",
        &hex1[..12],
        if &hex1[12..13] == "0" { "1" } else { "0" }
    ) + &hex1[13..];
    let index = manifest_bytes(&reg, "ns/vol", &format!("b3-{hex1}"), INDEX);
    let r = http()
        .put(format!("http://{reg}/v2/ns/vol/manifests/b3-{twin}"))
        .header("content-type", INDEX)
        .body(index)
        .send()
        .unwrap();
    assert!(
        r.status().is_success(),
        "plant the twin tag: {:?}",
        r.status()
    );
    let line = fails(
        sb.sealvol(
            &reg,
            &[
                "pull",
                &format!("bdn:ns/vol@b3:{}", &hex1[..12]),
                s(&sb.path().join("amb")),
            ],
        ),
        "pull of an ambiguous prefix",
    );
    assert!(line.contains("give more hex digits"), "{line}");
    assert!(line.contains('2'), "says how many matched: {line}");
    let dest = sb.path().join("longer");
    let v = pull(
        &sb,
        &reg,
        &format!("bdn:ns/vol@b3:{}", &hex1[..16]),
        &dest,
        &[],
    );
    assert_eq!(v["digest"], v1["digest"], "{v}");
    // The planted tag names an index whose version is another digest: a
    // reader must not take it for the version asked for.
    fails(
        sb.sealvol(
            &reg,
            &[
                "pull",
                &format!("bdn:ns/vol@b3:{twin}"),
                s(&sb.path().join("twin")),
            ],
        ),
        "pull of a digest tag whose index is another version",
    );
    assert!(!sb.path().join("twin").join("big.bin").exists());
}

#[test]
fn failures_give_one_line_and_leave_no_partial_or_wrong_file() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src, BIG);
    let source = tree(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let v = push(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let hex = hex_of(&v["digest"]);

    let dest = sb.path().join("dest");
    let pull_into = |registry: &str, reference: &str, cache: &Path| {
        sb.sealvol(
            registry,
            &["pull", reference, s(&dest), "--cache-dir", s(cache)],
        )
    };
    let fresh = || tempfile::tempdir().unwrap();

    // Refs that do not parse fail before any connection: the default
    // registry is down and the message is about the ref.
    let down = closed_addr();
    for bad in [
        "bdn:ns/Vol",
        "bdn:ns",
        "bdn:ns/vol@b3:xyz",
        "bdn:ns/vol:bad/../x",
    ] {
        let line = fails(
            pull_into(&down, bad, fresh().path()),
            &format!("pull {bad}"),
        );
        assert!(!line.contains(&down), "{bad} reached the registry: {line}");
        assert_nothing_partial_or_wrong(&source, &dest, bad);
    }

    let line = fails(
        pull_into(&down, "bdn:ns/vol", fresh().path()),
        "pull from a registry that is down",
    );
    assert!(line.contains(&down), "names the registry: {line}");
    assert_nothing_partial_or_wrong(&source, &dest, "registry down");

    let nothing = format!("bdn:ns/vol@b3:{}", "0".repeat(64));
    assert_ne!(hex, "0".repeat(64));
    fails(
        pull_into(&reg, &nothing, fresh().path()),
        "pull of a digest no version has",
    );
    assert_nothing_partial_or_wrong(&source, &dest, "unknown digest");

    // Every blob corrupted on the way (the tree index first).
    let proxy = FlipProxy::start(&reg);
    let line = fails(
        pull_into(&proxy.addr(), "bdn:ns/vol", fresh().path()),
        "pull through the flip proxy",
    );
    assert!(proxy.flipped() > 0, "the proxy corrupted nothing");
    assert!(line.contains("corrupt"), "{line}");
    assert_nothing_partial_or_wrong(&source, &dest, "corrupt blobs");
    drop(proxy);

    // Only the last chunk of big.bin corrupted: the tree arrives intact,
    // other files may be written, big.bin must not be, not even partly.
    let chunks = sealvol_tests::chunk_blobs(&reg, "ns/vol", &format!("b3-{hex}"));
    let last_big = chunks
        .iter()
        .rfind(|(_, size)| *size > 1 << 20)
        .expect("big.bin has chunks over 1 MiB")
        .0
        .clone();
    let proxy = FlipProxy::start_only(&reg, std::slice::from_ref(&last_big));
    let cache = fresh();
    let line = fails(
        pull_into(&proxy.addr(), "bdn:ns/vol", cache.path()),
        "pull with one corrupt chunk",
    );
    assert!(proxy.flipped() > 0, "the proxy corrupted nothing");
    assert!(line.contains("corrupt"), "{line}");
    assert_nothing_partial_or_wrong(&source, &dest, "one corrupt chunk");
    assert!(
        !dest.join("big.bin").exists(),
        "big.bin written from a corrupt chunk"
    );
    drop(proxy);

    // The same cache, straight from the registry: nothing corrupt was kept,
    // and the pull completes.
    let out = pull_into(&reg, "bdn:ns/vol", cache.path());
    ok(out, "pull after the failed ones");
    assert_same_tree(&src, &dest);
}

#[test]
fn a_second_pull_restores_only_what_was_damaged() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src, BIG);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    push(&sb, &reg, &src, "bdn:ns/vol", &[]);

    let dest = sb.path().join("dest");
    let first = pull(&sb, &reg, "bdn:ns/vol", &dest, &[]);
    assert_eq!(first["files_present"], 0, "{first}");
    assert_same_tree(&src, &dest);

    let again = pull(&sb, &reg, "bdn:ns/vol", &dest, &[]);
    assert_eq!(again["files_present"], SAMPLE_FILES, "{again}");
    assert_eq!(again["chunks_downloaded"], 0, "{again}");

    let damage = || {
        std::fs::remove_file(dest.join("config.json")).unwrap();
        let big = dest.join("big.bin");
        let mut bytes = std::fs::read(&big).unwrap();
        let at = 7 << 20;
        for b in &mut bytes[at..at + 100] {
            *b ^= 0x5a;
        }
        std::fs::write(&big, &bytes).unwrap();
        assert_eq!(bytes.len(), BIG, "same size");
    };

    // The cache refers to pulled files rather than keeping a second copy
    // of their bytes (each byte is written once): a pull elsewhere reads
    // them, and nothing crosses the network.
    let other = sb.path().join("other");
    let copy = pull(&sb, &reg, "bdn:ns/vol", &other, &[]);
    assert_eq!(copy["chunks_downloaded"], 0, "{copy}");
    assert_same_tree(&src, &other);

    // Warm cache (referring to `other` now): nothing crosses the network.
    damage();
    let resumed = pull(&sb, &reg, "bdn:ns/vol", &dest, &[]);
    assert_eq!(resumed["files_present"], SAMPLE_FILES - 2, "{resumed}");
    assert_eq!(resumed["chunks_downloaded"], 0, "{resumed}");
    assert!(
        resumed["chunks_from_cache"].as_u64().unwrap() >= 2,
        "{resumed}"
    );
    assert_same_tree(&src, &dest);

    // The files the cache refers to, changed: their chunks are fetched
    // again, never served from the changed bytes.
    damage();
    let big = other.join("big.bin");
    let mut bytes = std::fs::read(&big).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&big, &bytes).unwrap();
    std::fs::remove_file(other.join("config.json")).unwrap();
    let refetched = pull(&sb, &reg, "bdn:ns/vol", &dest, &[]);
    assert!(
        refetched["chunks_downloaded"].as_u64().unwrap() >= 2,
        "{refetched}"
    );
    assert_same_tree(&src, &dest);

    // Cold cache: only the damaged and missing files' data is fetched.
    damage();
    let cold = tempfile::tempdir().unwrap();
    let resumed = pull(
        &sb,
        &reg,
        "bdn:ns/vol",
        &dest,
        &["--cache-dir", s(cold.path())],
    );
    assert_eq!(resumed["files_present"], SAMPLE_FILES - 2, "{resumed}");
    let fetched = resumed["bytes_downloaded"].as_u64().unwrap();
    assert!(
        fetched > 0 && fetched <= (BIG + 20) as u64,
        "fetched {fetched} bytes to repair big.bin and config.json: {resumed}"
    );
    assert_same_tree(&src, &dest);
}

fn ls_paths(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect()
}

fn files_and_links(root: &Path) -> BTreeSet<String> {
    tree(root)
        .into_iter()
        .filter(|(_, n)| !matches!(n, Node::Dir { .. }))
        .map(|(p, _)| p)
        .collect()
}

#[test]
fn include_sub_paths_cat_ls_and_tags() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src, BIG);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let v = push(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let pinned = v["ref"].as_str().unwrap().to_string();

    let only_json = sb.path().join("only-json");
    let p = pull(
        &sb,
        &reg,
        "bdn:ns/vol",
        &only_json,
        &["--include", "*.json"],
    );
    assert_eq!(p["files"], 3, "{p}");
    assert_eq!(
        files_and_links(&only_json),
        ["config.json", "nested/params.json", "tokenizer.json"]
            .map(String::from)
            .into(),
    );
    for f in ["config.json", "nested/params.json", "tokenizer.json"] {
        assert_eq!(
            std::fs::read(only_json.join(f)).unwrap(),
            std::fs::read(src.join(f)).unwrap()
        );
    }

    let sub = sb.path().join("sub");
    pull(&sb, &reg, &format!("{pinned}/nested"), &sub, &[]);
    assert_same_tree(&src.join("nested"), &sub);

    let one = sb.path().join("one");
    pull(
        &sb,
        &reg,
        "bdn:ns/vol:head/nested/deeper/notes.txt",
        &one,
        &[],
    );
    assert_eq!(files_and_links(&one), ["notes.txt".to_string()].into());
    assert_eq!(std::fs::read(one.join("notes.txt")).unwrap(), b"deep\n");

    for f in ["big.bin", "nested/params.json", "empty"] {
        let out = sb.sealvol(&reg, &["cat", &format!("bdn:ns/vol/{f}")]);
        assert!(out.status.success(), "cat {f}: {}", stderr(&out));
        assert!(
            out.stdout == std::fs::read(src.join(f)).unwrap(),
            "cat {f}: other bytes than the source"
        );
    }

    let listed = json(
        sb.sealvol(&reg, &["ls", "bdn:ns/vol", "-r", "--output", "json"]),
        "ls -r",
    );
    assert_eq!(ls_paths(&listed), tree(&src).into_keys().collect());

    // Tags: set, pull by it, delete.
    let set = json(
        sb.sealvol(
            &reg,
            &[
                "tag",
                "set",
                "--volume-ref",
                &pinned,
                "--tag",
                "prod",
                "--output",
                "json",
            ],
        ),
        "tag set",
    );
    assert_eq!(set["digest"], v["digest"], "{set}");
    let by_tag = sb.path().join("by-tag");
    let p = pull(&sb, &reg, "bdn:ns/vol:prod", &by_tag, &[]);
    assert_eq!(p["digest"], v["digest"], "{p}");
    assert_same_tree(&src, &by_tag);
    ok(
        sb.sealvol(&reg, &["tag", "delete", "bdn:ns/vol:prod"]),
        "tag delete on sealvol serve",
    );
    let line = fails(
        sb.sealvol(&reg, &["stat", "bdn:ns/vol:prod"]),
        "stat of a deleted tag",
    );
    assert!(line.contains("prod"), "{line}");
    let versions = json(
        sb.sealvol(&reg, &["versions", "bdn:ns/vol", "--output", "json"]),
        "versions",
    );
    assert_eq!(versions.as_array().map(Vec::len), Some(1), "{versions}");
    assert_eq!(versions[0]["tags"], serde_json::json!([]), "{versions}");
    // The version itself stays.
    ok(
        sb.sealvol(&reg, &["stat", &pinned]),
        "stat after tag delete",
    );

    // CNCF distribution cannot delete a tag, and sealvol says so.
    let docker = DockerRegistry::start();
    let dreg = docker.addr();
    push(&sb, &dreg, &src, "bdn:ns/vol", &["--tag", "prod"]);
    let line = fails(
        sb.sealvol(&dreg, &["tag", "delete", "bdn:ns/vol:prod"]),
        "tag delete on docker-registry",
    );
    assert!(line.contains("not support"), "{line}");
    let still = ok(
        sb.sealvol(&dreg, &["stat", "bdn:ns/vol:prod", "--full-ref"]),
        "the tag is still there",
    );
    assert_eq!(still, pinned);
}

#[test]
fn a_registry_that_fails_now_and_then_is_retried() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src, BIG);
    let serve = Server::start(&sb.path().join("serve"));
    // Each proxy answers its first 3 blob requests with 503; a call gets 4
    // attempts, so both commands must succeed, and only by retrying.
    let flaky = FlipProxy::start_failing(&host(&serve), 3);
    let v = push(&sb, &flaky.addr(), &src, "bdn:ns/vol", &[]);
    assert_eq!(flaky.failed(), 3, "the push never met a failure");
    let flaky = FlipProxy::start_failing(&host(&serve), 3);
    let dest = sb.path().join("dest");
    let cache = tempfile::tempdir().unwrap();
    let pulled = pull(
        &sb,
        &flaky.addr(),
        "bdn:ns/vol",
        &dest,
        &["--cache-dir", s(cache.path())],
    );
    assert_eq!(flaky.failed(), 3, "the pull never met a failure");
    assert_eq!(pulled["digest"], v["digest"]);
    assert_same_tree(&src, &dest);
}

#[test]
fn a_pull_sweeps_what_a_killed_pull_left_behind() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src, BIG);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    push(&sb, &reg, &src, "bdn:ns/vol", &[]);
    // What a pull killed with SIGKILL leaves: its temporary files, named
    // after a process that is gone. One of a process that still runs (init)
    // belongs to a pull in progress and must stay.
    let dest = sb.path().join("dest");
    let gone = (4_000_000..4_194_000)
        .find(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        .unwrap();
    let stale = dest
        .join("nested")
        .join(format!(".deep.bin.sealvol-{gone}"));
    let live = dest.join(".big.bin.sealvol-1");
    write(&stale, b"partial", 0o644);
    write(&live, b"in progress", 0o644);
    pull(&sb, &reg, "bdn:ns/vol", &dest, &[]);
    assert!(!stale.exists(), "a dead pull's temporary file was kept");
    assert!(live.exists(), "a running pull's temporary file was removed");
    std::fs::remove_file(&live).unwrap();
    assert_same_tree(&src, &dest);
}

/// The requests a `sealvol serve` answered so far, by method and status,
/// from its Prometheus metrics (which count this `GET /metrics` only after
/// answering it).
fn requests_served(addr: &str) -> BTreeMap<(String, u16), u64> {
    let text = http()
        .get(format!("http://{addr}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let label = |line: &str, name: &str| -> Option<String> {
        let start = line.find(&format!("{name}=\""))? + name.len() + 2;
        let len = line[start..].find('"')?;
        Some(line[start..start + len].to_string())
    };
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("sealvol_http_requests_total{"))
    {
        let (Some(method), Some(status), Some(n)) = (
            label(line, "method"),
            label(line, "status").and_then(|s| s.parse().ok()),
            line.rsplit(' ').next().and_then(|n| n.parse::<f64>().ok()),
        ) else {
            panic!("unexpected metrics line: {line}");
        };
        *out.entry((method, status)).or_insert(0) += n as u64;
    }
    out
}

/// What happened between two [`requests_served`], less the `GET /metrics`
/// that took the first.
fn served_between(
    before: &BTreeMap<(String, u16), u64>,
    after: &BTreeMap<(String, u16), u64>,
) -> BTreeMap<(String, u16), u64> {
    let mut out: BTreeMap<(String, u16), u64> = after
        .iter()
        .map(|(k, n)| (k.clone(), n - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let metrics = ("GET".to_string(), 200);
    if let Some(n) = out.get_mut(&metrics) {
        *n -= 1;
    }
    out
}

fn count(served: &BTreeMap<(String, u16), u64>, method: &str) -> u64 {
    served
        .iter()
        .filter(|((m, _), _)| m == method)
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn an_open_registry_is_asked_for_v2_once_not_once_per_blob() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src, BIG);
    // Many small files, one chunk each: any per-blob overhead shows.
    for i in 0..40 {
        write(
            &src.join(format!("many/{i:02}.bin")),
            &noise(1000 + i, 100 + i as u64),
            0o644,
        );
    }
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);

    let before = requests_served(&reg);
    let pushed = push(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let after_push = requests_served(&reg);
    let dest = sb.path().join("dest");
    let cache = tempfile::tempdir().unwrap();
    let pulled = pull(
        &sb,
        &reg,
        "bdn:ns/vol",
        &dest,
        &["--cache-dir", s(cache.path())],
    );
    let after_pull = requests_served(&reg);
    assert_same_tree(&src, &dest);

    // The registry lets anyone in, so `GET /v2/` has nothing to say after
    // the first time. A push GETs nothing else but a manifest or two (the
    // volume's head among them, for its chunking parameters); a pull GETs
    // its chunks and a few manifests and tree blobs. Either may ask `/v2/`
    // before each manifest, but not before each blob.
    const HANDFUL: u64 = 16;
    let served = served_between(&before, &after_push);
    let chunks = pushed["chunks_uploaded"].as_u64().unwrap();
    assert!(chunks >= 48, "{pushed}");
    for method in ["HEAD", "POST", "PUT"] {
        assert!(
            count(&served, method) >= chunks,
            "push: fewer {method} requests than chunks sent: {served:?}"
        );
    }
    assert!(
        count(&served, "GET") <= HANDFUL,
        "push of {chunks} chunks: GET /v2/ before each blob request? {served:?}"
    );
    let served = served_between(&after_push, &after_pull);
    let chunks = pulled["chunks_downloaded"].as_u64().unwrap();
    assert!(chunks >= 48, "{pulled}");
    assert!(
        count(&served, "GET") <= chunks + HANDFUL,
        "pull of {chunks} chunks: GET /v2/ before each blob? {served:?}"
    );
}

#[test]
fn a_push_whose_uploads_fail_reports_them_and_publishes_nothing() {
    // Chunks go out while the directory is still being sealed: a refused
    // upload must stop the push with the registry's answer (not a sealing
    // error), and no tag may name anything.
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src, BIG);
    let serve = Server::start(&sb.path().join("serve"));
    let broken = FlipProxy::start_failing(&host(&serve), usize::MAX);
    let out = sb.sealvol(
        &broken.addr(),
        &["push", s(&src), "bdn:ns/vol", "--no-cache"],
    );
    let line = fails(out, "push through a registry that fails every blob request");
    assert!(broken.failed() > 0, "no blob request reached the proxy");
    assert!(
        line.contains("503"),
        "says what the registry answered: {line}"
    );
    assert!(
        !line.to_lowercase().contains("interrupted"),
        "reports the upload, not the stopped sealing: {line}"
    );
    let tags = http()
        .get(format!("http://{}/v2/ns/vol/tags/list", host(&serve)))
        .send()
        .unwrap();
    let listed = if tags.status().is_success() {
        tags.json::<Value>().unwrap()["tags"].clone()
    } else {
        Value::Null
    };
    assert!(
        listed.as_array().is_none_or(|t| t.is_empty()),
        "a failed push published tags: {listed}"
    );
}

#[test]
fn a_new_version_keeps_the_chunking_of_the_volumes_head() {
    // SPEC.md §4.1: new volumes get the 2 MiB default, but a volume first
    // published with the earlier 4 MiB one keeps it, so a push of an edit
    // cuts the unchanged bytes as before and sends only the edited chunks.
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src, BIG);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let mirror = Mirror::new(&reg);

    // v1 as an earlier release published it.
    let earlier = ChunkingParams::EARLIER_DEFAULT;
    mirror.publish_dir("ns/old", &src, earlier);

    // v2: 100 KiB in the middle of big.bin rewritten.
    let big = src.join("big.bin");
    let mut bytes = std::fs::read(&big).unwrap();
    for b in &mut bytes[BIG / 2..BIG / 2 + (100 << 10)] {
        *b ^= 0x5a;
    }
    std::fs::write(&big, &bytes).unwrap();
    let v2 = push(&sb, &reg, &src, "bdn:ns/old", &["--no-cache"]);
    let head = mirror.fetch_ref("ns/old", "head").tree;
    assert_eq!(head.params(), earlier, "v2 is cut as the head was: {v2}");
    let sent = v2["bytes_uploaded"].as_u64().unwrap();
    assert!(
        sent <= 2 * u64::from(earlier.max),
        "an edit of 100 KiB sent {sent} bytes: unchanged chunks went again"
    );

    // A new volume gets the default.
    push(&sb, &reg, &src, "bdn:ns/new", &[]);
    let head = mirror.fetch_ref("ns/new", "head").tree;
    assert_eq!(head.params(), ChunkingParams::default());
}
