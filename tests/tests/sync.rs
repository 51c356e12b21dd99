//! Sync jobs (SPEC.md §8) end to end: `sealvol sync …` and `sealvol secret
//! set` against a real `sealvol serve` that reads real servers on loopback —
//! moto (S3), azurite (Azure Blob), gcp-storage-emulator (GCS), the Hugging
//! Face Hub fixture (`tests/fixtures/hf_hub.py`) and a folder on its host.
//! Every sealed version is pulled back and compared byte for byte with what
//! the source holds; failures are checked by their job error code; a
//! registry killed mid-job must seal, after a restart, the same version
//! digest as a job that ran through.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use sealvol_spec::tree::EntryData;
use sealvol_spec::ChunkingParams;
use sealvol_tests::forge::Mirror;
use sealvol_tests::{
    assert_same_tree, fails, host, json, noise, ok, s, tree, write, Azurite, GcsEmulator, HfHub,
    Moto, Node, Sandbox, Server, AZURITE_ACCOUNT,
};
use serde_json::Value;

const MIB: usize = 1 << 20;
const CONFIG: &str = "sync_workers = 2";

/// A registry that runs sync jobs, with `env` naming the sources'
/// endpoints, and the sandbox its CLI runs in.
struct Registry {
    sb: Sandbox,
    server: Option<Server>,
    config: &'static str,
    env: Vec<(String, String)>,
}

impl Registry {
    fn start(env: &[(&str, &str)]) -> Registry {
        Registry::start_config(CONFIG, env)
    }

    /// A registry with `config` as its `registry.toml` lines.
    fn start_config(config: &'static str, env: &[(&str, &str)]) -> Registry {
        let sb = Sandbox::new();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let server = Server::start_config_env(&sb.path().join("registry"), config, &pairs(&env));
        Registry {
            sb,
            server: Some(server),
            config,
            env,
        }
    }

    fn host(&self) -> String {
        host(self.server.as_ref().expect("running"))
    }

    /// SIGKILL, then the same registry again on the same root and port.
    fn crash_and_restart(&mut self) {
        let server = self.server.take().expect("running");
        self.server = Some(server.kill_and_restart(self.config, &pairs(&self.env)));
    }

    fn sealvol(&self, args: &[&str]) -> Output {
        self.sb.sealvol(&self.host(), args)
    }

    /// `sealvol secret set NAME --for URI…` with `value` on standard input.
    fn set_secret(&self, name: &str, value: &str, for_sources: &[&str]) {
        let h = self.host();
        let mut args = vec!["secret", "set", name, "--registry", &h];
        for f in for_sources {
            args.extend_from_slice(&["--for", f]);
        }
        ok(
            self.sb.sealvol_stdin(&h, &args, value.as_bytes()),
            &format!("secret set {name}"),
        );
    }

    /// `sealvol sync start --source SOURCE --dest HOST/DEST EXTRA… --output json`.
    fn start_args(&self, source: &str, dest: &str, extra: &[&str]) -> Output {
        let dest = format!("{}/{dest}", self.host());
        let mut args = vec![
            "sync", "start", "--source", source, "--dest", &dest, "--output", "json",
        ];
        args.extend_from_slice(extra);
        self.sealvol(&args)
    }

    /// Starts a job without waiting; the job as created.
    fn start_job(&self, source: &str, dest: &str, extra: &[&str]) -> Value {
        let job = json(
            self.start_args(source, dest, extra),
            &format!("sync start {source}"),
        );
        let id = id(&job);
        assert!(
            id.len() == 21
                && id.starts_with("sync-")
                && id[5..].bytes().all(|b| b.is_ascii_hexdigit()),
            "job id {id:?} is not sync-<16 hex>"
        );
        job
    }

    /// `sync start … --wait --output json`, which must end READY; the job,
    /// checked against the ref it names.
    fn sync_ready(&self, source: &str, dest: &str, extra: &[&str]) -> Value {
        let mut args = vec!["--wait"];
        args.extend_from_slice(extra);
        let job = json(
            self.start_args(source, dest, &args),
            &format!("sync start --wait {source}"),
        );
        assert_eq!(job["state"], "READY", "{job}");
        assert_eq!(job["source"], source, "{job}");
        assert!(job["error"].is_null(), "{job}");
        let reference = job["ref"]
            .as_str()
            .unwrap_or_else(|| panic!("no ref: {job}"));
        // The full ref; `bdn:` since the registry is the sandbox's default.
        let name = dest.split(':').next().unwrap();
        let d = digest(&job);
        assert!(
            reference == format!("{}/{name}@{d}", self.host())
                || reference == format!("bdn:{name}@{d}"),
            "the ref {reference} does not name {name}@{d}: {job}"
        );
        let p = &job["progress"];
        assert_eq!(p["files_done"], p["files_total"], "{job}");
        assert_eq!(p["bytes_done"], p["bytes_total"], "{job}");
        job
    }

    /// `sync start --wait` that must end FAILED: the one stderr line
    /// (`sealvol: sync ID failed: CODE: message`) and the job as described
    /// afterwards.
    fn sync_failed(&self, source: &str, dest: &str, extra: &[&str]) -> (String, Value) {
        let mut args = vec!["--wait"];
        args.extend_from_slice(extra);
        let line = fails(
            self.start_args(source, dest, &args),
            &format!("sync start --wait {source}"),
        );
        let id = line
            .strip_prefix("sealvol: sync ")
            .and_then(|rest| rest.split_once(" failed: "))
            .map(|(id, _)| id.to_string())
            .unwrap_or_else(|| panic!("not `sealvol: sync ID failed: …`: {line:?}"));
        let job = self.describe(&id);
        assert_eq!(job["state"], "FAILED", "{job}");
        assert!(
            job["version"].is_null(),
            "a failed job names a version: {job}"
        );
        let code = job["error"]["code"].as_str().unwrap_or_default();
        assert!(
            line.starts_with(&format!("sealvol: sync {id} failed: {code}: ")),
            "the error line does not carry the job's code {code}: {line:?}"
        );
        (line, job)
    }

