//! Data the previous release wrote opens unchanged in this one (issue 31).
//!
//! `tests/fixtures/previous-release/make.sh`, run once with the previous
//! release's binary, left a registry's data folder (`redb/`, and
//! `postgres/` with a dump of its PostgreSQL tables) and what it wrote and
//! read back (`expected.json`). Each test here starts the current `sealvol
//! serve` on a copy of it and checks, through the real CLI and HTTP API:
//!
//! - every GET the previous release answered at the end (volumes, versions
//!   with a tombstone, entries, diff, stats, tags with expiry, keys,
//!   secrets, sync jobs, catalog, manifests, referrers) answers the same;
//! - every version pulls byte for byte as it was pushed, by digest, tag and
//!   head; the deleted one is refused, restores and pulls;
//! - API keys authenticate within their scope, the revoked one does not;
//! - the push claim left held is still held by its token, and released;
//! - the blob upload left halfway resumes and finishes;
//! - a new version pushes on top, with the next sequence number;
//! - the sync job left running resumes with the sealed secret, reads only
//!   the files it had not finished, and seals the expected version; GC
//!   then keeps everything;
//! - `sealvol serve migrate` copies the pristine fixture into the other
//!   metadata backend, which then answers the same.
//!
//! A third test reads the fixtures as stored (redb by its crate, the dump
//! as text) to check they still hold a row of every metadata table. Made
//! again (new ids, keys and times), the fixtures keep these tests valid.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sealvol_tests::{
    assert_tree, fails, host, json, noise, ok, s, sha256, tree, write, HfHub, Node, Postgres,
    Sandbox, Server,
};
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/previous-release");

/// What the manifest and index GETs accept, as make.sh asked.
const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
                      application/vnd.oci.image.manifest.v1+json, application/json";

#[test]
fn redb_data_of_the_previous_release_opens_unchanged() {
    check(Backend::Redb);
}

#[test]
fn postgres_data_of_the_previous_release_opens_unchanged() {
    check(Backend::Postgres);
}

/// The registry's metadata tables (`TableDefinition`s in `registry/src`)
/// that make.sh fills with at least one row each. The registry's only
/// other table, `secrets` (plaintext secrets of releases before secrets
/// were sealed, moved into `secrets.v2` at start), no release since writes.
const TABLES: [&str; 21] = [
    "api_keys",
    "blob_links",
    "claims",
    "gc_sweepers",
    "gc_sweeps",
    "hidden_manifests",
    "link_times",
    "manifests",
    "referrers",
    "repos",
    "secrets.v2",
    "sync_files",
    "sync_jobs",
    "tag_expiry",
    "tags",
    "upload_times",
    "uploads",
    "version_of_index",
    "versions",
    "volume_chunks",
    "volumes",
];

