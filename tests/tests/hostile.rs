//! Hostile versions and mirrors (issue 28): someone publishes a version
//! whose every hash is right (so the trust chain has nothing to catch) but
//! whose entries, modes or chunk lists are crafted, or a mirror serves
//! tampered chunk lists, or the destination already holds planted links.
//! Whatever happens, `pull` creates and changes nothing outside DIR, places
//! no unverified byte and no setuid bit, and a refusal is one clear line.
//!
//! Versions are published to docker-registry 2.8 (CNCF distribution) by a
//! small encoder ([`Mirror::publish_entries`]), not by `seal`, which must
//! refuse them. Each case hashes a sentinel folder beside DIR (its tree and
//! modes) before and after.

use std::path::{Path, PathBuf};

use sealvol_spec::chain;
use sealvol_spec::tree::{ChunkRef, Entry, EntryData};
use sealvol_spec::{ChunkingParams, Sha256Digest, TreeIndex};
use sealvol_tests::forge::Mirror;
use sealvol_tests::{
    fails, json, ok, s, stderr, tree, write, DockerRegistry, FlipProxy, Node, Sandbox,
};

/// DIR's parent with a sentinel folder beside DIR: `outside/` (mode 0700)
/// holding a file, and `victim` (mode 0600). Returns (DIR, outside).
fn setup(sb: &Sandbox, name: &str) -> (PathBuf, PathBuf) {
    let top = sb.path().join(name);
    let outside = top.join("outside");
    write(&outside.join("secret.txt"), b"keep me\n", 0o600);
    write(&top.join("victim"), b"victim bytes\n", 0o600);
    set_mode(&outside, 0o700);
    let dir = top.join("dir");
    std::fs::create_dir_all(&dir).unwrap();
    (dir, top)
}