    /// `sync cancel ID --output json`: `{"changed":…,"sync":…}`.
    fn cancel(&self, id: &str) -> Value {
        let h = self.host();
        json(
            self.sealvol(&["sync", "cancel", id, "--registry", &h, "--output", "json"]),
            &format!("sync cancel {id}"),
        )
    }

    fn describe(&self, id: &str) -> Value {
        let h = self.host();
        json(
            self.sealvol(&["sync", "describe", id, "--registry", &h, "--output", "json"]),
            &format!("sync describe {id}"),
        )
    }

    /// Describes job `id` until `until` holds; panics after `timeout` or
    /// when the job ends (READY, FAILED, CANCELED) without it holding.
    fn poll(
        &self,
        id: &str,
        what: &str,
        timeout: Duration,
        until: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let job = self.describe(id);
            if until(&job) {
                return job;
            }
            let state = job["state"].as_str().unwrap_or_default();
            if ["READY", "FAILED", "CANCELED"].contains(&state) {
                panic!("waiting for {what}, job {id} ended: {job}");
            }
            if Instant::now() > deadline {
                panic!("waiting for {what}, job {id} after {timeout:?}: {job}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Pulls `reference` into a fresh folder under the sandbox.
    fn pull(&self, reference: &str, into: &str) -> std::path::PathBuf {
        let dir = self.sb.path().join(into);
        ok(
            self.sealvol(&["pull", reference, s(&dir), "--output", "json"]),
            &format!("pull {reference}"),
        );
        dir
    }

    /// `sealvol versions HOST/NAME --output json`: the alive versions.
    fn versions(&self, name: &str) -> Vec<Value> {
        let r = format!("{}/{name}", self.host());
        match json(
            self.sealvol(&["versions", &r, "--output", "json"]),
            &format!("versions {r}"),
        ) {
            Value::Array(a) => a,
            other => panic!("versions: not a list: {other}"),
        }
    }
}

fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn id(job: &Value) -> String {
    job["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id: {job}"))
        .to_string()
}

/// The `b3:` digest of the version a READY job sealed.
fn digest(job: &Value) -> String {
    let d = job["version"]["digest"]
        .as_str()
        .unwrap_or_else(|| panic!("no version digest: {job}"))
        .to_string();
    assert!(
        d.len() == 67 && d.starts_with("b3:"),
        "not a b3 digest: {d}"
    );
    d
}

fn progress(job: &Value, field: &str) -> u64 {
    job["progress"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("no progress.{field}: {job}"))
}

/// Asserts that `dir` holds exactly `files` (path, bytes) with mode 0644,
/// their folders with mode 0755, and nothing else: what a sync from an
/// object store or the Hub must seal.
fn assert_files(dir: &Path, files: &[(&str, &[u8])]) {
    let mut want = std::collections::BTreeMap::new();
    for (path, bytes) in files {
        want.insert(
            path.to_string(),
            Node::File {
                mode: 0o644,
                len: bytes.len() as u64,
                sha256: sealvol_tests::sha256(bytes),
            },
        );
        let mut parent = Path::new(path).parent();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            want.insert(s(p).to_string(), Node::Dir { mode: 0o755 });
            parent = p.parent();
        }
    }
    let what = format!("{} is not the source", dir.display());
    sealvol_tests::assert_tree(&want, &tree(dir), &what);
}

/// Files of a few sizes, nested: several chunks each for the large ones
/// (the default chunks are 512 KiB/2 MiB/8 MiB), an empty one, one below
/// the Hub's LFS size.
fn model_files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "config.json",
            br#"{"architectures":["Tiny"],"hidden":64}"#.to_vec(),
        ),
        ("model-00001-of-00002.safetensors", noise(5 * MIB + 3, 1)),
        ("model-00002-of-00002.safetensors", noise(3 * MIB, 2)),
        ("tokenizer/tokenizer.json", noise(40_000, 3)),
        ("tokenizer/merges/empty.txt", Vec::new()),
    ]
}

