//! `sealvol serve` as OCI clients and operators meet it: data survives a
//! restart, a crash loses nothing that was acknowledged and leaves nothing
//! half-written, and bad requests get the spec's error codes.

use std::io::Read;
use std::time::Duration;

use reqwest::blocking::{Body, Client};
use reqwest::StatusCode;
use sealvol_tests::{sha256, Server};
use serde_json::{json, Value};

fn client() -> Client {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

fn push_blob(c: &Client, url: &str, repo: &str, data: &[u8]) -> String {
    let d = sha256(data);
    let r = c
        .post(format!("{url}/v2/{repo}/blobs/uploads/?digest={d}"))
        .body(data.to_vec())
        .send()
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::CREATED,
        "{}",
        r.text().unwrap_or_default()
    );
    d
}

fn manifest(config: &str, config_size: usize, layers: &[(&str, usize)]) -> Vec<u8> {
    let layers: Vec<Value> = layers
        .iter()
        .map(|(d, s)| json!({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d, "size": s}))
        .collect();
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": config_size},
        "layers": layers,
    }))
    .unwrap()
}

fn put_manifest(
    c: &Client,
    url: &str,
    repo: &str,
    reference: &str,
    body: &[u8],
) -> reqwest::blocking::Response {
    c.put(format!("{url}/v2/{repo}/manifests/{reference}"))
        .header("content-type", "application/vnd.oci.image.manifest.v1+json")
        .body(body.to_vec())
        .send()
        .unwrap()
}

/// Checks the status and the OCI error code of a failed request.
fn expect_error(r: reqwest::blocking::Response, status: StatusCode, code: &str) {
    assert_eq!(r.status(), status, "{}", r.url());
    let v: Value = r.json().expect("an OCI error body");
    assert_eq!(v["errors"][0]["code"].as_str().unwrap_or_default(), code);
}

#[test]
fn data_and_upload_sessions_survive_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let c = client();
    let server = Server::start(root.path());
    let url = server.url.clone();
    let config = b"{}".to_vec();
    let layer = vec![42u8; 100_000];
    let cd = push_blob(&c, &url, "weights/a", &config);
    let ld = push_blob(&c, &url, "weights/a", &layer);
    let m = manifest(&cd, config.len(), &[(&ld, layer.len())]);
    assert_eq!(
        put_manifest(&c, &url, "weights/a", "prod", &m).status(),
        StatusCode::CREATED
    );

    // A chunked upload, half done.
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let r = c
        .post(format!("{url}/v2/weights/a/blobs/uploads/"))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let loc = r.headers()["location"].to_str().unwrap().to_string();
    let r = c
        .patch(format!("{url}{loc}"))
        .header("content-range", "0-149999")
        .body(data[..150_000].to_vec())
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    assert!(server.stop().success(), "SIGTERM ends the server cleanly");

    let server = Server::start(root.path());
    let url = server.url.clone();
    let r = c
        .get(format!("{url}/v2/weights/a/manifests/prod"))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.bytes().unwrap().as_ref(), m.as_slice());
    let r = c
        .get(format!("{url}/v2/weights/a/blobs/{ld}"))
        .send()
        .unwrap();
    assert_eq!(r.bytes().unwrap().len(), layer.len());
    let r = c.get(format!("{url}{loc}")).send().unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(r.headers()["range"], "0-149999");
    // Resume where it stopped; the digest is checked over the whole file.
    let d = sha256(&data);
    let r = c
        .put(format!("{url}{loc}?digest={d}"))
        .header("content-range", "150000-299999")
        .body(data[150_000..].to_vec())
        .send()
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::CREATED,
        "{}",
        r.text().unwrap_or_default()
    );
    let r = c
        .get(format!("{url}/v2/weights/a/blobs/{d}"))
        .send()
        .unwrap();
    assert_eq!(r.bytes().unwrap().as_ref(), data.as_slice());
}

#[test]
fn bad_requests_get_spec_error_codes_not_500() {
    let root = tempfile::tempdir().unwrap();
    let server = Server::start(root.path());
    let (c, url) = (client(), server.url.clone());
    let get = |path: &str| c.get(format!("{url}{path}")).send().unwrap();
    expect_error(
        get("/v2/weights/a/blobs/sha256:nothex"),
        StatusCode::BAD_REQUEST,
        "DIGEST_INVALID",
    );
    expect_error(
        get("/v2/Weights/a/manifests/x"),
        StatusCode::BAD_REQUEST,
        "NAME_INVALID",
    );
    let missing = sha256(b"never pushed");
    let r = put_manifest(&c, &url, "weights/a", "v1", &manifest(&missing, 12, &[]));
    expect_error(r, StatusCode::BAD_REQUEST, "MANIFEST_BLOB_UNKNOWN");
    let r = put_manifest(&c, &url, "weights/a", "v1", b"{not json");
    expect_error(r, StatusCode::BAD_REQUEST, "MANIFEST_INVALID");
    let big = vec![b' '; (4 << 20) + 1];
    let r = put_manifest(&c, &url, "weights/a", "v1", &big);
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let r = c
        .post(format!(
            "{url}/v2/weights/a/blobs/uploads/?digest={missing}"
        ))
        .body(b"other bytes".to_vec())
        .send()
        .unwrap();
    expect_error(r, StatusCode::BAD_REQUEST, "DIGEST_INVALID");
    expect_error(
        get(&format!("/v2/weights/a/blobs/{missing}")),
        StatusCode::NOT_FOUND,
        "BLOB_UNKNOWN",
    );
    // Nothing of the rejected upload was kept.
    assert_eq!(
        std::fs::read_dir(root.path().join("uploads"))
            .unwrap()
            .count(),
        0
    );
}

