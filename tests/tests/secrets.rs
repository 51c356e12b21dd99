//! Sync secrets (SPEC.md §8.3, §8.4) end to end against the real binary:
//! a secret goes only to the sources and destinations it is bound to, a
//! sync never connects to a link-local address or (on a registry others
//! reach) to the host's loopback, whether a URI names it or a host name
//! resolves to it; values never rest in plaintext in the data folder, also
//! after a data folder of an earlier release is opened.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use sealvol_tests::{htpasswd_line, ok, s, Sandbox, Server};
use serde_json::{json, Value};

const PASSWORD: &str = "secret-test-password";

fn basic(user: &str) -> String {
    let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{PASSWORD}"));
    format!("Basic {b}")
}

/// A registry others reach (it has a public URL), with an admin and a
/// writer who may push to `weights/**` and `other/**`.
fn exposed_registry(sb: &Sandbox) -> Server {
    let htpasswd = sb.path().join("htpasswd");
    std::fs::write(
        &htpasswd,
        htpasswd_line("admin", PASSWORD) + &htpasswd_line("writer", PASSWORD),
    )
    .unwrap();
    let config = format!(
        "[auth]\nhtpasswd = {:?}\nadmins = [\"admin\"]\npublic_url = \"https://registry.example\"\n\
         [[auth.access]]\nrepositories = [\"weights/**\", \"other/**\"]\nusers = [\"writer\"]\nactions = [\"pull\", \"push\"]\n",
        s(&htpasswd)
    );
    Server::start_config_env(&sb.path().join("registry"), &config, &[])
}

fn put_secret(url: &str, name: &str, query: &str, value: &str) -> u16 {
    reqwest::blocking::Client::new()
        .put(format!("{url}/api/v1/secrets/{name}?{query}"))
        .header("authorization", basic("admin"))
        .header("content-type", "application/octet-stream")
        .body(value.to_string())
        .send()
        .expect("PUT secret")
        .status()
        .as_u16()
}

/// `POST /api/v1/syncs` as `user`: the status and the answer.
fn start_sync(url: &str, user: &str, body: Value) -> (u16, Value) {
    let resp = reqwest::blocking::Client::new()
        .post(format!("{url}/api/v1/syncs"))
        .header("authorization", basic(user))
        .json(&body)
        .send()
        .expect("POST sync");
    let status = resp.status().as_u16();
    (status, resp.json().unwrap_or(Value::Null))
}

fn job(url: &str, id: &str) -> Value {
    reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/syncs/{id}"))
        .header("authorization", basic("admin"))
        .send()
        .expect("GET sync")
        .json()
        .expect("a job")
}