fn as_refs<'a>(files: &'a [(&'static str, Vec<u8>)]) -> Vec<(&'static str, &'a [u8])> {
    files.iter().map(|(p, b)| (*p, b.as_slice())).collect()
}

/// A model repository on the Hub fixture: `root/models/ORG/REPO/PATH`.
fn hf_repo(root: &Path, repo: &str, files: &[(&str, &[u8])]) {
    for (path, bytes) in files {
        write(&root.join("models").join(repo).join(path), bytes, 0o644);
    }
}

#[test]
fn s3_prefix_syncs_byte_identical_filters_dedups_and_fails_on_a_missing_bucket() {
    let moto = Moto::start();
    moto.create_bucket("models");
    let files = model_files();
    for (path, bytes) in &files {
        moto.put("models", &format!("org/llm/{path}"), bytes);
    }
    // Keys beside the prefix, not under it.
    moto.put("models", "org/llm-v2/config.json", b"{}");
    moto.put("models", "org/other.bin", b"not under the prefix");

    let reg = Registry::start(&[
        ("AWS_ENDPOINT_URL", moto.url()),
        ("AWS_REGION", "us-east-1"),
    ]);
    reg.set_secret("moto", "k:s", &["s3://models/org", "s3://no-such-bucket"]);
    let listed = json(
        reg.sealvol(&[
            "secret",
            "list",
            "--registry",
            &reg.host(),
            "--output",
            "json",
        ]),
        "secret list",
    );
    assert_eq!(
        listed["secrets"],
        serde_json::json!([{"name": "moto", "for": ["s3://models/org", "s3://no-such-bucket"], "dest": []}]),
        "{listed}"
    );
    assert!(
        !listed.to_string().contains("k:s"),
        "a secret value came back: {listed}"
    );

    let job = reg.sync_ready("s3://models/org/llm", "s3/llm:v1", &["--secret", "moto"]);
    let total: usize = files.iter().map(|(_, b)| b.len()).sum();
    assert_eq!(progress(&job, "files_total"), files.len() as u64, "{job}");
    assert_eq!(progress(&job, "bytes_total"), total as u64, "{job}");
    assert!(progress(&job, "bytes_stored") > 0, "{job}");
    assert_eq!(job["attempts"], 1, "{job}");
    assert_eq!(job["dest"]["name"], "s3/llm", "{job}");
    assert_eq!(job["dest"]["tag"], "v1", "{job}");
    assert_eq!(job["secret"], "moto", "{job}");
    let v1 = digest(&job);
    let pulled = reg.pull(job["ref"].as_str().unwrap(), "llm");
    assert_files(&pulled, &as_refs(&files));
    // The seal moved head and the tag.
    let versions = reg.versions("s3/llm");
    assert_eq!(versions.len(), 1, "{versions:?}");
    assert_eq!(versions[0]["digest"], v1.as_str());
    assert_eq!(versions[0]["is_head"], true);
    assert_eq!(versions[0]["tags"], serde_json::json!(["v1"]));
    let by_tag = reg.pull(&format!("{}/s3/llm:v1", reg.host()), "llm-v1");
    assert_files(&by_tag, &as_refs(&files));

    // Filters: includes add up, an exclude wins, `*` crosses `/`.
    let job = reg.sync_ready(
        "s3://models/org/llm",
        "s3/filtered",
        &[
            "--secret",
            "moto",
            "--include",
            "*.safetensors",
            "--include",
            "tokenizer/*",
            "--exclude",
            "*.json",
        ],
    );
    let picked: Vec<(&str, &[u8])> = as_refs(&files)
        .into_iter()
        .filter(|(p, _)| p.ends_with(".safetensors") || *p == "tokenizer/merges/empty.txt")
        .collect();
    assert_eq!(progress(&job, "files_total"), picked.len() as u64, "{job}");
    assert_eq!(
        job["include"],
        serde_json::json!(["*.safetensors", "tokenizer/*"])
    );
    assert_eq!(job["exclude"], serde_json::json!(["*.json"]));
    assert_files(&reg.pull(job["ref"].as_str().unwrap(), "filtered"), &picked);

    // The same source again: nothing new to store, the same version.
    let again = reg.sync_ready("s3://models/org/llm", "s3/llm:v2", &["--secret", "moto"]);
    assert_eq!(digest(&again), v1, "the same source sealed another version");
    let described = reg.describe(&id(&again));
    assert_eq!(described["state"], "READY", "{described}");
    assert_eq!(progress(&described, "bytes_stored"), 0, "{described}");
    assert_eq!(
        progress(&described, "bytes_done"),
        total as u64,
        "{described}"
    );
    let versions = reg.versions("s3/llm");
    assert_eq!(versions.len(), 1, "{versions:?}");
    let mut tags: Vec<String> = versions[0]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    tags.sort();
    assert_eq!(tags, ["v1", "v2"], "{versions:?}");

    // A bucket that does not exist: not retried, no version.
    let started = Instant::now();
    let (line, job) = reg.sync_failed("s3://no-such-bucket/x", "s3/missing", &["--secret", "moto"]);
    assert_eq!(job["error"]["code"], "SOURCE_NOT_FOUND", "{line}\n{job}");
    assert_eq!(job["attempts"], 1, "{job}");
    assert!(job["retrying"].is_null(), "{job}");
    // Retrying would take 1+2+4+8+16 s of backoff at least.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "a missing bucket took {:?} to fail: retried?",
        started.elapsed()
    );
    assert!(
        reg.versions_or_none("s3/missing").is_empty(),
        "a failed job left a version"
    );

    // A secret the registry does not have is refused when the job is asked for.
    let line = fails(
        reg.start_args("s3://models/org/llm", "s3/nosecret", &["--secret", "nope"]),
        "sync start --secret nope",
    );
    assert!(line.contains("nope"), "{line}");
}

#[test]
fn s3_folder_markers_are_skipped() {
    let moto = Moto::start();
    moto.create_bucket("marked");
    let weights = noise(100_000, 21);
    // What consoles and `aws s3api put-object --key dir/` leave: empty
    // objects whose keys end in `/`, for the folder and one inside it.
    moto.put("marked", "ckpt/", b"");
    moto.put("marked", "ckpt/shards/", b"");
    moto.put("marked", "ckpt/shards/model.safetensors", &weights);
    moto.put("marked", "ckpt/empty/", b"");
    let reg = Registry::start(&[("AWS_ENDPOINT_URL", moto.url())]);
    reg.set_secret("moto", "k:s", &["s3://marked"]);
    let job = reg.sync_ready("s3://marked/ckpt", "s3/marked", &["--secret", "moto"]);
    assert_eq!(progress(&job, "files_total"), 1, "{job}");
    assert_files(
        &reg.pull(job["ref"].as_str().unwrap(), "marked"),
        &[("shards/model.safetensors", &weights)],
    );
    // Without the ETag check (for ETags that are not MD5s): the same
    // version, sizes still checked.
    let unchecked = reg.sync_ready(
        "s3://marked/ckpt?checksum=none",
        "s3/marked-unchecked",
        &["--secret", "moto"],
    );
    assert_eq!(digest(&unchecked), digest(&job), "{unchecked}");
    // An option the registry does not know is refused with the job.
    let line = fails(
        reg.start_args(
            "s3://marked/ckpt?checksum=md5",
            "s3/marked-bad",
            &["--secret", "moto"],
        ),
        "sync start ?checksum=md5",
    );
    assert!(line.contains("checksum=md5"), "{line}");
}

#[test]
fn azure_container_prefix_syncs_byte_identical() {
    let azurite = Azurite::start();
    azurite.create_container("weights");
    let files = model_files();
    for (path, bytes) in &files {
        azurite.put("weights", &format!("run1/{path}"), bytes);
    }
    azurite.put("weights", "run2/config.json", b"{}");
    let reg = Registry::start(&[("AZURITE_BLOB_STORAGE_URL", azurite.url())]);
    let source = format!("azure://{AZURITE_ACCOUNT}/weights/run1");
    let job = reg.sync_ready(&source, "azure/run1:latest", &[]);
    assert_eq!(progress(&job, "files_total"), files.len() as u64, "{job}");
    assert_files(
        &reg.pull(job["ref"].as_str().unwrap(), "run1"),
        &as_refs(&files),
    );
}

