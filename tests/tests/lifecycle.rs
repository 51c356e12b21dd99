//! A volume's life on `sealvol serve`, through the CLI a user types: versions
//! and head, tags that expire, `rm` and `restore` within the retention,
//! garbage collection that keeps what can still be restored and reclaims
//! what cannot, concurrent pushes to one volume, a push whose client died,
//! plain OCI clients seen by the volume view, and a registry without the
//! volume API saying so. The registry's clock is moved by the test (a file
//! holding seconds to add), never waited for.

use std::path::{Path, PathBuf};
use std::process::Output;

use sealvol_tests::{
    assert_same_tree, fails, host, json, noise, ok, s, sealvol_bin, stderr, write, DockerRegistry,
    Sandbox, Server,
};
use serde_json::Value;

const DAY: u64 = 86_400;

/// A registry whose clock the test moves.
struct Clocked {
    server: Server,
    clock: PathBuf,
    offset: u64,
}

impl Clocked {
    fn start(sb: &Sandbox, config: &str) -> Clocked {
        let clock = sb.path().join("clock");
        std::fs::write(&clock, "0").unwrap();
        let server = Server::start_with_clock(&sb.path().join("registry"), config, &clock);
        Clocked {
            server,
            clock,
            offset: 0,
        }
    }

    fn host(&self) -> String {
        host(&self.server)
    }

    /// Moves the registry's clock `secs` seconds on.
    fn advance(&mut self, secs: u64) {
        self.offset += secs;
        std::fs::write(&self.clock, self.offset.to_string()).unwrap();
    }

    /// Bytes of every blob file the registry stores.
    fn blob_bytes(&self) -> u64 {
        fn walk(dir: &Path) -> u64 {
            std::fs::read_dir(dir)
                .map(|rd| {
                    rd.map(|e| {
                        let e = e.unwrap();
                        let m = e.metadata().unwrap();
                        if m.is_dir() {
                            walk(&e.path())
                        } else {
                            m.len()
                        }
                    })
                    .sum()
                })
                .unwrap_or(0)
        }
        walk(&self.server.root.join("blobs"))
    }
}

fn push(sb: &Sandbox, registry: &str, dir: &Path, reference: &str) -> Value {
    json(
        sb.sealvol(registry, &["push", s(dir), reference, "--output", "json"]),
        &format!("push {reference}"),
    )
}

fn digest(v: &Value) -> String {
    v["digest"].as_str().expect("digest").to_string()
}

/// `sealvol versions REF --output json [extra]` as a list.
fn versions(sb: &Sandbox, registry: &str, reference: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["versions", reference, "--output", "json"];
    args.extend_from_slice(extra);
    match json(sb.sealvol(registry, &args), "versions") {
        Value::Array(a) => a,
        other => panic!("versions: not a list: {other}"),
    }
}

