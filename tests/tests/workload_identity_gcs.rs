//! Workload identity for `gs://` and `azure://` sources (SPEC.md §8.1) end
//! to end: a real `sealvol serve` whose environment names Google
//! external-account credentials (or Azure's federated-token variables)
//! syncs with no stored secret.
//!
//! Google STS, IAM Credentials and Microsoft Entra ID do not run locally,
//! so a fixture on loopback plays them: it checks every field the
//! registry sends (the subject token must be what the token file holds
//! now), issues numbered tokens, and counts exchanges. The buckets are
//! real emulators (gcp-storage-emulator, azurite) behind a recording proxy:
//! neither checks OAuth tokens, so the proxy is what proves each request
//! carried a token the fixture issued.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sealvol_tests::{
    fails, host, json, noise, ok, s, tree, Azurite, FlipProxy, GcsEmulator, Node, Sandbox, Server,
    AZURITE_ACCOUNT,
};
use serde_json::Value;

/// A projected service-account token, as Kubernetes writes it.
const JWT: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImdjcCJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6bWw6c2VhbHZvbCJ9.c2lnbmF0dXJlLWdjcA";
const AUDIENCE: &str = "//iam.googleapis.com/projects/123456/locations/global/workloadIdentityPools/k8s/providers/cluster";
const JWT_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
const SA: &str = "model-reader@proj.iam.gserviceaccount.com";
const CLIENT: &str = "8b3f6a0e-1111-4c2a-9d7e-5f0c2b1a9e77";
const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";

/// What the fixture answers.
#[derive(Clone, Copy)]
struct Mode {
    /// Seconds a token it issues lives.
    lifetime: u64,
    refuse_sts: bool,
    refuse_iam: bool,
    refuse_azure: bool,
}

/// Google STS, IAM Credentials and Entra ID's token endpoint, on one
/// loopback port.
struct TokenFixture {
    addr: String,
    mode: Arc<Mutex<Mode>>,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct State {
    /// Tokens issued, in order: `sts-N`, `sa-N`, `az-N`.
    issued: Vec<String>,
    sts: usize,
    iam: usize,
    azure: usize,
    /// Requests whose fields were not what they must be.
    problems: Vec<String>,
    /// The subject token of each STS exchange (or Entra ID assertion).
    subjects: Vec<String>,
}

struct Request {
    method: String,
    target: String,
    headers: HashMap<String, String>,
    body: String,
}

fn read_request(conn: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        target,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// `2026-01-02T03:04:05Z`.
fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

impl TokenFixture {
    /// Serves on a free loopback port; `subject_file` is the token file
    /// whose content every exchange must carry.
    fn start(subject_file: &Path) -> TokenFixture {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the token fixture");
        let addr = listener.local_addr().expect("fixture address").to_string();
        let mode = Arc::new(Mutex::new(Mode {
            lifetime: 3600,
            refuse_sts: false,
            refuse_iam: false,
            refuse_azure: false,
        }));
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, st, stopping) = (mode.clone(), state.clone(), stop.clone());
        let subject_file = subject_file.to_path_buf();
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let (m, st, file) = (m.clone(), st.clone(), subject_file.clone());
                std::thread::spawn(move || {
                    let Some(req) = read_request(&conn) else {
                        return;
                    };
                    let mode = *m.lock().unwrap();
                    let (status, body) = answer(&req, mode, &st, &file);
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(reply.as_bytes());
                });
            }
        });
        TokenFixture {
            addr,
            mode,
            state,
            stop,
            accept: Some(accept),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn set(&self, f: impl FnOnce(&mut Mode)) {
        f(&mut self.mode.lock().unwrap());
    }

    fn with<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.state.lock().unwrap())
    }

    fn assert_no_problems(&self) {
        let problems = self.with(|s| s.problems.clone());
        assert!(problems.is_empty(), "bad exchanges: {problems:#?}");
    }
}

