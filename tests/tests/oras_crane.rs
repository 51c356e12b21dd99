//! The real oras CLI (v1.3) and crane (v0.22), as `scripts/deps.sh` builds
//! them into `.deps/go/bin`, against versions that `sealvol push` published:
//! what `oras pull` gives a user (no file: a version's blobs carry no
//! `org.opencontainers.image.title`, so oras skips them and points at `oras
//! copy --to-oci-layout`, whose layout holds the version as SPEC §5 lays it
//! out, files rebuilt from it byte for byte), `oras copy` and `crane copy`
//! mirroring a version between `sealvol serve` and CNCF distribution 2.8 so
//! that it pulls back by `b3:` prefix, `oras attach`/`oras discover` with
//! the referrers API of `sealvol serve` (and oras's tag fallback on
//! distribution 2.8), and `oras manifest fetch`, `crane manifest`, `crane
//! digest`, `crane ls`, `crane config` and `crane export` showing SPEC §5.
//!
//! A missing tool fails the test (with the command that builds it): these
//! tests are never skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use sealvol_spec::{EntryData, TreeIndex};
use sealvol_tests::forge::Mirror;
use sealvol_tests::{
    assert_same_tree, assert_tree, closed_addr, host, json, noise, ok, s, sha256, stderr, tree,
    write, DockerRegistry, FlipProxy, Node, Sandbox, Server,
};
use serde_json::Value;

const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const VERSION_TYPE: &str = "application/vnd.sealvol.version.v1";
const SBOM_TYPE: &str = "application/vnd.example.sbom.v1+json";

/// A view config (SPEC.md §5.1): an image config for `platform`
/// (`os/arch`) whose rootfs is the one view layer.
fn assert_view_config(config: &Value, platform: &str) {
    let (os, arch) = platform.split_once('/').unwrap();
    assert_eq!(config["os"], os, "{config}");
    assert_eq!(config["architecture"], arch, "{config}");
    assert_eq!(config["rootfs"]["type"], "layers", "{config}");
    assert_eq!(config["rootfs"]["diff_ids"].as_array().unwrap().len(), 1);
}

/// A sandbox with the sample tree in `src` and a `sealvol serve` of its
/// own.
fn sampled() -> (Sandbox, PathBuf, Server) {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    (sb, src, serve)
}

fn oras(sb: &Sandbox, args: &[&str]) -> Output {
    sb.command(sealvol_tests::go_tool("oras"))
        .args(args)
        .output()
        .expect("run oras")
}

fn crane(sb: &Sandbox, args: &[&str]) -> Output {
    sb.command(sealvol_tests::go_tool("crane"))
        .args(args)
        .output()
        .expect("run crane")
}

/// Asserts that the command succeeded; its stdout, untouched.
fn raw(out: Output, what: &str) -> Vec<u8> {
    assert!(
        out.status.success(),
        "{what} failed ({:?}): {}",
        out.status,
        stderr(&out)
    );
    out.stdout
}

/// A model directory: a 9 MiB file of several chunks, small files (one
/// 0600, one 0755), an empty file, an empty directory, nested directories
/// and a symlink. Modes are set explicitly, whatever the umask.
fn sample(root: &Path) {
    write(&root.join("model.safetensors"), &noise(9 << 20, 29), 0o644);
    write(&root.join("config.json"), b"{\"hidden_size\": 64}\n", 0o644);
    write(&root.join("tokenizer/vocab.txt"), &noise(5000, 30), 0o600);
    write(&root.join("tokenizer/deep/merges.txt"), b"a b\n", 0o644);
    write(&root.join("run.sh"), b"#!/bin/sh\necho hi\n", 0o755);
    write(&root.join("empty"), b"", 0o644);
    std::fs::create_dir_all(root.join("emptydir")).unwrap();
    symlink("tokenizer/vocab.txt", root.join("vocab")).unwrap();
    for dir in ["", "tokenizer", "tokenizer/deep", "emptydir"] {
        std::fs::set_permissions(root.join(dir), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// A version `sealvol push` published as `ns/vol` on a registry.
struct Version {
    /// Its version digest's 64 hex digits.
    hex: String,
    /// `sha256:<hex>` of its index on that registry.
    index: String,
}

impl Version {
    fn tag(&self) -> String {
        format!("b3-{}", self.hex)
    }
}

/// `sealvol push SRC bdn:ns/vol EXTRA` to `registry`; checks that `sealvol
/// stat --oci-ref` prints `REGISTRY/ns/vol@<the index digest>`, the digest
/// of the bytes the registry serves for the version's digest tag.
fn push(sb: &Sandbox, registry: &str, src: &Path, extra: &[&str]) -> Version {
    let mut args = vec!["push", s(src), "bdn:ns/vol", "--output", "json"];
    args.extend_from_slice(extra);
    let v = json(sb.sealvol(registry, &args), "sealvol push");
    let hex = v["digest"]
        .as_str()
        .and_then(|d| d.strip_prefix("b3:"))
        .unwrap_or_else(|| panic!("push printed {v}"))
        .to_string();
    let oci = ok(
        sb.sealvol(
            registry,
            &["stat", &format!("bdn:ns/vol@b3:{hex}"), "--oci-ref"],
        ),
        "sealvol stat --oci-ref",
    );
    let index = oci
        .strip_prefix(&format!("{registry}/ns/vol@"))
        .unwrap_or_else(|| panic!("stat --oci-ref printed {oci:?}"))
        .to_string();
    assert_eq!(v["index_digest"], index.as_str(), "{v}");
    let (_, served) = Mirror::new(registry)
        .manifest("ns/vol", &format!("b3-{hex}"))
        .expect("the digest tag");
    assert_eq!(served, index, "the digest tag names the index stat prints");
    Version { hex, index }
}

/// The raw manifest `reference` of `repo` at `addr`.
fn manifest_bytes(addr: &str, repo: &str, reference: &str) -> Vec<u8> {
    Mirror::new(addr)
        .manifest(repo, reference)
        .unwrap_or_else(|| panic!("no manifest {repo}:{reference} at {addr}"))
        .0
}

fn parse(bytes: &[u8], what: &str) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{what} is not JSON ({e})"))
}

fn lines(text: &str) -> BTreeSet<String> {
    text.lines().map(str::to_string).collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|t| t.to_string()).collect()
}

/// The entries of a version index whose `dev.sealvol.role` is `role`.
fn entries_with_role<'a>(index: &'a Value, role: &str) -> Vec<&'a Value> {
    index["manifests"]
        .as_array()
        .expect("an index")
        .iter()
        .filter(|m| m["annotations"]["dev.sealvol.role"] == role)
        .collect()
}

