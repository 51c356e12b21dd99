//! `sealvol serve` with `[auth]` (SPEC.md §7.5), end to end against the
//! real binary: an authorization matrix over every `/v2` and `/api/v1`
//! endpoint for an admin, a writer and a reader of `weights/**`, an
//! anonymous caller and a wrong password, in an allowed and a forbidden
//! namespace; real clients (`sealvol login`, push, pull; skopeo with
//! `--creds`) through Basic auth; the CSRF refusals with auth on and off;
//! and the refusal to serve an exposed address without TLS or auth.

use std::path::Path;

use base64::Engine as _;
use sealvol_tests::{
    fails, host, htpasswd_line, ok, s, sha256, stderr, write, Containerd, Sandbox, Server,
};
use serde_json::{json, Value};

const PASSWORD: &str = "pa55:word with space";

/// The users and their rights: admin everything; writer pull/push/delete
/// and reader pull on `weights/**`, and so `grouped`, by its group;
/// nothing else for anyone.
fn start(sb: &Sandbox) -> Server {
    let mut lines = String::new();
    for u in ["admin", "writer", "reader", "grouped"] {
        lines.push_str(&htpasswd_line(u, PASSWORD));
    }
    let htpasswd = sb.path().join("htpasswd");
    std::fs::write(&htpasswd, lines).unwrap();
    // The sync row of the matrix creates a dir:// job of a folder that
    // does not exist: allowed under a root, and failing at once.
    let config = format!(
        "sync_dir_roots = [\"/nonexistent\"]\n[auth]\nhtpasswd = {:?}\nadmins = [\"admin\"]\n\
         [[auth.access]]\nrepositories = [\"weights/**\"]\nusers = [\"writer\"]\nactions = [\"pull\", \"push\", \"delete\"]\n\
         [[auth.access]]\nrepositories = [\"weights/**\"]\nusers = [\"reader\"]\ngroups = [\"readers\"]\nactions = [\"pull\"]\n\
         [auth.groups]\nreaders = [\"grouped\"]\n",
        s(&htpasswd)
    );
    Server::start_config_env(&sb.path().join("registry"), &config, &[])
}

fn basic(user: &str, password: &str) -> String {
    let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {b}")
}

/// One request: method, path, JSON body (sent as `application/json`) or
/// raw bytes.
struct Call<'a> {
    method: &'a str,
    path: String,
    body: Option<Vec<u8>>,
    content_type: &'a str,
}

fn call(url: &str, auth: Option<&str>, c: &Call) -> (u16, reqwest::blocking::Response) {
    let client = reqwest::blocking::Client::new();
    let mut req = client.request(c.method.parse().unwrap(), format!("{url}{}", c.path));
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    if c.method != "GET" && c.method != "HEAD" {
        req = req.header("content-type", c.content_type);
    }
    if let Some(b) = &c.body {
        req = req.body(b.clone());
    }
    let resp = req.send().expect("request to sealvol serve");
    (resp.status().as_u16(), resp)
}

/// A small tree to push.
fn model(dir: &Path, seed: u8) {
    write(&dir.join("config.json"), &[b'{', seed, b'}'], 0o644);
    write(&dir.join("w.bin"), &vec![seed; 300_000], 0o644);
}

fn login(sb: &Sandbox, reg: &str, user: &str) {
    ok(
        sb.sealvol_stdin(
            reg,
            &["login", reg, "-u", user, "--password-stdin"],
            PASSWORD.as_bytes(),
        ),
        "sealvol login",
    );
}