fn finished(url: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let j = job(url, id);
        if matches!(j["state"].as_str(), Some("READY" | "FAILED" | "CANCELED")) {
            return j;
        }
        assert!(Instant::now() < deadline, "job never finished: {j}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Asserts `listener` was never connected to.
fn untouched(listener: &TcpListener) {
    listener.set_nonblocking(true).unwrap();
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Ok((_, peer)) => panic!("the registry connected to the test's listener (from {peer})"),
        Err(e) => panic!("accept: {e}"),
    }
}

#[test]
fn secrets_and_syncs_go_only_where_they_are_allowed() {
    let sb = Sandbox::new();
    let reg = exposed_registry(&sb);
    let url = reg.url.clone();
    // What a wrongly sent credential or a forged endpoint would reach.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();

    // Binding is required, and checked.
    assert_eq!(put_secret(&url, "unbound", "", "v"), 400);
    assert_eq!(put_secret(&url, "bad", "for=dir:///srv", "v"), 400);
    let bound_for = format!("s3://bucket-a?endpoint=http://localhost:{port}");
    let q = format!("for={}&dest=weights/**", urlencode(&bound_for));
    assert_eq!(put_secret(&url, "s3a", &q, "AKIAEXAMPLE:wJalrSECRET"), 204);
    let oci_for = format!("oci://127.0.0.1:{}", port + 1);
    assert_eq!(
        put_secret(&url, "reg", &format!("for={}", urlencode(&oci_for)), "u:p"),
        204
    );

    let refused = [
        // Another bucket, at the listener, with a secret bound elsewhere.
        (
            "admin",
            json!({"source": format!("s3://bucket-b?endpoint=http://localhost:{port}"),
                   "dest": {"name": "weights/x"}, "secret": "s3a"}),
            403,
        ),
        // The bound bucket, into a destination the binding leaves out.
        (
            "writer",
            json!({"source": bound_for, "dest": {"name": "other/x"}, "secret": "s3a"}),
            403,
        ),
        // Another registry host than the secret's.
        (
            "admin",
            json!({"source": format!("oci://127.0.0.1:{port}/w/x:v1"),
                   "dest": {"name": "weights/x"}, "secret": "reg"}),
            403,
        ),
        // An endpoint override that neither the admin nor a binding allows:
        // the host's own credentials would follow it.
        (
            "admin",
            json!({"source": format!("s3://bucket-a?endpoint=http://localhost:{port}"),
                   "dest": {"name": "weights/x"}}),
            403,
        ),
        // This host's loopback, named by the URI, on a registry others reach.
        (
            "admin",
            json!({"source": format!("gs://b?endpoint=http://127.0.0.1:{port}"), "dest": {"name": "weights/x"}}),
            400,
        ),
        // Link-local, named by the URI.
        (
            "admin",
            json!({"source": "s3://b?endpoint=http://169.254.169.254", "dest": {"name": "weights/x"}}),
            400,
        ),
    ];
    for (user, body, status) in refused {
        let (got, answer) = start_sync(&url, user, body.clone());
        assert_eq!(got, status, "{user} {body}: {answer}");
        assert!(
            !answer.to_string().contains("wJalrSECRET"),
            "a secret value came back: {answer}"
        );
    }

    // A binding that names a link-local endpoint does not make it
    // reachable: the job is refused before it exists.
    let meta_for = "s3://b?endpoint=http://169.254.169.254";
    assert_eq!(
        put_secret(&url, "meta", &format!("for={}", urlencode(meta_for)), "k:s"),
        204
    );
    let (got, answer) = start_sync(
        &url,
        "admin",
        json!({"source": meta_for, "dest": {"name": "weights/x"}, "secret": "meta"}),
    );
    assert_eq!(got, 400, "{answer}");
    assert!(answer.to_string().contains("metadata"), "{answer}");

    // Allowed by the binding, but `localhost` resolves to this host's
    // loopback, which a registry others reach never connects to: the job
    // fails when it resolves the name, before any connection.
    let (got, created) = start_sync(
        &url,
        "writer",
        json!({"source": bound_for, "dest": {"name": "weights/x"}, "secret": "s3a"}),
    );
    assert_eq!(got, 201, "{created}");
    let done = finished(&url, created["id"].as_str().unwrap());
    assert_eq!(done["state"], "FAILED", "{done}");
    assert_eq!(done["error"]["code"], "INVALID_SOURCE", "{done}");
    assert!(
        done["error"]["message"]
            .as_str()
            .unwrap()
            .contains("loopback"),
        "{done}"
    );
    assert_eq!(done["attempts"], 1, "a refusal is not retried: {done}");
    assert!(!done.to_string().contains("wJalrSECRET"), "{done}");

    untouched(&listener);

    // Listed with their bindings, never their values.
    let listed: Value = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/secrets"))
        .header("authorization", basic("admin"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(
        listed["secrets"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "s3a", "for": [bound_for], "dest": ["weights/**"]})),
        "{listed}"
    );
    assert!(!listed.to_string().contains("wJalrSECRET"), "{listed}");
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn holds(path: &Path, needle: &[u8]) -> bool {
    let bytes = std::fs::read(path).unwrap();
    bytes.windows(needle.len()).any(|w| w == needle)
}

/// `sealvol secret list --output json` against the registry `h`.
fn secret_list(sb: &Sandbox, h: &str) -> Value {
    sealvol_tests::json(
        sb.sealvol(h, &["secret", "list", "--registry", h, "--output", "json"]),
        "secret list",
    )
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn secret_values_never_rest_in_plaintext() {
    let value = "hf_PLAINTEXTcanary0123456789abcdef";
    let sb = Sandbox::new();
    let root = sb.path().join("registry");
    let server = Server::start(&root);
    let h = sealvol_tests::host(&server);
    ok(
        sb.sealvol_stdin(
            &h,
            &["secret", "set", "hf", "--for", "hf://org", "--registry", &h],
            value.as_bytes(),
        ),
        "secret set",
    );
    let meta = root.join("meta.redb");
    assert!(!holds(&meta, value.as_bytes()), "meta.redb holds the value");
    assert_eq!(mode(&root), 0o700);
    assert_eq!(mode(&meta), 0o600);
    assert_eq!(mode(&root.join("secrets.key")), 0o600);
    drop(server);

    // A data folder of an earlier release: the value in plaintext in the
    // `secrets` table, the folder and its files open to everyone.
    let old = sb.path().join("old");
    std::fs::create_dir_all(&old).unwrap();
    let old_meta = old.join("meta.redb");
    {
        let db = redb::Database::create(&old_meta).unwrap();
        let tx = db.begin_write().unwrap();
        let table: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("secrets");
        tx.open_table(table)
            .unwrap()
            .insert("legacy", value.as_bytes())
            .unwrap();
        tx.commit().unwrap();
    }
    for p in [&old, &old_meta] {
        let m = if p.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    assert!(
        holds(&old_meta, value.as_bytes()),
        "the test must start from plaintext"
    );
    let server = Server::start(&old);
    let h = sealvol_tests::host(&server);
    assert!(
        !holds(&old_meta, value.as_bytes()),
        "meta.redb still holds the plaintext after the upgrade"
    );
    assert_eq!(mode(&old), 0o700);
    assert_eq!(mode(&old_meta), 0o600);
    let listed = secret_list(&sb, &h);
    assert_eq!(
        listed["secrets"],
        json!([{"name": "legacy", "for": [], "dest": []}]),
        "an upgraded secret is bound to nothing until rebound: {listed}"
    );
    ok(
        sb.sealvol(
            &h,
            &[
                "secret",
                "bind",
                "legacy",
                "--for",
                "hf://org",
                "--registry",
                &h,
            ],
        ),
        "secret bind",
    );
    let listed = secret_list(&sb, &h);
    assert_eq!(
        listed["secrets"],
        json!([{"name": "legacy", "for": ["hf://org"], "dest": []}]),
        "{listed}"
    );
    assert!(!holds(&old_meta, value.as_bytes()));
}
