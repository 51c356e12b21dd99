//! Sync schedules (SPEC.md §8.6) end to end: `sealvol sync schedule …`
//! against a real `sealvol serve` whose schedules start jobs that read a
//! folder on its host, as a training run writing checkpoints would. A run
//! of an unchanged source must seal nothing new and read nothing; a changed
//! one must seal a new version and move the tag; pause, resume, delete and
//! a restart must do what they say; two replicas sharing PostgreSQL must
//! start each run once; and only those who may push to the destination may
//! make or change a schedule.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use base64::Engine as _;
use sealvol_tests::{
    assert_same_tree, fails, host, htpasswd_line, json, noise, ok, s, write, Moto, Postgres,
    Sandbox, Server,
};
use serde_json::{json, Value};

const MIB: usize = 1 << 20;
/// Schedules in these tests run every 2 s: the registry's floor (a minute
/// by default) is lowered for them.
const CONFIG: &str = "sync_workers = 2\nsync_schedule_min_seconds = 2";

/// A registry that may read `src` with `dir://`, and the sandbox its CLI
/// runs in.
struct Registry {
    sb: Sandbox,
    server: Option<Server>,
    config: String,
}

impl Registry {
    fn start(src: &Path, extra: &str) -> Registry {
        let sb = Sandbox::new();
        let config = format!("{CONFIG}\nsync_dir_roots = [{:?}]\n{extra}", s(src));
        let server = Server::start_config_env(&sb.path().join("registry"), &config, &[]);
        Registry {
            sb,
            server: Some(server),
            config,
        }
    }

    fn host(&self) -> String {
        host(self.server.as_ref().expect("running"))
    }

    fn sealvol(&self, args: &[&str]) -> Output {
        self.sb.sealvol(&self.host(), args)
    }

    /// `sealvol sync schedule ARGS --registry HOST --output json`.
    fn schedule_json(&self, args: &[&str]) -> Value {
        let h = self.host();
        let mut all = vec!["sync", "schedule"];
        all.extend_from_slice(args);
        // `create` finds the registry in --dest.
        if args[0] != "create" {
            all.extend_from_slice(&["--registry", &h]);
        }
        all.extend_from_slice(&["--output", "json"]);
        json(
            self.sealvol(&all),
            &format!("sync schedule {}", args.join(" ")),
        )
    }

    fn describe(&self, id: &str) -> Value {
        self.schedule_json(&["describe", id])
    }

