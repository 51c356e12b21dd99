//! A registry killed at the worst moments and started again: what it left
//! behind, a garbage collection pass cut off mid-sweep or a push claim
//! whose release never arrived, must not hold up the writes that follow
//! (issue 28: after 11 SIGKILLs during pushes and a GC pass, every write
//! stalled for 59 s, and for 119 s once a new pass took the lease).
//!
//! A pass is killed mid-sweep by planting what it leaves in the stopped
//! registry's metadata (the lease row and the odd sweep sequence, as
//! `registry/src/store/meta/sweeps.rs` writes them), so the kill lands where it
//! matters every time.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::blocking::Client;
use reqwest::StatusCode;
use sealvol_client::claim::{hold_push_claim, push_holder};
use sealvol_client::Remote;
use sealvol_spec::reference::VolumeRef;
use sealvol_tests::{host, json, noise, ok, s, sha256, write, Sandbox, Server};
use serde_json::Value;

fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Leaves in the stopped registry's metadata at `root` what a GC pass of
/// replica `holder` killed mid-sweep leaves: its lease (the push claim on
/// `"\0gc"`) live until `expires_at`, and the sweep sequence made odd under
/// that lease.
fn plant_dead_sweep(root: &Path, holder: &str, expires_at: u64) {
    use redb::{ReadableTable as _, TableDefinition};
    let db = redb::Database::create(root.join("meta.redb")).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let token = format!("dead-pass-of-{holder}");
        let claim = serde_json::json!({"token": token, "holder": holder, "expires_at": expires_at});
        tx.open_table(TableDefinition::<&str, &[u8]>::new("claims"))
            .unwrap()
            .insert("\0gc", claim.to_string().as_bytes())
            .unwrap();
        let mut sweeps = tx
            .open_table(TableDefinition::<&str, u64>::new("gc_sweeps"))
            .unwrap();
        let n = sweeps.get("sweeps").unwrap().map_or(0, |v| v.value());
        let odd = if n % 2 == 0 { n + 1 } else { n + 2 };
        sweeps.insert("sweeps", odd).unwrap();
        tx.open_table(TableDefinition::<&str, &str>::new("gc_sweepers"))
            .unwrap()
            .insert("sweeps", format!("{odd} {token}").as_str())
            .unwrap();
    }
    tx.commit().unwrap();
}

/// Uploads `data` to `repo` in three requests (start, one chunk, finish)
/// as distribution clients do; the finish relies on the bytes, so it is
/// the request a sweep holds up. Its status.
fn chunked_upload(c: &Client, url: &str, repo: &str, data: &[u8]) -> StatusCode {
    let r = c
        .post(format!("{url}/v2/{repo}/blobs/uploads/"))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let loc = r.headers()["location"].to_str().unwrap().to_string();
    let r = c
        .patch(format!("{url}{loc}"))
        .header("content-range", format!("0-{}", data.len() - 1))
        .body(data.to_vec())
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let loc = r.headers()["location"].to_str().unwrap().to_string();
    let sep = if loc.contains('?') { '&' } else { '?' };
    c.put(format!("{url}{loc}{sep}digest={}", sha256(data)))
        .send()
        .unwrap()
        .status()
}

fn push(sb: &Sandbox, registry: &str, seed: u64) -> Duration {
    let src = sb.path().join(format!("v{seed}"));
    write(&src.join("weights.bin"), &noise(200_000, seed), 0o644);
    let started = Instant::now();
    ok(
        sb.sealvol(registry, &["push", s(&src), "bdn:ns/vol"]),
        &format!("push v{seed}"),
    );
    started.elapsed()
}

fn gc(sb: &Sandbox, registry: &str) -> Value {
    json(sb.sealvol(registry, &["gc", "--output", "json"]), "gc")
}

/// The kill that landed inside a GC pass: the restarted registry knows the
/// lease for its own replica's (its `replica-id`), ends that pass, and
/// writes go on at once; a pass may run at once too.
#[test]
fn a_pass_this_replica_left_mid_sweep_holds_up_no_write_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("registry");
    let sb = Sandbox::new();
    let c = client();
    let mut server = Server::start_config_env(&root, "", &[]);
    let addr = host(&server);
    push(&sb, &addr, 1);
    let replica = std::fs::read_to_string(root.join("replica-id")).unwrap();

    // Each kind of write meets the dead pass first once.
    for (round, first) in ["upload", "push"].into_iter().enumerate() {
        server.kill();
        plant_dead_sweep(&root, replica.trim(), unix_now() + 60);
        server = Server::start_again(&root, &addr, "", &[]);
        let url = server.url.clone();
        let seed = 10 * round as u64 + 2;
        let upload = || {
            let started = Instant::now();
            let status = chunked_upload(&c, &url, "ns/raw", &noise(300_000, seed));
            assert_eq!(status, StatusCode::CREATED);
            started.elapsed()
        };
        let took = if first == "upload" {
            upload()
        } else {
            push(&sb, &addr, seed)
        };
        assert!(
            took < Duration::from_secs(5),
            "the first {first} after the restart took {took:?}: it waited on the dead pass"
        );
        assert!(upload() < Duration::from_secs(5));
        assert!(push(&sb, &addr, seed + 1) < Duration::from_secs(5));
        // The lease is free: a pass runs now instead of TOOMANYREQUESTS.
        gc(&sb, &addr);
    }
}