#[test]
fn gcs_bucket_prefix_syncs_byte_identical() {
    let gcs = GcsEmulator::start();
    gcs.create_bucket("ckpts");
    let files = model_files();
    for (path, bytes) in &files {
        gcs.put("ckpts", &format!("step-100/{path}"), bytes);
    }
    gcs.put("ckpts", "step-200/config.json", b"{}");
    let reg = Registry::start(&[("STORAGE_EMULATOR_HOST", gcs.url())]);
    let job = reg.sync_ready("gs://ckpts/step-100", "gcs/step-100", &[]);
    assert_eq!(progress(&job, "files_total"), files.len() as u64, "{job}");
    assert_files(
        &reg.pull(job["ref"].as_str().unwrap(), "step"),
        &as_refs(&files),
    );
}

#[test]
fn hf_repo_syncs_filtered_and_verified() {
    let hub_root = tempfile::tempdir().unwrap();
    let files = model_files();
    let mut all = as_refs(&files);
    all.push(("README.md", b"# tiny\n"));
    hf_repo(hub_root.path(), "org/tiny", &all);
    // A repository whose Hub lists a wrong SHA-256 for one LFS file.
    let weights = noise(2 * MIB, 9);
    hf_repo(
        hub_root.path(),
        "org/corrupt",
        &[("config.json", b"{}"), ("model.safetensors", &weights)],
    );
    write(
        &hub_root
            .path()
            .join("models/org/corrupt/model.safetensors.sha256-override"),
        sealvol_tests::sha256(b"other bytes")
            .trim_start_matches("sha256:")
            .as_bytes(),
        0o644,
    );
    // A private repository.
    hf_repo(
        hub_root.path(),
        "org/private",
        &[("model.safetensors", &weights)],
    );
    write(
        &hub_root.path().join("models/org/private/.token"),
        b"hf_secret_token",
        0o644,
    );
    let hub = HfHub::start(hub_root.path(), None, 0);
    let reg = Registry::start(&[("HF_ENDPOINT", hub.url())]);

    let job = reg.sync_ready(
        "hf://org/tiny",
        "hf/tiny:main",
        &["--include", "*.safetensors", "--include", "*.json"],
    );
    let picked: Vec<(&str, &[u8])> = as_refs(&files)
        .into_iter()
        .filter(|(p, _)| p.ends_with(".safetensors") || p.ends_with(".json"))
        .collect();
    assert_eq!(progress(&job, "files_total"), picked.len() as u64, "{job}");
    assert_files(&reg.pull(job["ref"].as_str().unwrap(), "tiny"), &picked);
    // `main` was pinned to the commit it named when the job listed it.
    let pinned = job["pinned_source"].as_str().unwrap_or_default();
    let commit = pinned.strip_prefix("hf://org/tiny@").unwrap_or_default();
    assert!(
        commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
        "{job}"
    );

    let (line, job) = reg.sync_failed("hf://org/corrupt", "hf/corrupt", &[]);
    assert_eq!(job["error"]["code"], "CHECKSUM_MISMATCH", "{job}");
    assert!(
        line.contains("model.safetensors"),
        "the error does not name the file: {line}"
    );
    assert!(reg.versions_or_none("hf/corrupt").is_empty());

    let (line, job) = reg.sync_failed("hf://org/private", "hf/private", &[]);
    assert_eq!(job["error"]["code"], "SOURCE_DENIED", "{line}\n{job}");
    // The same repository with its token as the job's secret.
    reg.set_secret("hf", "hf_secret_token", &["hf://org/private"]);
    let job = reg.sync_ready("hf://org/private", "hf/private", &["--secret", "hf"]);
    assert_files(
        &reg.pull(job["ref"].as_str().unwrap(), "private"),
        &[("model.safetensors", &weights)],
    );
}

#[test]
fn hf_transient_failures_are_retried() {
    let hub_root = tempfile::tempdir().unwrap();
    let files = model_files();
    hf_repo(hub_root.path(), "org/flaky", &as_refs(&files));
    let hub = HfHub::start(hub_root.path(), None, 2);
    let reg = Registry::start(&[("HF_ENDPOINT", hub.url())]);
    let job = reg.sync_ready("hf://org/flaky", "hf/flaky", &[]);
    assert_files(
        &reg.pull(job["ref"].as_str().unwrap(), "flaky"),
        &as_refs(&files),
    );
    let refused = hub.log().lines().filter(|l| l.contains("\" 503 ")).count();
    assert_eq!(refused, 2, "the fixture's log:\n{}", hub.log());
    // Each refusal was retried, and counted (SPEC.md §8.2).
    assert_eq!(job["retries"], 2, "{job}");
    assert_eq!(reg.describe(&id(&job))["retries"], 2);
}

/// Six LFS files of 1 to 6 MiB. Through the fixture at [`SLOW_RATE`] per
/// download, four at a time as the registry reads them, the first is done
/// after about 1 s and the last after about 8 s.
fn slow_repo_files() -> Vec<(String, Vec<u8>)> {
    (0..6)
        .map(|i| {
            (
                format!("shard-{i}.safetensors"),
                noise((i as usize + 1) * MIB, 100 + i),
            )
        })
        .collect()
}

const SLOW_RATE: u64 = MIB as u64;

