//! The trust chain (SPEC.md §2.5, §2.6) as a user meets it: a pinned
//! `@b3:` digest means those bytes or an error, whatever a mirror serves.
//!
//! A forging mirror ([`Mirror`]) rewrites a version's tree index with plain
//! distribution requests and publishes it under the version's own digest
//! tag: first a tree that stays valid (file hashes and pieces kept, one
//! chunk swapped for another file's chunk of the same length), whose lie
//! only the per-piece check can catch; then a tree whose file hash no
//! longer matches, which must be refused before anything is served. Then
//! `sealvol verify` against a registry and a directory, and the format 1
//! versions of the previous release: read with a warning, refused under
//! `--require-verified`, and upgraded in place (same digest, tags,
//! sequence and head) by `sealvol upgrade` or by pushing the files again.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use sealvol_spec::chain::PIECE;
use sealvol_spec::oci::{self, MT_TREE_BLOB, MT_TREE_BLOB_V1};
use sealvol_spec::{ChunkRef, EntryData, TreeFormat, TreeIndex};
use sealvol_tests::forge::{chunks_of, encode_v1_from, Mirror};
use sealvol_tests::fuse::{
    assert_eio, is_mounted, mountpoint, pread, read, read_until_error, Mounted,
};
use sealvol_tests::{
    fails, host, json, noise, ok, push_hex, s, stderr, tree, write, DockerRegistry, Node, Sandbox,
    Server,
};
use serde_json::Value;

const MIB: usize = PIECE as usize;
/// Four pieces, the last one short.
const BIG: usize = 3 * MIB + 4321;

/// `big1.bin`'s bytes: several pieces.
fn big1() -> Vec<u8> {
    noise(BIG, 11)
}

/// `big2.bin`: `big1.bin` with its first MiB replaced. FastCDC (SPEC.md
/// §4) looks at no byte before `min` (1 MiB) of a chunk, so both files cut
/// at the same offsets: equal chunk lengths, the first chunks different
/// blobs, the others the same.
fn big2() -> Vec<u8> {
    let mut b = big1();
    b[..MIB].copy_from_slice(&noise(MIB, 12));
    b
}

fn forge_sample(root: &Path) {
    write(&root.join("big1.bin"), &big1(), 0o644);
    write(&root.join("big2.bin"), &big2(), 0o644);
    write(&root.join("config.json"), b"{\"hidden_size\": 64}\n", 0o644);
    write(&root.join("notes/readme.txt"), &noise(5000, 13), 0o600);
}

/// A cache folder no command has used yet: every chunk a command reads
/// comes from the registry.
fn fresh_cache(sb: &Sandbox, name: &str) -> String {
    let p = sb.path().join("caches").join(name);
    std::fs::create_dir_all(&p).unwrap();
    s(&p).to_string()
}

/// Exit code and stdout as JSON of a command that prints JSON whether or
/// not it succeeds (`verify`).
fn json_exit(out: Output, what: &str) -> (Option<i32>, Value) {
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let v = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "{what}: not JSON ({e}): {text:?}; exit {:?}, stderr: {}",
            out.status,
            stderr(&out)
        )
    });
    assert!(
        !stderr(&out).contains("panicked"),
        "{what}: {}",
        stderr(&out)
    );
    (out.status.code(), v)
}

/// The files below `dir` (none if it does not exist), by relative path.
fn files_in(dir: &Path) -> BTreeMap<String, Node> {
    if !dir.exists() {
        return BTreeMap::new();
    }
    tree(dir)
        .into_iter()
        .filter(|(_, n)| !matches!(n, Node::Dir { .. }))
        .collect()
}

/// Asserts that whatever a failed pull left in `dir` is a finished, right
/// file of `src` (no temporary files, nothing wrong), and nothing at
/// `absent`.
fn assert_pull_left_only_good_files(src: &Path, dir: &Path, absent: &str) {
    let want = tree(src);
    for (path, node) in files_in(dir) {
        assert_ne!(path, absent, "the failed pull left {absent} in its folder");
        assert_eq!(
            want.get(&path),
            Some(&node),
            "the failed pull left {path} in its folder, not a file of the source as it is"
        );
    }
}

/// The first offset where `a` and `b` differ.
fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()))
}