/// `digest -> (lifecycle, is_head, tags)` of a versions list.
fn states(list: &[Value]) -> Vec<(String, String, bool, Vec<String>)> {
    list.iter()
        .map(|v| {
            (
                digest(v),
                v["lifecycle"].as_str().unwrap_or("").to_string(),
                v["is_head"].as_bool().unwrap(),
                v["tags"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

fn gc(sb: &Sandbox, registry: &str, dry_run: bool) -> Value {
    let mut args = vec!["gc", "--output", "json"];
    if dry_run {
        args.push("--dry-run");
    }
    json(sb.sealvol(registry, &args), "gc")
}

/// A model directory of `len` bytes of noise `seed` plus a config file.
fn model(root: &Path, len: usize, seed: u64) -> PathBuf {
    let dir = root.join(format!("model-{seed}"));
    write(&dir.join("weights.bin"), &noise(len, seed), 0o644);
    write(
        &dir.join("config.json"),
        format!("{{\"seed\": {seed}}}\n").as_bytes(),
        0o644,
    );
    dir
}

fn pull_matches(sb: &Sandbox, registry: &str, reference: &str, expected: &Path, into: &str) {
    let dest = sb.path().join(into);
    ok(
        sb.sealvol(registry, &["pull", reference, s(&dest)]),
        &format!("pull {reference}"),
    );
    assert_same_tree(expected, &dest);
}

#[test]
fn a_volume_lives_is_deleted_restored_and_reclaimed() {
    let sb = Sandbox::new();
    let mut reg = Clocked::start(&sb, "");
    let r = reg.host();
    let (d1, d2) = (model(sb.path(), 3 << 20, 1), model(sb.path(), 3 << 20, 2));
    let v1 = digest(&push(&sb, &r, &d1, "bdn:ns/vol"));
    let v2 = digest(&push(&sb, &r, &d2, "bdn:ns/vol"));

    // Newest first, sequences grow, head is the last push.
    let list = versions(&sb, &r, "bdn:ns/vol", &[]);
    assert_eq!(
        states(&list),
        vec![
            (v2.clone(), "ALIVE".into(), true, vec![]),
            (v1.clone(), "ALIVE".into(), false, vec![]),
        ]
    );
    assert!(list[0]["sequence"].as_u64() > list[1]["sequence"].as_u64());

    // A tag that expires in an hour.
    let set = json(
        sb.sealvol(
            &r,
            &[
                "tag",
                "set",
                &format!("bdn:ns/vol@{v1}"),
                "prod",
                "--expires-at",
                "1h",
                "--output",
                "json",
            ],
        ),
        "tag set --expires-at",
    );
    assert_eq!(set["tag"], "prod");
    assert!(set["expires_at"].is_string(), "{set}");

    // rm without a terminal and without --yes deletes nothing.
    let line = fails(
        sb.sealvol(&r, &["rm", &format!("bdn:ns/vol@{v2}")]),
        "rm without --yes",
    );
    assert_eq!(
        line,
        "sealvol: refusing to delete without confirmation: pass --yes"
    );
    assert_eq!(versions(&sb, &r, "bdn:ns/vol", &[]).len(), 2);

    // rm by a digest prefix: head goes back to v1, v2 is tombstoned.
    let removed = json(
        sb.sealvol(
            &r,
            &[
                "rm",
                &format!("bdn:ns/vol@{}", &v2[..15]),
                "--yes",
                "--output",
                "json",
            ],
        ),
        "rm --yes",
    );
    assert_eq!(removed["deleted"][0]["digest"], v2.as_str(), "{removed}");
    assert_eq!(removed["retention_seconds"], 7 * DAY, "{removed}");
    assert_eq!(
        states(&versions(&sb, &r, "bdn:ns/vol", &[])),
        vec![(v1.clone(), "ALIVE".into(), true, vec!["prod".into()])]
    );
    let all = versions(&sb, &r, "bdn:ns/vol", &["--include-tombstoned"]);
    assert_eq!(
        states(&all),
        vec![
            (v2.clone(), "TOMBSTONED".into(), false, vec![]),
            (v1.clone(), "ALIVE".into(), true, vec!["prod".into()]),
        ]
    );
    assert!(all[0]["restorable_until"].is_string(), "{}", all[0]);
    pull_matches(&sb, &r, "bdn:ns/vol", &d1, "head-is-v1");
    let gone = fails(
        sb.sealvol(&r, &["pull", &format!("bdn:ns/vol@{v2}"), "x"]),
        "pull of a deleted version",
    );
    assert!(gone.contains(&v2[..15]), "{gone}");

    // Two hours on, past the upload grace and the tag's expiry: a GC pass
    // drops the tag but keeps every byte of the restorable version.
    reg.advance(2 * 3600);
    let before = reg.blob_bytes();
    let dry = gc(&sb, &r, true);
    let report = gc(&sb, &r, false);
    assert_eq!(report["tags_expired"], 1, "{report}");
    assert_eq!(report["blobs_deleted"], 0, "{report}");
    assert_eq!(report["versions_purged"], 0, "{report}");
    for k in ["tags_expired", "blobs_deleted", "bytes_reclaimed"] {
        assert_eq!(dry[k], report[k], "dry run counts {k}: {dry} vs {report}");
    }
    assert_eq!(reg.blob_bytes(), before);
    assert_eq!(
        states(&versions(&sb, &r, "bdn:ns/vol", &[])),
        vec![(v1.clone(), "ALIVE".into(), true, vec![])],
        "the expired tag is gone"
    );

    // Restore needs the full digest, brings v2 back as head, not its tags.
    let line = fails(
        sb.sealvol(&r, &["restore", &format!("bdn:ns/vol@{}", &v2[..15])]),
        "restore by prefix",
    );
    assert!(line.contains("full digest"), "{line}");
    ok(
        sb.sealvol(&r, &["restore", &format!("bdn:ns/vol@{v2}")]),
        "restore",
    );
    assert_eq!(
        states(&versions(&sb, &r, "bdn:ns/vol", &[])),
        vec![
            (v2.clone(), "ALIVE".into(), true, vec![]),
            (v1.clone(), "ALIVE".into(), false, vec![]),
        ]
    );
    pull_matches(&sb, &r, &format!("bdn:ns/vol@{v2}"), &d2, "restored-v2");
    let line = fails(
        sb.sealvol(&r, &["restore", &format!("bdn:ns/vol@{v2}")]),
        "restore of an alive version",
    );
    assert!(line.contains("not deleted"), "{line}");

    // rm -r deletes every version; eight days later they cannot come back,
    // and a GC pass gives their bytes back.
    let removed = json(
        sb.sealvol(
            &r,
            &[
                "rm",
                "--recursive",
                "bdn:ns/vol",
                "--yes",
                "--output",
                "json",
            ],
        ),
        "rm -r",
    );
    assert_eq!(removed["deleted"].as_array().unwrap().len(), 2, "{removed}");
    assert!(versions(&sb, &r, "bdn:ns/vol", &[]).is_empty());
    reg.advance(8 * DAY);
    let line = fails(
        sb.sealvol(&r, &["restore", &format!("bdn:ns/vol@{v1}")]),
        "restore after retention",
    );
    assert_eq!(
        line,
        format!("sealvol: bdn:ns/vol@{v1} was deleted more than 7 days ago and cannot be restored")
    );
    let before = reg.blob_bytes();
    let report = gc(&sb, &r, false);
    assert_eq!(report["versions_purged"], 2, "{report}");
    let reclaimed = report["bytes_reclaimed"].as_u64().unwrap();
    assert!(reclaimed >= 6 << 20, "both weights files: {report}");
    assert_eq!(reg.blob_bytes(), before - reclaimed, "{report}");
    assert!(
        versions(&sb, &r, "bdn:ns/vol", &["--include-tombstoned"]).is_empty(),
        "purged versions are not listed"
    );
    let line = fails(
        sb.sealvol(&r, &["restore", &format!("bdn:ns/vol@{v1}")]),
        "restore after purge",
    );
    assert!(line.contains("purged"), "{line}");
}

#[test]
fn an_expired_volume_has_every_version_deleted() {
    let sb = Sandbox::new();
    let mut reg = Clocked::start(&sb, "");
    let r = reg.host();
    let keep = digest(&push(&sb, &r, &model(sb.path(), 1 << 20, 3), "bdn:ns/keep"));
    let tmp = digest(&push(&sb, &r, &model(sb.path(), 1 << 20, 4), "bdn:ns/tmp"));
    let line = fails(
        sb.sealvol(
            &r,
            &[
                "update",
                "bdn:ns/tmp",
                "--expires-at",
                "2020-01-01T00:00:00Z",
            ],
        ),
        "update with a past time",
    );
    assert!(line.contains("in the past"), "{line}");
    let vol = json(
        sb.sealvol(
            &r,
            &[
                "update",
                "bdn:ns/tmp",
                "--expires-at",
                "2h",
                "--output",
                "json",
            ],
        ),
        "update --expires-at",
    );
    assert!(vol["expires_at"].is_string(), "{vol}");
    reg.advance(3600);
    assert_eq!(gc(&sb, &r, false)["volumes_expired"], 0);
    reg.advance(3600);
    assert_eq!(gc(&sb, &r, false)["volumes_expired"], 1);
    assert_eq!(
        states(&versions(&sb, &r, "bdn:ns/tmp", &["--include-tombstoned"])),
        vec![(tmp.clone(), "TOMBSTONED".into(), false, vec![])]
    );
    assert_eq!(
        states(&versions(&sb, &r, "bdn:ns/keep", &[])),
        vec![(keep, "ALIVE".into(), true, vec![])]
    );
    // Restorable like any deleted version; `never` clears the expiry.
    ok(
        sb.sealvol(&r, &["update", "bdn:ns/tmp", "--expires-at", "never"]),
        "update --expires-at never",
    );
    ok(
        sb.sealvol(&r, &["restore", &format!("bdn:ns/tmp@{tmp}")]),
        "restore after volume expiry",
    );
    reg.advance(DAY);
    assert_eq!(gc(&sb, &r, false)["volumes_expired"], 0);
    assert_eq!(versions(&sb, &r, "bdn:ns/tmp", &[]).len(), 1);
}

/// The one line a push refused for another push in progress prints.
const BUSY: &str = "sealvol: another push to bdn:ns/busy is in progress; push again";

#[test]
fn concurrent_pushes_seal_or_are_refused_and_head_is_a_sealed_one() {
    let sb = Sandbox::new();
    let server = Server::start(&sb.path().join("registry"));
    let r = host(&server);
    let dirs: Vec<PathBuf> = (0..8).map(|i| model(sb.path(), 8 << 20, 100 + i)).collect();
    let children: Vec<_> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            // Eight machines: each its own cache (pushes on one machine
            // share its file-state cache, and all but one seal without it).
            sb.command(sealvol_bin())
                .env("SEALVOL_REGISTRY", &r)
                .env("SEALVOL_CACHE_DIR", sb.path().join(format!("cache-{i}")))
                .args(["push", s(d), "bdn:ns/busy", "--output", "json"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start push")
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait for push"))
        .collect();
    let mut sealed = Vec::new();
    for (i, out) in outs.into_iter().enumerate() {
        if out.status.success() {
            sealed.push(digest(&json(out, &format!("push {i}"))));
        } else {
            let line = fails(out, &format!("push {i}"));
            assert_eq!(line, BUSY);
        }
    }
    assert!(!sealed.is_empty(), "at least one push seals");
    let list = versions(&sb, &r, "bdn:ns/busy", &[]);
    let mut listed: Vec<String> = list.iter().map(digest).collect();
    listed.sort();
    let mut want = sealed.clone();
    want.sort();
    assert_eq!(listed, want, "every sealed push is a version, nothing else");
    let heads: Vec<&Value> = list.iter().filter(|v| v["is_head"] == true).collect();
    assert_eq!(heads.len(), 1, "{list:?}");
    assert!(sealed.contains(&digest(heads[0])));
    eprintln!("{} of 8 concurrent pushes sealed", sealed.len());
}

#[test]
fn a_crashed_pushs_claim_lapses_after_its_ttl() {
    let sb = Sandbox::new();
    let mut reg = Clocked::start(&sb, "claim_ttl_seconds = 60");
    let r = reg.host();
    // What a push that died after taking the claim leaves behind.
    let resp = reqwest::blocking::Client::new()
        .post(format!("{}/api/v1/volumes/ns/busy/-/claim", reg.server.url))
        .json(&serde_json::json!({"holder": "a push that crashed"}))
        .send()
        .expect("claim");
    assert_eq!(resp.status().as_u16(), 201);
    let d = model(sb.path(), 1 << 20, 5);
    let line = fails(
        sb.sealvol(&r, &["push", s(&d), "bdn:ns/busy"]),
        "push while claimed",
    );
    assert_eq!(line, BUSY);
    assert!(
        stderr(&sb.sealvol(&r, &["versions", "bdn:ns/busy"])).contains("no such volume")
            || versions(&sb, &r, "bdn:ns/busy", &[]).is_empty(),
        "the refused push sealed nothing"
    );
    reg.advance(61);
    let v = digest(&push(&sb, &r, &d, "bdn:ns/busy"));
    assert_eq!(
        states(&versions(&sb, &r, "bdn:ns/busy", &[])),
        vec![(v, "ALIVE".into(), true, vec![])]
    );
}

#[test]
fn plain_oci_clients_and_the_volume_view_are_one_truth() {
    let sb = Sandbox::new();
    let server = Server::start(&sb.path().join("registry"));
    let r = host(&server);
    let d = model(sb.path(), 1 << 20, 6);
    let pushed = push(&sb, &r, &d, "bdn:ns/vol");
    let v = digest(&pushed);
    let policy = sb.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"default":[{"type":"insecureAcceptAnything"}]}"#,
    )
    .unwrap();
    let skopeo = |args: &[&str]| {
        let out = sb
            .command("skopeo")
            .args(["--policy", s(&policy)])
            .args(args)
            .output()
            .expect("run skopeo (installed by scripts/deps.sh)");
        assert!(out.status.success(), "skopeo {args:?}: {}", stderr(&out));
    };
    // A version copied by skopeo is a version of the volume it lands in.
    skopeo(&[
        "copy",
        "--all",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        &format!("docker://{r}/ns/vol:head"),
        &format!("docker://{r}/ns/copy:prod"),
    ]);
    let list = versions(&sb, &r, "bdn:ns/copy", &[]);
    assert_eq!(
        states(&list),
        vec![(v.clone(), "ALIVE".into(), true, vec!["prod".into()])]
    );
    pull_matches(&sb, &r, "bdn:ns/copy:prod", &d, "copied");
    // skopeo may re-serialize the index it copies (1.9 drops
    // `artifactType`): delete the copy's own index.
    let index = list[0]["index_digest"].as_str().unwrap().to_string();
    // An OCI DELETE of its index tombstones it: restorable, not gone.
    skopeo(&[
        "delete",
        "--tls-verify=false",
        &format!("docker://{r}/ns/copy@{index}"),
    ]);
    assert_eq!(
        states(&versions(&sb, &r, "bdn:ns/copy", &["--include-tombstoned"])),
        vec![(v.clone(), "TOMBSTONED".into(), false, vec![])]
    );
    ok(
        sb.sealvol(&r, &["restore", &format!("bdn:ns/copy@{v}")]),
        "restore what skopeo deleted",
    );
    pull_matches(&sb, &r, &format!("bdn:ns/copy@{v}"), &d, "restored");
}

#[test]
fn a_registry_without_the_volume_api_says_so() {
    let sb = Sandbox::new();
    let reg = DockerRegistry::start();
    let r = reg.addr();
    let d = model(sb.path(), 1 << 20, 7);
    let v = digest(&push(&sb, &r, &d, "bdn:ns/vol"));
    // versions falls back to the tags.
    let list = versions(&sb, &r, "bdn:ns/vol", &[]);
    assert_eq!(list.len(), 1);
    assert_eq!(digest(&list[0]), v);
    assert_eq!(list[0]["is_head"], true);
    assert!(list[0].get("lifecycle").is_none(), "{}", list[0]);
    let pinned = format!("bdn:ns/vol@{v}");
    let cases: [(&[&str], &str); 7] = [
        (&["rm", &pinned, "--yes"], "deleting versions"),
        (&["rm", "-r", "bdn:ns/vol", "--yes"], "deleting versions"),
        (&["restore", &pinned], "restoring deleted versions"),
        (
            &["update", "bdn:ns/vol", "--expires-at", "1h"],
            "volume expiry",
        ),
        (&["gc"], "garbage collection"),
        (
            &["tag", "set", &pinned, "prod", "--expires-at", "1h"],
            "tag expiry",
        ),
        (
            &["versions", "bdn:ns/vol", "--include-tombstoned"],
            "listing deleted versions",
        ),
    ];
    for (args, what) in cases {
        let line = fails(sb.sealvol(&r, args), &format!("{args:?}"));
        assert_eq!(
            line,
            format!("sealvol: registry {r} does not support {what} (it has no sealvol volume API)"),
            "{args:?}"
        );
    }
    // Nothing was deleted by any of them.
    pull_matches(&sb, &r, &pinned, &d, "still-there");
}