    /// The schedule once `until` holds of it (its last run finished).
    fn wait(&self, id: &str, what: &str, until: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self.describe(id);
            let settled = s["last_run"]["state"]
                .as_str()
                .is_some_and(|st| ["READY", "FAILED", "CANCELED"].contains(&st));
            if settled && until(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "waiting for {what}, schedule {id}: {s}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `GET /api/v1/PATH` on the registry (which has no auth).
    fn get(&self, path: &str) -> Value {
        reqwest::blocking::get(format!("http://{}/api/v1/{path}", self.host()))
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.json())
            .unwrap_or_else(|e| panic!("GET /api/v1/{path}: {e}"))
    }

    /// The version `tag` of `volume` names.
    fn tag(&self, volume: &str, tag: &str) -> String {
        let v = self.get(&format!("volumes/{volume}"));
        v["tags"]
            .as_array()
            .expect("tags")
            .iter()
            .find(|t| t["tag"] == tag)
            .and_then(|t| t["digest"].as_str())
            .unwrap_or_else(|| panic!("{volume} has no tag {tag}: {v}"))
            .to_string()
    }

    fn version_count(&self, volume: &str) -> usize {
        let v = self.get(&format!("volumes/{volume}/-/versions"));
        v["versions"].as_array().expect("versions").len()
    }

    fn pull(&self, reference: &str, into: &str) -> PathBuf {
        let dest = self.sb.path().join(into);
        ok(
            self.sealvol(&["pull", reference, s(&dest)]),
            &format!("pull {reference}"),
        );
        dest
    }
}

fn runs(s: &Value) -> u64 {
    s["runs"].as_u64().expect("runs")
}

fn last_digest(s: &Value) -> String {
    s["last_run"]["version"]["digest"]
        .as_str()
        .unwrap_or_else(|| panic!("the last run sealed no version: {s}"))
        .to_string()
}

/// A training run's checkpoint folder.
fn checkpoint(dir: &Path, step: u64) {
    write(&dir.join("model.safetensors"), &noise(3 * MIB, step), 0o644);
    write(
        &dir.join("trainer_state.json"),
        format!("{{\"step\":{step}}}").as_bytes(),
        0o644,
    );
}

#[test]
fn a_schedule_publishes_each_new_checkpoint_and_an_unchanged_one_costs_nothing() {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("run-42/checkpoints/latest");
    checkpoint(&src, 1);
    // A file changed within the last 100 ms is read again whatever its
    // identity (SPEC.md §8.5's racy rule); the checkpoint is older.
    std::thread::sleep(Duration::from_millis(300));
    let reg = Registry::start(root.path(), "");
    let h = reg.host();
    let source = format!("dir://{}", s(&src));
    let dest = format!("{h}/ckpt/run-42:latest");

    // Text: the id on stdout.
    let id = ok(
        reg.sealvol(&[
            "sync", "schedule", "create", "--source", &source, "--dest", &dest, "--every", "2s",
        ]),
        "sync schedule create",
    );
    assert!(id.starts_with("sched-") && id.len() == 22, "{id:?}");

    // The first run is at once, and publishes the checkpoint.
    let first = reg.wait(&id, "the first run", |s| runs(s) >= 1);
    assert_eq!(first["last_run"]["state"], "READY", "{first}");
    assert_eq!(first["last_run"]["schedule"], id.as_str(), "{first}");
    assert_eq!(first["every"], "2s");
    assert_eq!(first["every_seconds"], 2);
    let v1 = last_digest(&first);
    assert_eq!(reg.tag("ckpt/run-42", "latest"), v1);
    let pulled = reg.pull(&format!("{h}/ckpt/run-42@{v1}"), "v1");
    assert_same_tree(&src, &pulled);

    // Unchanged: the next run reads no file and seals nothing new.
    let n = runs(&first);
    let again = reg.wait(&id, "a run of the unchanged source", |s| runs(s) > n);
    let p = &again["last_run"]["progress"];
    assert_eq!(last_digest(&again), v1, "{again}");
    assert_eq!(p["files_reused"], p["files_total"], "{again}");
    assert_eq!(p["bytes_reused"], p["bytes_total"], "{again}");
    assert_eq!(p["bytes_stored"], 0, "{again}");
    assert_eq!(reg.version_count("ckpt/run-42"), 1);

    // A new checkpoint: the next run seals it and moves the tag.
    checkpoint(&src, 2);
    let second = reg.wait(&id, "a run of the new checkpoint", |s| {
        s["last_run"]["version"]["digest"]
            .as_str()
            .is_some_and(|d| d != v1)
    });
    let v2 = last_digest(&second);
    assert_eq!(reg.tag("ckpt/run-42", "latest"), v2);
    assert_same_tree(&src, &reg.pull(&format!("{h}/ckpt/run-42@{v2}"), "v2"));
    let p = &second["last_run"]["progress"];
    assert!(
        p["bytes_stored"].as_u64().unwrap() >= 3 * MIB as u64,
        "{second}"
    );

    // Listed, in text and JSON, with the last run.
    let text = ok(
        reg.sealvol(&["sync", "schedule", "list", "--registry", &h]),
        "sync schedule list",
    );
    assert!(text.starts_with("ID "), "{text}");
    assert!(text.contains(&id) && text.contains("READY"), "{text}");
    let listed = reg.schedule_json(&["list"]);
    assert_eq!(listed["schedules"][0]["id"], id.as_str(), "{listed}");
    assert!(
        listed["schedules"][0]["dest_ref"]
            .as_str()
            .unwrap()
            .ends_with("ckpt/run-42:latest"),
        "{listed}"
    );
    // The web view's sync page lists it.
    let page = reqwest::blocking::get(format!("http://{h}/ui/syncs"))
        .unwrap()
        .text()
        .unwrap();
    assert!(page.contains("Schedules") && page.contains(&id), "{page}");

    // Paused: no run starts; the next run is not shown.
    let paused = reg.schedule_json(&["pause", &id]);
    assert_eq!(paused["changed"], true, "{paused}");
    assert_eq!(paused["schedule"]["next_run_at"], Value::Null, "{paused}");
    let again = reg.schedule_json(&["pause", &id]);
    assert_eq!(again["changed"], false, "{again}");
    // Let a job queued just before the pause finish.
    let settled = reg.wait(&id, "the last run before the pause", |_| true);
    std::thread::sleep(Duration::from_secs(5));
    let still = reg.describe(&id);
    assert_eq!(
        runs(&still),
        runs(&settled),
        "a paused schedule ran: {still}"
    );
    assert_eq!(still["paused"], true);

    // Resumed: it runs at once.
    let n = runs(&still);
    let resumed = reg.schedule_json(&["resume", &id]);
    assert_eq!(resumed["changed"], true, "{resumed}");
    reg.wait(&id, "a run after resume", |s| runs(s) > n);

    // Deleted: gone, and no job of it starts any more.
    ok(
        reg.sealvol(&["sync", "schedule", "delete", &id, "--registry", &h]),
        "sync schedule delete",
    );
    let gone = fails(
        reg.sealvol(&["sync", "schedule", "describe", &id, "--registry", &h]),
        "describe a deleted schedule",
    );
    assert!(gone.contains("not found"), "{gone}");
    let jobs_of = |reg: &Registry| -> usize {
        let list = json(
            reg.sealvol(&["sync", "list", "--registry", &h, "--output", "json"]),
            "sync list",
        );
        list["syncs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["schedule"] == id.as_str())
            .count()
    };
    // A job queued in the same instant as the delete may still start.
    std::thread::sleep(Duration::from_secs(1));
    let before = jobs_of(&reg);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(jobs_of(&reg), before, "a deleted schedule started a job");
}

#[test]
fn schedules_survive_a_restart_and_bad_ones_are_refused_with_one_line() {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("ckpt");
    checkpoint(&src, 7);
    let mut reg = Registry::start(root.path(), "");
    let h = reg.host();
    let source = format!("dir://{}", s(&src));
    let dest = format!("{h}/ckpt/run-7:latest");

    for (every, why) in [
        ("1s", "every 2s to"),
        ("soon", "not a duration"),
        ("31d", "to 30days"),
    ] {
        let line = fails(
            reg.sealvol(&[
                "sync", "schedule", "create", "--source", &source, "--dest", &dest, "--every",
                every,
            ]),
            &format!("--every {every}"),
        );
        assert!(line.contains(why), "--every {every}: {line}");
    }
    // A source the registry may not read is refused when made, not later.
    let line = fails(
        reg.sealvol(&[
            "sync",
            "schedule",
            "create",
            "--source",
            "dir:///etc",
            "--dest",
            &dest,
            "--every",
            "1m",
        ]),
        "a dir:// source outside sync_dir_roots",
    );
    assert!(line.contains("sync_dir_roots"), "{line}");
    let line = fails(
        reg.sealvol(&[
            "sync",
            "schedule",
            "describe",
            "sched-0123456789abcdef",
            "--registry",
            &h,
        ]),
        "an unknown schedule",
    );
    assert!(line.contains("not found on registry"), "{line}");
    let none = ok(
        reg.sealvol(&[
            "sync",
            "schedule",
            "list",
            "--registry",
            &h,
            "--output",
            "json",
        ]),
        "an empty list",
    );
    assert_eq!(
        serde_json::from_str::<Value>(&none).unwrap()["schedules"],
        json!([])
    );

    let made = reg.schedule_json(&[
        "create",
        "--source",
        &source,
        "--dest",
        &dest,
        "--every",
        "2s",
        "--include",
        "*.json",
    ]);
    let id = made["id"].as_str().unwrap().to_string();
    let before = reg.wait(&id, "the first run", |s| runs(s) >= 1);
    assert_eq!(before["include"], json!(["*.json"]));
    // Only what --include selects was synced.
    let v = last_digest(&before);
    let pulled = reg.pull(&format!("{h}/ckpt/run-7@{v}"), "first");
    assert!(pulled.join("trainer_state.json").exists());
    assert!(!pulled.join("model.safetensors").exists());

    // A crash and a restart keep the schedule, and it runs on.
    let server = reg.server.take().unwrap();
    reg.server = Some(server.kill_and_restart(&reg.config, &[]));
    let n = runs(&reg.describe(&id));
    let after = reg.wait(&id, "a run after the restart", |s| runs(s) > n);
    assert_eq!(after["id"], id.as_str());
    assert_eq!(last_digest(&after), v);
}

fn basic(user: &str) -> String {
    let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:pw-{user}-1234"));
    format!("Basic {b}")
}

/// `METHOD /api/v1/PATH` as `user`: the status and the answer.
fn call(url: &str, method: &str, path: &str, user: &str, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::blocking::Client::new();
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = client
        .request(method, format!("{url}/api/v1/{path}"))
        .header("authorization", basic(user))
        // API writes must say they are JSON (SPEC.md §7.5).
        .header("content-type", "application/json");
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().unwrap_or(Value::Null))
}

#[test]
fn only_those_who_may_push_to_the_destination_make_or_change_a_schedule() {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("ckpt");
    checkpoint(&src, 3);
    let sb = Sandbox::new();
    let htpasswd = sb.path().join("htpasswd");
    let users = ["admin", "writer", "reader", "stranger"];
    let lines: String = users
        .iter()
        .map(|u| htpasswd_line(u, &format!("pw-{u}-1234")))
        .collect();
    std::fs::write(&htpasswd, lines).unwrap();
    let config = format!(
        "{CONFIG}\nsync_dir_roots = [{:?}]\n[auth]\nhtpasswd = {:?}\nadmins = [\"admin\"]\n\
         [[auth.access]]\nrepositories = [\"ckpt/**\"]\nusers = [\"writer\"]\nactions = [\"pull\", \"push\"]\n\
         [[auth.access]]\nrepositories = [\"ckpt/**\"]\nusers = [\"reader\"]\nactions = [\"pull\"]\n",
        s(root.path()),
        s(&htpasswd)
    );
    let server = Server::start_config_env(&sb.path().join("registry"), &config, &[]);
    let url = server.url.clone();
    let body = json!({
        "source": format!("dir://{}", s(&src)),
        "dest": {"name": "ckpt/run-3", "tag": "latest"},
        "every": "1h",
    });

    for user in ["reader", "stranger"] {
        let (status, answer) = call(&url, "POST", "schedules", user, Some(body.clone()));
        assert_eq!(status, 403, "{user}: {answer}");
        assert_eq!(answer["errors"][0]["code"], "DENIED", "{user}: {answer}");
    }
    let (status, made) = call(&url, "POST", "schedules", "writer", Some(body.clone()));
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_string();
    assert!(made["next_run_at"].is_string(), "{made}");

    // A reader sees it; a stranger neither lists nor reads it.
    let (status, seen) = call(&url, "GET", &format!("schedules/{id}"), "reader", None);
    assert_eq!(status, 200, "{seen}");
    let (_, listed) = call(&url, "GET", "schedules", "stranger", None);
    assert_eq!(listed["schedules"], json!([]), "{listed}");
    let (status, _) = call(&url, "GET", &format!("schedules/{id}"), "stranger", None);
    assert_eq!(status, 403);
    // Only pushers pause, resume or delete.
    for (method, path) in [
        ("POST", format!("schedules/{id}/pause")),
        ("POST", format!("schedules/{id}/resume")),
        ("DELETE", format!("schedules/{id}")),
    ] {
        let (status, answer) = call(&url, method, &path, "reader", None);
        assert_eq!(status, 403, "{method} {path}: {answer}");
    }
    let (status, paused) = call(
        &url,
        "POST",
        &format!("schedules/{id}/pause"),
        "writer",
        None,
    );
    assert_eq!(
        (status, &paused["changed"]),
        (200, &json!(true)),
        "{paused}"
    );
    // An unknown id and an unknown sub-path answer as the API does.
    let (status, answer) = call(
        &url,
        "GET",
        "schedules/sched-0000000000000000",
        "admin",
        None,
    );
    assert_eq!(status, 404);
    assert_eq!(answer["errors"][0]["code"], "SCHEDULE_UNKNOWN", "{answer}");
    let (status, _) = call(&url, "POST", &format!("schedules/{id}/run"), "admin", None);
    assert_eq!(status, 404);
    let (status, _) = call(&url, "DELETE", &format!("schedules/{id}"), "writer", None);
    assert_eq!(status, 204);
}

#[test]
fn two_replicas_sharing_postgresql_start_each_run_once() {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("ckpt");
    checkpoint(&src, 5);
    let sb = Sandbox::new();
    let pg = Postgres::start();
    // Both replicas keep their blobs in one bucket and their metadata in
    // one database, as replicas behind a balancer do.
    let moto = Moto::start();
    moto.create_bucket("sealvol");
    let creds = sb.path().join("s3.credentials");
    std::fs::write(&creds, "test:test\n").unwrap();
    let config = format!(
        "{CONFIG}\nsync_dir_roots = [{:?}]\n\
         [storage]\nkind = \"s3\"\nbucket = \"sealvol\"\nendpoint = \"{}\"\ncredentials_file = {:?}\n\
         [metadata]\nkind = \"postgres\"\nurl = \"{}\"\n",
        s(root.path()),
        moto.url(),
        s(&creds),
        pg.url()
    );
    let a = Server::start_config_env(&sb.path().join("replica-a"), &config, &[]);
    let b = Server::start_config_env(&sb.path().join("replica-b"), &config, &[]);
    let started = Instant::now();
    let made = json(
        sb.sealvol(
            &host(&a),
            &[
                "sync",
                "schedule",
                "create",
                "--source",
                &format!("dir://{}", s(&src)),
                "--dest",
                &format!("{}/ckpt/run-5:latest", host(&a)),
                "--every",
                "2s",
                "--output",
                "json",
            ],
        ),
        "sync schedule create on replica A",
    );
    let id = made["id"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_secs(9));
    // Replica B sees the schedule replica A stored.
    let seen = json(
        sb.sealvol(
            &host(&b),
            &[
                "sync",
                "schedule",
                "describe",
                &id,
                "--registry",
                &host(&b),
                "--output",
                "json",
            ],
        ),
        "describe on replica B",
    );
    let elapsed = started.elapsed().as_secs_f64();
    let list = json(
        sb.sealvol(
            &host(&b),
            &["sync", "list", "--registry", &host(&b), "--output", "json"],
        ),
        "sync list on replica B",
    );
    let jobs: Vec<&Value> = list["syncs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["schedule"] == id.as_str())
        .collect();
    // Reuse records live in the shared store too: whichever replica ran a
    // later job, it read no file the first one had sealed.
    for j in jobs.iter().filter(|j| j["state"] == "READY").rev().skip(1) {
        let p = &j["progress"];
        assert_eq!(p["files_reused"], p["files_total"], "{j}");
        assert_eq!(p["bytes_stored"], 0, "{j}");
    }
    let mut created: Vec<&str> = jobs
        .iter()
        .map(|j| j["created_at"].as_str().unwrap())
        .collect();
    created.sort();
    let n = created.len() as u64;
    assert_eq!(runs(&seen), n, "{seen}");
    // One run per beat at most: two replicas starting each would double it.
    let beats = (elapsed / 2.0).floor() as u64 + 1;
    assert!(
        (2..=beats).contains(&n),
        "{n} jobs in {elapsed:.1} s of a 2 s schedule: {created:?}"
    );
    let mut distinct = created.clone();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        created.len(),
        "two jobs in one second: {created:?}"
    );
    drop((a, b));
}