/// Another replica's dead pass is another matter: its lease is all this
/// replica knows of it, so writes wait for that lease to lapse, and then
/// go on.
#[test]
fn another_replicas_pass_left_mid_sweep_holds_writes_until_its_lease_lapses() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("registry");
    let sb = Sandbox::new();
    let c = client();
    let server = Server::start_config_env(&root, "", &[]);
    let addr = host(&server);
    push(&sb, &addr, 1);
    server.kill();
    let expires_at = unix_now() + 6;
    plant_dead_sweep(&root, "another-replica", expires_at);
    let server = Server::start_again(&root, &addr, "", &[]);
    let lapses = UNIX_EPOCH + Duration::from_secs(expires_at);

    let began = SystemTime::now();
    let status = chunked_upload(&c, &server.url, "ns/raw", &noise(300_000, 2));
    let ended = SystemTime::now();
    assert_eq!(status, StatusCode::CREATED);
    if began + Duration::from_secs(1) < lapses {
        assert!(
            ended + Duration::from_millis(100) >= lapses,
            "the upload went on {:?} before another replica's lease lapsed",
            lapses.duration_since(ended).unwrap_or_default()
        );
    }
    assert!(
        ended < lapses + Duration::from_secs(5),
        "the upload waited {:?} past the lease",
        ended.duration_since(lapses).unwrap_or_default()
    );
    gc(&sb, &addr);
}

/// A push claim whose answer was lost is asked for again by the same
/// holder (the client retries the POST): it is that holder's claim, given
/// back with its token, while another holder is still refused.
#[test]
fn a_claim_asked_for_again_by_its_holder_is_given_back() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_config_env(&tmp.path().join("registry"), "", &[]);
    let c = client();
    let claim = |holder: &str| {
        c.post(format!("{}/api/v1/volumes/ns/vol/-/claim", server.url))
            .header("content-type", "application/json")
            .body(serde_json::json!({ "holder": holder }).to_string())
            .send()
            .unwrap()
    };
    let first = claim("sealvol push h pid 7 push 1");
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().unwrap();
    let again = claim("sealvol push h pid 7 push 1");
    assert_eq!(
        again.status(),
        StatusCode::CREATED,
        "refused by its own claim"
    );
    let again: Value = again.json().unwrap();
    assert_eq!(again["token"], first["token"]);

    let other = claim("sealvol push h pid 7 push 2");
    assert_eq!(other.status(), StatusCode::CONFLICT);
    let other: Value = other.json().unwrap();
    assert_eq!(other["errors"][0]["code"], "PUSH_IN_PROGRESS");
}

/// The registry is away (restarting) when a push gives its claim back: the
/// client asks again until it is back, so the next push is not refused
/// until the claim lapses.
#[test]
fn a_claim_release_is_retried_until_the_registry_is_back() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("registry");
    let server = Server::start_config_env(&root, "", &[]);
    let addr = host(&server);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let remote = Remote::connect(&addr, false).unwrap();
    let volume: VolumeRef = format!("{addr}/ns/vol").parse().unwrap();
    let claim = rt
        .block_on(hold_push_claim(&remote, &volume, &push_holder()))
        .unwrap()
        .expect("the registry has the volume API");

    server.kill();
    let started = Instant::now();
    let release = rt.spawn(claim.release());
    // Long enough for the first attempts to be refused.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!release.is_finished(), "the release gave up at once");
    let server = Server::start_again(&root, &addr, "", &[]);
    rt.block_on(release).unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "the release took {took:?}");

    let next = client()
        .post(format!("{}/api/v1/volumes/ns/vol/-/claim", server.url))
        .header("content-type", "application/json")
        .body(serde_json::json!({ "holder": "the next push" }).to_string())
        .send()
        .unwrap();
    assert_eq!(
        next.status(),
        StatusCode::CREATED,
        "the claim was not released: {}",
        next.text().unwrap_or_default()
    );
}