/// A body that sends `data` slowly, so the request is still in flight
/// when the server is killed.
struct Slow {
    data: Vec<u8>,
    at: usize,
}

impl Read for Slow {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::thread::sleep(Duration::from_millis(20));
        let n = buf.len().min(16 << 10).min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[test]
fn a_crash_during_twenty_uploads_loses_nothing_acknowledged() {
    let root = tempfile::tempdir().unwrap();
    let server = Server::start(root.path());
    let url = server.url.clone();
    let c = client();
    // Something committed before the crash.
    let config = b"{\"a\":1}".to_vec();
    let cd = push_blob(&c, &url, "crash/base", &config);
    assert_eq!(
        put_manifest(
            &c,
            &url,
            "crash/base",
            "v1",
            &manifest(&cd, config.len(), &[])
        )
        .status(),
        StatusCode::CREATED
    );

    let blobs: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 1 << 20]).collect();
    let mut handles = Vec::new();
    for (i, data) in blobs.iter().cloned().enumerate() {
        let url = url.clone();
        handles.push(std::thread::spawn(move || {
            let c = client();
            let repo = format!("crash/r{}", i % 4);
            if i % 2 == 0 {
                // Chunked: a first chunk lands, the second is cut off.
                let r = c
                    .post(format!("{url}/v2/{repo}/blobs/uploads/"))
                    .send()
                    .ok()?;
                let loc = r.headers().get("location")?.to_str().ok()?.to_string();
                c.patch(format!("{url}{loc}"))
                    .header("content-range", "0-262143")
                    .body(data[..262_144].to_vec())
                    .send()
                    .ok()?;
                let slow = Slow {
                    data: data[262_144..].to_vec(),
                    at: 0,
                };
                let _ = c.patch(format!("{url}{loc}")).body(Body::new(slow)).send();
                Some((repo, Some(loc)))
            } else {
                // Monolithic, cut off mid-body.
                let d = sha256(&data);
                let slow = Slow { data, at: 0 };
                let _ = c
                    .post(format!("{url}/v2/{repo}/blobs/uploads/?digest={d}"))
                    .body(Body::new(slow))
                    .send();
                Some((repo, None))
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(400));
    server.kill();
    let outcomes: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();

    let server = Server::start(root.path());
    let url = server.url.clone();
    // Every stored blob re-hashes to its name.
    let mut stored = 0;
    for shard in std::fs::read_dir(root.path().join("blobs/sha256")).unwrap() {
        for f in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let f = f.unwrap();
            let bytes = std::fs::read(f.path()).unwrap();
            assert_eq!(
                sha256(&bytes),
                format!("sha256:{}", f.file_name().to_str().unwrap())
            );
            stored += 1;
        }
    }
    assert!(stored >= 2);
    // What was acknowledged is there.
    let r = c
        .get(format!("{url}/v2/crash/base/manifests/v1"))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = c
        .get(format!("{url}/v2/crash/base/blobs/{cd}"))
        .send()
        .unwrap();
    assert_eq!(r.bytes().unwrap().as_ref(), config.as_slice());
    // Interrupted chunked uploads resume from what the server has, or are gone.
    let mut resumed = 0;
    for (i, outcome) in outcomes.iter().enumerate() {
        let Some((repo, Some(loc))) = outcome else {
            continue;
        };
        let r = c.get(format!("{url}{loc}")).send().unwrap();
        match r.status() {
            StatusCode::NO_CONTENT => {
                let range = r.headers()["range"].to_str().unwrap();
                let have: usize = range.split('-').nth(1).unwrap().parse::<usize>().unwrap() + 1;
                let data = &blobs[i];
                let d = sha256(data);
                let r = c
                    .put(format!("{url}{loc}?digest={d}"))
                    .header("content-range", format!("{have}-{}", data.len() - 1))
                    .body(data[have..].to_vec())
                    .send()
                    .unwrap();
                assert_eq!(
                    r.status(),
                    StatusCode::CREATED,
                    "resuming {loc}: {}",
                    r.text().unwrap_or_default()
                );
                let r = c.get(format!("{url}/v2/{repo}/blobs/{d}")).send().unwrap();
                assert_eq!(r.bytes().unwrap().as_ref(), data.as_slice());
                resumed += 1;
            }
            StatusCode::NOT_FOUND => {}
            s => panic!("upload {loc} after the crash: {s}"),
        }
    }
    assert!(resumed > 0, "no session survived to be resumed");
    // No staging files, and no upload files without a session: the cut-off
    // monolithic uploads are gone and every resumed session completed.
    assert_eq!(
        std::fs::read_dir(root.path().join("tmp")).unwrap().count(),
        0
    );
    assert_eq!(
        std::fs::read_dir(root.path().join("uploads"))
            .unwrap()
            .count(),
        0
    );
    // New pushes work.
    push_blob(&c, &url, "crash/after", b"after the crash");
}

#[test]
fn serve_reads_its_config_file_and_rejects_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("from-config");
    let config = dir.path().join("registry.toml");
    std::fs::write(
        &config,
        format!(
            "addr = \"127.0.0.1:0\"\nroot = \"{}\"\nrequest_timeout_seconds = 30\n",
            root.display()
        ),
    )
    .unwrap();
    let server = Server::start_with(&["serve", "--config", config.to_str().unwrap()], &root);
    assert!(server.url.starts_with("http://127.0.0.1:"));
    assert!(
        root.join("meta.redb").exists(),
        "root from the config file is used"
    );
    assert!(server.stop().success());

    std::fs::write(&config, "addr = \"127.0.0.1:0\"\nroot_dir = \"typo\"\n").unwrap();
    let out = std::process::Command::new(sealvol_tests::sealvol_bin())
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("root_dir") && err.contains("registry.toml"),
        "{err}"
    );
}