/// The bytes of blob `digest` in the OCI image layout at `layout`, checked
/// against their name.
fn layout_blob(layout: &Path, digest: &str) -> Vec<u8> {
    let hex = digest
        .strip_prefix("sha256:")
        .unwrap_or_else(|| panic!("not sha256: {digest}"));
    let bytes = std::fs::read(layout.join("blobs/sha256").join(hex))
        .unwrap_or_else(|e| panic!("blob {digest} missing from the layout: {e}"));
    assert_eq!(
        sha256(&bytes),
        digest,
        "layout blob {digest} has other bytes"
    );
    bytes
}

#[test]
fn oras_pull_writes_no_file_and_its_oci_layout_holds_the_version_byte_for_byte() {
    let (sb, src, serve) = sampled();
    let reg = host(&serve);
    let v = push(&sb, &reg, &src, &["--tag", "prod"]);
    let index_bytes = manifest_bytes(&reg, "ns/vol", "prod");
    let index = parse(&index_bytes, "the index");

    // `oras pull` walks the index and every manifest under it, but a
    // version's blobs carry no `org.opencontainers.image.title`, so oras
    // skips every one of them: it writes no file and fetches no blob.
    let proxy = FlipProxy::start_counting(&reg);
    let out_dir = sb.path().join("oras-pull");
    let pulled = parse(
        &raw(
            oras(
                &sb,
                &[
                    "pull",
                    "--plain-http",
                    &format!("{}/ns/vol:prod", proxy.addr()),
                    "-o",
                    s(&out_dir),
                    "--format",
                    "json",
                ],
            ),
            "oras pull",
        ),
        "oras pull --format json",
    );
    assert_eq!(
        pulled["reference"],
        format!("{}/ns/vol@{}", proxy.addr(), v.index),
        "{pulled}"
    );
    assert_eq!(pulled["files"], serde_json::json!([]), "{pulled}");
    // Not even the output folder.
    assert!(!out_dir.exists(), "oras pull wrote {:?}", tree(&out_dir));
    let requests = proxy.requests();
    assert!(
        !requests.iter().any(|r| r.contains("/blobs/")),
        "oras pull fetched a blob: {requests:?}"
    );
    let fetched: BTreeSet<String> = requests
        .iter()
        .filter_map(|r| r.strip_prefix("GET /v2/ns/vol/manifests/"))
        .map(str::to_string)
        .collect();
    for m in index["manifests"].as_array().unwrap() {
        let d = m["digest"].as_str().unwrap();
        assert!(
            fetched.contains(d),
            "oras pull did not read {d}: {requests:?}"
        );
    }
    drop(proxy);

    // What it tells a user, and the one file it writes when asked for a
    // view image's config.
    let text = ok(
        oras(
            &sb,
            &[
                "pull",
                "--plain-http",
                &format!("{reg}/ns/vol:prod"),
                "-o",
                s(&out_dir),
            ],
        ),
        "oras pull (text)",
    );
    assert!(
        text.contains(
            "Skipped pulling layers without file name in \"org.opencontainers.image.title\""
        ),
        "{text}"
    );
    assert!(text.contains("--to-oci-layout"), "{text}");
    let config_dir = sb.path().join("oras-pull-config");
    ok(
        oras(
            &sb,
            &[
                "pull",
                "--plain-http",
                "--platform",
                "linux/amd64",
                &format!("{reg}/ns/vol:prod"),
                "-o",
                s(&config_dir),
                "--config",
                "view-config.json",
            ],
        ),
        "oras pull --platform linux/amd64 --config",
    );
    let names: Vec<String> = std::fs::read_dir(&config_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["view-config.json"]);
    let config = parse(
        &std::fs::read(config_dir.join("view-config.json")).unwrap(),
        "the view config",
    );
    assert_view_config(&config, "linux/amd64");

    // What oras points at: `oras copy --to-oci-layout`, an OCI image layout
    // with every blob of the version, its index byte-identical.
    let layout = sb.path().join("layout");
    ok(
        oras(
            &sb,
            &[
                "cp",
                "--from-plain-http",
                &format!("{reg}/ns/vol:prod"),
                "--to-oci-layout",
                &format!("{}:prod", s(&layout)),
            ],
        ),
        "oras cp --to-oci-layout",
    );
    assert_eq!(
        parse(
            &std::fs::read(layout.join("oci-layout")).unwrap(),
            "oci-layout"
        ),
        serde_json::json!({"imageLayoutVersion": "1.0.0"})
    );
    let top = parse(
        &std::fs::read(layout.join("index.json")).unwrap(),
        "index.json",
    );
    let tagged: Vec<&Value> = top["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["annotations"]["org.opencontainers.image.ref.name"] == "prod")
        .collect();
    assert_eq!(tagged.len(), 1, "{top}");
    assert_eq!(tagged[0]["digest"], v.index.as_str(), "{top}");
    assert_eq!(tagged[0]["mediaType"], INDEX, "{top}");
    assert!(
        layout_blob(&layout, &v.index) == index_bytes,
        "the layout's index differs from the registry's"
    );

    // Every manifest under the index, and every blob they reference, is
    // there with its bytes.
    for m in index["manifests"].as_array().unwrap() {
        let manifest = parse(
            &layout_blob(&layout, m["digest"].as_str().unwrap()),
            "a manifest",
        );
        layout_blob(&layout, manifest["config"]["digest"].as_str().unwrap());
        for l in manifest["layers"].as_array().unwrap() {
            layout_blob(&layout, l["digest"].as_str().unwrap());
        }
    }

    // Read as SPEC §5.7 says: the tree manifest's one layer is the tree
    // index, and each file is its chunk blobs end to end. The files come
    // out byte for byte, with their modes; directories and the symlink too.
    let trees = entries_with_role(&index, "tree");
    assert_eq!(trees.len(), 1, "{index}");
    let tree_manifest = parse(
        &layout_blob(&layout, trees[0]["digest"].as_str().unwrap()),
        "the tree manifest",
    );
    let layers = tree_manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{tree_manifest}");
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.sealvol.tree.index.v2"
    );
    let t = TreeIndex::decode(&layout_blob(&layout, layers[0]["digest"].as_str().unwrap()))
        .expect("the layout's tree index decodes");
    assert_eq!(t.version_digest().to_string(), format!("b3:{}", v.hex));
    let shard_chunks: BTreeSet<String> = entries_with_role(&index, "chunks")
        .iter()
        .flat_map(|e| {
            let shard = parse(
                &layout_blob(&layout, e["digest"].as_str().unwrap()),
                "a shard",
            );
            shard["layers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["digest"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut tree_chunks = BTreeSet::new();
    let mut rebuilt = BTreeMap::new();
    for e in t.entries() {
        let node = match &e.data {
            EntryData::Dir => Node::Dir { mode: e.mode },
            EntryData::Symlink { target } => Node::Symlink {
                target: PathBuf::from(target),
            },
            EntryData::File { size, chunks, .. } => {
                let mut bytes = Vec::new();
                for c in chunks {
                    assert_eq!(c.offset, bytes.len() as u64, "{}", e.path);
                    let chunk = layout_blob(&layout, &c.sha256.to_string());
                    assert_eq!(chunk.len(), c.length as usize, "{}", e.path);
                    bytes.extend_from_slice(&chunk);
                    tree_chunks.insert(c.sha256.to_string());
                }
                assert_eq!(bytes.len() as u64, *size, "{}", e.path);
                Node::File {
                    mode: e.mode,
                    len: *size,
                    sha256: sha256(&bytes),
                }
            }
        };
        rebuilt.insert(e.path.clone(), node);
    }
    assert_eq!(
        shard_chunks, tree_chunks,
        "the shards list exactly the tree's chunks"
    );
    match &t.get("model.safetensors").expect("the big file").data {
        EntryData::File { chunks, .. } => assert!(chunks.len() >= 2, "{chunks:?}"),
        other => panic!("model.safetensors: {other:?}"),
    }
    assert_tree(
        &tree(&src),
        &rebuilt,
        "the tree rebuilt from oras's layout differs from the source",
    );
}

/// Every manifest the version index `digest` of `repo` lists is at `to`
/// with the bytes it has at `from`, and so is every blob they reference:
/// the copy is complete, every platform's view included.
fn assert_complete_copy(from: &str, to: &str, repo: &str, digest: &str) {
    let (src, dst) = (Mirror::new(from), Mirror::new(to));
    let index = manifest_bytes(from, "ns/vol", digest);
    assert!(
        manifest_bytes(to, repo, digest) == index,
        "{to}/{repo}: the index differs"
    );
    for m in parse(&index, "the index")["manifests"].as_array().unwrap() {
        let d = m["digest"].as_str().unwrap();
        let (bytes, _) = src.manifest("ns/vol", d).expect("origin's manifest");
        let copied = dst
            .manifest(repo, d)
            .unwrap_or_else(|| panic!("{to}/{repo}: manifest {d} was not copied"));
        assert!(copied.0 == bytes, "{to}/{repo}: manifest {d} differs");
        let manifest = parse(&bytes, "a manifest");
        let blobs =
            std::iter::once(&manifest["config"]).chain(manifest["layers"].as_array().unwrap());
        for b in blobs {
            let b = b["digest"].as_str().unwrap();
            assert!(
                dst.has_blob(repo, b),
                "{to}/{repo}: blob {b} was not copied"
            );
        }
    }
}

#[test]
fn oras_and_crane_copies_between_sealvol_serve_and_docker_registry_pull_back_identical() {
    let (sb, src, origin) = sampled();
    let origin_addr = host(&origin);
    let v = push(&sb, &origin_addr, &src, &["--tag", "prod"]);
    let tag = v.tag();
    let docker = DockerRegistry::start();
    let fresh = Server::start(&sb.path().join("fresh"));
    let (docker_addr, fresh_addr) = (docker.addr(), host(&fresh));

    // sealvol serve -> distribution: oras copies the digest tag with its
    // referrers (-r; there are none here, so distribution gets no referrers
    // tag), crane every tag of the repository.
    ok(
        oras(
            &sb,
            &[
                "cp",
                "-r",
                "--from-plain-http",
                "--to-plain-http",
                &format!("{origin_addr}/ns/vol:{tag}"),
                &format!("{docker_addr}/oras/vol:{tag}"),
            ],
        ),
        "oras cp sealvol serve -> docker-registry",
    );
    ok(
        crane(
            &sb,
            &[
                "copy",
                "--insecure",
                "--all-tags",
                &format!("{origin_addr}/ns/vol"),
                &format!("{docker_addr}/crane/vol"),
            ],
        ),
        "crane copy --all-tags sealvol serve -> docker-registry",
    );
    // distribution -> a fresh sealvol serve: oras the digest tag, crane the
    // user's tag alone; sealvol serve knows versions, so it adds the digest
    // tag and head itself.
    ok(
        oras(
            &sb,
            &[
                "cp",
                "-r",
                "--from-plain-http",
                "--to-plain-http",
                &format!("{docker_addr}/oras/vol:{tag}"),
                &format!("{fresh_addr}/oras/vol:{tag}"),
            ],
        ),
        "oras cp docker-registry -> sealvol serve",
    );
    ok(
        crane(
            &sb,
            &[
                "copy",
                "--insecure",
                &format!("{docker_addr}/crane/vol:prod"),
                &format!("{fresh_addr}/crane/vol:prod"),
            ],
        ),
        "crane copy docker-registry -> sealvol serve",
    );

    let tags = |addr: &str, repo: &str| {
        lines(&ok(
            crane(&sb, &["ls", "--insecure", &format!("{addr}/{repo}")]),
            "crane ls",
        ))
    };
    assert_eq!(tags(&docker_addr, "oras/vol"), set(&[&tag]));
    assert_eq!(
        tags(&docker_addr, "crane/vol"),
        set(&[&tag, "head", "prod"])
    );
    assert_eq!(tags(&fresh_addr, "oras/vol"), set(&[&tag, "head"]));
    assert_eq!(tags(&fresh_addr, "crane/vol"), set(&[&tag, "head", "prod"]));

    for (addr, repo) in [
        (&docker_addr, "oras/vol"),
        (&docker_addr, "crane/vol"),
        (&fresh_addr, "oras/vol"),
        (&fresh_addr, "crane/vol"),
    ] {
        // Neither tool rewrites the index (skopeo 1.9 does): the copy has
        // the same index digest, every manifest and every blob.
        assert_complete_copy(&origin_addr, addr, repo, &v.index);
        let copy = format!("{addr}/{repo}");
        assert_eq!(
            ok(
                sb.sealvol(
                    &closed_addr(),
                    &["stat", &format!("{copy}@b3:{}", v.hex), "--oci-ref"]
                ),
                "stat --oci-ref of a copy"
            ),
            format!("{copy}@{}", v.index)
        );
        // And it pulls back by a digest prefix, byte for byte.
        let dest = sb.path().join(format!(
            "pulled-{}-{}",
            addr.replace(':', "_"),
            repo.replace('/', "_")
        ));
        let cache = tempfile::tempdir().unwrap();
        let pulled = json(
            sb.sealvol(
                &closed_addr(),
                &[
                    "pull",
                    &format!("{copy}@b3:{}", &v.hex[..16]),
                    s(&dest),
                    "--cache-dir",
                    s(cache.path()),
                    "--output",
                    "json",
                ],
            ),
            &format!("sealvol pull of the copy at {copy}"),
        );
        assert_eq!(
            pulled["digest"],
            format!("b3:{}", v.hex),
            "{copy}: {pulled}"
        );
        assert_eq!(pulled["chunks_from_cache"], 0, "{copy}: {pulled}");
        assert_same_tree(&src, &dest);
    }
}

#[test]
fn oras_discover_lists_a_referrer_of_a_version_on_sealvol_serve_and_on_its_copies() {
    let (sb, src, serve) = sampled();
    let reg = host(&serve);
    let v = push(&sb, &reg, &src, &[]);
    let tag = v.tag();

    // sealvol attaches no referrer of its own: a version has none until a
    // user attaches one.
    let referrers_of = |addr: &str, repo: &str| -> Value {
        let r = reqwest::blocking::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(format!("http://{addr}/v2/{repo}/referrers/{}", v.index))
            .send()
            .unwrap();
        assert_eq!(r.status(), 200, "{addr}: referrers API");
        assert_eq!(r.headers()["content-type"], INDEX);
        r.json().unwrap()
    };
    assert_eq!(
        referrers_of(&reg, "ns/vol")["manifests"],
        serde_json::json!([])
    );

    // An SBOM attached with oras to the version's index, by digest, as
    // `sealvol stat --oci-ref` names it.
    let sbom_dir = sb.path().join("sbom");
    std::fs::create_dir_all(&sbom_dir).unwrap();
    let sbom = noise(700, 31);
    std::fs::write(sbom_dir.join("sbom.spdx.json"), &sbom).unwrap();
    let mut attach = sb.command(sealvol_tests::go_tool("oras"));
    attach.current_dir(&sbom_dir).args([
        "attach",
        "--plain-http",
        "--artifact-type",
        SBOM_TYPE,
        "--annotation",
        "org.example.tool=sealvol-tests",
        "--format",
        "json",
        &format!("{reg}/ns/vol@{}", v.index),
        "sbom.spdx.json:application/spdx+json",
    ]);
    let attached = parse(
        &raw(attach.output().expect("run oras"), "oras attach"),
        "oras attach --format json",
    );
    let referrer = attached["digest"].as_str().unwrap().to_string();
    assert_eq!(attached["artifactType"], SBOM_TYPE, "{attached}");
    let manifest = parse(&manifest_bytes(&reg, "ns/vol", &referrer), "the referrer");
    assert_eq!(
        manifest["subject"]["digest"],
        v.index.as_str(),
        "{manifest}"
    );
    assert_eq!(manifest["subject"]["mediaType"], INDEX, "{manifest}");

    // sealvol serve has the referrers API: oras adds no fallback tag.
    assert_eq!(
        lines(&ok(
            oras(
                &sb,
                &["repo", "tags", "--plain-http", &format!("{reg}/ns/vol")]
            ),
            "oras repo tags"
        )),
        set(&[&tag, "head"])
    );

    // `oras discover` and the referrers API agree: one referrer, the
    // descriptor oras attached.
    let discover = |addr: &str, repo: &str, reference: &str, extra: &[&str]| -> Value {
        let target = format!("{addr}/{repo}{reference}");
        let mut args = vec!["discover", "--plain-http", "--format", "json", &target];
        args.extend_from_slice(extra);
        parse(
            &raw(oras(&sb, &args), "oras discover"),
            "oras discover --format json",
        )
    };
    let api = referrers_of(&reg, "ns/vol");
    let listed = api["manifests"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{api}");
    let want = &listed[0];
    assert_eq!(want["digest"], referrer.as_str(), "{api}");
    assert_eq!(want["mediaType"], MANIFEST, "{api}");
    assert_eq!(want["artifactType"], SBOM_TYPE, "{api}");
    assert_eq!(
        want["annotations"]["org.example.tool"], "sealvol-tests",
        "{api}"
    );
    assert_eq!(want["size"], attached["size"], "{api}");
    let check = |found: &Value, addr: &str| {
        assert_eq!(found["digest"], v.index.as_str(), "{found}");
        let refs = found["referrers"].as_array().unwrap();
        assert_eq!(refs.len(), 1, "{addr}: {found}");
        for k in ["digest", "mediaType", "artifactType", "size", "annotations"] {
            assert_eq!(refs[0][k], want[k], "{addr}: {k}: {found}");
        }
    };
    check(&discover(&reg, "ns/vol", ":head", &[]), &reg);
    check(
        &discover(
            &reg,
            "ns/vol",
            &format!("@{}", v.index),
            &["--artifact-type", SBOM_TYPE],
        ),
        &reg,
    );
    let none = discover(
        &reg,
        "ns/vol",
        ":head",
        &["--artifact-type", "application/x-other"],
    );
    assert_eq!(none["referrers"], serde_json::json!([]), "{none}");

    // `oras cp -r` takes the referrer along. distribution 2.8 has no
    // referrers API, so oras keeps the list in the fallback tag
    // `sha256-<index hex>` there; discover finds it all the same, and the
    // extra tag does not disturb a `b3:` prefix.
    let docker = DockerRegistry::start();
    let fresh = Server::start(&sb.path().join("fresh"));
    ok(
        oras(
            &sb,
            &[
                "cp",
                "-r",
                "--from-plain-http",
                "--to-plain-http",
                &format!("{reg}/ns/vol:{tag}"),
                &format!("{}/ns/vol:{tag}", docker.addr()),
            ],
        ),
        "oras cp -r to docker-registry",
    );
    ok(
        oras(
            &sb,
            &[
                "cp",
                "-r",
                "--from-plain-http",
                "--to-plain-http",
                &format!("{}/ns/vol:{tag}", docker.addr()),
                &format!("{}/ns/vol:{tag}", host(&fresh)),
            ],
        ),
        "oras cp -r docker-registry -> a fresh sealvol serve",
    );
    let fallback = format!("sha256-{}", v.index.strip_prefix("sha256:").unwrap());
    assert_eq!(
        lines(&ok(
            crane(
                &sb,
                &["ls", "--insecure", &format!("{}/ns/vol", docker.addr())]
            ),
            "crane ls"
        )),
        set(&[&tag, &fallback])
    );
    check(
        &discover(&docker.addr(), "ns/vol", &format!(":{tag}"), &[]),
        "docker",
    );
    check(
        &discover(&host(&fresh), "ns/vol", &format!(":{tag}"), &[]),
        "fresh",
    );
    assert_eq!(
        referrers_of(&host(&fresh), "ns/vol")["manifests"],
        api["manifests"],
        "the fresh sealvol serve's referrers API"
    );
    assert_eq!(
        lines(&ok(
            crane(
                &sb,
                &["ls", "--insecure", &format!("{}/ns/vol", host(&fresh))]
            ),
            "crane ls"
        )),
        set(&[&tag, "head"])
    );
    let cache = tempfile::tempdir().unwrap();
    let dest = sb.path().join("pulled");
    let pulled = json(
        sb.sealvol(
            &closed_addr(),
            &[
                "pull",
                &format!("{}/ns/vol@b3:{}", docker.addr(), &v.hex[..12]),
                s(&dest),
                "--cache-dir",
                s(cache.path()),
                "--output",
                "json",
            ],
        ),
        "sealvol pull beside a referrers tag",
    );
    assert_eq!(pulled["digest"], format!("b3:{}", v.hex), "{pulled}");
    assert_same_tree(&src, &dest);

    // The referrer is an ordinary oras artifact: `oras pull` gives its file.
    let out_dir = sb.path().join("sbom-pulled");
    ok(
        oras(
            &sb,
            &[
                "pull",
                "--plain-http",
                &format!("{}/ns/vol@{referrer}", docker.addr()),
                "-o",
                s(&out_dir),
            ],
        ),
        "oras pull of the referrer",
    );
    assert!(
        std::fs::read(out_dir.join("sbom.spdx.json")).unwrap() == sbom,
        "the SBOM came back with other bytes"
    );
}

#[test]
fn oras_and_crane_show_the_layout_of_spec_5() {
    let (sb, src, serve) = sampled();
    let docker = DockerRegistry::start();
    let files = tree(&src)
        .values()
        .filter(|n| matches!(n, Node::File { .. }))
        .count();
    let size: u64 = tree(&src)
        .values()
        .map(|n| match n {
            Node::File { len, .. } => *len,
            _ => 0,
        })
        .sum();

    for reg in [host(&serve), docker.addr()] {
        let v = push(&sb, &reg, &src, &["--tag", "prod"]);
        let at = |reference: &str| format!("{reg}/ns/vol{reference}");
        let index_bytes = manifest_bytes(&reg, "ns/vol", "prod");
        assert_eq!(sha256(&index_bytes), v.index);

        // The index, byte for byte as the registry serves it, from both.
        let fetched = raw(
            oras(&sb, &["manifest", "fetch", "--plain-http", &at(":prod")]),
            "oras manifest fetch",
        );
        assert!(
            fetched == index_bytes,
            "{reg}: oras manifest fetch: other bytes"
        );
        let fetched = raw(
            crane(&sb, &["manifest", "--insecure", &at(":prod")]),
            "crane manifest",
        );
        assert!(fetched == index_bytes, "{reg}: crane manifest: other bytes");
        let descriptor = parse(
            &raw(
                oras(
                    &sb,
                    &[
                        "manifest",
                        "fetch",
                        "--plain-http",
                        "--descriptor",
                        &at(":prod"),
                    ],
                ),
                "oras manifest fetch --descriptor",
            ),
            "a descriptor",
        );
        assert_eq!(descriptor["mediaType"], INDEX, "{reg}: {descriptor}");
        assert_eq!(
            descriptor["digest"],
            v.index.as_str(),
            "{reg}: {descriptor}"
        );
        assert_eq!(descriptor["size"], index_bytes.len(), "{reg}: {descriptor}");
        for (tool, out) in [
            (
                "crane digest",
                crane(&sb, &["digest", "--insecure", &at(":prod")]),
            ),
            (
                "oras resolve",
                oras(&sb, &["resolve", "--plain-http", &at(":prod")]),
            ),
        ] {
            assert_eq!(ok(out, tool), v.index, "{reg}: {tool}");
        }

        // §5.1, §5.5, §5.6: an index of type version.v1 with its
        // annotations; view, view, tree, chunks, in that order.
        let index = parse(&index_bytes, "the index");
        assert_eq!(index["schemaVersion"], 2, "{index}");
        assert_eq!(index["mediaType"], INDEX, "{index}");
        assert_eq!(index["artifactType"], VERSION_TYPE, "{index}");
        let notes = &index["annotations"];
        assert_eq!(notes["dev.sealvol.version"], format!("b3:{}", v.hex));
        assert_eq!(notes["dev.sealvol.files"], files.to_string(), "{notes}");
        assert_eq!(notes["dev.sealvol.size"], size.to_string(), "{notes}");
        assert!(
            notes["org.opencontainers.image.created"].is_string(),
            "{notes}"
        );
        let manifests = index["manifests"].as_array().unwrap();
        let roles: Vec<&str> = manifests
            .iter()
            .map(|m| m["annotations"]["dev.sealvol.role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["view", "view", "tree", "chunks"], "{index}");
        let platforms: Vec<String> = manifests
            .iter()
            .map(|m| {
                format!("{}/{}", m["platform"]["os"], m["platform"]["architecture"])
                    .replace('"', "")
            })
            .collect();
        assert_eq!(
            platforms,
            [
                "linux/amd64",
                "linux/arm64",
                "unknown/unknown",
                "unknown/unknown"
            ]
        );
        for m in manifests {
            assert_eq!(m["mediaType"], MANIFEST, "{m}");
        }
        assert_eq!(
            manifests[2]["artifactType"],
            "application/vnd.sealvol.tree.v1"
        );
        assert_eq!(
            manifests[3]["artifactType"],
            "application/vnd.sealvol.chunks.v1"
        );

        // The tree manifest: the empty config and the tree index.
        let tree_manifest = parse(
            &raw(
                oras(
                    &sb,
                    &[
                        "manifest",
                        "fetch",
                        "--plain-http",
                        &at(&format!("@{}", manifests[2]["digest"].as_str().unwrap())),
                    ],
                ),
                "oras manifest fetch of the tree manifest",
            ),
            "the tree manifest",
        );
        assert_eq!(
            tree_manifest["artifactType"], "application/vnd.sealvol.tree.v1",
            "{tree_manifest}"
        );
        assert_eq!(
            tree_manifest["config"],
            serde_json::json!({
                "mediaType": "application/vnd.oci.empty.v1+json",
                "digest": sha256(b"{}"),
                "size": 2,
            })
        );
        let tree_layers = tree_manifest["layers"].as_array().unwrap();
        assert_eq!(tree_layers.len(), 1, "{tree_manifest}");
        assert_eq!(
            tree_layers[0]["mediaType"], "application/vnd.sealvol.tree.index.v2",
            "{tree_manifest}"
        );
        let tree_digest = tree_layers[0]["digest"].as_str().unwrap().to_string();
        assert_eq!(
            tree_manifest["annotations"]["dev.sealvol.version"],
            format!("b3:{}", v.hex)
        );

        // The chunk shard: chunk blobs, the empty config.
        let shard = parse(
            &raw(
                crane(
                    &sb,
                    &[
                        "manifest",
                        "--insecure",
                        &at(&format!("@{}", manifests[3]["digest"].as_str().unwrap())),
                    ],
                ),
                "crane manifest of the shard",
            ),
            "the shard",
        );
        assert_eq!(shard["artifactType"], "application/vnd.sealvol.chunks.v1");
        assert_eq!(
            shard["config"]["mediaType"],
            "application/vnd.oci.empty.v1+json"
        );
        for l in shard["layers"].as_array().unwrap() {
            assert_eq!(l["mediaType"], "application/vnd.sealvol.chunk.v1", "{l}");
        }

        // Each view is an image for its platform: one gzip layer carrying
        // the version and tree digests (twice, §5.4), a config whose one
        // diff id is that layer's tar.
        for (i, platform) in ["linux/amd64", "linux/arm64"].into_iter().enumerate() {
            let view_bytes = raw(
                oras(
                    &sb,
                    &[
                        "manifest",
                        "fetch",
                        "--plain-http",
                        "--platform",
                        platform,
                        &at(":prod"),
                    ],
                ),
                "oras manifest fetch --platform",
            );
            assert_eq!(
                sha256(&view_bytes),
                manifests[i]["digest"].as_str().unwrap()
            );
            assert_eq!(
                ok(
                    crane(
                        &sb,
                        &["digest", "--insecure", "--platform", platform, &at(":prod")]
                    ),
                    "crane digest --platform"
                ),
                manifests[i]["digest"].as_str().unwrap(),
                "{reg} {platform}"
            );
            let view = parse(&view_bytes, "a view manifest");
            assert_eq!(view["mediaType"], MANIFEST, "{view}");
            assert_eq!(
                view["config"]["mediaType"],
                "application/vnd.oci.image.config.v1+json"
            );
            let layers = view["layers"].as_array().unwrap();
            assert_eq!(layers.len(), 1, "{view}");
            assert_eq!(
                layers[0]["mediaType"],
                "application/vnd.oci.image.layer.v1.tar+gzip"
            );
            let version = format!("b3:{}", v.hex);
            for (k, want) in [
                ("dev.sealvol.version", &version),
                ("dev.sealvol.tree", &tree_digest),
                ("containerd.io/snapshot/sealvol.version", &version),
                ("containerd.io/snapshot/sealvol.tree", &tree_digest),
            ] {
                assert_eq!(layers[0]["annotations"][k], want.as_str(), "{k}: {view}");
            }
            let config = parse(
                &raw(
                    crane(
                        &sb,
                        &["config", "--insecure", "--platform", platform, &at(":prod")],
                    ),
                    "crane config",
                ),
                "a view config",
            );
            assert_view_config(&config, platform);
        }

        // What `crane export` makes of a view: the pointer file alone.
        let exported = sb.path().join("export.tar");
        ok(
            crane(
                &sb,
                &[
                    "export",
                    "--insecure",
                    "--platform",
                    "linux/amd64",
                    &at(":prod"),
                    s(&exported),
                ],
            ),
            "crane export",
        );
        let mut archive = tar::Archive::new(std::fs::File::open(&exported).unwrap());
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_str().unwrap().to_string();
            let header = entry.header();
            let (mode, uid, mtime) = (
                header.mode().unwrap(),
                header.uid().unwrap(),
                header.mtime().unwrap(),
            );
            let mut body = String::new();
            entry.read_to_string(&mut body).unwrap();
            seen.push((path, mode, uid, mtime, body));
        }
        let pointer = format!(
            "{{\"version\":\"b3:{}\",\"tree\":\"{tree_digest}\"}}\n",
            v.hex
        );
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].0.trim_end_matches('/'), ".sealvol", "{seen:?}");
        assert_eq!(
            (
                &seen[1].0[..],
                seen[1].1,
                seen[1].2,
                seen[1].3,
                &seen[1].4[..]
            ),
            (".sealvol/version.json", 0o444, 0, 0, &pointer[..]),
            "{seen:?}"
        );

        // Tags (§5.3: the digest tag beside head and the user's) and the
        // catalog.
        let want = set(&[&v.tag(), "head", "prod"]);
        assert_eq!(
            lines(&ok(crane(&sb, &["ls", "--insecure", &at("")]), "crane ls")),
            want,
            "{reg}"
        );
        assert_eq!(
            lines(&ok(
                oras(&sb, &["repo", "tags", "--plain-http", &at("")]),
                "oras repo tags"
            )),
            want,
            "{reg}"
        );
        assert!(
            lines(&ok(
                crane(&sb, &["catalog", "--insecure", &reg]),
                "crane catalog"
            ))
            .contains("ns/vol"),
            "{reg}"
        );
        assert!(
            lines(&ok(
                oras(&sb, &["repo", "ls", "--plain-http", &reg]),
                "oras repo ls"
            ))
            .contains("ns/vol"),
            "{reg}"
        );
    }
}