#[test]
fn a_registry_killed_mid_job_resumes_and_seals_the_same_version() {
    let hub_root = tempfile::tempdir().unwrap();
    let files = slow_repo_files();
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    hf_repo(hub_root.path(), "org/big", &refs);
    let slow_hub = HfHub::start(hub_root.path(), Some(SLOW_RATE), 0);
    let mut reg = Registry::start(&[("HF_ENDPOINT", slow_hub.url())]);

    let job = reg.start_job("hf://org/big", "hf/big:v1", &[]);
    let id = id(&job);
    let before = reg.poll(
        &id,
        "a file done while RUNNING",
        Duration::from_secs(60),
        |j| j["state"] == "RUNNING" && progress(j, "files_done") >= 1,
    );
    // Counted now, before the kill: the restarted registry's workers start
    // downloading at once. A download the old registry starts after this
    // takes the slot of a file recorded done meanwhile, which the restarted
    // one does not read again, so the bound below still holds.
    let downloads_before = slow_hub.downloads().len();
    let done_before = progress(&before, "files_done");
    assert!(
        done_before < files.len() as u64,
        "the job finished before the crash; slow the fixture down: {before}"
    );
    reg.crash_and_restart();
    let after = reg.describe(&id);
    assert!(
        ["QUEUED", "RUNNING", "READY"].contains(&after["state"].as_str().unwrap_or_default()),
        "after the restart: {after}"
    );
    assert!(
        progress(&after, "files_done") >= done_before,
        "files done before the crash were forgotten: {before}\nafter: {after}"
    );
    let ready = reg.poll(
        &id,
        "READY after the restart",
        Duration::from_secs(120),
        |j| j["state"] == "READY",
    );
    // Only the files not done before the crash were read again.
    let again = slow_hub.downloads()[downloads_before..].to_vec();
    assert!(
        !again.is_empty() && again.len() as u64 <= files.len() as u64 - done_before,
        "{done_before} of {} files were done before the crash, yet after it the registry \
         downloaded {again:?}",
        files.len()
    );
    let resumed = digest(&ready);
    let reference = format!("{}/hf/big@{resumed}", reg.host());
    assert_files(&reg.pull(&reference, "big"), &refs);

    // The same repository, uninterrupted, on another registry.
    let fast_hub = HfHub::start(hub_root.path(), None, 0);
    let other = Registry::start(&[("HF_ENDPOINT", fast_hub.url())]);
    let straight = other.sync_ready("hf://org/big", "hf/big", &[]);
    assert_eq!(
        digest(&straight),
        resumed,
        "a resumed job sealed another version than an uninterrupted one"
    );
}

#[test]
fn cancel_stops_a_running_job_and_seals_nothing() {
    let hub_root = tempfile::tempdir().unwrap();
    let files = slow_repo_files();
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    hf_repo(hub_root.path(), "org/big", &refs);
    let small = noise(3000, 5);
    hf_repo(
        hub_root.path(),
        "org/small",
        &[("model.safetensors", &small)],
    );
    let hub = HfHub::start(hub_root.path(), Some(SLOW_RATE), 0);
    let reg = Registry::start(&[("HF_ENDPOINT", hub.url())]);
    let h = reg.host();

    let job = reg.start_job("hf://org/big", "hf/canceled:v1", &[]);
    let id = id(&job);
    reg.poll(
        &id,
        "RUNNING with bytes read",
        Duration::from_secs(60),
        |j| j["state"] == "RUNNING" && progress(j, "bytes_done") > 0,
    );
    let canceled = json(
        reg.sealvol(&["sync", "cancel", &id, "--registry", &h, "--output", "json"]),
        "sync cancel",
    );
    assert_eq!(canceled["changed"], true, "{canceled}");
    assert_eq!(canceled["sync"]["state"], "CANCELED", "{canceled}");
    // The job stops reading: a job that went on would start the downloads
    // of the last two shards as the first two finish, about 1 s and 2 s in.
    std::thread::sleep(Duration::from_millis(300));
    let downloads = hub.downloads();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        hub.downloads(),
        downloads,
        "the canceled job went on downloading"
    );
    let job = reg.describe(&id);
    assert_eq!(job["state"], "CANCELED", "{job}");
    assert!(job["version"].is_null(), "{job}");
    assert!(
        reg.versions_or_none("hf/canceled").is_empty(),
        "a canceled job sealed a version"
    );

    let again = json(
        reg.sealvol(&["sync", "cancel", &id, "--registry", &h, "--output", "json"]),
        "sync cancel again",
    );
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(again["sync"]["state"], "CANCELED", "{again}");
    let text = ok(
        reg.sealvol(&["sync", "cancel", &id, "--registry", &h]),
        "sync cancel again (text)",
    );
    assert!(text.contains("nothing changed"), "{text}");

    // The volume is free for the next job: its claim went with the job.
    let job = reg.sync_ready("hf://org/small", "hf/canceled:v1", &[]);
    let versions = reg.versions("hf/canceled");
    assert_eq!(versions.len(), 1, "{versions:?}");
    assert_eq!(versions[0]["digest"], digest(&job).as_str());
}

#[test]
fn cancel_of_a_queued_job_takes_effect_at_once() {
    let hub_root = tempfile::tempdir().unwrap();
    let files = slow_repo_files();
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    hf_repo(hub_root.path(), "org/big", &refs);
    hf_repo(
        hub_root.path(),
        "org/small",
        &[("model.safetensors", &noise(3000, 6))],
    );
    let hub = HfHub::start(hub_root.path(), Some(SLOW_RATE), 0);
    // One worker: while A runs, B waits in the queue.
    let reg = Registry::start_config("sync_workers = 1", &[("HF_ENDPOINT", hub.url())]);

    let a = id(&reg.start_job("hf://org/big", "hf/running-a", &[]));
    reg.poll(&a, "RUNNING", Duration::from_secs(60), |j| {
        j["state"] == "RUNNING"
    });
    let b = id(&reg.start_job("hf://org/small", "hf/queued-b", &[]));
    let queued = reg.describe(&b);
    assert_eq!(queued["state"], "QUEUED", "{queued}");

    let canceled = reg.cancel(&b);
    assert_eq!(canceled["changed"], true, "{canceled}");
    assert_eq!(canceled["sync"]["state"], "CANCELED", "{canceled}");
    assert_eq!(canceled["sync"]["attempts"], 0, "{canceled}");

    let canceled = reg.cancel(&a);
    assert_eq!(canceled["changed"], true, "{canceled}");
    assert_eq!(canceled["sync"]["state"], "CANCELED", "{canceled}");
    // The worker A held is free now; B must not run on it.
    std::thread::sleep(Duration::from_secs(1));
    for (id, volume) in [(&a, "hf/running-a"), (&b, "hf/queued-b")] {
        let job = reg.describe(id);
        assert_eq!(job["state"], "CANCELED", "{job}");
        assert!(job["version"].is_null(), "{job}");
        assert!(
            reg.versions_or_none(volume).is_empty(),
            "canceled job {id} sealed a version of {volume}"
        );
    }
    assert_eq!(reg.describe(&b)["attempts"], 0);
    let downloads = hub.downloads();
    assert!(
        downloads.iter().all(|d| !d.starts_with("org/small/")),
        "the canceled queued job ran: {downloads:?}"
    );
}