impl Drop for TokenFixture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(&self.addr);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// The fixture's answer to one request: checks its fields (a wrong one is
/// a problem, and refused as the real service would), then issues a token
/// or refuses as `mode` says.
fn answer(req: &Request, mode: Mode, state: &Mutex<State>, subject_file: &Path) -> (u16, String) {
    let mut st = state.lock().unwrap();
    let subject = std::fs::read_to_string(subject_file).unwrap_or_default();
    let form: HashMap<String, String> = url_form(&req.body);
    let mut problems = Vec::new();
    let mut want = |what: &str, got: Option<&str>, expected: &str| {
        if got != Some(expected) {
            problems.push(format!(
                "{} {}: {what} is {got:?}, not {expected:?}",
                req.method, req.target
            ));
        }
    };
    let path = req.target.split('?').next().unwrap_or_default();
    let (status, body) = if path == "/v1/token" {
        st.sts += 1;
        want("method", Some(&req.method), "POST");
        want(
            "content-type",
            req.headers.get("content-type").map(String::as_str),
            "application/x-www-form-urlencoded",
        );
        want(
            "grant_type",
            form.get("grant_type").map(String::as_str),
            "urn:ietf:params:oauth:grant-type:token-exchange",
        );
        want(
            "audience",
            form.get("audience").map(String::as_str),
            AUDIENCE,
        );
        want(
            "subject_token_type",
            form.get("subject_token_type").map(String::as_str),
            JWT_TYPE,
        );
        want(
            "requested_token_type",
            form.get("requested_token_type").map(String::as_str),
            "urn:ietf:params:oauth:token-type:access_token",
        );
        want(
            "scope",
            form.get("scope").map(String::as_str),
            "https://www.googleapis.com/auth/cloud-platform",
        );
        // The token as the file holds it now (trimmed, as Google reads it).
        want(
            "subject_token",
            form.get("subject_token").map(String::as_str),
            subject.trim(),
        );
        st.subjects
            .push(form.get("subject_token").cloned().unwrap_or_default());
        if mode.refuse_sts {
            // Echoes the token, as a careless server might.
            (
                400,
                serde_json::json!({"error": "invalid_grant", "error_description": format!("The subject token {} is not trusted", subject.trim())}).to_string(),
            )
        } else {
            let token = format!("sts-{}", st.sts);
            st.issued.push(token.clone());
            (
                200,
                serde_json::json!({"access_token": token, "issued_token_type": "urn:ietf:params:oauth:token-type:access_token", "token_type": "Bearer", "expires_in": mode.lifetime}).to_string(),
            )
        }
    } else if path == format!("/v1/projects/-/serviceAccounts/{SA}:generateAccessToken") {
        st.iam += 1;
        want("method", Some(&req.method), "POST");
        // The newest STS token the fixture issued.
        let sts = st
            .issued
            .iter()
            .rev()
            .find(|t| t.starts_with("sts-"))
            .cloned()
            .unwrap_or_default();
        want(
            "authorization",
            req.headers.get("authorization").map(String::as_str),
            &format!("Bearer {sts}"),
        );
        let body: Value = serde_json::from_str(&req.body).unwrap_or(Value::Null);
        want(
            "body",
            Some(&body.to_string()),
            &serde_json::json!({"scope": ["https://www.googleapis.com/auth/devstorage.read_only"], "lifetime": "3600s"}).to_string(),
        );
        if mode.refuse_iam {
            (
                403,
                serde_json::json!({"error": {"code": 403, "message": format!("Permission 'iam.serviceAccounts.getAccessToken' denied (caller {sts})"), "status": "PERMISSION_DENIED"}}).to_string(),
            )
        } else {
            let token = format!("sa-{}", st.iam);
            st.issued.push(token.clone());
            let expire = SystemTime::now() + Duration::from_secs(mode.lifetime);
            (
                200,
                serde_json::json!({"accessToken": token, "expireTime": rfc3339(expire)})
                    .to_string(),
            )
        }
    } else if path == format!("/{TENANT}/oauth2/v2.0/token") {
        st.azure += 1;
        want("method", Some(&req.method), "POST");
        want(
            "client_id",
            form.get("client_id").map(String::as_str),
            CLIENT,
        );
        want(
            "client_assertion_type",
            form.get("client_assertion_type").map(String::as_str),
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        );
        want(
            "client_assertion",
            form.get("client_assertion").map(String::as_str),
            subject.trim(),
        );
        want(
            "grant_type",
            form.get("grant_type").map(String::as_str),
            "client_credentials",
        );
        want(
            "scope",
            form.get("scope").map(String::as_str),
            "https://storage.azure.com/.default",
        );
        st.subjects
            .push(form.get("client_assertion").cloned().unwrap_or_default());
        if mode.refuse_azure {
            (
                400,
                serde_json::json!({"error": "invalid_client", "error_description": format!("AADSTS700213: No matching federated identity record found for presented assertion {}", subject.trim())}).to_string(),
            )
        } else {
            let token = format!("az-{}", st.azure);
            st.issued.push(token.clone());
            (
                200,
                serde_json::json!({"access_token": token, "token_type": "Bearer", "expires_in": mode.lifetime}).to_string(),
            )
        }
    } else {
        problems.push(format!("unexpected request {} {}", req.method, req.target));
        (404, r#"{"error":"not_found"}"#.to_string())
    };
    if !problems.is_empty() {
        st.problems.extend(problems);
        return (400, r#"{"error":"invalid_request"}"#.to_string());
    }
    (status, body)
}

fn url_form(body: &str) -> HashMap<String, String> {
    body.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(&s.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// A registry with `env` added, and the sandbox its CLI runs in.
struct Registry {
    sb: Sandbox,
    server: Server,
}

impl Registry {
    fn start(config: &str, env: &[(&str, &str)]) -> Registry {
        let sb = Sandbox::new();
        let server = Server::start_config_env(&sb.path().join("registry"), config, env);
        Registry { sb, server }
    }

    fn sealvol(&self, args: &[&str]) -> std::process::Output {
        self.sb.sealvol(&host(&self.server), args)
    }

    fn sync_wait(&self, source: &str, dest: &str) -> std::process::Output {
        let dest = format!("{}/{dest}", host(&self.server));
        self.sealvol(&[
            "sync", "start", "--source", source, "--dest", &dest, "--wait", "--output", "json",
        ])
    }

    /// A job that must end READY, its files those of `files`.
    fn sync_ready(&self, source: &str, dest: &str, files: &[(&str, Vec<u8>)]) -> Value {
        let job = json(self.sync_wait(source, dest), "sync start --wait");
        assert_eq!(job["state"], "READY", "{job}");
        assert!(job["secret"].is_null(), "{job}");
        let digest = job["version"]["digest"]
            .as_str()
            .unwrap_or_else(|| panic!("no version digest: {job}"))
            .to_string();
        let name = dest.split(':').next().unwrap_or(dest);
        let pulled = self
            .sb
            .path()
            .join(format!("pulled-{}", name.replace('/', "-")));
        let reference = format!("{}/{name}@{digest}", host(&self.server));
        ok(
            self.sealvol(&["pull", &reference, s(&pulled), "--output", "json"]),
            "pull",
        );
        let got: Vec<(String, Node)> = tree(&pulled)
            .into_iter()
            .filter(|(_, n)| matches!(n, Node::File { .. }))
            .collect();
        let want: Vec<(String, Node)> = files
            .iter()
            .map(|(path, bytes)| {
                let node = Node::File {
                    mode: 0o644,
                    len: bytes.len() as u64,
                    sha256: sealvol_tests::sha256(bytes),
                };
                (path.to_string(), node)
            })
            .collect();
        assert_eq!(got, want, "the version is not the source's files");
        job
    }

    /// A job that must fail: its stderr line and the job as described.
    fn sync_failed(&self, source: &str, dest: &str) -> (String, Value) {
        let line = fails(self.sync_wait(source, dest), "sync start --wait");
        let id = line
            .strip_prefix("sealvol: sync ")
            .and_then(|rest| rest.split_once(" failed: "))
            .map(|(id, _)| id.to_string())
            .unwrap_or_else(|| panic!("not `sealvol: sync ID failed: …`: {line:?}"));
        let h = host(&self.server);
        let job = json(
            self.sealvol(&[
                "sync",
                "describe",
                &id,
                "--registry",
                &h,
                "--output",
                "json",
            ]),
            "sync describe",
        );
        assert_eq!(job["state"], "FAILED", "{job}");
        (line, job)
    }
}

/// Model files, and the token folder with the projected token in it.
fn files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("config.json", br#"{"hidden":64}"#.to_vec()),
        ("model.safetensors", noise(2 * (1 << 20) + 3, 11)),
        ("tokenizer/vocab.txt", noise(30_000, 12)),
    ]
}

fn token_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("token folder");
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{JWT}\n")).expect("write the token");
    (dir, file)
}

/// An `external_account` credentials file as `gcloud iam
/// workload-identity-pools create-cred-config` writes it, pointed at the
/// fixture.
fn credentials_file(
    dir: &Path,
    fixture: &TokenFixture,
    impersonate: bool,
    token: &Path,
) -> PathBuf {
    let mut creds = serde_json::json!({
        "universe_domain": "googleapis.com",
        "type": "external_account",
        "audience": AUDIENCE,
        "subject_token_type": JWT_TYPE,
        "token_url": format!("{}/v1/token", fixture.url()),
        "credential_source": {"file": s(token), "format": {"type": "text"}},
    });
    if impersonate {
        creds["service_account_impersonation_url"] = Value::String(format!(
            "{}/v1/projects/-/serviceAccounts/{SA}:generateAccessToken",
            fixture.url()
        ));
    }
    let file = dir.join("gcp-credentials.json");
    std::fs::write(&file, creds.to_string()).expect("write the credentials file");
    file
}

/// A GCS emulator with the model under `private/team/llm/`, behind a
/// recording proxy.
fn bucket(files: &[(&str, Vec<u8>)]) -> (GcsEmulator, FlipProxy) {
    let gcs = GcsEmulator::start();
    gcs.create_bucket("private");
    for (path, bytes) in files {
        gcs.put("private", &format!("team/llm/{path}"), bytes);
    }
    let proxy = FlipProxy::start_counting(gcs.url().trim_start_matches("http://"));
    (gcs, proxy)
}

/// The tokens the bucket's requests carried since the `skip` first.
fn bearers(proxy: &FlipProxy, skip: usize) -> Vec<String> {
    proxy
        .requests_with_authorization()
        .into_iter()
        .skip(skip)
        .map(|(req, auth)| {
            auth.and_then(|a| a.strip_prefix("Bearer ").map(str::to_string))
                .unwrap_or_else(|| panic!("{req} carried no bearer token"))
        })
        .collect()
}

#[test]
fn gs_without_a_secret_exchanges_the_projected_token_and_impersonates() {
    let files = files();
    let (_gcs, proxy) = bucket(&files);
    let (tokens, token_file) = token_dir();
    let fixture = TokenFixture::start(&token_file);
    let creds = credentials_file(tokens.path(), &fixture, true, &token_file);
    let emulator = format!("http://{}", proxy.addr());
    let reg = Registry::start(
        "sync_workers = 2",
        &[
            ("STORAGE_EMULATOR_HOST", &emulator),
            ("GOOGLE_APPLICATION_CREDENTIALS", s(&creds)),
        ],
    );

    reg.sync_ready("gs://private/team/llm", "wid/llm:v1", &files);
    fixture.assert_no_problems();
    assert_eq!(fixture.with(|s| (s.sts, s.iam)), (1, 1), "one exchange");
    // Every request the bucket saw carried the service account's token,
    // not the STS token or the subject token.
    let seen = bearers(&proxy, 0);
    assert!(seen.len() > files.len(), "listing and reads: {seen:?}");
    assert!(seen.iter().all(|t| t == "sa-1"), "{seen:?}");

    // Two more jobs at once share the kept token: no new exchange.
    let before = proxy.requests().len();
    std::thread::scope(|scope| {
        for dest in ["wid/a:v1", "wid/b:v1"] {
            let (reg, files) = (&reg, &files);
            scope.spawn(move || reg.sync_ready("gs://private/team/llm?checksum=none", dest, files));
        }
    });
    assert_eq!(
        fixture.with(|s| (s.sts, s.iam)),
        (1, 1),
        "the token is shared"
    );
    let seen = bearers(&proxy, before);
    assert!(
        !seen.is_empty() && seen.iter().all(|t| t == "sa-1"),
        "{seen:?}"
    );
    fixture.assert_no_problems();
}

#[test]
fn a_token_about_to_expire_is_exchanged_again_with_the_rotated_subject_token() {
    let files = files();
    let (_gcs, proxy) = bucket(&files);
    let (tokens, token_file) = token_dir();
    let fixture = TokenFixture::start(&token_file);
    // STS tokens that live 4 s: exchanged again after 2 s.
    fixture.set(|m| m.lifetime = 4);
    let creds = credentials_file(tokens.path(), &fixture, false, &token_file);
    let emulator = format!("http://{}", proxy.addr());
    let reg = Registry::start(
        "sync_workers = 1",
        &[
            ("STORAGE_EMULATOR_HOST", &emulator),
            ("GOOGLE_APPLICATION_CREDENTIALS", s(&creds)),
        ],
    );
    reg.sync_ready("gs://private/team/llm", "wid/llm:v1", &files);
    let first = fixture.with(|s| s.sts);
    assert!(first >= 1);
    let issued_first: Vec<String> = fixture.with(|s| s.issued.clone());
    let seen = bearers(&proxy, 0);
    assert!(
        seen.iter().all(|t| issued_first.contains(t)),
        "{seen:?} not all issued ({issued_first:?})"
    );

    // The platform rotates the projected token; the kept one is due.
    let rotated = JWT.replace("c2lnbmF0dXJlLWdjcA", "cm90YXRlZA");
    std::fs::write(&token_file, &rotated).expect("rotate the token");
    std::thread::sleep(Duration::from_millis(2500));
    let before = proxy.requests().len();
    reg.sync_ready("gs://private/team/llm", "wid/llm:v2", &files);
    fixture.assert_no_problems();
    let (count, subjects, issued) = fixture.with(|s| (s.sts, s.subjects.clone(), s.issued.clone()));
    assert!(count > first, "no new exchange: {count}");
    assert_eq!(subjects.last().map(String::as_str), Some(rotated.as_str()));
    // The second job's requests carried only tokens issued after the first.
    let seen = bearers(&proxy, before);
    assert!(!seen.is_empty());
    for t in &seen {
        assert!(
            issued.contains(t) && !issued_first.contains(t),
            "{t} is not a new token ({issued:?})"
        );
    }
}

#[test]
fn a_refused_exchange_fails_the_job_denied_naming_the_identity_not_the_token() {
    let files = files();
    let (_gcs, proxy) = bucket(&files);
    let (tokens, token_file) = token_dir();
    let fixture = TokenFixture::start(&token_file);
    let creds = credentials_file(tokens.path(), &fixture, true, &token_file);
    let emulator = format!("http://{}", proxy.addr());
    let reg = Registry::start(
        "sync_workers = 1",
        &[
            ("STORAGE_EMULATOR_HOST", &emulator),
            ("GOOGLE_APPLICATION_CREDENTIALS", s(&creds)),
        ],
    );

    // STS refuses the subject token (and echoes it).
    fixture.set(|m| m.refuse_sts = true);
    let (line, job) = reg.sync_failed("gs://private/team/llm", "wid/sts");
    assert_eq!(job["error"]["code"], "SOURCE_DENIED", "{line}\n{job}");
    let message = job["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(SA), "the identity is not named: {message}");
    assert!(
        message.contains(s(&creds)),
        "the file is not named: {message}"
    );
    assert!(message.contains("invalid_grant"), "{message}");
    for text in [&line, message, &job.to_string()] {
        assert!(!text.contains(JWT), "the token leaked: {text}");
    }
    assert_eq!(job["retries"], 0, "a refusal is not retried: {job}");

    // STS accepts, IAM refuses the impersonation (and echoes the STS token).
    fixture.set(|m| {
        m.refuse_sts = false;
        m.refuse_iam = true;
    });
    let (line, job) = reg.sync_failed("gs://private/team/llm", "wid/iam");
    assert_eq!(job["error"]["code"], "SOURCE_DENIED", "{line}\n{job}");
    let message = job["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(SA), "the identity is not named: {message}");
    assert!(message.contains("PERMISSION_DENIED"), "{message}");
    let sts = fixture.with(|s| s.issued.last().cloned().unwrap_or_default());
    assert!(sts.starts_with("sts-"), "{sts}");
    for text in [&line, message, &job.to_string()] {
        assert!(!text.contains(JWT), "the token leaked: {text}");
        assert!(!text.contains(&sts), "the STS token leaked: {text}");
    }
    fixture.assert_no_problems();
    // Nothing reached the bucket without a token.
    assert!(proxy.requests().is_empty(), "{:?}", proxy.requests());

    // Both work again: the next job exchanges anew and reads.
    fixture.set(|m| m.refuse_iam = false);
    reg.sync_ready("gs://private/team/llm", "wid/ok", &files);
    let seen = bearers(&proxy, 0);
    assert!(
        !seen.is_empty() && seen.iter().all(|t| t.starts_with("sa-")),
        "{seen:?}"
    );
}

#[test]
fn azure_without_a_secret_uses_the_federated_token() {
    let files = files();
    let azurite = Azurite::start();
    // Azurite checks OAuth tokens only over HTTPS: a public container lets
    // the token reach it unchecked, and the proxy shows what was sent.
    azurite.create_public_container("weights");
    for (path, bytes) in &files {
        azurite.put("weights", &format!("run1/{path}"), bytes);
    }
    let proxy = FlipProxy::start_counting(azurite.url().trim_start_matches("http://"));
    let (_tokens, token_file) = token_dir();
    // Entra ID takes the file as it is: no line end.
    std::fs::write(&token_file, JWT).expect("write the token");
    let fixture = TokenFixture::start(&token_file);
    let endpoint = format!("http://{}", proxy.addr());
    let config = format!("sync_workers = 1\nsync_endpoints = [\"{endpoint}\"]");
    // The authority with a trailing `/`, as the AKS webhook sets it.
    let authority = format!("{}/", fixture.url());
    let reg = Registry::start(
        &config,
        &[
            ("AZURE_FEDERATED_TOKEN_FILE", s(&token_file)),
            ("AZURE_CLIENT_ID", CLIENT),
            ("AZURE_TENANT_ID", TENANT),
            ("AZURE_AUTHORITY_HOST", &authority),
        ],
    );
    let source =
        format!("azure://{AZURITE_ACCOUNT}/weights/run1?endpoint={endpoint}/{AZURITE_ACCOUNT}");
    reg.sync_ready(&source, "wid/azure:v1", &files);
    fixture.assert_no_problems();
    assert_eq!(fixture.with(|s| s.azure), 1, "one exchange");
    let seen = bearers(&proxy, 0);
    assert!(seen.len() > files.len(), "{seen:?}");
    assert!(seen.iter().all(|t| t == "az-1"), "{seen:?}");

    // Entra ID refuses: SOURCE_DENIED naming the client and tenant. (A
    // store is made per job, and with it object_store's token cache, so
    // this job exchanges again.)
    fixture.set(|m| m.refuse_azure = true);
    let (line, job) = reg.sync_failed(&source, "wid/azure-denied");
    assert_eq!(job["error"]["code"], "SOURCE_DENIED", "{line}\n{job}");
    let message = job["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(CLIENT) && message.contains(TENANT),
        "{message}"
    );
    for text in [&line, message, &job.to_string()] {
        assert!(!text.contains(JWT), "the token leaked: {text}");
    }
    fixture.assert_no_problems();
}