/// Everything beside DIR: what no pull may change.
fn around(top: &Path) -> Vec<(String, Node)> {
    let mut t: Vec<_> = tree(top)
        .into_iter()
        .filter(|(p, _)| p != "dir" && !p.starts_with("dir/"))
        .collect();
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(top).unwrap().permissions().mode() & 0o7777;
    t.push((".".into(), Node::Dir { mode }));
    t
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode_of(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn dir(p: &str, mode: u32) -> Entry {
    Entry {
        path: p.into(),
        mode,
        data: EntryData::Dir,
    }
}

fn file(p: &str, mode: u32, data: &[u8]) -> Entry {
    Entry {
        path: p.into(),
        mode,
        data: EntryData::file_of(data, &[]),
    }
}

fn link(p: &str, target: &str) -> Entry {
    Entry {
        path: p.into(),
        mode: 0o777,
        data: EntryData::Symlink {
            target: target.into(),
        },
    }
}

fn sorted(mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.sort_by(|a, b| sealvol_spec::path::canonical_cmp(&a.path, &b.path));
    entries
}

fn params() -> ChunkingParams {
    ChunkingParams::default()
}

/// docker-registry 2.8 (stopped when dropped), its address, a publisher
/// writing to it, and a sandbox for the commands.
fn peers() -> (DockerRegistry, String, Mirror, Sandbox) {
    let reg = DockerRegistry::start();
    let addr = reg.addr();
    let mirror = Mirror::new(&addr);
    (reg, addr, mirror, Sandbox::new())
}

/// Pulls `reference` into `dir`; the output.
fn pull(
    sb: &Sandbox,
    reg: &str,
    reference: &str,
    dir: &Path,
    extra: &[&str],
) -> std::process::Output {
    let mut args = vec!["pull", reference, s(dir), "--no-cache"];
    args.extend_from_slice(extra);
    sb.sealvol(reg, &args)
}

/// Case 1: symlinks through symlinks. The tree is refused by every reader
/// with one line naming the rule, and by `push` before it publishes.
#[test]
fn chained_symlinks_are_refused_by_readers_and_writers() {
    let (_reg, addr, mirror, sb) = peers();
    let cases: [(&str, Vec<Entry>); 3] = [
        (
            "up",
            vec![link("l", "."), link("up", "l/.."), file("x", 0o644, b"x")],
        ),
        (
            "passwd",
            vec![link("l", "."), link("passwd", "l/l/l/../../../etc/passwd")],
        ),
        (
            "nested",
            vec![
                dir("d", 0o755),
                link("d/x", ".."),
                link("y", "d/x/.."),
                file("z", 0o644, b"z"),
            ],
        ),
    ];
    for (name, entries) in cases {
        let data: Vec<&[u8]> = vec![b"x", b"z"];
        let repo = format!("hostile/{name}");
        let hex = mirror.publish_entries(&repo, params(), &sorted(entries), &data, &[]);
        let reference = format!("bdn:{repo}@b3:{hex}");
        let (target, top) = setup(&sb, name);
        let before = around(&top);
        let line = fails(
            pull(&sb, &addr, &reference, &target, &[]),
            &format!("pull {name}"),
        );
        assert!(
            line.contains("tree index is invalid")
                && line.contains("after passing through the symlink"),
            "{name}: {line}"
        );
        assert!(!line.contains("damaged data"), "{name}: {line}");
        assert_eq!(
            around(&top),
            before,
            "{name}: pull changed something outside DIR"
        );
        assert!(
            tree(&target).is_empty(),
            "{name}: pull left {:?}",
            tree(&target)
        );
        let mp = sb.path().join(format!("mnt-{name}"));
        std::fs::create_dir_all(&mp).unwrap();
        for args in [
            vec!["mount", reference.as_str(), s(&mp)],
            vec!["ls", reference.as_str()],
            vec!["cat", &format!("{reference}/x")],
            vec!["diff", reference.as_str(), reference.as_str()],
        ] {
            let line = fails(sb.sealvol(&addr, &args), &format!("{args:?}"));
            assert!(line.contains("tree index is invalid"), "{args:?}: {line}");
        }
        // verify says why, in text and in JSON.
        let out = sb.sealvol(&addr, &["verify", &reference, "--deep"]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "verify {name}: {}",
            stderr(&out)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("corrupt tree") && text.contains("after passing through the symlink"),
            "{text}"
        );
        let out = sb.sealvol(&addr, &["verify", &reference, "--output", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["ok"], false);
        assert!(
            v["corrupt"][0]["reason"]
                .as_str()
                .unwrap()
                .contains("symlink"),
            "{v}"
        );
    }

    // The writer refuses to publish such a tree.
    let src = sb.path().join("src-links");
    std::fs::create_dir_all(&src).unwrap();
    std::os::unix::fs::symlink(".", src.join("l")).unwrap();
    std::os::unix::fs::symlink("l/..", src.join("up")).unwrap();
    let line = fails(
        sb.sealvol(&addr, &["push", s(&src), "bdn:hostile/pushed"]),
        "push of chained links",
    );
    assert!(line.contains("after passing through the symlink"), "{line}");
    assert!(
        mirror.manifest("hostile/pushed", "head").is_none(),
        "nothing published"
    );
}

/// Cases 2–4: links already in DIR, where the version has a folder or a
/// file, and at a name a temporary file could take, are replaced, never
/// followed; two pulls of hostile content into one DIR stay inside it.
#[test]
fn planted_links_in_dir_are_replaced_not_followed() {
    let (_reg, addr, mirror, sb) = peers();
    let weights = sealvol_tests::noise(3 << 20, 5);
    let entries = sorted(vec![
        dir("sub", 0o777),
        file("sub/model.bin", 0o755, &weights),
        dir("up", 0o755),
        file("up/model.bin", 0o644, b"up model"),
        file("config.json", 0o644, b"{}"),
    ]);
    // Each file is one chunk (`file_of` with no cut points).
    let chunk_refs: Vec<&[u8]> = vec![&weights, b"up model", b"{}"];
    let hex = mirror.publish_entries("plain/weights", params(), &entries, &chunk_refs, &[]);
    let reference = format!("bdn:plain/weights@b3:{hex}");

    let (target, top) = setup(&sb, "planted");
    // A folder of the version planted as a link outside; a file of the
    // version planted as a link to an outside file; the chained links of
    // an earlier hostile pull, which resolve to DIR's parent; links under
    // the temporary names an earlier release would have used.
    std::os::unix::fs::symlink(top.join("outside"), target.join("sub")).unwrap();
    std::os::unix::fs::symlink(top.join("victim"), target.join("config.json")).unwrap();
    std::os::unix::fs::symlink(".", target.join("l")).unwrap();
    std::os::unix::fs::symlink("l/..", target.join("up")).unwrap();
    let last_pid: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .map(|t| t.trim().parse().unwrap_or(1))
        .unwrap_or(1);
    for pid in last_pid..last_pid + 64 {
        for name in ["model.bin", "config.json"] {
            let _ = std::os::unix::fs::symlink(
                top.join("victim"),
                target.join(format!(".{name}.sealvol-{pid}")),
            );
        }
    }
    let before = around(&top);
    ok(
        pull(&sb, &addr, &reference, &target, &[]),
        "pull over planted links",
    );
    assert_eq!(
        around(&top),
        before,
        "the pull changed something outside DIR"
    );
    for d in ["sub", "up"] {
        let m = std::fs::symlink_metadata(target.join(d)).unwrap();
        assert!(m.is_dir(), "{d} is a real folder now");
    }
    assert_eq!(
        std::fs::read(target.join("sub/model.bin")).unwrap(),
        weights
    );
    assert_eq!(
        std::fs::read(target.join("up/model.bin")).unwrap(),
        b"up model"
    );
    let m = std::fs::symlink_metadata(target.join("config.json")).unwrap();
    assert!(m.is_file(), "config.json replaced the link");
    assert_eq!(std::fs::read(target.join("config.json")).unwrap(), b"{}");
    // Folders the pull created get the version's mode; one that was there
    // keeps its own.
    assert_eq!(mode_of(&target.join("sub")), 0o777);
    let kept = target.join("kept");
    std::fs::create_dir_all(&kept).unwrap();
    set_mode(&kept, 0o700);
    ok(
        pull(&sb, &addr, &format!("{reference}/sub"), &kept, &[]),
        "pull a folder into an existing one",
    );
    assert_eq!(mode_of(&kept), 0o700);
    let again = target.join("again");
    std::fs::create_dir_all(again.join("sub")).unwrap();
    set_mode(&again.join("sub"), 0o750);
    ok(
        pull(&sb, &addr, &reference, &again, &[]),
        "pull over an existing folder",
    );
    assert_eq!(
        mode_of(&again.join("sub")),
        0o750,
        "an existing folder keeps its mode"
    );
    assert_eq!(
        around(&top),
        before,
        "the pulls changed something outside DIR"
    );
    // No temporary file is left behind.
    let leftovers: Vec<String> = tree(&target)
        .into_keys()
        .filter(|p| {
            p.contains(".sealvol-") && !p.contains(".model.bin.") && !p.contains(".config.json.")
        })
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

/// Case 5: setuid, setgid and sticky bits a version records are dropped
/// unless `--keep-special-bits`, which says so.
#[test]
fn special_bits_are_dropped_unless_kept() {
    let (_reg, addr, mirror, sb) = peers();
    let script: &[u8] = b"#!/bin/sh\nid\n";
    let entries = sorted(vec![
        dir("bin", 0o1777),
        file("bin/run", 0o4755, script),
        file("bin/grp", 0o2750, b"grp"),
    ]);
    let hex = mirror.publish_entries("hostile/suid", params(), &entries, &[script, b"grp"], &[]);
    let reference = format!("bdn:hostile/suid@b3:{hex}");
    let (target, _) = setup(&sb, "suid");
    let out = pull(&sb, &addr, &reference, &target, &[]);
    ok(out, "pull");
    assert_eq!(mode_of(&target.join("bin/run")), 0o755);
    assert_eq!(mode_of(&target.join("bin/grp")), 0o750);
    assert_eq!(mode_of(&target.join("bin")), 0o777);
    let kept = sb.path().join("kept");
    let out = pull(&sb, &addr, &reference, &kept, &["--keep-special-bits"]);
    let err = stderr(&out);
    ok(out, "pull --keep-special-bits");
    assert!(err.contains("keeping the setuid"), "{err}");
    assert_eq!(mode_of(&kept.join("bin/run")), 0o4755);
    assert_eq!(mode_of(&kept.join("bin")), 0o1777);
}

/// Case 6: a mirror serves chunk lists that name one blob at two lengths
/// (a later record claiming more, then fewer, bytes). The tree is refused
/// before anything is planned: no panic, no file of zeros placed.
#[test]
fn one_blob_at_two_lengths_is_refused() {
    let (_reg, addr, mirror, sb) = peers();
    let src = sb.path().join("src");
    write(&src.join("a.bin"), &sealvol_tests::noise(1000, 1), 0o644);
    write(&src.join("b.bin"), &sealvol_tests::noise(5000, 2), 0o644);
    let pushed = json(
        sb.sealvol(&addr, &["push", s(&src), "bdn:clash/v", "--output", "json"]),
        "push",
    );
    let hex = pushed["digest"]
        .as_str()
        .unwrap()
        .strip_prefix("b3:")
        .unwrap()
        .to_string();
    let original = mirror.fetch("clash/v", &hex);
    for (from, to) in [("a.bin", "b.bin"), ("b.bin", "a.bin")] {
        mirror.forge_raw_on("clash/v", &original, |entries| {
            let sha = match &entries.iter().find(|e| e.path == from).unwrap().data {
                EntryData::File { chunks, .. } => chunks[0].sha256,
                _ => unreachable!(),
            };
            let e = entries.iter_mut().find(|e| e.path == to).unwrap();
            if let EntryData::File { chunks, .. } = &mut e.data {
                chunks[0].sha256 = sha;
            }
        });
        let target = sb.path().join(format!("clash-{to}"));
        let out = pull(&sb, &addr, &format!("bdn:clash/v@b3:{hex}"), &target, &[]);
        assert_ne!(
            out.status.code(),
            Some(101),
            "pull panicked: {}",
            stderr(&out)
        );
        let line = fails(out, "pull of a clashing chunk list");
        assert!(
            line.contains("tree index is invalid") && line.contains("one blob has one length"),
            "{line}"
        );
        assert!(!target.join("a.bin").exists() && !target.join("b.bin").exists());
    }
}

/// Case 7: `verify --deep` fetches each distinct chunk once, however many
/// records name it: a file of 20,000 one-byte records of one blob is one
/// blob GET.
#[test]
fn verify_deep_fetches_each_chunk_once() {
    let (_reg, addr, mirror, sb) = peers();
    let data = vec![b'x'; 20_000];
    let lengths = vec![1usize; data.len()];
    let entries = vec![Entry {
        path: "many.bin".into(),
        mode: 0o644,
        data: EntryData::file_of(&data, &lengths),
    }];
    TreeIndex::new(params(), entries.clone()).expect("a valid tree");
    let hex = mirror.publish_entries("hostile/records", params(), &entries, &[b"x"], &[]);
    let proxy = FlipProxy::start_counting(&addr);
    let started = std::time::Instant::now();
    let out = sb.sealvol(
        &proxy.addr(),
        &[
            "verify",
            &format!("bdn:hostile/records@b3:{hex}"),
            "--deep",
            "--output",
            "json",
        ],
    );
    let elapsed = started.elapsed();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("verify: {e}: {}", stderr(&out)));
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["bytes_checked"], 20_000, "{v}");
    let chunk = Sha256Digest::of(b"x").to_string();
    let gets = proxy
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET ") && r.contains(&chunk))
        .count();
    assert_eq!(
        gets,
        1,
        "the one chunk is fetched once: {:?}",
        proxy.requests()
    );
    assert!(elapsed.as_secs() < 20, "verify --deep took {elapsed:?}");
}

/// Case 8: a small index declaring far more bytes than DIR's file system
/// has free is refused up front, with one line, before any download.
#[test]
fn pull_refuses_what_cannot_fit() {
    let (_reg, addr, mirror, sb) = peers();
    let free = {
        let out = std::process::Command::new("df")
            .args(["--output=avail", "-B1", s(sb.path())])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines().nth(1).unwrap().trim().parse::<u64>().unwrap()
    };
    // One chunk blob of the largest length, named by every record of a
    // file twice the free space (at least 256 GiB): the chain is whatever
    // the (random) chaining values merge to, so the tree is valid.
    let len = params().max;
    let size = (free * 2).max(256 << 30).div_ceil(u64::from(len)) * u64::from(len);
    let blob = sealvol_tests::noise(len as usize, 9);
    let sha = Sha256Digest::of(&blob);
    let chunks: Vec<ChunkRef> = (0..size / u64::from(len))
        .map(|i| ChunkRef {
            offset: i * u64::from(len),
            length: len,
            sha256: sha,
        })
        .collect();
    let pieces: Vec<[u8; 32]> = (0..chain::piece_count(size))
        .map(|i| Sha256Digest::of(&i.to_le_bytes()).0)
        .collect();
    let blake3 = chain::combine(&pieces, size).expect("pieces merge");
    let entries = vec![
        dir("models", 0o755),
        Entry {
            path: "models/huge.bin".into(),
            mode: 0o644,
            data: EntryData::File {
                size,
                blake3,
                chunks,
                pieces,
            },
        },
    ];
    TreeIndex::new(params(), entries.clone()).expect("a valid tree");
    let hex = mirror.publish_entries("hostile/huge", params(), &entries, &[&blob], &[]);
    let proxy = FlipProxy::start_counting(&addr);
    let target = sb.path().join("huge");
    let line = fails(
        pull(
            &sb,
            &proxy.addr(),
            &format!("bdn:hostile/huge@b3:{hex}"),
            &target,
            &[],
        ),
        "pull of a version larger than the disk",
    );
    assert!(line.contains("bytes free"), "{line}");
    let chunk_gets = proxy
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET ") && r.contains(&sha.to_string()))
        .count();
    assert_eq!(chunk_gets, 0, "nothing downloaded: {:?}", proxy.requests());
    assert!(
        tree(&target).is_empty(),
        "nothing left: {:?}",
        tree(&target)
    );
}