#[test]
fn dir_source_keeps_the_tree_and_its_modes() {
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    write(&src.join("model.safetensors"), &noise(6 * MIB, 11), 0o644);
    write(&src.join("run.sh"), b"#!/bin/sh\necho hi\n", 0o755);
    write(&src.join("nested/deeper/notes.txt"), b"notes", 0o600);
    write(&src.join("nested/empty"), b"", 0o644);
    // dir:// reads only the folders the admin lists.
    let config = format!("{CONFIG}\nsync_dir_roots = [{:?}]", s(&src));
    let reg = Registry::start_config(Box::leak(config.into_boxed_str()), &[]);
    let h = reg.host();
    let source = format!("dir://{}", s(&src));

    // Without --wait the text output is the job id.
    let dest = format!("{h}/local/tree:v1");
    let id = ok(
        reg.sealvol(&["sync", "start", "--source", &source, "--dest", &dest]),
        "sync start (text)",
    );
    assert!(id.starts_with("sync-") && id.len() == 21, "{id:?}");
    let job = reg.poll(&id, "READY", Duration::from_secs(60), |j| {
        j["state"] == "READY"
    });
    let pulled = reg.pull(&format!("{h}/local/tree@{}", digest(&job)), "pulled");
    assert_same_tree(&src, &pulled);

    // With --wait the text output is the version's full ref.
    let reference = ok(
        reg.sealvol(&[
            "sync", "start", "--source", &source, "--dest", &dest, "--wait",
        ]),
        "sync start --wait (text)",
    );
    let expected = digest(&job);
    assert!(
        reference.ends_with(&format!("/local/tree@{expected}"))
            || reference == format!("bdn:local/tree@{expected}"),
        "{reference:?} is not the ref of {expected}"
    );

    let listed = json(
        reg.sealvol(&["sync", "list", "--registry", &h, "--output", "json"]),
        "sync list",
    );
    let ids: Vec<&str> = listed["syncs"]
        .as_array()
        .unwrap_or_else(|| panic!("no syncs: {listed}"))
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{listed}");
    assert_eq!(ids[1], id, "not newest first: {listed}");
    let mine = json(
        reg.sealvol(&["sync", "list", "--dest", &dest, "--output", "json"]),
        "sync list --dest",
    );
    assert_eq!(mine, listed, "--dest {dest} left out jobs into it");
    let other = format!("{h}/local/other");
    let none = json(
        reg.sealvol(&["sync", "list", "--dest", &other, "--output", "json"]),
        "sync list --dest",
    );
    assert_eq!(none["syncs"], serde_json::json!([]), "{none}");
}

impl Registry {
    /// The alive versions of `name`; none when the volume does not exist.
    fn versions_or_none(&self, name: &str) -> Vec<Value> {
        let r = format!("{}/{name}", self.host());
        let out = self.sealvol(&["versions", &r, "--output", "json"]);
        if !out.status.success() {
            return Vec::new();
        }
        match serde_json::from_slice(&out.stdout) {
            Ok(Value::Array(a)) => a,
            other => panic!("versions {r}: {other:?}"),
        }
    }
}

#[test]
fn a_sync_keeps_the_chunking_of_the_volumes_head() {
    // SPEC.md §4.1: a sync into a volume first published with the earlier
    // default (1/4/16 MiB) cuts as its head was cut, so an edit shares the
    // unchanged chunks; a sync into a new volume cuts with the default.
    let sb = Sandbox::new();
    let src = sb.path().join("src");
    let mut data = noise(20 * MIB, 12);
    write(&src.join("model.safetensors"), &data, 0o644);
    let config = format!("{CONFIG}\nsync_dir_roots = [{:?}]", s(&src));
    let reg = Registry::start_config(Box::leak(config.into_boxed_str()), &[]);
    let h = reg.host();
    let mirror = Mirror::new(&h);

    let earlier = ChunkingParams::EARLIER_DEFAULT;
    let sealed = mirror.publish_dir("local/old", &src, earlier);
    let v1_chunks: std::collections::BTreeSet<String> = sealed
        .chunk_locations()
        .iter()
        .map(|l| l.sha256.to_string())
        .collect();

    for b in &mut data[10 * MIB..10 * MIB + 4096] {
        *b ^= 0x5a;
    }
    write(&src.join("model.safetensors"), &data, 0o644);
    let source = format!("dir://{}", s(&src));
    for dest in ["local/old", "local/new"] {
        ok(
            reg.sealvol(&[
                "sync",
                "start",
                "--source",
                &source,
                "--dest",
                &format!("{h}/{dest}"),
                "--wait",
            ]),
            &format!("sync into {dest}"),
        );
    }
    let old = mirror.fetch_ref("local/old", "head").tree;
    assert_eq!(old.params(), earlier, "the sync re-cut the volume");
    let Some(EntryData::File { chunks, .. }) = old.get("model.safetensors").map(|e| &e.data) else {
        panic!("the synced version has the file");
    };
    let shared = chunks
        .iter()
        .filter(|c| v1_chunks.contains(&c.sha256.to_string()))
        .count();
    assert!(
        shared + 2 >= chunks.len(),
        "an edit of 4 KiB left {shared} of {} chunks shared",
        chunks.len()
    );
    let new = mirror.fetch_ref("local/new", "head").tree;
    assert_eq!(new.params(), ChunkingParams::default());
}