#[test]
fn a_mirror_that_swaps_a_chunk_gets_eio_and_errors_never_wrong_bytes() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    forge_sample(&src);
    let docker = DockerRegistry::start();
    let reg = docker.addr();
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let pinned = format!("bdn:ns/vol@b3:{hex}");
    let mirror = Mirror::new(&reg);

    let before = mirror.fetch("ns/vol", &hex);
    assert_eq!(before.tree_media_type, MT_TREE_BLOB);
    let (c1, c2) = (
        chunks_of(&before.tree, "big1.bin"),
        chunks_of(&before.tree, "big2.bin"),
    );
    let lengths = |c: &[ChunkRef]| c.iter().map(|c| c.length).collect::<Vec<_>>();
    assert_eq!(lengths(&c1), lengths(&c2), "big1 and big2 cut alike");
    assert_ne!(c1[0].sha256, c2[0].sha256, "their first chunks differ");
    assert!(c1[0].length as usize >= MIB);

    // (a) big1.bin's first chunk is now big2.bin's: a blob the registry
    // has, of the right length and sha256, under big1's own hash and
    // pieces. The tree is valid and its version digest is the pinned one.
    let swapped = c2[0].sha256;
    let built = mirror.forge("ns/vol", &hex, |entries| {
        for e in entries.iter_mut().filter(|e| e.path == "big1.bin") {
            if let EntryData::File { chunks, .. } = &mut e.data {
                chunks[0].sha256 = swapped;
            }
        }
    });
    assert_eq!(built.digest.hex(), hex);
    let now = mirror.fetch("ns/vol", &hex);
    assert_ne!(
        now.index_digest, before.index_digest,
        "the mirror serves the forged index"
    );
    assert_eq!(chunks_of(&now.tree, "big1.bin")[0].sha256, swapped);

    let (good, other) = (big1(), big2());
    let diff_at = first_difference(&good, &other);
    assert!(diff_at < MIB);

    // The mount: the forged piece gives EIO, every time; what it serves is
    // right; other files read correctly.
    let mnt = mountpoint(&sb, "mnt");
    let cache = fresh_cache(&sb, "mount");
    let mut m = Mounted::start(
        &sb,
        &reg,
        &["mount", &pinned, s(&mnt), "--cache-dir", &cache],
        &[&mnt],
    );
    let path = mnt.join("big1.bin");
    for offset in [0, MIB as u64 / 2, 0] {
        assert_eio(
            pread(&path, offset, 4096),
            &format!("a read of big1.bin at {offset}, in the forged piece"),
        );
    }
    // A piece whose bytes verify may be served; if it is, they are right.
    if let Ok(b) = pread(&path, 2 * PIECE + 10, 4096) {
        assert_eq!(
            b,
            good[2 * MIB + 10..2 * MIB + 10 + 4096],
            "wrong bytes served"
        );
    }
    let (returned, err) = read_until_error(&path);
    let err = err.expect("reading big1.bin through the forged piece succeeded");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(
        returned.len() <= diff_at && returned == good[..returned.len()],
        "{} bytes served from the forged chunk",
        returned.len()
    );
    assert_eq!(read(&mnt.join("big2.bin")).unwrap(), other);
    assert_eq!(
        read(&mnt.join("config.json")).unwrap(),
        b"{\"hidden_size\": 64}\n"
    );
    assert_eq!(
        read(&mnt.join("notes/readme.txt")).unwrap(),
        noise(5000, 13)
    );
    m.stop();

    // cat: exit 1, one line naming the file, no wrong byte on stdout.
    let out = sb.sealvol(
        &reg,
        &[
            "cat",
            &format!("{pinned}/big1.bin"),
            "--cache-dir",
            &fresh_cache(&sb, "cat"),
        ],
    );
    let stdout = out.stdout.clone();
    let line = fails(out, "cat of the forged file");
    assert!(line.contains("big1.bin"), "{line}");
    assert!(
        stdout.len() <= diff_at && stdout == good[..stdout.len()],
        "cat wrote {} bytes, some of the forged chunk's",
        stdout.len()
    );
    let out = sb.sealvol(
        &reg,
        &[
            "cat",
            &format!("{pinned}/big2.bin"),
            "--cache-dir",
            &fresh_cache(&sb, "cat2"),
        ],
    );
    assert!(out.status.success(), "cat big2.bin: {}", stderr(&out));
    assert!(out.stdout == other, "cat big2.bin: wrong bytes");

    // pull: exit 1, no big1.bin and no temporary file left.
    let dest = sb.path().join("pulled");
    let line = fails(
        sb.sealvol(
            &reg,
            &[
                "pull",
                &pinned,
                s(&dest),
                "--cache-dir",
                &fresh_cache(&sb, "pull"),
            ],
        ),
        "pull of the forged version",
    );
    assert!(line.contains("big1.bin"), "{line}");
    assert_pull_left_only_good_files(&src, &dest, "big1.bin");

    // verify --deep: exit 1, big1.bin corrupt.
    let (code, v) = json_exit(
        sb.sealvol(
            &reg,
            &[
                "verify",
                &pinned,
                "--deep",
                "--output",
                "json",
                "--cache-dir",
                &fresh_cache(&sb, "verify"),
            ],
        ),
        "verify --deep of the forged version",
    );
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["deep"], true, "{v}");
    let corrupt = v["corrupt"].as_array().expect("corrupt list");
    assert!(
        corrupt.iter().any(|p| p["path"] == "big1.bin"),
        "verify --deep does not name big1.bin: {v}"
    );
    assert!(
        corrupt.iter().all(|p| p["path"] == "big1.bin"),
        "verify --deep blames other files: {v}"
    );
}