#[test]
fn authorization_matrix_over_every_endpoint() {
    let sb = Sandbox::new();
    let server = start(&sb);
    let url = server.url.clone();
    let reg = host(&server);

    // A kubelet's or a load balancer's probes send no credentials: the
    // health endpoints answer them, and say nothing more.
    for (path, want) in [
        ("/livez", 200),
        ("/readyz", 200),
        ("/v2/", 401),
        ("/metrics", 401),
    ] {
        let r = reqwest::blocking::get(format!("{url}{path}")).unwrap();
        assert_eq!(r.status().as_u16(), want, "anonymous GET {path}");
        if want == 200 {
            assert_eq!(r.text().unwrap(), "ok\n", "GET {path}");
        }
    }

    // An admin publishes one volume in each namespace with real clients.
    let admin = Sandbox::new();
    login(&admin, &reg, "admin");
    let mut b3 = std::collections::HashMap::new();
    for (repo, seed) in [("weights/a", 1u8), ("other/b", 2)] {
        let d = admin.path().join(repo.replace('/', "-"));
        model(&d, seed);
        let out = ok(
            admin.sealvol(&reg, &["push", s(&d), &format!("bdn:{repo}")]),
            "admin push",
        );
        let digest = out.trim().rsplit('@').next().unwrap().to_string();
        b3.insert(repo, digest);
    }
    let blob = b"one blob".to_vec();
    let blob_digest = sha256(&blob);
    let a = basic("admin", PASSWORD);
    for repo in ["weights/a", "other/b"] {
        let (st, _) = call(
            &url,
            Some(&a),
            &Call {
                method: "POST",
                path: format!("/v2/{repo}/blobs/uploads/?digest={blob_digest}"),
                body: Some(blob.clone()),
                content_type: "application/octet-stream",
            },
        );
        assert_eq!(st, 201, "admin monolithic upload to {repo}");
    }

    // An API key that may pull weights/** and nothing else, made by the
    // admin with the CLI; its line is `id:secret`.
    let line = ok(
        admin.sealvol(
            &reg,
            &[
                "admin",
                "key",
                "create",
                "--repositories",
                "weights/**",
                "--actions",
                "pull",
                "--expires",
                "1d",
                "--registry",
                &reg,
            ],
        ),
        "admin key create",
    );
    let (key_id, key_secret) = line.trim().split_once(':').expect("id:secret");
    let users: [(&str, Option<String>); 7] = [
        ("admin", Some(basic("admin", PASSWORD))),
        ("writer", Some(basic("writer", PASSWORD))),
        ("reader", Some(basic("reader", PASSWORD))),
        ("grouped", Some(basic("grouped", PASSWORD))),
        ("apikey", Some(basic(key_id, key_secret))),
        ("anonymous", None),
        ("wrong-password", Some(basic("writer", "nope"))),
    ];
    // (name, method, path, body, content type, allowed-to, success code)
    // where allowed-to is the action needed on the repository, "admin",
    // or "any" (anyone known).
    let zero = format!("sha256:{}", "0".repeat(64));
    let mut table = String::from("| endpoint | repo | admin | writer | reader | grouped | apikey | anonymous | wrong-password |\n|---|---|---|---|---|---|---|---|---|\n");
    let mut failures = Vec::new();
    for repo in ["weights/a", "other/b"] {
        let v = &b3[repo];
        #[rustfmt::skip]
        let endpoints: Vec<(&str, String, Option<Value>, &str, u16)> = vec![
            ("GET", format!("/v2/{repo}/tags/list"), None, "pull", 200),
            ("HEAD", format!("/v2/{repo}/manifests/head"), None, "pull", 200),
            ("GET", format!("/v2/{repo}/blobs/{blob_digest}"), None, "pull", 200),
            ("GET", format!("/v2/{repo}/referrers/{zero}"), None, "pull", 200),
            ("POST", format!("/v2/{repo}/blobs/uploads/"), None, "push", 202),
            ("PUT", format!("/v2/{repo}/manifests/x"), None, "push", 400),
            ("DELETE", format!("/v2/{repo}/manifests/{zero}"), None, "delete", 404),
            ("GET", format!("/api/v1/volumes/{repo}"), None, "pull", 200),
            ("GET", format!("/api/v1/volumes/{repo}/-/versions"), None, "pull", 200),
            ("GET", format!("/api/v1/volumes/{repo}/-/versions/{v}"), None, "pull", 200),
            ("GET", format!("/api/v1/volumes/{repo}/-/versions/{v}/entries"), None, "pull", 200),
            ("GET", format!("/api/v1/volumes/{repo}/-/versions/{v}/diff/{v}"), None, "pull", 200),
            ("GET", format!("/api/v1/volumes/{repo}/-/stats"), None, "pull", 200),
            ("PUT", format!("/api/v1/volumes/{repo}/-/tags/t"), Some(json!({"digest": v})), "push", 200),
            ("DELETE", format!("/api/v1/volumes/{repo}/-/tags/nosuch"), None, "delete", 404),
            ("POST", format!("/api/v1/volumes/{repo}/-/versions/{v}/restore"), None, "delete", 409),
            ("PATCH", format!("/api/v1/volumes/{repo}"), Some(json!({"expires_at": null})), "delete", 200),
            ("POST", "/api/v1/syncs".into(), Some(json!({"source": "dir:///nonexistent", "dest": {"name": repo}})), "push", 201),
            ("GET", "/v2/".into(), None, "any", 200),
            ("GET", "/v2/_catalog".into(), None, "any", 200),
            ("GET", "/api/v1".into(), None, "any", 200),
            ("GET", "/api/v1/whoami?repository=weights/a".into(), None, "any", 200),
            ("GET", "/api/v1/volumes".into(), None, "any", 200),
            ("GET", "/api/v1/syncs".into(), None, "any", 200),
            ("POST", "/api/v1/gc?dry_run=true".into(), None, "admin", 200),
            ("GET", "/api/v1/secrets".into(), None, "admin", 200),
            ("GET", "/api/v1/keys".into(), None, "admin", 200),
            ("DELETE", "/api/v1/keys/svk_0000000000000000".into(), None, "admin", 404),
        ];
        for (method, path, body, need, success) in endpoints {
            if repo == "other/b" && !path.contains(repo) && need != "push" {
                continue; // repository-less rows once
            }
            let mut row = format!("| {method} {path} | {repo} |");
            for (who, auth) in &users {
                // Each failed login waits a second: try the wrong password
                // on a few rows only.
                if *who == "wrong-password" && !(path == "/v2/" || path.ends_with("/tags/list")) {
                    row.push_str(" – |");
                    continue;
                }
                let allowed = match (*who, need) {
                    ("wrong-password", _) | ("anonymous", _) => false,
                    ("admin", _) => true,
                    (_, "any") => true,
                    (_, "admin") => false,
                    ("writer", _) => repo == "weights/a",
                    ("reader" | "grouped" | "apikey", n) => repo == "weights/a" && n == "pull",
                    _ => unreachable!(),
                };
                let expected = if allowed {
                    success
                } else if matches!(*who, "anonymous" | "wrong-password") {
                    401
                } else {
                    403
                };
                let c = Call {
                    method,
                    path: path.clone(),
                    body: body.as_ref().map(|b| b.to_string().into_bytes()),
                    content_type: "application/json",
                };
                let (got, resp) = call(&url, auth.as_deref(), &c);
                let challenge = resp.headers().get("www-authenticate").is_some();
                let text = resp.text().unwrap_or_default();
                if got != expected || (got == 401 && !challenge) {
                    failures.push(format!(
                        "{who} {method} {path}: got {got} (challenge {challenge}), want {expected}: {text}"
                    ));
                }
                if got == 403 && method != "HEAD" && !text.contains("DENIED") {
                    failures.push(format!("{who} {method} {path}: 403 without DENIED: {text}"));
                }
                row.push_str(&format!(
                    " {got}{} |",
                    if got == expected { "" } else { " ✗" }
                ));
            }
            table.push_str(&row);
            table.push('\n');
        }
    }
    println!("{table}");
    assert!(failures.is_empty(), "{}\n{table}", failures.join("\n"));

    // Listings show only what the caller may pull.
    let list = |auth: &str, path: &str| -> Value {
        let (st, resp) = call(
            &url,
            Some(auth),
            &Call {
                method: "GET",
                path: path.into(),
                body: None,
                content_type: "",
            },
        );
        assert_eq!(st, 200, "{path}");
        resp.json().unwrap()
    };
    let r = basic("reader", PASSWORD);
    assert_eq!(
        list(&r, "/v2/_catalog")["repositories"],
        json!(["weights/a"])
    );
    assert_eq!(
        list(&a, "/v2/_catalog")["repositories"],
        json!(["other/b", "weights/a"])
    );
    let names = |v: Value, key: &str| -> Vec<String> {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                x["name"]
                    .as_str()
                    .or(x["dest"]["name"].as_str())
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(names(list(&r, "/api/v1/volumes"), "volumes"), ["weights/a"]);
    assert_eq!(
        list(&r, "/api/v1/namespaces")["namespaces"],
        json!(["weights"])
    );
    // What each may do, as a web view asks before it shows a button.
    for (who, auth, admin, actions) in [
        ("reader", &r, false, json!(["pull"])),
        (
            "writer",
            &basic("writer", PASSWORD),
            false,
            json!(["pull", "push", "delete"]),
        ),
        ("admin", &a, true, json!(["pull", "push", "delete"])),
    ] {
        let me = list(auth, "/api/v1/whoami?repository=weights/a");
        assert_eq!(me["subject"], who, "{me}");
        assert_eq!(me["admin"], admin, "{me}");
        assert_eq!(me["authentication"], true, "{me}");
        assert_eq!(me["actions"], actions, "{who}: {me}");
        assert_eq!(
            list(auth, "/api/v1/whoami?repository=other/b")["actions"],
            if who == "admin" {
                actions.clone()
            } else {
                json!([])
            },
            "{who} on other/b"
        );
    }
    let syncs = names(list(&r, "/api/v1/syncs"), "syncs");
    assert!(
        !syncs.is_empty() && syncs.iter().all(|d| d == "weights/a"),
        "{syncs:?}"
    );
}

#[test]
fn real_clients_log_in_push_pull_and_copy() {
    let sb = Sandbox::new();
    let server = start(&sb);
    let reg = host(&server);
    let d = sb.path().join("model");
    model(&d, 7);

    // Without credentials: one line that says to log in.
    let line = fails(
        sb.sealvol(&reg, &["push", s(&d), "bdn:weights/m"]),
        "anonymous push",
    );
    assert!(line.contains("sealvol login"), "{line}");

    login(&sb, &reg, "writer");
    let pushed = ok(
        sb.sealvol(&reg, &["push", s(&d), "bdn:weights/m"]),
        "writer push",
    );
    let digest = pushed.trim().rsplit('@').next().unwrap().to_string();
    // A namespace the writer has no entry for.
    let line = fails(
        sb.sealvol(&reg, &["push", s(&d), "bdn:other/m"]),
        "push elsewhere",
    );
    assert!(
        line.contains("denied") || line.contains("DENIED") || line.contains("may not"),
        "{line}"
    );

    let out = sb.path().join("pulled");
    ok(
        sb.sealvol(&reg, &["pull", &format!("bdn:weights/m@{digest}"), s(&out)]),
        "writer pull",
    );
    sealvol_tests::assert_same_tree(&d, &out);

    // The reader may pull but not push or move tags.
    let reader = Sandbox::new();
    login(&reader, &reg, "reader");
    ok(
        reader.sealvol(
            &reg,
            &["pull", "bdn:weights/m", s(&reader.path().join("p"))],
        ),
        "reader pull",
    );
    fails(
        reader.sealvol(
            &reg,
            &["tag", "set", &format!("bdn:weights/m@{digest}"), "prod"],
        ),
        "reader tag set",
    );
    // A wrong password is refused at login, and nothing is stored.
    let out = reader.sealvol_stdin(
        &reg,
        &["login", &reg, "-u", "writer", "--password-stdin"],
        b"wrong",
    );
    assert!(!out.status.success(), "{}", stderr(&out));

    // skopeo with --creds: copy the version between namespaces as the
    // admin, and be refused as the reader.
    let creds = |u: &str| format!("{u}:{PASSWORD}");
    let skopeo = |args: &[&str]| {
        sb.command("skopeo")
            .args(args)
            .output()
            .expect("run skopeo (installed by scripts/deps.sh)")
    };
    let src = format!("docker://{reg}/weights/m:head");
    // skopeo with --authfile: the config.json `sealvol login` wrote (the
    // writer's), read by skopeo alone.
    let authfile = sb.docker_config().join("config.json");
    let out = Sandbox::new()
        .command("skopeo")
        .args([
            "inspect",
            "--raw",
            "--tls-verify=false",
            "--authfile",
            s(&authfile),
            &src,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "skopeo --authfile: {}", stderr(&out));
    let dst = format!("docker://{reg}/copies/m:head");
    let out = skopeo(&[
        "copy",
        "--all",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        "--src-creds",
        &creds("reader"),
        "--dest-creds",
        &creds("reader"),
        &src,
        &dst,
    ]);
    assert!(!out.status.success(), "reader may not push copies/m");
    let out = skopeo(&[
        "copy",
        "--all",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        "--src-creds",
        &creds("admin"),
        "--dest-creds",
        &creds("admin"),
        &src,
        &dst,
    ]);
    assert!(out.status.success(), "admin skopeo copy: {}", stderr(&out));
    let out = skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        "--creds",
        &creds("reader"),
        &src,
    ]);
    assert!(
        out.status.success(),
        "reader skopeo inspect: {}",
        stderr(&out)
    );
    // Anonymous: a sandbox without the logins above.
    let out = Sandbox::new()
        .command("skopeo")
        .args(["inspect", "--raw", "--tls-verify=false", &src])
        .output()
        .unwrap();
    assert!(!out.status.success(), "anonymous skopeo inspect must fail");
}