/// Writes a file of the source: (path, bytes).
type Put<'a> = Box<dyn Fn(&str, &[u8]) + 'a>;

/// What a source holds for the reuse scenario, and what it read so far.
struct Seeded<'a> {
    /// `sync start --source`.
    source: String,
    put: Put<'a>,
    delete: Box<dyn Fn(&str) + 'a>,
    /// The paths whose bytes the source served so far, one per read;
    /// `None` where the source keeps no count (a folder).
    reads: Box<dyn Fn() -> Option<Vec<String>> + 'a>,
}

/// SPEC.md §8.5 on one source: a re-sync of an unchanged source reads no
/// file and ends at the same version; after a file changes (its size
/// kept), another is added, one is deleted and one renamed, the next sync
/// reads only what changed and seals exactly the new contents.
fn unchanged_files_are_not_read_again(
    reg: &Registry,
    src: &Seeded,
    dest: &str,
    extra: &[&str],
) -> Value {
    let mut files: Vec<(&str, Vec<u8>)> = model_files();
    for (path, bytes) in &files {
        (src.put)(path, bytes);
    }
    // A file changed within 100 ms of a listing is not trusted (§8.5).
    std::thread::sleep(Duration::from_millis(300));
    let first = reg.sync_ready(&src.source, dest, extra);
    assert_eq!(progress(&first, "files_reused"), 0, "{first}");
    let read_first = (src.reads)();
    if let Some(r) = &read_first {
        // The empty file has no bytes to read.
        for (path, bytes) in files.iter().filter(|(_, b)| !b.is_empty()) {
            assert!(
                r.iter().any(|p| p.ends_with(path)),
                "{path} ({} bytes) was not read by the first sync: {r:?}",
                bytes.len()
            );
        }
    }

    let again = reg.sync_ready(&src.source, dest, extra);
    assert_eq!(digest(&again), digest(&first), "{again}");
    assert_eq!(
        progress(&again, "files_reused"),
        files.len() as u64,
        "{again}"
    );
    assert_eq!(
        progress(&again, "bytes_reused"),
        progress(&again, "bytes_total"),
        "{again}"
    );
    assert_eq!(progress(&again, "bytes_stored"), 0, "{again}");
    assert_eq!(
        (src.reads)(),
        read_first,
        "an unchanged re-sync read file data"
    );

    // One file changes with its size kept, one is added, one deleted, one
    // renamed.
    let changed = "model-00002-of-00002.safetensors";
    let at = files.iter().position(|(p, _)| *p == changed).unwrap();
    let mut bytes = files[at].1.clone();
    bytes[MIB] ^= 0xff;
    (src.put)(changed, &bytes);
    files[at].1 = bytes;
    (src.put)("added.bin", &noise(MIB + 7, 21));
    files.push(("added.bin", noise(MIB + 7, 21)));
    (src.delete)("tokenizer/tokenizer.json");
    files.retain(|(p, _)| *p != "tokenizer/tokenizer.json");
    let config = files.iter().position(|(p, _)| *p == "config.json").unwrap();
    let (_, config_bytes) = files.remove(config);
    (src.delete)("config.json");
    (src.put)("conf/config.json", &config_bytes);
    files.push(("conf/config.json", config_bytes));
    std::thread::sleep(Duration::from_millis(300));
    let before = (src.reads)();
    let third = reg.sync_ready(&src.source, dest, extra);
    assert_ne!(digest(&third), digest(&first), "{third}");
    let pulled = reg.pull(
        third["ref"].as_str().unwrap(),
        &format!("{}-3", dest.replace(['/', ':'], "-")),
    );
    if src.source.starts_with("dir://") {
        assert_same_tree(Path::new(src.source.trim_start_matches("dir://")), &pulled);
    } else {
        assert_files(&pulled, &as_refs(&files));
    }
    // The unchanged shard and the empty file, at least, were taken unread.
    assert!(progress(&third, "files_reused") >= 2, "{third}");
    assert_eq!(
        progress(&third, "files_total"),
        files.len() as u64,
        "{third}"
    );
    if let (Some(before), Some(after)) = (before, (src.reads)()) {
        let new: Vec<&String> = after[before.len()..].iter().collect();
        assert!(
            new.iter().any(|p| p.ends_with(changed))
                && new.iter().any(|p| p.ends_with("added.bin")),
            "the changed and the added file were not read: {new:?}"
        );
        for p in &new {
            assert!(
                [changed, "added.bin", "conf/config.json"]
                    .iter()
                    .any(|c| p.ends_with(c)),
                "{p} did not change, yet was read again: {new:?}"
            );
        }
    }
    third
}