/// `mount`, `cat` (of any file) and `pull` of `reference` each exit 1
/// before serving a byte.
fn assert_refused_before_serving(sb: &Sandbox, reg: &str, reference: &str, what: &str) {
    let mnt = mountpoint(sb, &format!("mnt-{what}"));
    match Mounted::try_start(
        sb,
        reg,
        &[
            "mount",
            reference,
            s(&mnt),
            "--cache-dir",
            &fresh_cache(sb, &format!("mount-{what}")),
        ],
        &[&mnt],
    ) {
        Ok(mut m) => {
            m.stop();
            panic!("{what}: {reference} was mounted");
        }
        Err(f) => {
            assert_eq!(
                f.status.and_then(|s| s.code()),
                Some(1),
                "{what}: mount: {f:?}"
            );
            assert!(
                f.stderr.starts_with("sealvol: ")
                    && f.stderr.lines().count() == 1
                    && !f.stderr.contains("panicked"),
                "{what}: mount: one error line expected: {}",
                f.stderr
            );
        }
    }
    assert!(!is_mounted(&mnt), "{what}: left a mount");

    for file in ["big1.bin", "config.json"] {
        let out = sb.sealvol(
            reg,
            &[
                "cat",
                &format!("{reference}/{file}"),
                "--cache-dir",
                &fresh_cache(sb, &format!("cat-{what}-{file}")),
            ],
        );
        let written = out.stdout.len();
        fails(out, &format!("{what}: cat {file}"));
        assert_eq!(written, 0, "{what}: cat {file} wrote bytes");
    }

    let dest = sb.path().join(format!("pulled-{what}"));
    fails(
        sb.sealvol(
            reg,
            &[
                "pull",
                reference,
                s(&dest),
                "--cache-dir",
                &fresh_cache(sb, &format!("pull-{what}")),
            ],
        ),
        &format!("{what}: pull"),
    );
    let left = files_in(&dest);
    assert!(left.is_empty(), "{what}: pull wrote {:?}", left.keys());
}

#[test]
fn a_mirror_that_changes_a_file_hash_is_refused_before_anything_is_served() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    forge_sample(&src);
    let docker = DockerRegistry::start();
    let reg = docker.addr();
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let pinned = format!("bdn:ns/vol@b3:{hex}");
    let mirror = Mirror::new(&reg);
    let original = mirror.fetch("ns/vol", &hex);
    let EntryData::File {
        blake3: other_hash,
        pieces: other_pieces,
        ..
    } = original.tree.get("big2.bin").unwrap().data.clone()
    else {
        panic!("big2.bin is a file")
    };

    // (b) big1.bin claims another hash, its pieces kept: the chain no
    // longer merges, and the tree is not the pinned version.
    let changed = other_hash;
    let built = mirror.forge_raw("ns/vol", &hex, |entries| {
        for e in entries.iter_mut().filter(|e| e.path == "big1.bin") {
            if let EntryData::File { blake3, .. } = &mut e.data {
                *blake3 = changed;
            }
        }
    });
    let forged_blob = &built.blobs[0].bytes;
    assert!(
        TreeIndex::decode(forged_blob).is_err(),
        "the forged tree should fail the chain check"
    );
    assert_eq!(
        mirror.manifest_digest("ns/vol", &format!("b3-{hex}")),
        Some(built.index.digest().to_string()),
        "the mirror serves the forged index"
    );
    assert_refused_before_serving(&sb, &reg, &pinned, "hash");

    // The same with the other file's pieces too: a valid tree, but of
    // another version than the one the index and the ref pin.
    let built = mirror.forge_raw_on("ns/vol", &original, |entries| {
        for e in entries.iter_mut().filter(|e| e.path == "big1.bin") {
            if let EntryData::File { blake3, pieces, .. } = &mut e.data {
                *blake3 = other_hash;
                *pieces = other_pieces.clone();
            }
        }
    });
    let decoded = TreeIndex::decode(&built.blobs[0].bytes).expect("a valid tree");
    assert_ne!(decoded.version_digest().hex(), hex);
    assert_refused_before_serving(&sb, &reg, &pinned, "pieces");
    // Unpinned, the tree still disagrees with its index's annotation.
    let out = sb.sealvol(&reg, &["cat", "bdn:ns/vol/config.json"]);
    let written = out.stdout.len();
    fails(out, "cat through head of the forged version");
    assert_eq!(written, 0);

    // That other version laid out whole, consistent with itself, under the
    // pinned digest's tag: its index names another digest than the ref.
    let built = mirror.forge("ns/vol", &hex, |_| {});
    assert_ne!(built.digest.hex(), hex);
    assert_eq!(
        mirror.manifest_digest("ns/vol", &format!("b3-{hex}")),
        Some(built.index.digest().to_string())
    );
    assert_refused_before_serving(&sb, &reg, &pinned, "retagged");
}