/// The fixtures are worth something only while they hold a row of every
/// table: read them as they are stored (redb by its crate, the dump as
/// text), without the registry.
#[test]
fn the_fixtures_hold_rows_of_every_table() {
    use redb::{ReadableDatabase as _, ReadableTableMetadata as _};
    let want: std::collections::BTreeSet<String> = TABLES.iter().map(|t| t.to_string()).collect();

    let dir = tempfile::tempdir().unwrap();
    let tar = Backend::Redb.dir().join("data.tar");
    tar::Archive::new(std::fs::File::open(&tar).unwrap())
        .unpack(dir.path())
        .unwrap();
    let db = redb::ReadOnlyDatabase::open(dir.path().join("meta.redb")).expect("open meta.redb");
    let tx = db.begin_read().unwrap();
    let mut filled = std::collections::BTreeSet::new();
    for handle in tx.list_tables().unwrap() {
        let name = redb::TableHandle::name(&handle).to_string();
        if tx.open_untyped_table(handle).unwrap().len().unwrap() > 0 {
            filled.insert(name);
        }
    }
    assert_eq!(filled, want, "tables with rows in the redb fixture");

    let dump = std::fs::read_to_string(Backend::Postgres.dir().join("dump.sql")).unwrap();
    let rows = dump
        .split("COPY public.sealvol_tables (tbl, k, v) FROM stdin;\n")
        .nth(1)
        .expect("the dump copies sealvol_tables")
        .split("\n\\.\n")
        .next()
        .unwrap();
    let filled: std::collections::BTreeSet<String> = rows
        .lines()
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect();
    assert_eq!(filled, want, "tables with rows in the PostgreSQL dump");
    assert!(
        dump.contains("COPY public.sealvol_schema (version, applied_at) FROM stdin;\n1\t"),
        "the dump lacks the schema version the previous release applied"
    );
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Backend {
    Redb,
    Postgres,
}

impl Backend {
    fn dir(self) -> PathBuf {
        Path::new(FIXTURES).join(match self {
            Backend::Redb => "redb",
            Backend::Postgres => "postgres",
        })
    }
}

/// A copy of one fixture, ready to serve: its data folder unpacked and,
/// for PostgreSQL, its dump restored into `database` of `pg`.
struct FixtureCopy {
    root: PathBuf,
    /// `[metadata]` lines, empty for redb.
    metadata: String,
}

fn copy_fixture(backend: Backend, root: &Path, pg: Option<(&Postgres, &str)>) -> FixtureCopy {
    std::fs::create_dir_all(root).unwrap();
    let tar = backend.dir().join("data.tar");
    tar::Archive::new(std::fs::File::open(&tar).unwrap_or_else(|e| panic!("{tar:?}: {e}")))
        .unpack(root)
        .unwrap_or_else(|e| panic!("unpack {tar:?}: {e}"));
    let metadata = match (backend, pg) {
        (Backend::Redb, _) => {
            assert!(root.join("meta.redb").exists(), "no meta.redb in {tar:?}");
            String::new()
        }
        (Backend::Postgres, Some((pg, database))) => {
            assert!(
                !root.join("meta.redb").exists(),
                "the PostgreSQL fixture's data folder holds a meta.redb"
            );
            let url = database_url(pg, database);
            if database != "postgres" {
                psql(&pg.url(), &["-c", &format!("CREATE DATABASE {database}")]);
            }
            let dump = backend.dir().join("dump.sql");
            psql(&url, &["-f", s(&dump)]);
            format!("[metadata]\nkind = \"postgres\"\nurl = \"{url}\"\n")
        }
        (Backend::Postgres, None) => panic!("the PostgreSQL fixture needs a server"),
    };
    FixtureCopy {
        root: root.to_path_buf(),
        metadata,
    }
}

/// `pg`'s URL with `database` in place of `postgres`.
fn database_url(pg: &Postgres, database: &str) -> String {
    let url = pg.url();
    let base = url
        .strip_suffix("/postgres")
        .expect("a URL ending /postgres");
    format!("{base}/{database}")
}

/// Runs Debian's newest `psql` on `url` with `args`; it must succeed.
fn psql(url: &str, args: &[&str]) {
    let mut versions: Vec<u32> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is not installed; run `bash scripts/deps.sh`")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    versions.sort();
    let bin = format!("/usr/lib/postgresql/{}/bin/psql", versions.last().unwrap());
    let out = Command::new(bin)
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url])
        .args(args)
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn load(backend: Backend) -> Value {
    let file = backend.dir().join("expected.json");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file:?}: {e}"))
}

/// The registry.toml lines the fixture was made with that matter to what
/// it answers (retention and upload TTL, a century: the fixture's
/// tombstone and upload stay live), no GC timer, `workers` sync workers,
/// the fixture's users, and `metadata`.
fn config(fx: &Value, workers: u32, metadata: &str) -> String {
    format!(
        "gc_interval_seconds = 0\nretention_seconds = {}\nupload_ttl_seconds = {}\n\
         sync_workers = {workers}\n[auth]\nhtpasswd = {:?}\nadmins = [\"admin\"]\n{metadata}",
        fx["retention_seconds"],
        fx["upload_ttl_seconds"],
        s(&Path::new(FIXTURES).join("htpasswd")),
    )
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v}"))
}

/// The tree `name` of expected.json as [`tree`] reads a folder.
fn expected_tree(fx: &Value, name: &str) -> BTreeMap<String, Node> {
    let entries = fx["trees"][name]
        .as_object()
        .unwrap_or_else(|| panic!("no tree {name} in expected.json"));
    assert!(!entries.is_empty(), "tree {name} is empty");
    entries
        .iter()
        .map(|(path, e)| {
            let mode = || e["mode"].as_u64().unwrap() as u32;
            let node = match str_of(&e["kind"], "kind") {
                "file" => Node::File {
                    mode: mode(),
                    len: e["size"].as_u64().unwrap(),
                    sha256: str_of(&e["sha256"], "sha256").to_string(),
                },
                "dir" => Node::Dir { mode: mode() },
                "symlink" => Node::Symlink {
                    target: PathBuf::from(str_of(&e["target"], "target")),
                },
                other => panic!("kind {other}"),
            };
            (path.clone(), node)
        })
        .collect()
}

/// Passes when `got` holds everything `want` does: objects may have gained
/// fields, arrays have the same length and elements, anything else is
/// equal. Panics naming the first difference.
fn assert_holds(what: &str, at: &str, want: &Value, got: &Value) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let gv = g
                    .get(k)
                    .unwrap_or_else(|| panic!("{what}: {at}.{k} is gone; the answer: {got}"));
                assert_holds(what, &format!("{at}.{k}"), wv, gv);
            }
        }
        (Value::Array(w), Value::Array(g)) => {
            assert_eq!(
                w.len(),
                g.len(),
                "{what}: {at} has {} elements, not {}: {got}",
                g.len(),
                w.len()
            );
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                assert_holds(what, &format!("{at}[{i}]"), wv, gv);
            }
        }
        _ => assert_eq!(want, got, "{what}: {at} differs"),
    }
}