/// The keys moto served `GET`s of object bytes for, under `bucket/`.
fn moto_reads(moto: &Moto, bucket: &str) -> Vec<String> {
    let needle = format!("\"GET /{bucket}/");
    moto.log()
        .lines()
        .filter_map(|l| {
            l.split(&needle)
                .nth(1)?
                .split([' ', '?'])
                .next()
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn s3_resync_reads_only_changed_objects() {
    s3_resync(false);
}

#[test]
fn s3_resync_of_a_versioned_bucket_reads_only_changed_objects() {
    s3_resync(true);
}

/// The reuse scenario on moto, with the bucket's versioning on or off.
fn s3_resync(versioning: bool) {
    let moto = Moto::start();
    moto.create_bucket("ckpt");
    if versioning {
        moto.enable_versioning("ckpt");
    }
    let reg = Registry::start(&[
        ("AWS_ENDPOINT_URL", moto.url()),
        ("AWS_REGION", "us-east-1"),
    ]);
    reg.set_secret("moto", "k:s", &["s3://ckpt"]);
    let src = Seeded {
        source: "s3://ckpt/run-42".into(),
        put: Box::new(|p, b| moto.put("ckpt", &format!("run-42/{p}"), b)),
        delete: Box::new(|p| moto.delete("ckpt", &format!("run-42/{p}"))),
        reads: Box::new(|| Some(moto_reads(&moto, "ckpt"))),
    };
    unchanged_files_are_not_read_again(&reg, &src, "ckpt/run-42:latest", &["--secret", "moto"]);

    // `?checksum=none`: ETags are not trusted across jobs (§8.5), so each
    // sync reads every object again.
    let before = moto_reads(&moto, "ckpt").len();
    let source = "s3://ckpt/run-42?checksum=none";
    let job = reg.sync_ready(source, "ckpt/nosum", &["--secret", "moto"]);
    let job2 = reg.sync_ready(source, "ckpt/nosum", &["--secret", "moto"]);
    assert_eq!(digest(&job2), digest(&job), "{job2}");
    assert_eq!(progress(&job2, "files_reused"), 0, "{job2}");
    let non_empty = 4; // model_files() less the empty one, as changed above
    assert!(
        moto_reads(&moto, "ckpt").len() - before >= 2 * non_empty,
        "checksum=none objects were not read again"
    );
}

#[test]
fn hf_new_revision_downloads_only_changed_files() {
    let hub_root = tempfile::tempdir().unwrap();
    let hub = HfHub::start(hub_root.path(), None, 0);
    let reg = Registry::start(&[("HF_ENDPOINT", hub.url())]);
    let repo = hub_root.path().join("models/org/ckpt");
    let src = Seeded {
        source: "hf://org/ckpt".into(),
        put: Box::new(|p, b| write(&repo.join(p), b, 0o644)),
        delete: Box::new(|p| std::fs::remove_file(repo.join(p)).unwrap()),
        reads: Box::new(|| Some(hub.downloads())),
    };
    unchanged_files_are_not_read_again(&reg, &src, "hf/ckpt:main", &[]);
}

#[test]
fn gcs_resync_reads_only_changed_objects() {
    let gcs = GcsEmulator::start();
    gcs.create_bucket("ckpts");
    // Counts the registry's requests: the emulator logs none of its own.
    let proxy = sealvol_tests::FlipProxy::start_counting(gcs.url().trim_start_matches("http://"));
    let reg = Registry::start(&[("STORAGE_EMULATOR_HOST", &format!("http://{}", proxy.addr()))]);
    let src = Seeded {
        source: "gs://ckpts/step".into(),
        put: Box::new(|p, b| gcs.put("ckpts", &format!("step/{p}"), b)),
        delete: Box::new(|p| gcs.delete("ckpts", &format!("step/{p}"))),
        reads: Box::new(|| Some(proxy_reads(&proxy, "GET /download/storage/v1/b/ckpts/o/"))),
    };
    unchanged_files_are_not_read_again(&reg, &src, "gcs/step", &[]);
}

/// The object names a counting proxy saw fetched: the targets of the
/// requests that start with `prefix` (`METHOD /PATH-PREFIX`), without their
/// query, percent-decoded.
fn proxy_reads(proxy: &sealvol_tests::FlipProxy, prefix: &str) -> Vec<String> {
    proxy
        .requests()
        .iter()
        .filter_map(|r| r.strip_prefix(prefix))
        .map(|rest| {
            let name = rest.split('?').next().unwrap_or_default();
            percent_encoding::percent_decode_str(name)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect()
}

#[test]
fn dir_resync_takes_unchanged_files_unread() {
    let sb = Sandbox::new();
    let root = sb.path().join("src");
    std::fs::create_dir_all(&root).unwrap();
    let config = format!("{CONFIG}\nsync_dir_roots = [{:?}]", s(&root));
    let reg = Registry::start_config(Box::leak(config.into_boxed_str()), &[]);
    let src = Seeded {
        source: format!("dir://{}", s(&root)),
        put: Box::new(|p, b| write(&root.join(p), b, 0o644)),
        delete: Box::new(|p| std::fs::remove_file(root.join(p)).unwrap()),
        reads: Box::new(|| None),
    };
    let job = unchanged_files_are_not_read_again(&reg, &src, "local/ckpt", &[]);

    // The chunks go (removed here as a sweep would remove them): records
    // naming them are not taken, and every file is read again.
    let hex = digest(&job)[3..].to_string();
    let blobs = reg.sb.path().join("registry/blobs/sha256");
    for (d, _) in sealvol_tests::chunk_blobs(&reg.host(), "local/ckpt", &format!("b3-{hex}")) {
        let h = d.trim_start_matches("sha256:");
        std::fs::remove_file(blobs.join(&h[..2]).join(h)).unwrap();
    }
    let again = reg.sync_ready(&src.source, "local/ckpt", &[]);
    assert_eq!(digest(&again), digest(&job), "{again}");
    // Only the empty file, which has no chunk, is taken.
    assert_eq!(progress(&again, "files_reused"), 1, "{again}");
    assert_eq!(progress(&again, "bytes_reused"), 0, "{again}");
    assert_eq!(
        progress(&again, "bytes_stored"),
        progress(&again, "bytes_total"),
        "{again}"
    );
    let pulled = reg.pull(again["ref"].as_str().unwrap(), "after-gc");
    assert_same_tree(&root, &pulled);
}

#[test]
fn azure_resync_reads_only_changed_blobs() {
    let azurite = Azurite::start();
    azurite.create_container("ckpt");
    // Counts the registry's requests: azurite runs silent.
    let proxy =
        sealvol_tests::FlipProxy::start_counting(azurite.url().trim_start_matches("http://"));
    let url = format!("http://{}", proxy.addr());
    let reg = Registry::start(&[("AZURITE_BLOB_STORAGE_URL", &url)]);
    let blobs = format!("GET /{AZURITE_ACCOUNT}/ckpt/");
    let src = Seeded {
        source: format!("azure://{AZURITE_ACCOUNT}/ckpt/run"),
        put: Box::new(|p, b| azurite.put("ckpt", &format!("run/{p}"), b)),
        delete: Box::new(|p| azurite.delete("ckpt", &format!("run/{p}"))),
        reads: Box::new(|| Some(proxy_reads(&proxy, &blobs))),
    };
    unchanged_files_are_not_read_again(&reg, &src, "azure/run", &[]);
}