/// A `text/plain` POST (a CORS simple request any web page can send) and a
/// request from a foreign `Origin` are refused before they do anything.
fn csrf_refusals(url: &str, auth: Option<&str>) {
    let post = |ct: &str, origin: Option<&str>| {
        let mut req = reqwest::blocking::Client::new()
            .post(format!("{url}/api/v1/syncs"))
            .header("content-type", ct)
            .body(r#"{"source": "dir:///nonexistent", "dest": {"name": "weights/x"}}"#);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.send().unwrap().status().as_u16()
    };
    assert_eq!(post("text/plain", None), 415);
    assert_eq!(post("application/x-www-form-urlencoded", None), 415);
    assert_eq!(post("application/json", Some("https://evil.example")), 403);
    let mut req = reqwest::blocking::Client::new().get(format!("{url}/api/v1/syncs"));
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let jobs: Value = req.send().unwrap().json().unwrap();
    assert_eq!(jobs["syncs"], json!([]), "no job may exist");
    // Bodiless writes need the JSON content type too.
    let mut req = reqwest::blocking::Client::new().post(format!("{url}/api/v1/gc?dry_run=true"));
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    assert_eq!(req.send().unwrap().status().as_u16(), 415);
}

#[test]
fn csrf_is_refused_with_auth_on_and_off() {
    let sb = Sandbox::new();
    let open = Server::start(&sb.path().join("open"));
    csrf_refusals(&open.url, None);
    let server = start(&sb);
    csrf_refusals(&server.url, Some(&basic("admin", PASSWORD)));
}

#[test]
fn an_exposed_address_needs_tls_and_auth() {
    let sb = Sandbox::new();
    let root = sb.path().join("r");
    let run = |args: &[&str]| {
        let mut all = vec!["serve", "--addr", "0.0.0.0:0", "--root", s(&root)];
        all.extend_from_slice(args);
        sb.sealvol("127.0.0.1:1", &all)
    };
    let line = fails(run(&[]), "plain HTTP off loopback");
    assert!(
        line.contains("--allow-plain-http") && line.contains("[tls]"),
        "{line}"
    );
    let line = fails(run(&["--allow-plain-http"]), "no auth off loopback");
    assert!(
        line.contains("[auth]") && line.contains("--allow-anonymous-writes"),
        "{line}"
    );
    // Nothing was created for a refused start.
    assert!(
        !root.exists(),
        "a refused start must not create the data folder"
    );
}

/// `skopeo ARGS` in the sandbox's environment.
fn skopeo_in(sb: &Sandbox, args: &[&str]) -> std::process::Output {
    sb.command("skopeo")
        .args(args)
        .output()
        .expect("run skopeo (installed by scripts/deps.sh)")
}

/// A test CA and a certificate it signed for 127.0.0.1, in `dir`:
/// (CA certificate, server certificate, server key).
fn test_ca(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let p = |n: &str| dir.join(n);
    let (ca_key, ca_crt, key, csr_file) = (p("ca.key"), p("ca.crt"), p("tls.key"), p("tls.csr"));
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("run openssl (installed by scripts/deps.sh)");
        assert!(out.status.success(), "openssl {args:?}: {}", stderr(&out));
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509", "-days", "1", "-subj", "/CN=sealvol test CA"];
    ca.extend(ec);
    ca.extend(["-keyout", s(&ca_key), "-out", s(&ca_crt)]);
    openssl(&ca);
    let mut csr = vec!["req", "-subj", "/CN=127.0.0.1"];
    csr.extend(ec);
    csr.extend(["-keyout", s(&key), "-out", s(&csr_file)]);
    openssl(&csr);
    std::fs::write(
        p("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-days",
        "1",
        "-in",
        s(&p("tls.csr")),
        "-CA",
        s(&p("ca.crt")),
        "-CAkey",
        s(&p("ca.key")),
        "-CAcreateserial",
        "-extfile",
        s(&p("ext.cnf")),
        "-out",
        s(&p("tls.crt")),
    ]);
    (p("ca.crt"), p("tls.crt"), p("tls.key"))
}

#[test]
fn tls_with_a_certificate_the_clients_are_told_to_trust() {
    let sb = Sandbox::new();
    let (ca_cert, cert, key) = test_ca(sb.path());
    let htpasswd = sb.path().join("htpasswd");
    std::fs::write(&htpasswd, htpasswd_line("writer", PASSWORD)).unwrap();
    let config = format!(
        "[tls]\ncertificate = {:?}\nkey = {:?}\n\
         [auth]\nhtpasswd = {:?}\n\
         [[auth.access]]\nrepositories = [\"weights/**\"]\nusers = [\"writer\"]\nactions = [\"pull\", \"push\"]\n",
        s(&cert),
        s(&key),
        s(&htpasswd)
    );
    let server = Server::start_config_env(&sb.path().join("registry"), &config, &[]);
    assert!(server.url.starts_with("https://"), "{}", server.url);
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&ca_cert).unwrap()).unwrap();
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(ca)
        .build()
        .unwrap();
    // The token flow over TLS: challenge, token, then the call with it.
    let resp = client.get(format!("{}/v2/", server.url)).send().unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let challenge = resp.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        challenge.starts_with(&format!("Bearer realm=\"{}/token\"", server.url)),
        "{challenge}"
    );
    let token: Value = client
        .get(format!(
            "{}/token?scope=repository:weights/a:pull,push",
            server.url
        ))
        .basic_auth("writer", Some(PASSWORD))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let t = token["token"].as_str().unwrap();
    let resp = client
        .post(format!("{}/v2/weights/a/blobs/uploads/", server.url))
        .bearer_auth(t)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    // Plain HTTP on the TLS port gets nowhere.
    let plain = format!("{}/v2/", server.url.replace("https://", "http://"));
    assert!(reqwest::blocking::get(plain).map_or(true, |r| !r.status().is_success()));

    // skopeo, told to trust the certificate (--cert-dir), logs in and
    // copies a local OCI layout in.
    let certs = sb.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::copy(&ca_cert, certs.join("ca.crt")).unwrap();
    let layout = sb.path().join("layout");
    let d = sb.path().join("model");
    model(&d, 9);
    let open = Server::start(&sb.path().join("open"));
    ok(
        sb.sealvol(&host(&open), &["push", s(&d), "bdn:weights/m"]),
        "push to the open registry",
    );
    let out = skopeo_in(
        &sb,
        &[
            "copy",
            "--all",
            "--src-tls-verify=false",
            &format!("docker://{}/weights/m:head", host(&open)),
            &format!("oci:{}:m", s(&layout)),
        ],
    );
    assert!(
        out.status.success(),
        "skopeo copy to a layout: {}",
        stderr(&out)
    );
    let dest = format!("docker://{}/weights/m:head", host(&server));
    let out = skopeo_in(
        &sb,
        &[
            "copy",
            "--all",
            "--dest-cert-dir",
            s(&certs),
            "--dest-creds",
            &format!("writer:{PASSWORD}"),
            &format!("oci:{}:m", s(&layout)),
            &dest,
        ],
    );
    assert!(
        out.status.success(),
        "skopeo copy over TLS: {}",
        stderr(&out)
    );
    let out = skopeo_in(
        &sb,
        &[
            "inspect",
            "--raw",
            "--cert-dir",
            s(&certs),
            "--creds",
            &format!("writer:{PASSWORD}"),
            &dest,
        ],
    );
    assert!(
        out.status.success(),
        "skopeo inspect over TLS: {}",
        stderr(&out)
    );
    // Without being told to trust it, skopeo refuses the certificate.
    let out = skopeo_in(
        &sb,
        &[
            "inspect",
            "--raw",
            "--creds",
            &format!("writer:{PASSWORD}"),
            &dest,
        ],
    );
    assert!(
        !out.status.success(),
        "an untrusted certificate must be refused"
    );
}