fn verify_sample(root: &Path) {
    write(&root.join("a.txt"), &noise(5000, 21), 0o644);
    write(&root.join("b.bin"), &noise(2 * MIB + 999, 22), 0o644);
    write(&root.join("nested/c.txt"), b"see\n", 0o644);
    write(&root.join("d.json"), b"{}\n", 0o644);
}

#[test]
fn verify_checks_a_registry_copy_and_a_directory() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    verify_sample(&src);
    let docker = DockerRegistry::start();
    let reg = docker.addr();
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/vol", &[]);
    let pinned = format!("bdn:ns/vol@b3:{hex}");
    let total = (5000 + 2 * MIB + 999 + 4 + 3) as u64;

    let v = json(
        sb.sealvol(&reg, &["verify", &pinned, "--output", "json"]),
        "verify",
    );
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["verifiable"], true, "{v}");
    assert_eq!(v["deep"], false, "{v}");
    assert_eq!(v["missing"], serde_json::json!([]), "{v}");
    assert_eq!(v["corrupt"], serde_json::json!([]), "{v}");
    assert!(v["chunks"].as_u64().unwrap() >= 4, "{v}");
    let v = json(
        sb.sealvol(
            &reg,
            &[
                "verify",
                &pinned,
                "--deep",
                "--output",
                "json",
                "--cache-dir",
                &fresh_cache(&sb, "deep"),
            ],
        ),
        "verify --deep",
    );
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["deep"], true, "{v}");
    assert_eq!(v["bytes_checked"], total, "{v}");

    // A directory against the version, and against its bare digest.
    let v = json(
        sb.sealvol(&reg, &["verify", s(&src), &pinned, "--output", "json"]),
        "verify DIR REF",
    );
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["differences"], serde_json::json!([]), "{v}");
    let v = json(
        sb.sealvol(
            &reg,
            &[
                "verify",
                s(&src),
                "--digest",
                &format!("b3:{hex}"),
                "--output",
                "json",
            ],
        ),
        "verify DIR --digest",
    );
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["actual"], format!("b3:{hex}"), "{v}");
    let other = format!("b3:{}", "0".repeat(64));
    let (code, v) = json_exit(
        sb.sealvol(
            &reg,
            &["verify", s(&src), "--digest", &other, "--output", "json"],
        ),
        "verify DIR --digest of another version",
    );
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["actual"], format!("b3:{hex}"), "{v}");

    // One file changed, one added, one removed: each named, exit 1.
    let changed = sb.path().join("changed");
    verify_sample(&changed);
    write(&changed.join("a.txt"), &noise(5001, 99), 0o644);
    write(&changed.join("extra.txt"), b"new\n", 0o644);
    std::fs::remove_file(changed.join("nested/c.txt")).unwrap();
    let (code, v) = json_exit(
        sb.sealvol(&reg, &["verify", s(&changed), &pinned, "--output", "json"]),
        "verify DIR REF of a changed directory",
    );
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["ok"], false, "{v}");
    let mut diffs: Vec<(String, String)> = v["differences"]
        .as_array()
        .expect("differences")
        .iter()
        .map(|d| {
            (
                d["path"].as_str().unwrap().to_string(),
                d["what"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    diffs.sort();
    assert_eq!(
        diffs,
        [
            ("a.txt".to_string(), "changed".to_string()),
            ("extra.txt".to_string(), "extra".to_string()),
            ("nested/c.txt".to_string(), "missing".to_string()),
        ],
        "{v}"
    );
    let (code, v) = json_exit(
        sb.sealvol(
            &reg,
            &[
                "verify",
                s(&changed),
                "--digest",
                &format!("b3:{hex}"),
                "--output",
                "json",
            ],
        ),
        "verify DIR --digest of a changed directory",
    );
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["ok"], false, "{v}");
    assert_ne!(v["actual"], format!("b3:{hex}"), "{v}");

    // A chunk blob gone from the registry's storage: missing, by file.
    let mirror = Mirror::new(&reg);
    let gone = chunks_of(&mirror.fetch("ns/vol", &hex).tree, "b.bin")[0].sha256;
    let data = docker
        .storage()
        .join("docker/registry/v2/blobs/sha256")
        .join(&gone.hex()[..2])
        .join(gone.hex())
        .join("data");
    std::fs::remove_file(&data)
        .unwrap_or_else(|e| panic!("remove {} from the registry: {e}", data.display()));
    assert!(!mirror.has_blob("ns/vol", &gone.to_string()));
    for deep in [false, true] {
        let mut args = vec!["verify", pinned.as_str(), "--output", "json"];
        if deep {
            args.push("--deep");
        }
        let (code, v) = json_exit(sb.sealvol(&reg, &args), "verify with a chunk gone");
        assert_eq!(code, Some(1), "{v}");
        assert_eq!(v["ok"], false, "{v}");
        assert_eq!(
            v["missing"],
            serde_json::json!([{"kind": "chunk", "digest": gone.to_string(), "path": "b.bin"}]),
            "{v}"
        );
        assert_eq!(v["corrupt"], serde_json::json!([]), "{v}");
    }
}

fn upgrade_sample(root: &Path) {
    write(
        &root.join("weights.bin"),
        &noise(2 * MIB + 12345, 31),
        0o644,
    );
    write(&root.join("config.json"), b"{\"layers\": 2}\n", 0o644);
    write(&root.join("tok/vocab.txt"), &noise(7000, 32), 0o444);
    std::os::unix::fs::symlink("config.json", root.join("link")).unwrap();
}

/// Publishes `src` into the fresh repository `repo` of `reg` as the
/// previous release did: a format 1 tree index, every chunk, the index by
/// digest, tags `b3-<hex>`, `head` and `prod`. The tree comes from a push
/// of `src` to `scratch` (another repository). Returns the version's hex
/// and the index digest.
fn publish_v1(sb: &Sandbox, reg: &str, src: &Path, scratch: &str, repo: &str) -> (String, String) {
    let hex = push_hex(sb, reg, src, &format!("bdn:{scratch}"), &[]);
    let mirror = Mirror::new(reg);
    let v2 = mirror.fetch(scratch, &hex);
    let v1_bytes = encode_v1_from(&v2.tree, src);
    let v1 = TreeIndex::decode(&v1_bytes).expect("the format 1 encoding decodes");
    assert_eq!(v1.format(), TreeFormat::V1);
    assert_eq!(v1.version_digest().hex(), hex, "format 1 keeps the digest");
    let built = oci::build_version_with_blob(&v1, v1_bytes, MT_TREE_BLOB_V1, &v2.meta)
        .expect("lay out the format 1 version");
    mirror.put_chunks_from(repo, &v2.tree, src);
    let index = mirror.publish(repo, &built, &[&format!("b3-{hex}"), "head", "prod"]);
    let back = mirror.fetch_ref(repo, "prod");
    assert_eq!(back.tree_media_type, MT_TREE_BLOB_V1);
    assert_eq!(back.index_digest, index);
    (hex, index)
}

/// `sealvol versions REF --output json`: (digest, sequence, is_head) of
/// each version.
fn versions(sb: &Sandbox, reg: &str, reference: &str) -> Vec<(String, u64, bool)> {
    let v = json(
        sb.sealvol(reg, &["versions", reference, "--output", "json"]),
        "versions",
    );
    let mut out: Vec<(String, u64, bool)> = v
        .as_array()
        .unwrap_or_else(|| panic!("versions printed {v}"))
        .iter()
        .map(|x| {
            (
                x["digest"].as_str().unwrap().to_string(),
                x["sequence"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("no sequence from the volume API: {x}")),
                x["is_head"].as_bool().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Two versions, `old` (not head) sealed before `newer` (head).
fn assert_newer_is_head(versions: &[(String, u64, bool)], old: &str, newer: &str) {
    let find = |hex: &str| {
        versions
            .iter()
            .find(|v| v.0 == format!("b3:{hex}"))
            .unwrap_or_else(|| panic!("no version b3:{hex} in {versions:?}"))
    };
    let (o, n) = (find(old), find(newer));
    assert_eq!(versions.len(), 2, "{versions:?}");
    assert!(!o.2 && n.2 && o.1 < n.1, "{versions:?}");
}

/// The lines of `out`'s stderr that warn of a format 1 tree.
fn legacy_warnings(out: &Output) -> Vec<String> {
    stderr(out)
        .lines()
        .filter(|l| l.contains("format 1 tree index"))
        .map(str::to_string)
        .collect()
}

fn assert_one_legacy_warning(out: &Output, what: &str) {
    let w = legacy_warnings(out);
    assert_eq!(
        w.len(),
        1,
        "{what}: one warning line expected: {:?}",
        stderr(out)
    );
    assert!(w[0].starts_with("sealvol: warning: "), "{what}: {}", w[0]);
}

#[test]
fn a_format_1_version_is_read_with_a_warning_and_upgraded_in_place() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    upgrade_sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let (hex, old_index) = publish_v1(&sb, &reg, &src, "ns/scratch", "ns/old");
    // A newer version, so head is not the format 1 one.
    let newer = sb.path().join("newer");
    write(&newer.join("other.txt"), b"newer\n", 0o644);
    let newer_hex = push_hex(&sb, &reg, &newer, "bdn:ns/old", &[]);
    let before = versions(&sb, &reg, "bdn:ns/old");
    assert_newer_is_head(&before, &hex, &newer_hex);

    // Read with one warning line.
    let dest = sb.path().join("pulled");
    let out = sb.sealvol(&reg, &["pull", "bdn:ns/old:prod", s(&dest)]);
    assert!(
        out.status.success(),
        "pull of a format 1 version: {}",
        stderr(&out)
    );
    assert_one_legacy_warning(&out, "pull");
    sealvol_tests::assert_same_tree(&src, &dest);
    let out = sb.sealvol(&reg, &["cat", "bdn:ns/old:prod/tok/vocab.txt"]);
    assert!(
        out.status.success(),
        "cat of a format 1 version: {}",
        stderr(&out)
    );
    assert_one_legacy_warning(&out, "cat");
    assert!(out.stdout == noise(7000, 32), "cat: wrong bytes");

    // Refused when asked to.
    let refused = sb.path().join("refused");
    let out = sb.sealvol(
        &reg,
        &["pull", "bdn:ns/old:prod", s(&refused), "--require-verified"],
    );
    fails(out, "pull --require-verified of a format 1 version");
    assert!(files_in(&refused).is_empty());
    let out = sb.sealvol(
        &reg,
        &["cat", "bdn:ns/old:prod/config.json", "--require-verified"],
    );
    let written = out.stdout.len();
    fails(out, "cat --require-verified of a format 1 version");
    assert_eq!(written, 0);

    // Mounted with the warning; refused under --require-verified.
    let mnt = mountpoint(&sb, "mnt");
    let mut m = Mounted::start(
        &sb,
        &reg,
        &[
            "mount",
            "bdn:ns/old:prod",
            s(&mnt),
            "--cache-dir",
            &fresh_cache(&sb, "m"),
        ],
        &[&mnt],
    );
    assert_eq!(
        read(&mnt.join("weights.bin")).unwrap(),
        noise(2 * MIB + 12345, 31)
    );
    m.stop();
    let log = m.stderr();
    let w: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("format 1 tree index"))
        .collect();
    assert_eq!(w.len(), 1, "mount: one warning line expected:\n{log}");
    assert!(w[0].starts_with("sealvol: warning: "), "{}", w[0]);
    let mnt2 = mountpoint(&sb, "mnt2");
    match Mounted::try_start(
        &sb,
        &reg,
        &["mount", "bdn:ns/old:prod", s(&mnt2), "--require-verified"],
        &[&mnt2],
    ) {
        Ok(mut m) => {
            m.stop();
            panic!("mount --require-verified mounted a format 1 version");
        }
        Err(f) => assert_eq!(f.status.and_then(|s| s.code()), Some(1), "{f:?}"),
    }

    // The upgrade: a format 2 tree under the same digest and tags.
    let up = json(
        sb.sealvol(
            &reg,
            &[
                "upgrade",
                "bdn:ns/old:prod",
                "--output",
                "json",
                "--cache-dir",
                &fresh_cache(&sb, "up"),
            ],
        ),
        "upgrade",
    );
    assert_eq!(up["upgraded"], true, "{up}");
    assert_eq!(up["digest"], format!("b3:{hex}"), "{up}");
    assert_eq!(up["files"], 3, "{up}");
    let new_index = up["index_digest"].as_str().unwrap().to_string();
    assert_ne!(new_index, old_index, "{up}");
    let tags: Vec<&str> = up["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(tags.contains(&"prod"), "{up}");
    assert!(
        !tags.contains(&"head"),
        "head named the newer version: {up}"
    );

    let mirror = Mirror::new(&reg);
    for tag in ["prod".to_string(), format!("b3-{hex}")] {
        let f = mirror.fetch_ref("ns/old", &tag);
        assert_eq!(f.tree_media_type, MT_TREE_BLOB, "{tag}");
        assert_eq!(f.tree.format(), TreeFormat::V2, "{tag}");
        assert_eq!(f.index_digest, new_index, "{tag}");
        assert_eq!(f.index.digest.hex(), hex, "{tag}");
    }
    assert_eq!(
        ok(
            sb.sealvol(&reg, &["stat", "bdn:ns/old:prod", "--full-ref"]),
            "stat --full-ref"
        ),
        format!("bdn:ns/old@b3:{hex}")
    );
    let v = json(
        sb.sealvol(&reg, &["verify", "bdn:ns/old:prod", "--output", "json"]),
        "verify after the upgrade",
    );
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["verifiable"], true, "{v}");
    assert_eq!(
        versions(&sb, &reg, "bdn:ns/old"),
        before,
        "sequence or head moved"
    );

    // Read again: verified, no warning, and --require-verified accepts it.
    let again = sb.path().join("again");
    let out = sb.sealvol(
        &reg,
        &["pull", "bdn:ns/old:prod", s(&again), "--require-verified"],
    );
    assert!(
        out.status.success(),
        "pull after the upgrade: {}",
        stderr(&out)
    );
    assert!(legacy_warnings(&out).is_empty(), "{}", stderr(&out));
    sealvol_tests::assert_same_tree(&src, &again);
    let up = json(
        sb.sealvol(&reg, &["upgrade", "bdn:ns/old:prod", "--output", "json"]),
        "upgrade again",
    );
    assert_eq!(up["upgraded"], false, "{up}");
    assert_eq!(up["index_digest"], new_index.as_str(), "{up}");
}

#[test]
fn pushing_the_files_of_a_format_1_version_again_republishes_it_in_place() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    upgrade_sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let (hex, old_index) = publish_v1(&sb, &reg, &src, "ns/scratch", "ns/again");
    let newer = sb.path().join("newer");
    write(&newer.join("other.txt"), b"newer\n", 0o644);
    let newer_hex = push_hex(&sb, &reg, &newer, "bdn:ns/again", &[]);
    let before = versions(&sb, &reg, "bdn:ns/again");
    assert_newer_is_head(&before, &hex, &newer_hex);

    let v = json(
        sb.sealvol(&reg, &["push", s(&src), "bdn:ns/again", "--output", "json"]),
        "push of the same files again",
    );
    assert_eq!(v["digest"], format!("b3:{hex}"), "{v}");
    assert_eq!(
        v["already_present"], false,
        "a format 1 tree must be re-published: {v}"
    );
    let mirror = Mirror::new(&reg);
    for tag in ["prod".to_string(), format!("b3-{hex}")] {
        let f = mirror.fetch_ref("ns/again", &tag);
        assert_eq!(f.tree_media_type, MT_TREE_BLOB, "{tag}");
        assert_ne!(f.index_digest, old_index, "{tag}");
        assert_eq!(f.index.digest.hex(), hex, "{tag}");
    }
    assert_eq!(
        mirror.fetch_ref("ns/again", "head").index.digest.hex(),
        newer_hex,
        "head moved to the re-published version"
    );
    assert_eq!(
        versions(&sb, &reg, "bdn:ns/again"),
        before,
        "sequence or head moved"
    );
    let out = sb.sealvol(
        &reg,
        &["cat", "bdn:ns/again:prod/config.json", "--require-verified"],
    );
    assert!(
        out.status.success(),
        "cat after the re-push: {}",
        stderr(&out)
    );
    assert!(out.stdout == b"{\"layers\": 2}\n");
}

/// The bytes under `hex` (a chunk's sha256) in the chunk cache at `cache`.
fn cached_chunk(cache: &str, hex: &str) -> Option<Vec<u8>> {
    std::fs::read(Path::new(cache).join(format!("chunks/sha256/{}/{hex}", &hex[..2]))).ok()
}

/// Readers of a format 2 tree check each byte once, through the chain, and
/// cache downloads unchecked (SPEC.md §2.5), so a version whose chunk list
/// names a chunk with other bytes, read through a mirror that serves those
/// bytes, poisons the cache for every version that holds the real chunk.
/// The rule: nothing unverified is served, and a poisoned entry costs one
/// fetch (checked by sha256), never a lasting error. Each of the mount,
/// `cat` and `pull` of the honest version reads the right bytes from a
/// poisoned cache and leaves the entry repaired.
#[test]
fn a_cache_poisoned_through_a_forging_mirror_costs_an_honest_version_one_fetch() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    forge_sample(&src);
    let docker = DockerRegistry::start();
    let reg = docker.addr();
    let hex = push_hex(&sb, &reg, &src, "bdn:ns/honest", &[]);
    let honest = format!("bdn:ns/honest@b3:{hex}");
    let mirror = Mirror::new(&reg);
    let x = chunks_of(&mirror.fetch("ns/honest", &hex).tree, "big1.bin")[0];
    let good = big1();
    let real = good[..x.length as usize].to_vec();

    // The hostile version: one file whose bytes are the chunk's with its
    // middle byte flipped (what the mirror below serves for that chunk),
    // its hash and pieces those bytes', its chunk list naming the real
    // chunk. Valid, and consistent with its own digest.
    let mut poison = real.clone();
    let mid = poison.len() / 2;
    poison[mid] ^= 0xff;
    let mut data = EntryData::file_of(&poison, &[]);
    if let EntryData::File { chunks, .. } = &mut data {
        chunks[0].sha256 = x.sha256;
    }
    let entries = [sealvol_spec::Entry {
        path: "poison.bin".into(),
        mode: 0o644,
        data,
    }];
    let evil_hex = mirror.publish_entries(
        "evil/poison",
        sealvol_spec::ChunkingParams::default(),
        &entries,
        &[&real],
        &[],
    );
    let evil = format!("bdn:evil/poison@b3:{evil_hex}/poison.bin");
    let forging = sealvol_tests::FlipProxy::start_only(&reg, &[x.sha256.to_string()]);
    // One cache per honest reader: a cache already repaired refuses the
    // hostile version its poison (its chain rejects the real chunk, and
    // the mirror's bytes fail their sha256 on the fetch that follows).
    let poison_cache = |cache: &str| {
        let out = sb.sealvol(&forging.addr(), &["cat", &evil, "--cache-dir", cache]);
        assert!(
            out.status.success(),
            "cat of the hostile version: {}",
            stderr(&out)
        );
        assert!(out.stdout == poison, "the hostile version's own bytes");
        assert_eq!(
            cached_chunk(cache, &x.sha256.hex()).as_deref(),
            Some(&poison[..]),
            "the cache holds the mirror's bytes under the honest chunk's name"
        );
    };
    let assert_repaired = |cache: &str, who: &str| {
        assert_eq!(
            cached_chunk(cache, &x.sha256.hex()).as_deref(),
            Some(&real[..]),
            "{who} left the poisoned entry in the cache"
        );
    };

    // The mount: the right bytes, no EIO.
    let cache = fresh_cache(&sb, "mount");
    poison_cache(&cache);
    let mnt = mountpoint(&sb, "mnt");
    let mut m = Mounted::start(
        &sb,
        &reg,
        &["mount", &honest, s(&mnt), "--cache-dir", &cache],
        &[&mnt],
    );
    assert!(
        read(&mnt.join("big1.bin")).unwrap() == good,
        "the mount served wrong bytes"
    );
    m.stop();
    assert_repaired(&cache, "the mount");

    // cat.
    let cache = fresh_cache(&sb, "cat");
    poison_cache(&cache);
    let out = sb.sealvol(
        &reg,
        &["cat", &format!("{honest}/big1.bin"), "--cache-dir", &cache],
    );
    assert!(out.status.success(), "cat big1.bin: {}", stderr(&out));
    assert!(out.stdout == good, "cat big1.bin: wrong bytes");
    assert_repaired(&cache, "cat");

    // pull: every file right. A pull leaves references to the files it
    // wrote rather than copies, so the entry it repaired is gone, not
    // rewritten.
    let cache = fresh_cache(&sb, "pull");
    poison_cache(&cache);
    let dest = sb.path().join("pulled");
    ok(
        sb.sealvol(&reg, &["pull", &honest, s(&dest), "--cache-dir", &cache]),
        "pull of the honest version",
    );
    assert_eq!(tree(&dest), tree(&src), "the pulled files");
    assert_ne!(
        cached_chunk(&cache, &x.sha256.hex()).as_deref(),
        Some(&poison[..]),
        "pull left the poisoned entry in the cache"
    );
    assert!(
        forging.flipped() >= 3,
        "the mirror served its bytes each time"
    );
}