/// A registry on a copy of the fixture and the admin's CLI, logged in.
struct Registry {
    sb: Sandbox,
    server: Option<Server>,
    fx: Value,
    http: reqwest::blocking::Client,
}

impl Registry {
    fn start(fx: &Value, root: &Path, config: &str, env: &[(&str, &str)]) -> Registry {
        let server = Server::start_config_env(root, config, env);
        let reg = Registry {
            sb: Sandbox::new(),
            server: Some(server),
            fx: fx.clone(),
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
        };
        reg.login(&reg.sb, "admin", str_of(&fx["password"], "password"));
        reg
    }

    fn stop(&mut self) {
        let status = self.server.take().expect("running").stop();
        assert!(status.success(), "sealvol serve stopped with {status}");
    }

    fn host(&self) -> String {
        host(self.server.as_ref().expect("running"))
    }

    fn url(&self) -> String {
        self.server.as_ref().expect("running").url.clone()
    }

    fn login(&self, sb: &Sandbox, user: &str, password: &str) {
        let h = self.host();
        ok(
            sb.sealvol_stdin(
                &h,
                &["login", &h, "-u", user, "--password-stdin"],
                password.as_bytes(),
            ),
            &format!("sealvol login as {user}"),
        );
    }

    fn sealvol(&self, args: &[&str]) -> std::process::Output {
        self.sb.sealvol(&self.host(), args)
    }

    /// The fixture's admin: user name and password.
    fn admin(&self) -> (&str, &str) {
        ("admin", str_of(&self.fx["password"], "password"))
    }