#[test]
fn tokens_expired_for_another_audience_or_tampered_are_refused() {
    let sb = Sandbox::new();
    let server = start(&sb);
    let url = &server.url;
    let client = reqwest::blocking::Client::new();
    let token = |user: &str, scope: &str| -> String {
        let v: Value = client
            .get(format!("{url}/token?scope={scope}"))
            .basic_auth(user, Some(PASSWORD))
            .send()
            .unwrap()
            .json()
            .unwrap();
        v["token"].as_str().unwrap().to_string()
    };
    let status = |t: &str, method: &str, path: &str| {
        client
            .request(method.parse().unwrap(), format!("{url}{path}"))
            .bearer_auth(t)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    let t = token("writer", "repository:weights/a:pull,push");
    assert_eq!(status(&t, "POST", "/v2/weights/a/blobs/uploads/"), 202);
    // Scoped: another repository, or an action not asked for.
    assert_eq!(status(&t, "POST", "/v2/weights/b/blobs/uploads/"), 401);
    assert_eq!(
        status(
            &t,
            "DELETE",
            &format!("/v2/weights/a/manifests/sha256:{}", "0".repeat(64))
        ),
        401
    );
    // Asked for more than the policy allows: not granted.
    let r = token("reader", "repository:weights/a:pull,push");
    assert_eq!(status(&r, "GET", "/v2/weights/a/tags/list"), 404);
    assert_eq!(status(&r, "POST", "/v2/weights/a/blobs/uploads/"), 403);
    // Tampered payload, another key's signature, garbage.
    let mut parts: Vec<String> = t.split('.').map(String::from).collect();
    parts[1] = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
        br#"{"iss":"x","sub":"admin","aud":"x","exp":9999999999,"nbf":0,"iat":0,"jti":"j","access":[]}"#,
    );
    assert_eq!(status(&parts.join("."), "GET", "/v2/"), 401);
    assert_eq!(status("not.a.token", "GET", "/v2/"), 401);
    // The OAuth2 password form gives the same kind of token.
    let v: Value = client
        .post(format!("{url}/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "grant_type=password&username=writer&password={}&scope=repository%3Aweights%2Fa%3Apull&service={}",
            PASSWORD.replace(':', "%3A").replace(' ', "+"),
            host(&server)
        ))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(v["access_token"].as_str().is_some(), "{v}");
    assert_eq!(v["expires_in"], 300);
    // A token of a registry with another key (another data folder).
    let sb2 = Sandbox::new();
    let other = start(&sb2);
    let v: Value = client
        .get(format!(
            "{}/token?scope=repository:weights/a:pull,push",
            other.url
        ))
        .basic_auth("writer", Some(PASSWORD))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(status(v["token"].as_str().unwrap(), "GET", "/v2/"), 401);
}

