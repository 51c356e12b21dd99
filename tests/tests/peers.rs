//! The helpers that stand in for peers in the push/pull interop tests work:
//! CNCF distribution starts and speaks the registry API (open, or behind an
//! htpasswd login), and the flip proxy corrupts exactly one byte of each
//! blob body and nothing else.

use std::time::Duration;

use reqwest::blocking::Client;
use reqwest::StatusCode;
use sealvol_tests::{sha256, DockerRegistry, FlipProxy, HTPASSWD_REALM};

fn client() -> Client {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Bytes that differ from their neighbours, so a flipped byte cannot hide.
fn data(len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
        .collect()
}

/// A monolithic upload through `addr`: POST, then PUT `?digest=` to the
/// Location it returns. Returns the digest and that Location.
fn upload(c: &Client, addr: &str, repo: &str, blob: &[u8]) -> (String, String) {
    let r = c
        .post(format!("http://{addr}/v2/{repo}/blobs/uploads/"))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED, "{:?}", r.text());
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let url = if location.starts_with('/') {
        format!("http://{addr}{location}")
    } else {
        location.clone()
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let digest = sha256(blob);
    let r = c
        .put(format!("{url}{sep}digest={digest}"))
        .header("content-type", "application/octet-stream")
        .body(blob.to_vec())
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED, "{:?}", r.text());
    (digest, location)
}

fn get(c: &Client, url: &str) -> (StatusCode, Vec<u8>) {
    let r = c.get(url).send().unwrap();
    (r.status(), r.bytes().unwrap().to_vec())
}

#[test]
fn docker_registry_starts_and_speaks_registry_v2() {
    let reg = DockerRegistry::start();
    let addr = reg.addr();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    assert!(reg.storage().starts_with(std::env::temp_dir()));
    let r = client().get(format!("http://{addr}/v2/")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()
            .get("docker-distribution-api-version")
            .map(|v| v.to_str().unwrap()),
        Some("registry/2.0")
    );
    // Two registries at once get two ports and two stores.
    let other = DockerRegistry::start();
    assert_ne!(other.addr(), addr);
    assert_ne!(other.storage(), reg.storage());
}

#[test]
fn docker_registry_with_htpasswd_lets_in_only_its_user() {
    let reg = DockerRegistry::start_with_htpasswd("alice", "pa:ss word");
    let url = format!("http://{}/v2/", reg.addr());
    let r = client().get(&url).send().unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        r.headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap()),
        Some(format!("Basic realm=\"{HTPASSWD_REALM}\"").as_str())
    );
    let status = |user: &str, password: &str| {
        client()
            .get(&url)
            .basic_auth(user, Some(password))
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(status("alice", "pa:ss word"), StatusCode::OK);
    assert_eq!(status("alice", "pa:ss"), StatusCode::UNAUTHORIZED);
    assert_eq!(status("bob", "pa:ss word"), StatusCode::UNAUTHORIZED);
    // Uploads need the login too.
    let r = client()
        .post(format!("http://{}/v2/ns/vol/blobs/uploads/", reg.addr()))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[test]
fn flip_proxy_corrupts_one_byte_of_each_blob_body_only() {
    let reg = DockerRegistry::start();
    let proxy = FlipProxy::start(&reg.addr());
    let c = client();
    let blob = data(100_003);
    let (digest, location) = upload(&c, &proxy.addr(), "peers/flip", &blob);
    // distribution answers with an absolute Location; the proxy keeps the
    // client on itself.
    assert!(
        !location.contains(&reg.addr()),
        "upload Location bypasses the proxy: {location}"
    );
    assert_eq!(proxy.flipped(), 0, "uploads pass through untouched");

    // Stored intact: the registry itself serves the exact bytes.
    let (status, direct) = get(
        &c,
        &format!("http://{}/v2/peers/flip/blobs/{digest}", reg.addr()),
    );
    assert_eq!(status, StatusCode::OK);
    assert!(direct == blob, "the registry stored other bytes");

    // Through the proxy: same length, exactly the middle byte flipped.
    let (status, flipped) = get(
        &c,
        &format!("http://{}/v2/peers/flip/blobs/{digest}", proxy.addr()),
    );
    assert_eq!(status, StatusCode::OK);
    assert_eq!(flipped.len(), blob.len());
    let diffs: Vec<usize> = (0..blob.len()).filter(|&i| blob[i] != flipped[i]).collect();
    assert_eq!(diffs, vec![blob.len() / 2]);
    assert_eq!(flipped[blob.len() / 2], blob[blob.len() / 2] ^ 0xff);
    assert_ne!(sha256(&flipped), digest);
    assert_eq!(proxy.flipped(), 1);

    // HEAD passes through with the real length; errors are not corrupted.
    let r = c
        .head(format!(
            "http://{}/v2/peers/flip/blobs/{digest}",
            proxy.addr()
        ))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()["content-length"].to_str().unwrap(),
        blob.len().to_string()
    );
    let missing = sha256(b"not uploaded");
    let r = c
        .get(format!(
            "http://{}/v2/peers/flip/blobs/{missing}",
            proxy.addr()
        ))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let err: serde_json::Value = r.json().expect("an intact error body");
    assert_eq!(err["errors"][0]["code"], "BLOB_UNKNOWN");
    assert_eq!(proxy.flipped(), 1);
}

#[test]
fn flip_proxy_passes_manifests_through_byte_identical() {
    let reg = DockerRegistry::start();
    let proxy = FlipProxy::start(&reg.addr());
    let c = client();
    let (config, _) = upload(&c, &reg.addr(), "peers/manifest", b"{}");
    let layer = data(4096);
    let (layer_digest, _) = upload(&c, &reg.addr(), "peers/manifest", &layer);
    // Not serde_json's canonical form, so a re-encoding would show.
    let manifest = format!(
        "{{\n  \"schemaVersion\": 2,\n  \"mediaType\": \"application/vnd.oci.image.manifest.v1+json\",\n  \
         \"config\": {{\"mediaType\": \"application/vnd.oci.image.config.v1+json\", \"digest\": \"{config}\", \"size\": 2}},\n  \
         \"layers\": [{{\"mediaType\": \"application/vnd.oci.image.layer.v1.tar\", \"digest\": \"{layer_digest}\", \"size\": 4096}}]\n}}\n"
    )
    .into_bytes();
    let r = c
        .put(format!(
            "http://{}/v2/peers/manifest/manifests/v1",
            proxy.addr()
        ))
        .header("content-type", "application/vnd.oci.image.manifest.v1+json")
        .body(manifest.clone())
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED, "{:?}", r.text());

    for reference in ["v1".to_string(), sha256(&manifest)] {
        let r = c
            .get(format!(
                "http://{}/v2/peers/manifest/manifests/{reference}",
                proxy.addr()
            ))
            .header("accept", "application/vnd.oci.image.manifest.v1+json")
            .send()
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()["docker-content-digest"].to_str().unwrap(),
            sha256(&manifest)
        );
        assert!(
            r.bytes().unwrap() == manifest,
            "manifest {reference} changed"
        );
    }
    assert_eq!(proxy.flipped(), 0);
}