    /// METHOD PATH as `user`, with `body`.
    fn request(
        &self,
        method: &str,
        path: &str,
        user: (&str, &str),
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> reqwest::blocking::Response {
        let mut req = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.url()))
            .basic_auth(user.0, Some(user.1));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        req.send()
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// GET PATH as the admin: status 200 and its JSON.
    fn get(&self, path: &str) -> Value {
        let resp = self.request("GET", path, self.admin(), &[("accept", ACCEPT)], None);
        let status = resp.status().as_u16();
        let text = resp.text().unwrap();
        assert_eq!(status, 200, "GET {path}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {text}"))
    }

    /// Every GET the previous release answered at the end answers the
    /// same, but for what `job` changes in the interrupted sync job, which
    /// this registry runs again.
    fn check_snapshots(&self, what: &str, job: impl Fn(&mut Value)) {
        let hf_id = &self.fx["syncs"]["hf"]["id"];
        let snapshots = self.fx["snapshots"].as_array().expect("snapshots");
        assert!(snapshots.len() >= 20, "too few snapshots in expected.json");
        let mut adjusted = 0;
        for snap in snapshots {
            let path = str_of(&snap["path"], "path");
            let mut want = snap["body"].clone();
            if let Some(Value::Array(list)) = want.get_mut("syncs") {
                for j in list.iter_mut().filter(|j| j["id"] == *hf_id) {
                    job(j);
                    adjusted += 1;
                }
            } else if want["id"] == *hf_id {
                job(&mut want);
                adjusted += 1;
            }
            assert_holds(&format!("{what}: GET {path}"), "$", &want, &self.get(path));
        }
        assert_eq!(adjusted, 2, "the hf job is in two snapshots");
    }

    /// Pulls `reference` (`ns/vol[:tag|@digest]`) with `sb`'s credentials
    /// into a new folder; checks it against tree `name` and, when given,
    /// its digest.
    fn pull_as(&self, sb: &Sandbox, reference: &str, name: &str, digest: Option<&str>) {
        let h = self.host();
        static PULLS: AtomicUsize = AtomicUsize::new(0);
        let dir = sb
            .path()
            .join(format!("pull-{}", PULLS.fetch_add(1, Ordering::Relaxed)));
        let pulled = json(
            sb.sealvol(
                &h,
                &[
                    "pull",
                    &format!("{h}/{reference}"),
                    s(&dir),
                    "--no-cache",
                    "--output",
                    "json",
                ],
            ),
            &format!("pull {reference}"),
        );
        if let Some(d) = digest {
            assert_eq!(pulled["digest"], d, "pull {reference}: {pulled}");
        }
        assert_tree(
            &expected_tree(&self.fx, name),
            &tree(&dir),
            &format!("{reference} pulled differs from tree {name} as pushed"),
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn pull(&self, reference: &str, name: &str, digest: Option<&str>) {
        self.pull_as(&self.sb, reference, name, digest)
    }

    fn version(&self, v: &str) -> String {
        str_of(&self.fx["versions"][v], "version digest").to_string()
    }

    fn describe_sync(&self, id: &str) -> Value {
        let h = self.host();
        json(
            self.sealvol(&["sync", "describe", id, "--registry", &h, "--output", "json"]),
            &format!("sync describe {id}"),
        )
    }
}

fn check(backend: Backend) {
    let fx = load(backend);
    assert_eq!(
        fx["metadata"],
        match backend {
            Backend::Redb => "redb",
            Backend::Postgres => "postgres",
        }
    );
    let work = Sandbox::new();
    let pg = Postgres::start();
    let copy = copy_fixture(
        backend,
        &work.path().join("registry"),
        (backend == Backend::Postgres).then_some((&pg, "postgres")),
    );
    // The Hub the interrupted job reads (same bytes, no longer throttled).
    let hub = HfHub::start(&hub_repository(&fx, &work.path().join("hub")), None, 0);
    let env = [("HF_ENDPOINT", hub.url())];
    let config = config(&fx, 1, &copy.metadata);
    let mut reg = Registry::start(&fx, &copy.root, &config, &env);

    // The job the previous release left running starts another attempt at
    // once, which waits for the claim its first attempt holds, as the
    // previous release's did.
    let hf_id = str_of(&fx["syncs"]["hf"]["id"], "id").to_string();
    let was = snapshot(&fx, &format!("/api/v1/syncs/{hf_id}"));
    let attempts = was["attempts"].as_u64().unwrap() + 1;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let job = reg.describe_sync(&hf_id);
        if job["attempts"] == attempts && job["retrying"] == was["retrying"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the interrupted job did not wait for its claim again: {job}\nit was: {was}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    reg.check_snapshots("the previous release's data", |job| {
        job["attempts"] = attempts.into();
    });
    versions_and_tags(&reg);
    keys(&reg);
    claim(&reg);
    upload(&reg);
    oras_artifact(&reg);
    push_on_top(&reg);
    resumed_sync(&reg, &hub);
    reg.stop();

    // What this release wrote over the previous one's opens again.
    let mut reg = Registry::start(&fx, &copy.root, &config, &env);
    gc_keeps_everything(&reg);
    reg.stop();

    migrate(backend, &fx, &work, &pg);
}

/// The body of the snapshot of GET `path`.
fn snapshot<'a>(fx: &'a Value, path: &str) -> &'a Value {
    &fx["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["path"] == path)
        .unwrap_or_else(|| panic!("no snapshot of {path} in expected.json"))["body"]
}

/// The Hub repository the interrupted job reads, made again from the
/// seeds in expected.json (and checked against its digests), private with
/// the job's secret as its token; the Hub fixture's root.
fn hub_repository(fx: &Value, root: &Path) -> PathBuf {
    let hf = &fx["syncs"]["hf"];
    let repo = root.join("models/org/slow");
    for f in hf["files"].as_array().unwrap() {
        let bytes = noise(
            f["size"].as_u64().unwrap() as usize,
            f["seed"].as_u64().unwrap(),
        );
        assert_eq!(sha256(&bytes), f["sha256"], "noise() no longer makes {f}");
        write(&repo.join(str_of(&f["path"], "path")), &bytes, 0o644);
    }
    write(
        &repo.join(".token"),
        str_of(&hf["token"], "token").as_bytes(),
        0o644,
    );
    root.to_path_buf()
}

/// Versions, tags and the tombstone: pulls by digest, tag and head, a
/// refused pull of the deleted version, its restore.
fn versions_and_tags(reg: &Registry) {
    let fx = &reg.fx;
    let vol = str_of(&fx["volume"], "volume");
    let (v1, v2, v3) = (reg.version("v1"), reg.version("v2"), reg.version("v3"));
    for (v, d) in [("v1", &v1), ("v2", &v2)] {
        reg.pull(&format!("{vol}@{d}"), v, Some(d));
    }
    for (tag, v) in fx["tags"].as_object().unwrap() {
        let v = str_of(v, "tag's version");
        reg.pull(&format!("{vol}:{tag}"), v, Some(&reg.version(v)));
    }
    let head = str_of(&fx["head"], "head");
    reg.pull(vol, head, Some(&reg.version(head)));
    let d = &fx["dataset"];
    reg.pull(
        &format!(
            "{}@{}",
            str_of(&d["volume"], "volume"),
            str_of(&d["version"], "version")
        ),
        str_of(&d["tree"], "tree"),
        None,
    );
    let dir = &fx["syncs"]["dir"];
    reg.pull(
        &format!(
            "{}@{}",
            str_of(&dir["volume"], "volume"),
            str_of(&dir["version"], "version")
        ),
        str_of(&dir["tree"], "tree"),
        None,
    );
    let h = reg.host();
    ok(
        reg.sealvol(&["verify", &format!("{h}/{vol}@{v1}"), "--deep"]),
        "verify v1 --deep",
    );

    // Each version is found by its index's digest too, the deleted one
    // included.
    let listed = snapshot(
        fx,
        &format!("/api/v1/volumes/{vol}/-/versions?include_tombstoned=true"),
    );
    for d in [&v1, &v2, &v3] {
        let was = listed["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["digest"] == d.as_str())
            .unwrap_or_else(|| panic!("{d} not in {listed}"));
        let index = str_of(&was["index_digest"], "index_digest");
        assert!(index.starts_with("sha256:"), "{was}");
        let got = reg.get(&format!("/api/v1/volumes/{vol}/-/versions/{index}"));
        assert_eq!(got["digest"], d.as_str(), "the version of index {index}");
    }

    // The tag with an expiry keeps it.
    let tags = reg.get(&format!("/api/v1/volumes/{vol}"))["tags"].clone();
    let stable = tags
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tag"] == "stable")
        .unwrap_or_else(|| panic!("no tag stable: {tags}"));
    assert_eq!(stable["expires_at"], fx["tag_expiry"]["stable"], "{stable}");

    // The deleted version: not served, restorable, then whole.
    assert_eq!(str_of(&fx["deleted"], "deleted"), "v3");
    let gone = reg.get(&format!("/api/v1/volumes/{vol}/-/versions/{v3}"));
    assert_eq!(gone["lifecycle"], "TOMBSTONED", "{gone}");
    fails(
        reg.sealvol(&[
            "pull",
            &format!("{h}/{vol}@{v3}"),
            s(&reg.sb.path().join("v3-deleted")),
        ]),
        "pull of the deleted version",
    );
    let restored = json(
        reg.sealvol(&["restore", &format!("{h}/{vol}@{v3}"), "--output", "json"]),
        "restore v3",
    );
    assert_eq!(restored["digest"], v3.as_str(), "{restored}");
    assert_eq!(
        reg.get(&format!("/api/v1/volumes/{vol}/-/versions/{v3}"))["lifecycle"],
        "ALIVE"
    );
    reg.pull(&format!("{vol}@{v3}"), "v3", Some(&v3));
    let listed = json(
        reg.sealvol(&["versions", &format!("{h}/{vol}"), "--output", "json"]),
        "versions",
    );
    let mut digests: Vec<&str> = listed
        .as_array()
        .or_else(|| listed["versions"].as_array())
        .unwrap_or_else(|| panic!("versions: {listed}"))
        .iter()
        .map(|v| str_of(&v["digest"], "digest"))
        .collect();
    digests.sort();
    let mut want = vec![v1.as_str(), v2.as_str(), v3.as_str()];
    want.sort();
    assert_eq!(digests, want, "{listed}");
}

/// The keys still log in, within their scope; the revoked one does not.
fn keys(reg: &Registry) {
    let fx = &reg.fx;
    let key = |name: &str| {
        let k = &fx["keys"][name];
        (
            str_of(&k["id"], "key id").to_string(),
            str_of(&k["secret"], "key secret").to_string(),
        )
    };
    let tags = |(id, secret): &(String, String), repo: &str| {
        reg.request(
            "GET",
            &format!("/v2/{repo}/tags/list"),
            (id, secret),
            &[],
            None,
        )
        .status()
        .as_u16()
    };
    let (pull, push, revoked) = (key("pull"), key("push"), key("revoked"));
    assert_eq!(tags(&pull, "weights/m"), 200, "the pull key");
    assert_eq!(tags(&push, "weights/m"), 200, "the push key");
    assert_eq!(tags(&revoked, "weights/m"), 401, "the revoked key");
    let wrong = (pull.0.clone(), format!("{}0", pull.1));
    assert_eq!(tags(&wrong, "weights/m"), 401, "the pull key, wrong secret");
    // Scopes: weights/** only.
    assert_eq!(tags(&pull, "datasets/d"), 403, "the pull key on datasets/d");

    let node = Sandbox::new();
    reg.login(&node, &pull.0, &pull.1);
    reg.pull_as(&node, "weights/m:prod", "v2", Some(&reg.version("v2")));
    let h = reg.host();
    let src = node.path().join("src");
    write(&src.join("f.txt"), b"pushed with the pull key\n", 0o644);
    fails(
        node.sealvol(&h, &["push", s(&src), &format!("{h}/weights/by-key")]),
        "push with the pull key",
    );

    let ci = Sandbox::new();
    reg.login(&ci, &push.0, &push.1);
    write(
        &ci.path().join("src/f.txt"),
        b"pushed with the push key\n",
        0o644,
    );
    let pushed = json(
        ci.sealvol(
            &h,
            &[
                "push",
                s(&ci.path().join("src")),
                &format!("{h}/weights/by-key"),
                "--output",
                "json",
            ],
        ),
        "push with the push key",
    );
    assert!(
        str_of(&pushed["digest"], "digest").starts_with("b3:"),
        "{pushed}"
    );
    // weights/* is one level: not weights/a/b.
    fails(
        ci.sealvol(
            &h,
            &[
                "push",
                s(&ci.path().join("src")),
                &format!("{h}/weights/a/b"),
            ],
        ),
        "push with the push key outside its scope",
    );
}

/// The claim left held: another holder is refused, its own holder gets it
/// back by the same token, and once released a push goes through.
fn claim(reg: &Registry) {
    let c = &reg.fx["claim"];
    let vol = str_of(&c["volume"], "volume");
    let token = str_of(&c["token"], "token");
    let admin = reg.admin();
    let json_body = [("content-type", "application/json")];
    let take = |holder: &str| {
        let resp = reg.request(
            "POST",
            &format!("/api/v1/volumes/{vol}/-/claim"),
            admin,
            &json_body,
            Some(
                serde_json::json!({ "holder": holder })
                    .to_string()
                    .into_bytes(),
            ),
        );
        let status = resp.status().as_u16();
        (status, resp.text().unwrap())
    };
    let (status, body) = take("someone else");
    assert_eq!(status, 409, "a second claim on {vol}: {body}");
    assert!(body.contains("PUSH_IN_PROGRESS"), "{body}");
    let h = reg.host();
    let src = reg.sb.path().join("held");
    write(&src.join("f.txt"), b"held\n", 0o644);
    fails(
        reg.sealvol(&["push", s(&src), &format!("{h}/{vol}")]),
        "push while the claim is held",
    );
    let (status, body) = take(str_of(&c["holder"], "holder"));
    assert!(status == 200 || status == 201, "its own holder: {body}");
    let again: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(again["token"], token, "{again}");
    let resp = reg.request(
        "DELETE",
        &format!("/api/v1/volumes/{vol}/-/claim/{token}"),
        admin,
        &[("content-type", "application/json")],
        None,
    );
    assert_eq!(resp.status().as_u16(), 204, "release the claim");
    json(
        reg.sealvol(&["push", s(&src), &format!("{h}/{vol}"), "--output", "json"]),
        "push once the claim is released",
    );
}

/// The upload left halfway: its offset, the rest, the blob.
fn upload(reg: &Registry) {
    let u = &reg.fx["upload"];
    let location = str_of(&u["location"], "location");
    let sent = u["sent"].as_u64().unwrap() as usize;
    let bytes = noise(
        u["size"].as_u64().unwrap() as usize,
        u["seed"].as_u64().unwrap(),
    );
    let digest = sha256(&bytes);
    let admin = reg.admin();
    let resp = reg.request("GET", location, admin, &[], None);
    assert_eq!(resp.status().as_u16(), 204, "GET {location}");
    let range = resp.headers()["range"].to_str().unwrap().to_string();
    assert_eq!(range, format!("0-{}", sent - 1), "the upload's offset");
    let resp = reg.request(
        "PATCH",
        location,
        admin,
        &[
            ("content-type", "application/octet-stream"),
            ("content-range", &format!("{sent}-{}", bytes.len() - 1)),
        ],
        Some(bytes[sent..].to_vec()),
    );
    assert_eq!(resp.status().as_u16(), 202, "PATCH the rest");
    let next = resp.headers()["location"].to_str().unwrap().to_string();
    let sep = if next.contains('?') { '&' } else { '?' };
    let resp = reg.request(
        "PUT",
        &format!("{next}{sep}digest={digest}"),
        admin,
        &[],
        None,
    );
    assert_eq!(resp.status().as_u16(), 201, "finish the upload");
    let repo = str_of(&u["repo"], "repo");
    let resp = reg.request(
        "GET",
        &format!("/v2/{repo}/blobs/{digest}"),
        admin,
        &[],
        None,
    );
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.bytes().unwrap().as_ref() == bytes.as_slice(),
        "the blob's bytes"
    );
}

/// The plain OCI artifact oras pushed, and its referrer.
fn oras_artifact(reg: &Registry) {
    let o = &reg.fx["oras"];
    if o.is_null() {
        eprintln!("the fixture was made without oras: no plain OCI artifact to check");
        return;
    }
    let repo = str_of(&o["repo"], "repo");
    let admin = reg.admin();
    let manifest = |reference: &str| {
        let resp = reg.request(
            "GET",
            &format!("/v2/{repo}/manifests/{reference}"),
            admin,
            &[("accept", ACCEPT)],
            None,
        );
        assert_eq!(resp.status().as_u16(), 200, "manifest {reference}");
        resp.bytes().unwrap().to_vec()
    };
    let blob = |digest: &str| {
        let resp = reg.request(
            "GET",
            &format!("/v2/{repo}/blobs/{digest}"),
            admin,
            &[],
            None,
        );
        assert_eq!(resp.status().as_u16(), 200, "blob {digest}");
        resp.bytes().unwrap().to_vec()
    };
    let subject = str_of(&o["subject"], "subject");
    let bytes = manifest(str_of(&o["tag"], "tag"));
    assert_eq!(sha256(&bytes), subject, "the artifact's manifest");
    let m: Value = serde_json::from_slice(&bytes).unwrap();
    let layer = str_of(&m["layers"][0]["digest"], "layer");
    assert_eq!(
        blob(layer),
        o["files"]["artifact.txt"].as_str().unwrap().as_bytes()
    );
    let referrers = reg.get(&format!("/v2/{repo}/referrers/{subject}"));
    let sig = str_of(&referrers["manifests"][0]["digest"], "referrer");
    let bytes = manifest(sig);
    assert_eq!(sha256(&bytes), sig);
    let m: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(m["subject"]["digest"], subject, "{m}");
    let layer = str_of(&m["layers"][0]["digest"], "layer");
    assert_eq!(
        blob(layer),
        o["files"]["signature.txt"].as_str().unwrap().as_bytes()
    );
}

/// A new version on top of the old ones, the second plus one file: the
/// next sequence, the new head, and in the volume's storage statistics
/// only the new file's chunk (the chunks of the earlier versions, which
/// the previous release recorded, are known).
fn push_on_top(reg: &Registry) {
    let vol = str_of(&reg.fx["volume"], "volume");
    let before = snapshot(&reg.fx, &format!("/api/v1/volumes/{vol}"))["sequence"]
        .as_u64()
        .unwrap();
    let stats = |what: &str| {
        let st = reg.get(&format!("/api/v1/volumes/{vol}/-/stats"));
        let n = |k: &str| {
            st[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{what}: no {k} in {st}"))
        };
        (n("stored_bytes"), n("chunks"))
    };
    let (stored, chunks) = stats("before the push");
    let h = reg.host();
    let src = reg.sb.path().join("v4");
    let v2 = reg.version("v2");
    ok(
        reg.sealvol(&["pull", &format!("{h}/{vol}@{v2}"), s(&src), "--no-cache"]),
        "pull v2",
    );
    let added = noise(5000, 99);
    write(&src.join("added.bin"), &added, 0o644);
    let pushed = json(
        reg.sealvol(&[
            "push",
            s(&src),
            &format!("{h}/{vol}:next"),
            "--output",
            "json",
        ]),
        "push on top",
    );
    let d = str_of(&pushed["digest"], "digest");
    let v = reg.get(&format!("/api/v1/volumes/{vol}/-/versions/{d}"));
    assert!(
        v["sequence"].as_u64().unwrap() > before,
        "the new version's sequence {} is not past the volume's {before}",
        v["sequence"]
    );
    assert_eq!(v["is_head"], true, "{v}");
    let volume = reg.get(&format!("/api/v1/volumes/{vol}"));
    assert_eq!(volume["head"]["digest"], d, "{volume}");
    assert_eq!(
        stats("after the push"),
        (stored + added.len() as u64, chunks + 1),
        "stored bytes and chunks of {vol} before the push: {stored}, {chunks}"
    );
    let out = reg.sb.path().join("v4-pulled");
    json(
        reg.sealvol(&[
            "pull",
            &format!("{h}/{vol}:next"),
            s(&out),
            "--no-cache",
            "--output",
            "json",
        ]),
        "pull the new version",
    );
    sealvol_tests::assert_same_tree(&src, &out);
}

/// The job the previous release left RUNNING: resumed with its secret,
/// reading only the files not recorded done, sealing the expected version.
fn resumed_sync(reg: &Registry, hub: &HfHub) {
    let hf = &reg.fx["syncs"]["hf"];
    let id = str_of(&hf["id"], "id");
    assert!(
        hub.downloads().is_empty(),
        "the job read files while its first attempt held the claim"
    );
    // Its first attempt's claim, asked for by the same holder: that claim,
    // by its token; released.
    let vol = str_of(&hf["volume"], "volume");
    let admin = reg.admin();
    let resp = reg.request(
        "POST",
        &format!("/api/v1/volumes/{vol}/-/claim"),
        admin,
        &[("content-type", "application/json")],
        Some(
            serde_json::json!({ "holder": hf["claim_holder"] })
                .to_string()
                .into_bytes(),
        ),
    );
    let status = resp.status().as_u16();
    let claim: Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
    assert!(status == 200 || status == 201, "{status} {claim}");
    let token = str_of(&claim["token"], "claim token");
    let resp = reg.request(
        "DELETE",
        &format!("/api/v1/volumes/{vol}/-/claim/{token}"),
        admin,
        &[("content-type", "application/json")],
        None,
    );
    assert_eq!(resp.status().as_u16(), 204, "release the job's old claim");

    let deadline = Instant::now() + Duration::from_secs(120);
    let job = loop {
        let job = reg.describe_sync(id);
        if job["state"] == "READY" || job["state"] == "FAILED" {
            break job;
        }
        assert!(
            Instant::now() < deadline,
            "the resumed job did not end in 120 s: {job}\nthe hub's log:\n{}",
            hub.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        job["state"],
        "READY",
        "{job}\nthe hub's log:\n{}",
        hub.log()
    );
    assert_eq!(job["version"]["digest"], hf["seals_to"], "{job}");
    let done: Vec<&str> = hf["done"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| str_of(d, "done"))
        .collect();
    let want: std::collections::BTreeSet<String> = hf["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| str_of(&f["path"], "path"))
        .filter(|p| !done.contains(p))
        .map(|p| format!("org/slow/{p}"))
        .collect();
    // A download retried counts once: what matters is which files.
    let downloaded: std::collections::BTreeSet<String> = hub.downloads().into_iter().collect();
    assert_eq!(
        downloaded, want,
        "the resumed job read again files it had recorded done"
    );
    let h = reg.host();
    let out = reg.sb.path().join("hf");
    json(
        reg.sealvol(&[
            "pull",
            &format!(
                "{h}/{}:{}",
                str_of(&hf["volume"], "volume"),
                str_of(&hf["tag"], "tag")
            ),
            s(&out),
            "--no-cache",
            "--output",
            "json",
        ]),
        "pull the synced version",
    );
    let files = tree(&out);
    assert_eq!(
        files.len(),
        hf["files"].as_array().unwrap().len(),
        "{files:?}"
    );
    for f in hf["files"].as_array().unwrap() {
        match files.get(str_of(&f["path"], "path")) {
            Some(Node::File { sha256, .. }) => assert_eq!(sha256, &f["sha256"], "{f}"),
            other => panic!("{f}: pulled {other:?}"),
        }
    }
}

/// A GC pass on the upgraded data purges nothing; every version still
/// pulls whole afterwards.
fn gc_keeps_everything(reg: &Registry) {
    let h = reg.host();
    let report = json(
        reg.sealvol(&["gc", "--registry", &h, "--output", "json"]),
        "gc",
    );
    assert_eq!(report["versions_purged"], 0, "{report}");
    assert_eq!(report["manifests_deleted"], 0, "{report}");
    let vol = str_of(&reg.fx["volume"], "volume");
    for v in ["v1", "v2", "v3"] {
        let d = reg.version(v);
        reg.pull(&format!("{vol}@{d}"), v, Some(&d));
    }
}

/// `sealvol serve migrate` from a pristine copy of the fixture into the
/// other metadata backend; the copy answers the same.
fn migrate(backend: Backend, fx: &Value, work: &Sandbox, pg: &Postgres) {
    let source = copy_fixture(
        backend,
        &work.path().join("pristine"),
        (backend == Backend::Postgres).then_some((pg, "pristine")),
    );
    let from = sealvol_tests::write_config(&source.root, "127.0.0.1:0", &source.metadata);
    let target = work.path().join("migrated");
    let metadata = match backend {
        // Into a fresh database of the same server.
        Backend::Redb => {
            psql(&pg.url(), &["-c", "CREATE DATABASE migrated"]);
            format!(
                "[metadata]\nkind = \"postgres\"\nurl = \"{}\"\n",
                database_url(pg, "migrated")
            )
        }
        Backend::Postgres => String::new(),
    };
    let to = sealvol_tests::write_config(&target, "127.0.0.1:0", &metadata);
    let out = ok(
        work.command(sealvol_tests::sealvol_bin())
            .args(["serve", "migrate", "--from", s(&from), "--to", s(&to)])
            .output()
            .unwrap(),
        "serve migrate",
    );
    assert!(
        out.contains("migrated") && out.contains("1 secret"),
        "{out}"
    );
    // Claims are not migrated, so the interrupted job runs at once there:
    // through a Hub too slow for it to end while this looks.
    let hub = HfHub::start(
        &hub_repository(fx, &work.path().join("slow-hub")),
        Some(1),
        0,
    );
    let mut reg = Registry::start(
        fx,
        &target,
        &config(fx, 1, &metadata),
        &[("HF_ENDPOINT", hub.url())],
    );
    reg.check_snapshots("the migrated copy", |job| {
        let job = job.as_object_mut().unwrap();
        for changes in ["attempts", "retries", "retrying", "progress", "started_at"] {
            job.remove(changes);
        }
    });
    let d1 = reg.version("v1");
    reg.pull(&format!("weights/m@{d1}"), "v1", Some(&d1));
    let h = reg.host();
    let v3 = reg.version("v3");
    json(
        reg.sealvol(&[
            "restore",
            &format!("{h}/weights/m@{v3}"),
            "--output",
            "json",
        ]),
        "restore v3 in the migrated copy",
    );
    reg.pull(&format!("weights/m@{v3}"), "v3", Some(&v3));
    let pull_key = &fx["keys"]["pull"];
    let status = reg
        .request(
            "GET",
            "/v2/weights/m/tags/list",
            (
                str_of(&pull_key["id"], "id"),
                str_of(&pull_key["secret"], "secret"),
            ),
            &[],
            None,
        )
        .status()
        .as_u16();
    assert_eq!(status, 200, "the pull key on the migrated copy");
    reg.stop();
}