#[test]
fn api_keys_are_scoped_shown_once_and_revocable() {
    let sb = Sandbox::new();
    let server = start(&sb);
    let reg = host(&server);
    let admin = Sandbox::new();
    login(&admin, &reg, "admin");
    let d = sb.path().join("model");
    model(&d, 3);
    ok(
        admin.sealvol(&reg, &["push", s(&d), "bdn:weights/k"]),
        "admin push",
    );

    let created = sealvol_tests::json(
        admin.sealvol(
            &reg,
            &[
                "admin",
                "key",
                "create",
                "--repositories",
                "weights/*",
                "--actions",
                "pull",
                "--registry",
                &reg,
                "--output",
                "json",
            ],
        ),
        "key create",
    );
    let id = created["id"].as_str().unwrap().to_string();
    let secret = created["secret"].as_str().unwrap().to_string();
    // Listed without its secret.
    let listed = sealvol_tests::json(
        admin.sealvol(
            &reg,
            &[
                "admin",
                "key",
                "list",
                "--registry",
                &reg,
                "--output",
                "json",
            ],
        ),
        "key list",
    );
    assert_eq!(listed["keys"][0]["id"], id.as_str());
    assert!(
        !listed.to_string().contains(&secret),
        "a listing must not show the secret"
    );
    // Only admins manage keys.
    let writer = Sandbox::new();
    login(&writer, &reg, "writer");
    fails(
        writer.sealvol(&reg, &["admin", "key", "list", "--registry", &reg]),
        "writer key list",
    );

    // A GPU node logs in with the key: it pulls, and may not push.
    let node = Sandbox::new();
    ok(
        node.sealvol_stdin(
            &reg,
            &["login", &reg, "-u", &id, "--password-stdin"],
            secret.as_bytes(),
        ),
        "login with the key",
    );
    ok(
        node.sealvol(&reg, &["pull", "bdn:weights/k", s(&node.path().join("p"))]),
        "key pull",
    );
    fails(
        node.sealvol(&reg, &["push", s(&d), "bdn:weights/other"]),
        "key push",
    );
    // A token it got stops working once the key is revoked.
    let client = reqwest::blocking::Client::new();
    let v: Value = client
        .get(format!(
            "{}/token?scope=repository:weights/k:pull",
            server.url
        ))
        .basic_auth(&id, Some(&secret))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let token = v["token"].as_str().unwrap().to_string();
    let tags = |t: &str| {
        client
            .get(format!("{}/v2/weights/k/tags/list", server.url))
            .bearer_auth(t)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(tags(&token), 200);
    ok(
        admin.sealvol(&reg, &["admin", "key", "revoke", &id, "--registry", &reg]),
        "revoke",
    );
    assert_eq!(tags(&token), 401);
    fails(
        node.sealvol(&reg, &["pull", "bdn:weights/k", s(&node.path().join("q"))]),
        "pull after revoke",
    );
    let line = fails(
        admin.sealvol(&reg, &["admin", "key", "revoke", &id, "--registry", &reg]),
        "revoke twice",
    );
    assert!(line.contains("not found"), "{line}");
}

/// oras-py with a user name and password: lists tags and reads the index
/// of a version through the token flow; a denied namespace fails.
const ORAS_LOGIN_SCRIPT: &str = r#"
import json, sys
import oras.client

host, user, password, repo, denied = sys.argv[1:6]
client = oras.client.OrasClient(hostname=host, insecure=True)
# login() would also call a docker daemon; this is the part that
# authenticates the client.
client.auth.set_basic_auth(user, password)
tags = client.get_tags(f"{host}/{repo}")
index = client.get_manifest(
    f"{host}/{repo}:head",
    allowed_media_type=["application/vnd.oci.image.index.v1+json"],
)
try:
    client.get_tags(f"{host}/{denied}")
    refused = False
except Exception:
    refused = True
print(json.dumps({"tags": tags, "artifactType": index.get("artifactType"), "refused": refused}))
"#;

#[test]
fn oras_py_logs_in_and_mount_reads_through_auth() {
    let sb = Sandbox::new();
    let server = start(&sb);
    let reg = host(&server);
    let admin = Sandbox::new();
    login(&admin, &reg, "admin");
    let d = sb.path().join("model");
    model(&d, 5);
    let pushed = ok(
        admin.sealvol(&reg, &["push", s(&d), "bdn:weights/o"]),
        "push",
    );
    ok(
        admin.sealvol(&reg, &["push", s(&d), "bdn:other/o"]),
        "push other",
    );

    let script = sb.path().join("oras_login.py");
    std::fs::write(&script, ORAS_LOGIN_SCRIPT).unwrap();
    let out = sb
        .command(sealvol_tests::venv_bin("python"))
        .arg(&script)
        .args([reg.as_str(), "reader", PASSWORD, "weights/o", "other/o"])
        .output()
        .expect("run the venv's python (scripts/deps.sh sets it up)");
    let seen = sealvol_tests::json(out, "oras-py with a login");
    assert!(
        seen["tags"].as_array().unwrap().iter().any(|t| t == "head"),
        "{seen}"
    );
    assert_eq!(
        seen["artifactType"],
        sealvol_spec::oci::MT_VERSION,
        "{seen}"
    );
    assert_eq!(seen["refused"], true, "{seen}");

    // A GPU node with the reader's login mounts the version and reads it;
    // without a login the mount is refused before anything is served.
    let node = Sandbox::new();
    let digest = pushed.trim().rsplit('@').next().unwrap().to_string();
    let r = format!("bdn:weights/o@{digest}");
    let anon_mnt = sealvol_tests::fuse::mountpoint(&node, "anon");
    let refused = sealvol_tests::fuse::Mounted::try_start(
        &node,
        &reg,
        &["mount", &r, s(&anon_mnt)],
        &[&anon_mnt],
    );
    assert!(refused.is_err(), "a mount without credentials must fail");
    login(&node, &reg, "reader");
    let mnt = sealvol_tests::fuse::mountpoint(&node, "mnt");
    let mut m = sealvol_tests::fuse::Mounted::start(&node, &reg, &["mount", &r, s(&mnt)], &[&mnt]);
    assert_eq!(
        sealvol_tests::fuse::read(&mnt.join("w.bin")).unwrap(),
        std::fs::read(d.join("w.bin")).unwrap()
    );
    assert!(m.stop().success());
}

/// A P-256 key of the test's "OIDC provider" (PKCS#8, PEM).
const IDP_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgB8Clw8N6iSGH0hjk
lxQii+Se+Fm/l7AEGfMMW1WyxQChRANCAAT5OPRXrw5UR0Ljb+witTte9i9EbTjM
Ol8KGwuBBb5wDE4dj7gx3opTkylSfO8Xix/U+vFN7EC46AD24AzlUPtw
-----END PRIVATE KEY-----";

#[test]
fn tokens_of_an_external_issuer_are_accepted_for_their_subject() {
    use jsonwebtoken::{jwk, Algorithm, EncodingKey, Header};
    let sb = Sandbox::new();
    let body: String = IDP_KEY
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap();
    let key = EncodingKey::from_ec_der(&der);
    let mut public = jwk::Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
    public.common.key_id = Some("idp-1".into());
    let jwks = sb.path().join("jwks.json");
    std::fs::write(
        &jwks,
        serde_json::to_vec(&jwk::JwkSet { keys: vec![public] }).unwrap(),
    )
    .unwrap();
    let htpasswd = sb.path().join("htpasswd");
    std::fs::write(&htpasswd, "").unwrap();
    let config = format!(
        "[auth]\nhtpasswd = {:?}\n[auth.token]\nissuer = \"https://idp.example\"\naudience = \"sealvol\"\njwks_file = {:?}\n\
         [[auth.access]]\nrepositories = [\"weights/**\"]\nusers = [\"alice@example.com\"]\nactions = [\"pull\", \"push\"]\n",
        s(&htpasswd),
        s(&jwks)
    );
    let server = Server::start_config_env(&sb.path().join("registry"), &config, &[]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = |sub: &str, aud: &str| {
        let mut h = Header::new(Algorithm::ES256);
        h.kid = Some("idp-1".into());
        let claims = json!({"iss": "https://idp.example", "aud": aud, "sub": sub, "exp": now + 300, "nbf": now - 5});
        jsonwebtoken::encode(&h, &claims, &key).unwrap()
    };
    let status = |t: &str, method: &str, path: &str| {
        reqwest::blocking::Client::new()
            .request(method.parse().unwrap(), format!("{}{path}", server.url))
            .bearer_auth(t)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    let alice = token("alice@example.com", "sealvol");
    assert_eq!(status(&alice, "POST", "/v2/weights/a/blobs/uploads/"), 202);
    assert_eq!(status(&alice, "POST", "/v2/other/a/blobs/uploads/"), 403);
    // Another subject has no entry; another audience is not ours.
    assert_eq!(
        status(
            &token("bob@example.com", "sealvol"),
            "POST",
            "/v2/weights/a/blobs/uploads/"
        ),
        403
    );
    assert_eq!(
        status(&token("alice@example.com", "elsewhere"), "GET", "/v2/"),
        401
    );
}

#[test]
fn containerd_pulls_with_a_user_through_the_token_flow() {
    let sb = Sandbox::new();
    let server = start(&sb);
    let reg = host(&server);
    let admin = Sandbox::new();
    login(&admin, &reg, "admin");
    let d = sb.path().join("model");
    model(&d, 6);
    ok(
        admin.sealvol(&reg, &["push", s(&d), "bdn:weights/c"]),
        "push",
    );
    ok(
        admin.sealvol(&reg, &["push", s(&d), "bdn:other/c"]),
        "push other",
    );

    let ctd = Containerd::start();
    let pull = |user: Option<&str>, repo: &str| {
        let image = format!("{reg}/{repo}:head");
        let mut args = vec!["images", "pull", "--plain-http"];
        let creds;
        if let Some(u) = user {
            creds = format!("{u}:{PASSWORD}");
            args.extend(["--user", creds.as_str()]);
        }
        args.push(&image);
        ctd.ctr(&args)
    };
    let out = pull(Some("reader"), "weights/c");
    assert!(
        out.status.success(),
        "ctr pull as the reader: {}",
        stderr(&out)
    );
    let listed = ctd.ctr(&["images", "ls", "-q"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains(&format!("{reg}/weights/c:head")),
        "{listed:?}"
    );
    assert!(
        !pull(None, "weights/c").status.success(),
        "anonymous ctr pull"
    );
    assert!(
        !pull(Some("reader"), "other/c").status.success(),
        "a namespace the reader may not pull"
    );
}
