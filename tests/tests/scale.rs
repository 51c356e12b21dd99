//! The registry on shared engines: `[storage] kind = "s3"` with moto's S3
//! server as the bucket. Volumes pushed and pulled through it, upload
//! sessions that span requests and restarts, digests refused without a
//! trace, and garbage collection deleting from the bucket.

use std::path::Path;
use std::time::Duration;

use sealvol_tests::{assert_same_tree, host, json, noise, s, write, Moto, Sandbox, Server};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

const BUCKET: &str = "sealvol";
const PREFIX: &str = "registry";

/// The `[storage]` section for moto's bucket, with credentials in a file.
fn s3_config(moto: &Moto, dir: &Path) -> String {
    let creds = dir.join("s3.credentials");
    std::fs::write(&creds, "test:test\n").unwrap();
    format!(
        "[storage]\nkind = \"s3\"\nbucket = \"{BUCKET}\"\nprefix = \"{PREFIX}\"\nendpoint = \"{}\"\ncredentials_file = \"{}\"\n",
        moto.url(),
        s(&creds)
    )
}

/// A replica's `registry.toml`: `top` (top-level fields), the bucket's
/// `[storage]` and PostgreSQL as `[metadata]`.
fn replica_config(top: &str, moto: &Moto, dir: &Path, pg: &sealvol_tests::Postgres) -> String {
    format!(
        "{top}{}[metadata]\nkind = \"postgres\"\nurl = \"{}\"\n",
        s3_config(moto, dir),
        pg.url()
    )
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn blob_key(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap();
    format!("{PREFIX}/blobs/sha256/{}/{hex}", &hex[..2])
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// An upload `Location` as a URL.
fn absolute(base: &str, location: &str) -> String {
    if location.starts_with("http") {
        location.to_string()
    } else {
        format!("{base}{location}")
    }
}

/// PATCHes `data[from..to]` to upload `url`; the next location.
fn patch(
    http: &reqwest::blocking::Client,
    url: &str,
    data: &[u8],
    from: usize,
    to: usize,
) -> String {
    let resp = http
        .patch(url)
        .header("content-type", "application/octet-stream")
        .header("content-range", format!("{from}-{}", to - 1))
        .body(data[from..to].to_vec())
        .send()
        .unwrap();
    assert_eq!(resp.status(), 202, "PATCH {from}-{to}");
    resp.headers()["location"].to_str().unwrap().to_string()
}

#[test]
fn a_volume_pushed_to_an_s3_backed_registry_pulls_back_identical_after_a_restart() {
    let sb = Sandbox::new();
    let moto = Moto::start();
    moto.create_bucket(BUCKET);
    let config = s3_config(&moto, sb.path());
    let root = sb.path().join("registry");
    let server = Server::start_config_env(&root, &config, &[]);
    let r = host(&server);

    let src = sb.path().join("model");
    write(&src.join("config.json"), br#"{"layers": 2}"#, 0o644);
    write(&src.join("model.safetensors"), &noise(21 << 20, 1), 0o644);
    write(&src.join("empty"), b"", 0o644);
    let pushed = json(
        sb.sealvol(
            &r,
            &[
                "push",
                s(&src),
                &format!("{r}/weights/m:v1"),
                "--output",
                "json",
            ],
        ),
        "push",
    );

    // Every byte went to the bucket: the data folder holds no blob, and
    // the version's index is stored under its digest.
    assert!(
        !root.join("blobs").exists(),
        "an S3-backed registry wrote blobs to its data folder"
    );
    let index = pushed["index_digest"].as_str().unwrap();
    assert_eq!(sha256(&moto.get(BUCKET, &blob_key(index))), index);
    let keys = moto.keys(BUCKET, &format!("{PREFIX}/blobs/"));
    assert!(keys.len() > 5, "{keys:?}");
    assert!(
        moto.keys(BUCKET, &format!("{PREFIX}/uploads/")).is_empty(),
        "finished uploads leave data behind"
    );

    let out = sb.path().join("pulled");
    json(
        sb.sealvol(
            &r,
            &[
                "pull",
                &format!("{r}/weights/m:v1"),
                s(&out),
                "--output",
                "json",
            ],
        ),
        "pull",
    );
    assert_same_tree(&src, &out);

    // A registry process that dies loses nothing the bucket holds.
    let server = server.kill_and_restart(&config, &[]);
    let r = host(&server);
    let again = sb.path().join("again");
    let pulled = json(
        sb.sealvol(
            &r,
            &[
                "pull",
                &format!("{r}/weights/m:v1"),
                s(&again),
                "--no-cache",
                "--output",
                "json",
            ],
        ),
        "pull after a restart",
    );
    assert_eq!(pulled["digest"], pushed["digest"]);
    assert_same_tree(&src, &again);
}

#[test]
fn upload_sessions_in_s3_join_in_order_survive_a_restart_and_refuse_a_wrong_digest() {
    let sb = Sandbox::new();
    let moto = Moto::start();
    moto.create_bucket(BUCKET);
    let config = s3_config(&moto, sb.path());
    let root = sb.path().join("registry");
    let server = Server::start_config_env(&root, &config, &[]);
    let http = client();
    let repo = "chunked/blob";

    // Three requests: 10 MiB (a multipart segment), a restart, 3 MiB, and
    // the last 1 KiB with the PUT that completes it.
    let data = noise((13 << 20) + 1024, 7);
    let digest = sha256(&data);
    let start = http
        .post(format!("{}/v2/{repo}/blobs/uploads/", server.url))
        .send()
        .unwrap();
    assert_eq!(start.status(), 202);
    let location = start.headers()["location"].to_str().unwrap().to_string();
    let location = patch(&http, &absolute(&server.url, &location), &data, 0, 10 << 20);

    // The registry restarts on the same port; the session goes on.
    let server = server.kill_and_restart(&config, &[]);
    let url = absolute(&server.url, &location);
    let status = http.get(&url).send().unwrap();
    assert_eq!(status.status(), 204);
    assert_eq!(
        status.headers()["range"].to_str().unwrap(),
        format!("0-{}", (10 << 20) - 1),
        "the session's size after a restart"
    );
    let location = patch(&http, &url, &data, 10 << 20, 13 << 20);
    let location = absolute(&server.url, &location);
    let sep = if location.contains('?') { '&' } else { '?' };
    let done = http
        .put(format!("{location}{sep}digest={digest}"))
        .header("content-type", "application/octet-stream")
        .body(data[13 << 20..].to_vec())
        .send()
        .unwrap();
    assert_eq!(done.status(), 201, "{}", done.text().unwrap_or_default());

    let got = http
        .get(format!("{}/v2/{repo}/blobs/{digest}", server.url))
        .send()
        .unwrap();
    assert_eq!(got.status(), 200);
    assert!(got.bytes().unwrap()[..] == data[..], "the blob's bytes");
    let range = http
        .get(format!("{}/v2/{repo}/blobs/{digest}", server.url))
        .header("range", "bytes=12582912-12583011")
        .send()
        .unwrap();
    assert_eq!(range.status(), 206);
    assert!(range.bytes().unwrap()[..] == data[12 << 20..(12 << 20) + 100]);
    assert_eq!(sha256(&moto.get(BUCKET, &blob_key(&digest))), digest);

    // A wrong digest: refused, and nothing lands under either digest.
    let other = noise(3 << 20, 9);
    let wrong = sha256(b"something else");
    let start = http
        .post(format!("{}/v2/{repo}/blobs/uploads/", server.url))
        .send()
        .unwrap();
    let location = absolute(&server.url, start.headers()["location"].to_str().unwrap());
    let sep = if location.contains('?') { '&' } else { '?' };
    let refused = http
        .put(format!("{location}{sep}digest={wrong}"))
        .header("content-type", "application/octet-stream")
        .body(other.clone())
        .send()
        .unwrap();
    assert_eq!(refused.status(), 400);
    assert!(refused.text().unwrap().contains("DIGEST_INVALID"));
    for d in [wrong, sha256(&other)] {
        let head = http
            .head(format!("{}/v2/{repo}/blobs/{d}", server.url))
            .send()
            .unwrap();
        assert_eq!(head.status(), 404, "{d}");
    }
    assert!(
        moto.keys(BUCKET, &format!("{PREFIX}/uploads/")).is_empty(),
        "ended sessions leave data behind"
    );
}

#[test]
fn garbage_collection_deletes_unreferenced_blobs_from_the_bucket() {
    let sb = Sandbox::new();
    let moto = Moto::start();
    moto.create_bucket(BUCKET);
    let clock = sb.path().join("clock");
    std::fs::write(&clock, "0").unwrap();
    let config = format!("gc_grace_seconds = 60\n{}", s3_config(&moto, sb.path()));
    let server = Server::start_with_clock(&sb.path().join("registry"), &config, &clock);
    let r = host(&server);
    let http = client();

    let src = sb.path().join("model");
    write(&src.join("a.bin"), &noise(3 << 20, 3), 0o644);
    json(
        sb.sealvol(
            &r,
            &[
                "push",
                s(&src),
                &format!("{r}/gc/kept:v1"),
                "--output",
                "json",
            ],
        ),
        "push",
    );
    // A blob nothing references, uploaded in one request.
    let stray = noise(1 << 20, 4);
    let digest = sha256(&stray);
    let put = http
        .post(format!(
            "{}/v2/gc/stray/blobs/uploads/?digest={digest}",
            server.url
        ))
        .header("content-type", "application/octet-stream")
        .body(stray)
        .send()
        .unwrap();
    assert_eq!(put.status(), 201);
    assert_eq!(moto.keys(BUCKET, &blob_key(&digest)).len(), 1);
    let before = moto.keys(BUCKET, &format!("{PREFIX}/blobs/")).len();

    std::fs::write(&clock, "3600").unwrap();
    let report = json(sb.sealvol(&r, &["gc", "--output", "json"]), "gc");
    assert!(
        moto.keys(BUCKET, &blob_key(&digest)).is_empty(),
        "the unreferenced blob stays in the bucket: {report}"
    );
    assert_eq!(
        moto.keys(BUCKET, &format!("{PREFIX}/blobs/")).len(),
        before - 1,
        "garbage collection deleted more than the stray blob: {report}"
    );
    let out = sb.path().join("pulled");
    json(
        sb.sealvol(
            &r,
            &[
                "pull",
                &format!("{r}/gc/kept:v1"),
                s(&out),
                "--no-cache",
                "--output",
                "json",
            ],
        ),
        "pull after gc",
    );
    assert_same_tree(&src, &out);
}

#[test]
fn with_redirect_blob_gets_go_to_the_bucket_and_pulls_still_verify_every_byte() {
    let sb = Sandbox::new();
    let moto = Moto::start();
    moto.create_bucket(BUCKET);
    let config = format!("{}redirect = true\n", s3_config(&moto, sb.path()));
    let server = Server::start_config_env(&sb.path().join("registry"), &config, &[]);
    let r = host(&server);

    let src = sb.path().join("model");
    write(&src.join("model.safetensors"), &noise(9 << 20, 5), 0o644);
    write(&src.join("tokenizer.json"), b"{}", 0o644);
    json(
        sb.sealvol(
            &r,
            &[
                "push",
                s(&src),
                &format!("{r}/weights/r:v1"),
                "--output",
                "json",
            ],
        ),
        "push",
    );

    // GET answers with the bucket's presigned URL; HEAD stays here.
    let plain = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let data = noise(2 << 20, 6);
    let index = sha256(&data);
    let index = index.as_str();
    let put = plain
        .post(format!(
            "{}/v2/weights/r/blobs/uploads/?digest={index}",
            server.url
        ))
        .header("content-type", "application/octet-stream")
        .body(data)
        .send()
        .unwrap();
    assert_eq!(put.status(), 201);
    let blob = format!("{}/v2/weights/r/blobs/{index}", server.url);
    let got = plain.get(&blob).send().unwrap();
    assert_eq!(got.status(), 307);
    let location = got.headers()["location"].to_str().unwrap().to_string();
    assert!(
        location.starts_with(moto.url()) && location.contains("X-Amz-Signature="),
        "{location}"
    );
    let head = plain.head(&blob).send().unwrap();
    assert_eq!(head.status(), 200);
    let bytes = plain.get(&location).send().unwrap().bytes().unwrap();
    assert_eq!(sha256(&bytes), index);

    let out = sb.path().join("pulled");
    json(
        sb.sealvol(
            &r,
            &[
                "pull",
                &format!("{r}/weights/r:v1"),
                s(&out),
                "--no-cache",
                "--output",
                "json",
            ],
        ),
        "pull through redirects",
    );
    assert_same_tree(&src, &out);
}

/// `GET`s of blobs among `requests` (a counting proxy's), by digest.
fn blob_gets(requests: &[String]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.starts_with("GET ") && r.contains("/blobs/sha256:"))
        .map(|r| r.rsplit('/').next().unwrap().to_string())
        .collect()
}

/// A model folder of a few files, one large enough for several chunks.
fn model(dir: &Path, seed: u64) {
    write(&dir.join("config.json"), br#"{"hidden": 64}"#, 0o644);
    write(
        &dir.join("model.safetensors"),
        &noise(12 << 20, seed),
        0o644,
    );
    write(&dir.join("tokenizer.json"), &noise(3000, seed + 1), 0o644);
}

#[test]
fn a_pull_through_cache_fetches_each_blob_once_and_serves_what_it_holds_with_the_upstream_down() {
    let sb = Sandbox::new();
    let upstream = Server::start(&sb.path().join("upstream"));
    let up = host(&upstream);
    let src = sb.path().join("model");
    model(&src, 11);
    json(
        sb.sealvol(
            &up,
            &[
                "push",
                s(&src),
                &format!("{up}/weights/m:v1"),
                "--output",
                "json",
            ],
        ),
        "push to the upstream",
    );

    let counting = sealvol_tests::FlipProxy::start_counting(&up);
    let cache_root = sb.path().join("cache-registry");
    let config = format!(
        "upstream = \"http://{}\"\ntag_ttl_seconds = 0\n",
        counting.addr()
    );
    let cache = Server::start_config_env(&cache_root, &config, &[]);
    let c = host(&cache);

    // Two clients at once, cold: each blob crosses from the upstream once.
    let pull = |to: &str| {
        let (sb, c, to) = (&sb, c.clone(), sb.path().join(to));
        move || {
            let out = sb.sealvol(
                &c,
                &[
                    "pull",
                    &format!("{c}/weights/m:v1"),
                    s(&to),
                    "--no-cache",
                    "--output",
                    "json",
                ],
            );
            (out, to)
        }
    };
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(pull("a"));
        let b = scope.spawn(pull("b"));
        (a.join().unwrap(), b.join().unwrap())
    });
    for (out, to) in [a, b] {
        json(out, "pull through the cache");
        assert_same_tree(&src, &to);
    }
    let gets = blob_gets(&counting.requests());
    let mut distinct = gets.clone();
    distinct.sort();
    distinct.dedup();
    assert!(!gets.is_empty());
    assert_eq!(
        gets.len(),
        distinct.len(),
        "a blob was fetched from the upstream more than once: {gets:?}"
    );

    // A later client: nothing more from the upstream.
    json(
        sb.sealvol(
            &c,
            &[
                "pull",
                &format!("{c}/weights/m:v1"),
                s(&sb.path().join("c")),
                "--no-cache",
                "--output",
                "json",
            ],
        ),
        "second pull",
    );
    assert_eq!(blob_gets(&counting.requests()).len(), gets.len());

    // A cache takes no writes and has no volume API.
    let other = sb.path().join("other");
    model(&other, 12);
    let refused = sb.sealvol(&c, &["push", s(&other), &format!("{c}/weights/m:v2")]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("pull-through cache"), "{err}");
    let api = client()
        .get(format!("{}/api/v1/volumes", cache.url))
        .send()
        .unwrap();
    assert_eq!(api.status(), 404);

    // The upstream gone: the cached tag and blobs still serve.
    drop(counting);
    let out = sb.path().join("offline");
    json(
        sb.sealvol(
            &c,
            &[
                "pull",
                &format!("{c}/weights/m:v1"),
                s(&out),
                "--no-cache",
                "--output",
                "json",
            ],
        ),
        "pull with the upstream down",
    );
    assert_same_tree(&src, &out);
}

// Signed versions through a cache: a signature is a referrer of the
// version index, which the cache lists as the upstream does.

/// Pushes a small version to `registry` as `ns/vol:v1` and signs it with
/// `key`; its folder and its `b3:` digest.
fn push_signed(
    sb: &Sandbox,
    registry: &str,
    key: &Path,
    seed: u64,
) -> (std::path::PathBuf, String) {
    let src = sb.path().join(format!("signed-{seed}"));
    write(&src.join("config.json"), br#"{"hidden": 64}"#, 0o644);
    write(&src.join("weights.bin"), &noise(300_000, seed), 0o644);
    let pushed = json(
        sb.sealvol(
            registry,
            &[
                "push",
                s(&src),
                &format!("{registry}/ns/vol:v1"),
                "--output",
                "json",
            ],
        ),
        "push to the upstream",
    );
    let version = pushed["digest"].as_str().unwrap().to_string();
    sealvol_tests::ok(
        sb.sealvol(
            registry,
            &["sign", &format!("{registry}/ns/vol:v1"), "--key", s(key)],
        ),
        "sign on the upstream",
    );
    (src, version)
}

/// Through the cache at `c`: version `version` verifies as signed by
/// `public` and pulls with the signature required (the same files as
/// `src`); checked against `other`, it is refused on one line.
fn signed_through(sb: &Sandbox, c: &str, version: &str, public: &Path, other: &Path, src: &Path) {
    let pinned = format!("{c}/ns/vol@{version}");
    let verified = sealvol_tests::ok(
        sb.sealvol(c, &["verify", &pinned, "--signed-by", s(public)]),
        "verify --signed-by through the cache",
    );
    assert!(verified.contains("signed by"), "{verified}");
    let to = sb.path().join(format!("pulled-{}", &version[3..15]));
    json(
        sb.sealvol(
            c,
            &[
                "pull",
                &pinned,
                s(&to),
                "--require-signature",
                s(public),
                "--no-cache",
                "--output",
                "json",
            ],
        ),
        "pull --require-signature through the cache",
    );
    assert_same_tree(src, &to);
    sealvol_tests::fails(
        sb.sealvol(c, &["verify", &pinned, "--signed-by", s(other)]),
        "verify --signed-by another key through the cache",
    );
}

#[test]
fn a_pull_through_cache_lists_the_upstreams_signatures_so_signed_versions_verify_through_it() {
    let sb = Sandbox::new();
    let (key, public) = sealvol_tests::ec_key(sb.path(), "ec");
    let (_, other) = sealvol_tests::ec_key(sb.path(), "other");
    let cache_of = |name: &str, upstream: &str| {
        let config = format!("upstream = \"http://{upstream}\"\ntag_ttl_seconds = 0\n");
        Server::start_config_env(&sb.path().join(name), &config, &[])
    };

    // sealvol serve upstream: the referrers API.
    let upstream = Server::start(&sb.path().join("upstream"));
    let (src, version) = push_signed(&sb, &host(&upstream), &key, 71);
    let proxy = sealvol_tests::FlipProxy::start_counting(&host(&upstream));
    let cache = cache_of("cache", &proxy.addr());
    let c = host(&cache);
    signed_through(&sb, &c, &version, &public, &other, &src);
    assert!(
        proxy.requests().iter().any(|r| r.contains("/referrers/")),
        "the cache did not ask the upstream for referrers: {:#?}",
        proxy.requests()
    );

    // The upstream gone: the signature the cache holds still lists.
    drop(proxy);
    sealvol_tests::ok(
        sb.sealvol(
            &c,
            &[
                "verify",
                &format!("{c}/ns/vol@{version}"),
                "--signed-by",
                s(&public),
            ],
        ),
        "verify --signed-by with the upstream down",
    );

    // docker-registry 2.8 has no referrers API: the signature is in its
    // referrers tag schema, which the cache lists from.
    let docker = sealvol_tests::DockerRegistry::start();
    let (src, version) = push_signed(&sb, &docker.addr(), &key, 72);
    let proxy = sealvol_tests::FlipProxy::start_counting(&docker.addr());
    let cache = cache_of("docker-cache", &proxy.addr());
    signed_through(&sb, &host(&cache), &version, &public, &other, &src);
    assert!(
        proxy
            .requests()
            .iter()
            .any(|r| r.contains("/manifests/sha256-")),
        "the cache did not read the referrers tag schema: {:#?}",
        proxy.requests()
    );
}

#[test]
fn a_corrupt_upstream_blob_is_refused_and_not_cached() {
    let sb = Sandbox::new();
    let upstream = Server::start(&sb.path().join("upstream"));
    let up = host(&upstream);
    let src = sb.path().join("model");
    model(&src, 21);
    json(
        sb.sealvol(
            &up,
            &[
                "push",
                s(&src),
                &format!("{up}/weights/m:v1"),
                "--output",
                "json",
            ],
        ),
        "push to the upstream",
    );

    // Every blob body the cache receives has a byte flipped.
    let flipping = sealvol_tests::FlipProxy::start(&up);
    let cache_root = sb.path().join("cache-registry");
    let config = format!("upstream = \"http://{}\"\n", flipping.addr());
    let cache = Server::start_config_env(&cache_root, &config, &[]);
    let c = host(&cache);
    let failed = sb.sealvol(
        &c,
        &[
            "pull",
            &format!("{c}/weights/m:v1"),
            s(&sb.path().join("bad")),
            "--no-cache",
        ],
    );
    assert!(
        !failed.status.success(),
        "a pull of corrupt blobs succeeded"
    );
    assert!(flipping.flipped() > 0);
    let http = client();
    let bad = http
        .get(format!(
            "{}/v2/weights/m/blobs/{}",
            cache.url,
            sha256(b"not there")
        ))
        .send()
        .unwrap();
    assert_eq!(bad.status(), 404, "an unknown blob is the upstream's 404");

    // The same cache data behind an honest upstream: whatever it kept is
    // intact, so the pull succeeds.
    drop(cache);
    let config = format!("upstream = \"http://{up}\"\n");
    let cache = Server::start_config_env(&cache_root, &config, &[]);
    let c = host(&cache);
    let out = sb.path().join("good");
    json(
        sb.sealvol(
            &c,
            &[
                "pull",
                &format!("{c}/weights/m:v1"),
                s(&out),
                "--no-cache",
                "--output",
                "json",
            ],
        ),
        "pull after the corruption",
    );
    assert_same_tree(&src, &out);
}

#[test]
fn a_pull_through_cache_stays_within_its_cache_size() {
    let sb = Sandbox::new();
    let upstream = Server::start(&sb.path().join("upstream"));
    let up = host(&upstream);
    let src = sb.path().join("model");
    model(&src, 31);
    json(
        sb.sealvol(
            &up,
            &[
                "push",
                s(&src),
                &format!("{up}/weights/m:v1"),
                "--output",
                "json",
            ],
        ),
        "push to the upstream",
    );
    let cache_root = sb.path().join("cache-registry");
    let max = 6u64 << 20;
    let config = format!("upstream = \"http://{up}\"\ncache_size = {max}\n");
    let cache = Server::start_config_env(&cache_root, &config, &[]);
    let c = host(&cache);
    // Twice: the second pull fetches again what the first evicted.
    for to in ["a", "b"] {
        let out = sb.path().join(to);
        json(
            sb.sealvol(
                &c,
                &[
                    "pull",
                    &format!("{c}/weights/m:v1"),
                    s(&out),
                    "--no-cache",
                    "--output",
                    "json",
                ],
            ),
            "pull through a small cache",
        );
        assert_same_tree(&src, &out);
        let kept: u64 = walkdir(&cache_root.join("blobs"));
        assert!(
            kept <= max,
            "the cache holds {kept} bytes of blobs, more than {max}"
        );
        assert!(kept > 0);
    }
}

/// Bytes of the files under `dir`.
fn walkdir(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| {
                let e = e.unwrap();
                let m = e.metadata().unwrap();
                if m.is_dir() {
                    walkdir(&e.path())
                } else {
                    m.len()
                }
            })
            .sum()
        })
        .unwrap_or(0)
}

// The cache tier's cost on the long link: a cold pull through a cache
// sends the upstream one request per blob and manifest, plus what
// authenticating takes, whether the upstream is open, takes Basic
// credentials or hands out tokens.

/// A cold pull of `weights/m:v1` through a new pull-through cache (data
/// in `sb/name`) of the counting `proxy`, with `credentials`
/// (`USER:PASSWORD`) for the upstream when given; checks the pulled tree
/// against `src` and returns the requests the proxy saw meanwhile.
fn pull_through_counting(
    sb: &Sandbox,
    name: &str,
    proxy: &sealvol_tests::FlipProxy,
    credentials: Option<&str>,
    src: &Path,
) -> Vec<String> {
    let mut config = format!(
        "upstream = \"http://{}\"\ntag_ttl_seconds = 0\n",
        proxy.addr()
    );
    if let Some(c) = credentials {
        let file = sb.path().join(format!("{name}.credentials"));
        write(&file, format!("{c}\n").as_bytes(), 0o600);
        config.push_str(&format!("upstream_credentials_file = {:?}\n", s(&file)));
    }
    let cache = Server::start_config_env(&sb.path().join(name), &config, &[]);
    let before = proxy.requests().len();
    pull_counted(
        sb,
        &cache,
        "v1",
        &sb.path().join(format!("{name}-pulled")),
        src,
        proxy,
        before,
    )
}

/// Pulls `weights/m:TAG` through `cache` into `to`, checks it against
/// `src`, and returns the requests `proxy` saw from its `before`th on.
fn pull_counted(
    sb: &Sandbox,
    cache: &Server,
    tag: &str,
    to: &Path,
    src: &Path,
    proxy: &sealvol_tests::FlipProxy,
    before: usize,
) -> Vec<String> {
    let c = host(cache);
    json(
        sb.sealvol(
            &c,
            &[
                "pull",
                &format!("{c}/weights/m:{tag}"),
                s(to),
                "--no-cache",
                "--output",
                "json",
            ],
        ),
        "pull through the cache",
    );
    assert_same_tree(src, to);
    proxy.requests()[before..].to_vec()
}

/// The distinct blobs and manifests among `seen`, and the `GET /v2/`
/// probes.
fn objects_and_probes(seen: &[String]) -> (usize, usize) {
    let mut objects: Vec<&str> = seen
        .iter()
        .filter(|r| {
            r.starts_with("GET /v2/") && (r.contains("/blobs/") || r.contains("/manifests/"))
        })
        .map(|r| r.split('?').next().unwrap_or(r))
        .collect();
    objects.sort();
    objects.dedup();
    let probes = seen.iter().filter(|r| r.as_str() == "GET /v2/").count();
    (objects.len(), probes)
}

/// Asserts that `seen` holds each blob and manifest once, plus `auth`
/// requests at most.
fn assert_one_request_per_object(seen: &[String], auth: usize, what: &str) {
    let (objects, probes) = objects_and_probes(seen);
    eprintln!(
        "{what}: {} upstream requests, {objects} blobs and manifests, {probes} GET /v2/",
        seen.len()
    );
    assert!(objects >= 3, "{what}: too few objects to tell: {seen:#?}");
    assert!(
        seen.len() <= objects + auth,
        "{what}: the upstream saw {} requests ({probes} of them GET /v2/) for {objects} blobs and manifests; at most {} expected: {seen:#?}",
        seen.len(),
        objects + auth
    );
}

/// Pushes a model of several chunks to `registry` as `weights/m:TAG`
/// (logged in already where it needs credentials); its folder.
fn push_model(sb: &Sandbox, registry: &str, tag: &str, seed: u64) -> std::path::PathBuf {
    let src = sb.path().join(format!("model-{tag}"));
    model(&src, seed);
    json(
        sb.sealvol(
            registry,
            &[
                "push",
                s(&src),
                &format!("{registry}/weights/m:{tag}"),
                "--output",
                "json",
            ],
        ),
        "push to the upstream",
    );
    src
}

fn login(sb: &Sandbox, registry: &str, user: &str, password: &str) {
    sealvol_tests::ok(
        sb.sealvol_stdin(
            registry,
            &["login", registry, "-u", user, "--password-stdin"],
            password.as_bytes(),
        ),
        "sealvol login",
    );
}

#[test]
fn a_pull_through_an_open_upstream_costs_one_request_per_blob_and_manifest_plus_one() {
    let sb = Sandbox::new();
    let upstream = Server::start(&sb.path().join("upstream"));
    let up = host(&upstream);
    let src = push_model(&sb, &up, "v1", 51);
    let proxy = sealvol_tests::FlipProxy::start_counting(&up);
    let seen = pull_through_counting(&sb, "cache", &proxy, None, &src);
    assert_one_request_per_object(&seen, 1, "sealvol serve without auth");

    // docker-registry 2.8, open: the same.
    let docker = sealvol_tests::DockerRegistry::start();
    let src = push_model(&sb, &docker.addr(), "v1", 52);
    let proxy = sealvol_tests::FlipProxy::start_counting(&docker.addr());
    let seen = pull_through_counting(&sb, "docker-cache", &proxy, None, &src);
    assert_one_request_per_object(&seen, 1, "docker-registry without auth");
}

#[test]
fn a_pull_through_a_basic_auth_upstream_costs_one_request_per_blob_and_manifest_plus_one() {
    const USER: &str = "puller";
    const PASSWORD: &str = "cache-pass";
    let sb = Sandbox::new();
    let docker = sealvol_tests::DockerRegistry::start_with_htpasswd(USER, PASSWORD);
    let up = docker.addr();
    login(&sb, &up, USER, PASSWORD);
    let src = push_model(&sb, &up, "v1", 61);
    let proxy = sealvol_tests::FlipProxy::start_counting(&up);
    let seen = pull_through_counting(
        &sb,
        "cache",
        &proxy,
        Some(&format!("{USER}:{PASSWORD}")),
        &src,
    );
    assert_one_request_per_object(&seen, 1, "docker-registry with htpasswd");
}

#[test]
fn a_pull_through_a_token_upstream_reuses_its_token_and_authenticates_again_once_on_a_401() {
    const PASSWORD: &str = "cache-pass";
    let sb = Sandbox::new();
    // The upstream's token realm is the counting proxy, so token fetches
    // are counted too: the proxy's address must be known first.
    let up = format!("127.0.0.1:{}", sealvol_tests::free_port());
    let proxy = sealvol_tests::FlipProxy::start_counting(&up);
    let htpasswd = sb.path().join("htpasswd");
    std::fs::write(&htpasswd, sealvol_tests::htpasswd_line("writer", PASSWORD)).unwrap();
    let config = |key: &str| {
        format!(
            "[auth]\nhtpasswd = {:?}\npublic_url = \"http://{}\"\nsigning_key_file = {:?}\n\
             [[auth.access]]\nrepositories = [\"weights/**\"]\nusers = [\"writer\"]\nactions = [\"pull\", \"push\"]\n",
            s(&htpasswd),
            proxy.addr(),
            s(&sb.path().join(key))
        )
    };
    let root = sb.path().join("upstream");
    let upstream = Server::start_again(&root, &up, &config("a.key"), &[]);
    login(&sb, &up, "writer", PASSWORD);
    let src = push_model(&sb, &up, "v1", 71);

    let mut cache_config = format!(
        "upstream = \"http://{}\"\ntag_ttl_seconds = 0\n",
        proxy.addr()
    );
    let creds = sb.path().join("cache.credentials");
    write(&creds, format!("writer:{PASSWORD}\n").as_bytes(), 0o600);
    cache_config.push_str(&format!("upstream_credentials_file = {:?}\n", s(&creds)));
    let cache = Server::start_config_env(&sb.path().join("cache"), &cache_config, &[]);
    let before = proxy.requests().len();
    let seen = pull_counted(
        &sb,
        &cache,
        "v1",
        &sb.path().join("a"),
        &src,
        &proxy,
        before,
    );
    // A token needs the realm: one GET /v2/ (its challenge) and one
    // token fetch, then the token serves every fetch.
    let tokens = |seen: &[String]| seen.iter().filter(|r| r.starts_with("GET /token")).count();
    assert_eq!(tokens(&seen), 1, "{seen:#?}");
    assert_one_request_per_object(&seen, 2, "sealvol serve with tokens");

    // The upstream signs with another key: the cache's token is refused
    // (401), and it fetches one new token and goes on.
    let upstream = upstream.kill_and_restart(&config("b.key"), &[]);
    let src2 = push_model(&sb, &up, "v2", 72);
    let before = proxy.requests().len();
    let seen = pull_counted(
        &sb,
        &cache,
        "v2",
        &sb.path().join("b"),
        &src2,
        &proxy,
        before,
    );
    assert_eq!(tokens(&seen), 1, "{seen:#?}");
    // The refused request is sent again.
    assert_one_request_per_object(&seen, 3, "sealvol serve with tokens, after a 401");
    drop(upstream);
}

#[test]
fn reads_go_to_mirrors_in_order_fail_over_and_resolve_tags_only_where_allowed() {
    let sb = Sandbox::new();
    let origin = Server::start(&sb.path().join("origin"));
    let src = sb.path().join("model");
    model(&src, 41);
    json(
        sb.sealvol(
            &host(&origin),
            &[
                "push",
                s(&src),
                &format!("{}/weights/m:v1", host(&origin)),
                "--output",
                "json",
            ],
        ),
        "push to the origin",
    );
    // Clients name the origin through a counting proxy; the mirror is a
    // pull-through cache of the origin, behind its own counting proxy.
    let origin_seen = sealvol_tests::FlipProxy::start_counting(&host(&origin));
    let cache = Server::start_with(
        &[
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--root",
            s(&sb.path().join("mirror")),
            "--upstream",
            &origin.url,
        ],
        &sb.path().join("mirror"),
    );
    let mirror_seen = sealvol_tests::FlipProxy::start_counting(&host(&cache));
    // A host nobody listens on, first in line.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();

    let hosts = sb.path().join("certs.d");
    let o = origin_seen.addr();
    write(
        &hosts.join(&o).join("hosts.toml"),
        format!(
            "server = \"http://{o}\"\n[host.\"http://{dead}\"]\n  capabilities = [\"pull\", \"resolve\"]\n[host.\"http://{}\"]\n  capabilities = [\"pull\"]\n",
            mirror_seen.addr()
        )
        .as_bytes(),
        0o644,
    );
    let out = sb.path().join("pulled");
    let pulled = sb
        .command(sealvol_tests::sealvol_bin())
        .env("SEALVOL_HOSTS_DIR", &hosts)
        .args([
            "pull",
            &format!("{o}/weights/m:v1"),
            s(&out),
            "--no-cache",
            "--output",
            "json",
        ])
        .output()
        .unwrap();
    json(pulled, "pull with the first mirror down");
    assert_same_tree(&src, &out);

    // The tag resolved on the origin (the mirror may not resolve); every
    // blob came from the mirror; none from the origin directly.
    let at_origin = origin_seen.requests();
    assert!(
        at_origin
            .iter()
            .any(|r| r.starts_with("GET /v2/weights/m/manifests/v1")),
        "{at_origin:?}"
    );
    assert!(
        blob_gets(&at_origin).is_empty(),
        "blobs fetched from the origin: {at_origin:?}"
    );
    assert!(!blob_gets(&mirror_seen.requests()).is_empty());
}

#[test]
fn two_replicas_on_one_bucket_and_one_postgres_serve_the_same_volumes() {
    let sb = Sandbox::new();
    let moto = Moto::start();
    moto.create_bucket(BUCKET);
    let pg = sealvol_tests::Postgres::start();
    let config = replica_config("", &moto, sb.path(), &pg);
    let a = Server::start_config_env(&sb.path().join("replica-a"), &config, &[]);
    let b = Server::start_config_env(&sb.path().join("replica-b"), &config, &[]);
    let (ra, rb) = (host(&a), host(&b));

    // Pushed to A, pulled from B.
    let v1 = sb.path().join("v1");
    model(&v1, 51);
    let pushed = json(
        sb.sealvol(
            &ra,
            &[
                "push",
                s(&v1),
                &format!("{ra}/weights/m:v1"),
                "--output",
                "json",
            ],
        ),
        "push v1 to replica A",
    );
    let out = sb.path().join("from-b");
    let pulled = json(
        sb.sealvol(
            &rb,
            &[
                "pull",
                &format!("{rb}/weights/m:v1"),
                s(&out),
                "--no-cache",
                "--output",
                "json",
            ],
        ),
        "pull v1 from replica B",
    );
    assert_eq!(pulled["digest"], pushed["digest"]);
    assert_same_tree(&v1, &out);

    // A second version pushed to B is A's head too; both list both.
    let v2 = sb.path().join("v2");
    model(&v2, 52);
    let pushed2 = json(
        sb.sealvol(
            &rb,
            &[
                "push",
                s(&v2),
                &format!("{rb}/weights/m:v2"),
                "--output",
                "json",
            ],
        ),
        "push v2 to replica B",
    );
    for r in [&ra, &rb] {
        let list = json(
            sb.sealvol(
                r,
                &["versions", &format!("{r}/weights/m"), "--output", "json"],
            ),
            "versions",
        );
        let list = list.as_array().unwrap();
        assert_eq!(list.len(), 2, "{r}: {list:?}");
        let head: Vec<&Value> = list.iter().filter(|v| v["is_head"] == true).collect();
        assert_eq!(head.len(), 1);
        assert_eq!(head[0]["digest"], pushed2["digest"], "{r}");
    }
    // Storage statistics kept in PostgreSQL, the same from both: the
    // distinct chunks of both versions, as their manifests list them.
    let mut distinct = std::collections::BTreeMap::new();
    for tag in ["v1", "v2"] {
        distinct.extend(sealvol_tests::chunk_blobs(&ra, "weights/m", tag));
    }
    let stored: u64 = distinct.values().sum();
    for r in [&ra, &rb] {
        let stats: Value = client()
            .get(format!("http://{r}/api/v1/volumes/weights/m/-/stats"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(stats["versions"], 2, "{r}: {stats}");
        assert_eq!(stats["stored_bytes"], stored, "{r}: {stats}");
        assert_eq!(stats["chunks"], distinct.len(), "{r}: {stats}");
        let logical = pushed["bytes"].as_u64().unwrap() + pushed2["bytes"].as_u64().unwrap();
        assert_eq!(stats["logical_bytes"], logical, "{r}: {stats}");
    }
    let out2 = sb.path().join("v2-from-a");
    json(
        sb.sealvol(
            &ra,
            &[
                "pull",
                &format!("{ra}/weights/m:head"),
                s(&out2),
                "--no-cache",
                "--output",
                "json",
            ],
        ),
        "pull head from replica A",
    );
    assert_same_tree(&v2, &out2);
    assert!(!sb.path().join("replica-a").join("meta.redb").exists());

    // One upload session, its requests spread over both replicas as a
    // round-robin balancer would: each replica takes the size from the
    // shared store.
    let http = client();
    let data = noise((9 << 20) + 77, 53);
    let digest = sha256(&data);
    let start = http
        .post(format!("{}/v2/spread/blob/blobs/uploads/", a.url))
        .send()
        .unwrap();
    assert_eq!(start.status(), 202);
    let loc = start.headers()["location"].to_str().unwrap().to_string();
    let loc = patch(&http, &absolute(&b.url, &loc), &data, 0, 3 << 20);
    let loc = patch(&http, &absolute(&a.url, &loc), &data, 3 << 20, 6 << 20);
    let status = http.get(absolute(&b.url, &loc)).send().unwrap();
    assert_eq!(status.status(), 204);
    assert_eq!(
        status.headers()["range"].to_str().unwrap(),
        format!("0-{}", (6 << 20) - 1)
    );
    let loc = patch(&http, &absolute(&a.url, &loc), &data, 6 << 20, 8 << 20);
    let url = absolute(&b.url, &loc);
    let sep = if url.contains('?') { '&' } else { '?' };
    let done = http
        .put(format!("{url}{sep}digest={digest}"))
        .header("content-type", "application/octet-stream")
        .body(data[8 << 20..].to_vec())
        .send()
        .unwrap();
    assert_eq!(done.status(), 201, "{}", done.text().unwrap_or_default());
    let got = http
        .get(format!("{}/v2/spread/blob/blobs/{digest}", a.url))
        .send()
        .unwrap()
        .bytes()
        .unwrap();
    assert!(
        got[..] == data[..],
        "the blob assembled across replicas differs"
    );

    // Each replica passes the distribution-spec workflows on its own.
    let conformance = sealvol_tests::sealvol_bin().with_file_name("sealvol-conformance");
    for r in [&a, &b] {
        let out = std::process::Command::new(&conformance)
            .args(["--url", &r.url])
            .output()
            .expect("run sealvol-conformance");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("50 passed, 0 failed"),
            "conformance against {}:\n{text}{}",
            r.url,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    drop(pg);
}

#[test]
fn concurrent_pushes_of_one_volume_across_replicas_each_seal_or_are_refused_cleanly() {
    let sb = Sandbox::new();
    let moto = Moto::start();
    moto.create_bucket(BUCKET);
    let pg = sealvol_tests::Postgres::start();
    let config = replica_config("", &moto, sb.path(), &pg);
    let a = Server::start_config_env(&sb.path().join("replica-a"), &config, &[]);
    let b = Server::start_config_env(&sb.path().join("replica-b"), &config, &[]);
    let hosts = [host(&a), host(&b)];

    let dirs: Vec<_> = (0..8)
        .map(|i| {
            let d = sb.path().join(format!("v{i}"));
            write(&d.join("weights.bin"), &noise(1 << 20, 60 + i), 0o644);
            d
        })
        .collect();
    let outs: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = dirs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let (sb, r) = (&sb, hosts[i % 2].clone());
                scope.spawn(move || {
                    sb.sealvol(
                        &r,
                        &[
                            "push",
                            s(d),
                            &format!("{r}/weights/race:p{i}"),
                            "--output",
                            "json",
                        ],
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut sealed = Vec::new();
    for (i, out) in outs.into_iter().enumerate() {
        if out.status.success() {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            sealed.push(v["digest"].as_str().unwrap().to_string());
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("in progress"),
                "push {i} failed for another reason than a push in progress: {err}"
            );
        }
    }
    assert!(!sealed.is_empty(), "no push sealed");
    // Both replicas list exactly the sealed versions, with one head among them.
    for r in &hosts {
        let list = json(
            sb.sealvol(
                r,
                &["versions", &format!("{r}/weights/race"), "--output", "json"],
            ),
            "versions",
        );
        let mut listed: Vec<String> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["digest"].as_str().unwrap().to_string())
            .collect();
        listed.sort();
        let mut want = sealed.clone();
        want.sort();
        assert_eq!(listed, want, "{r}");
        let heads = list
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v["is_head"] == true)
            .count();
        assert_eq!(heads, 1, "{r}");
    }
    drop(pg);
}

/// `sealvol sync describe ID` on `r`, as JSON.
fn describe(sb: &Sandbox, r: &str, id: &str) -> Value {
    json(
        sb.sealvol(
            r,
            &["sync", "describe", id, "--registry", r, "--output", "json"],
        ),
        "sync describe",
    )
}

/// Describes job `id` on `r` until `until` holds (up to `secs`).
fn poll(sb: &Sandbox, r: &str, id: &str, secs: u64, until: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let job = describe(sb, r, id);
        if until(&job) {
            return job;
        }
        let state = job["state"].as_str().unwrap_or_default();
        assert!(
            !["FAILED", "CANCELED"].contains(&state),
            "job {id} ended: {job}"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} after {secs} s: {job}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_sync_whose_replica_dies_is_finished_by_another_with_the_same_version() {
    let sb = Sandbox::new();
    let moto = Moto::start();
    moto.create_bucket(BUCKET);
    let pg = sealvol_tests::Postgres::start();
    // Six files of 1 to 6 MiB through a hub serving 1 MiB/s: ~20 s.
    let hub_root = tempfile::tempdir().unwrap();
    for i in 0..6u64 {
        write(
            &hub_root
                .path()
                .join(format!("models/org/big/shard-{i}.safetensors")),
            &noise((i as usize + 1) << 20, 100 + i),
            0o644,
        );
    }
    let slow = sealvol_tests::HfHub::start(hub_root.path(), Some(1 << 20), 0);
    let env = [("HF_ENDPOINT", slow.url())];
    let config = replica_config(
        "sync_lease_seconds = 2\nclaim_ttl_seconds = 4\n",
        &moto,
        sb.path(),
        &pg,
    );
    // Only A runs at first, so the job is A's.
    let a = Server::start_config_env(&sb.path().join("replica-a"), &config, &env);
    let ra = host(&a);
    let job = json(
        sb.sealvol(
            &ra,
            &[
                "sync",
                "start",
                "--source",
                "hf://org/big",
                "--dest",
                &format!("{ra}/hf/big:v1"),
                "--output",
                "json",
            ],
        ),
        "sync start",
    );
    let id = job["id"].as_str().unwrap().to_string();
    let running = poll(&sb, &ra, &id, 60, |j| {
        j["state"] == "RUNNING" && j["progress"]["files_done"].as_u64() >= Some(1)
    });
    let done_before = running["progress"]["files_done"].as_u64().unwrap();
    assert!(
        done_before < 6,
        "the job finished before the kill: {running}"
    );
    // A dies; B, started after, takes the job once A's lease lapsed.
    a.kill();
    let b = Server::start_config_env(&sb.path().join("replica-b"), &config, &env);
    let rb = host(&b);
    let ready = poll(&sb, &rb, &id, 120, |j| j["state"] == "READY");
    assert!(
        ready["progress"]["files_done"].as_u64() >= Some(done_before),
        "files done before the kill were forgotten: {ready}"
    );
    let resumed = ready["version"]["digest"].as_str().unwrap().to_string();

    // The same source, uninterrupted, on a plain registry.
    let fast = sealvol_tests::HfHub::start(hub_root.path(), None, 0);
    let plain_root = sb.path().join("plain");
    let plain = Server::start_config_env(&plain_root, "", &[("HF_ENDPOINT", fast.url())]);
    let rp = host(&plain);
    let straight = json(
        sb.sealvol(
            &rp,
            &[
                "sync",
                "start",
                "--source",
                "hf://org/big",
                "--dest",
                &format!("{rp}/hf/big:v1"),
                "--wait",
                "--output",
                "json",
            ],
        ),
        "an uninterrupted sync",
    );
    assert_eq!(straight["version"]["digest"].as_str().unwrap(), resumed);
    drop(pg);
}

#[test]
fn migrate_copies_a_whole_registry_from_the_data_folder_to_a_bucket_and_postgres() {
    let sb = Sandbox::new();
    let src_root = sb.path().join("old");
    let old = Server::start_config_env(&src_root, "", &[]);
    let r = host(&old);
    let (v1, v2) = (sb.path().join("v1"), sb.path().join("v2"));
    model(&v1, 71);
    model(&v2, 72);
    let p1 = json(
        sb.sealvol(
            &r,
            &[
                "push",
                s(&v1),
                &format!("{r}/weights/m:v1"),
                "--output",
                "json",
            ],
        ),
        "push v1",
    );
    let p2 = json(
        sb.sealvol(
            &r,
            &[
                "push",
                s(&v2),
                &format!("{r}/weights/m:v2"),
                "--output",
                "json",
            ],
        ),
        "push v2",
    );
    let (d1, d2) = (
        p1["digest"].as_str().unwrap(),
        p2["digest"].as_str().unwrap(),
    );
    json(
        sb.sealvol(
            &r,
            &[
                "tag",
                "set",
                &format!("{r}/weights/m@{d1}"),
                "prod",
                "--expires-at",
                "1h",
                "--output",
                "json",
            ],
        ),
        "tag set",
    );
    json(
        sb.sealvol(
            &r,
            &[
                "rm",
                &format!("{r}/weights/m@{d2}"),
                "--yes",
                "--output",
                "json",
            ],
        ),
        "rm v2",
    );
    sealvol_tests::ok(
        sb.sealvol_stdin(
            &r,
            &[
                "secret",
                "set",
                "hf-token",
                "--for",
                "hf://org",
                "--registry",
                &r,
            ],
            b"hf_secretvalue123",
        ),
        "secret set",
    );
    let state = |r: &str| {
        let versions = json(
            sb.sealvol(
                r,
                &[
                    "versions",
                    &format!("{r}/weights/m"),
                    "--include-tombstoned",
                    "--output",
                    "json",
                ],
            ),
            "versions",
        );
        let rows: Vec<(String, String, bool, Value)> = versions
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["digest"].as_str().unwrap().to_string(),
                    v["lifecycle"].as_str().unwrap_or_default().to_string(),
                    v["is_head"] == true,
                    v["tags"].clone(),
                )
            })
            .collect();
        let secrets = sealvol_tests::ok(
            sb.sealvol(r, &["secret", "list", "--registry", r]),
            "secret list",
        );
        (rows, secrets)
    };
    let before = state(&r);
    assert_eq!(before.0.len(), 2, "{before:?}");
    drop(old);

    // Into a bucket and PostgreSQL.
    let moto = Moto::start();
    moto.create_bucket(BUCKET);
    let pg = sealvol_tests::Postgres::start();
    let new_root = sb.path().join("new");
    let from = sealvol_tests::write_config(&src_root, "127.0.0.1:0", "");
    let to = sealvol_tests::write_config(
        &new_root,
        "127.0.0.1:0",
        &replica_config("", &moto, sb.path(), &pg),
    );
    let out = sealvol_tests::ok(
        sb.command(sealvol_tests::sealvol_bin())
            .args(["serve", "migrate", "--from", s(&from), "--to", s(&to)])
            .output()
            .unwrap(),
        "serve migrate",
    );
    assert!(
        out.contains("migrated") && out.contains("1 secret"),
        "{out}"
    );
    // Into a registry that holds data now: refused.
    let again = sb
        .command(sealvol_tests::sealvol_bin())
        .args(["serve", "migrate", "--from", s(&from), "--to", s(&to)])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("empty registry"));

    let new = Server::start_with(&["serve", "--config", s(&to)], &new_root);
    let n = host(&new);
    assert_eq!(state(&n), before, "the migrated registry differs");
    let pulled = sb.path().join("pulled");
    json(
        sb.sealvol(
            &n,
            &[
                "pull",
                &format!("{n}/weights/m:prod"),
                s(&pulled),
                "--no-cache",
                "--output",
                "json",
            ],
        ),
        "pull the migrated prod tag",
    );
    assert_same_tree(&v1, &pulled);
    json(
        sb.sealvol(
            &n,
            &[
                "restore",
                &format!("{n}/weights/m@{d2}"),
                "--output",
                "json",
            ],
        ),
        "restore v2 after the migration",
    );
    drop(pg);
}

#[test]
fn an_azure_backed_registry_stores_uploads_and_pulls_back_identical() {
    let sb = Sandbox::new();
    let azurite = sealvol_tests::Azurite::start();
    azurite.create_container("blobs");
    let config = format!(
        "[storage]\nkind = \"azure\"\nbucket = \"blobs\"\naccount = \"{}\"\nprefix = \"{PREFIX}\"\n",
        sealvol_tests::AZURITE_ACCOUNT
    );
    let env = [("AZURITE_BLOB_STORAGE_URL", azurite.url())];
    let root = sb.path().join("registry");
    let server = Server::start_config_env(&root, &config, &env);
    let r = host(&server);
    let src = sb.path().join("model");
    model(&src, 81);
    json(
        sb.sealvol(
            &r,
            &[
                "push",
                s(&src),
                &format!("{r}/weights/az:v1"),
                "--output",
                "json",
            ],
        ),
        "push to azure",
    );
    assert!(
        !root.join("blobs").exists(),
        "an Azure-backed registry wrote blobs to its data folder"
    );
    // An upload in three requests (joined in the container) and one whole.
    let http = client();
    let data = noise((10 << 20) + 5, 82);
    let digest = sha256(&data);
    let start = http
        .post(format!("{}/v2/az/blob/blobs/uploads/", server.url))
        .send()
        .unwrap();
    let loc = start.headers()["location"].to_str().unwrap().to_string();
    let loc = patch(&http, &absolute(&server.url, &loc), &data, 0, 9 << 20);
    let loc = patch(
        &http,
        &absolute(&server.url, &loc),
        &data,
        9 << 20,
        10 << 20,
    );
    let url = absolute(&server.url, &loc);
    let sep = if url.contains('?') { '&' } else { '?' };
    let done = http
        .put(format!("{url}{sep}digest={digest}"))
        .header("content-type", "application/octet-stream")
        .body(data[10 << 20..].to_vec())
        .send()
        .unwrap();
    assert_eq!(done.status(), 201, "{}", done.text().unwrap_or_default());
    let got = http
        .get(format!("{}/v2/az/blob/blobs/{digest}", server.url))
        .send()
        .unwrap()
        .bytes()
        .unwrap();
    assert!(got[..] == data[..]);

    let server = server.kill_and_restart(&config, &env);
    let r = host(&server);
    let out = sb.path().join("pulled");
    json(
        sb.sealvol(
            &r,
            &[
                "pull",
                &format!("{r}/weights/az:v1"),
                s(&out),
                "--no-cache",
                "--output",
                "json",
            ],
        ),
        "pull from azure after a restart",
    );
    assert_same_tree(&src, &out);
    let conformance = sealvol_tests::sealvol_bin().with_file_name("sealvol-conformance");
    let run = std::process::Command::new(&conformance)
        .args(["--url", &server.url])
        .output()
        .expect("run sealvol-conformance");
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && text.contains("50 passed, 0 failed"),
        "conformance against an Azure-backed registry:\n{text}"
    );
}

#[test]
fn a_token_from_one_replica_is_honoured_by_another_with_the_same_signing_key() {
    let sb = Sandbox::new();
    let moto = Moto::start();
    moto.create_bucket(BUCKET);
    let pg = sealvol_tests::Postgres::start();
    const PASSWORD: &str = "replica-pass";
    let htpasswd = sb.path().join("htpasswd");
    std::fs::write(&htpasswd, sealvol_tests::htpasswd_line("writer", PASSWORD)).unwrap();
    let config = |key: &str| {
        format!(
            "{}[auth]\nhtpasswd = {:?}\npublic_url = \"http://registry.example.test\"\nsigning_key_file = {:?}\n\
             [[auth.access]]\nrepositories = [\"weights/**\"]\nusers = [\"writer\"]\nactions = [\"pull\", \"push\"]\n",
            replica_config("", &moto, sb.path(), &pg),
            s(&htpasswd),
            s(&sb.path().join(key))
        )
    };
    let a = Server::start_config_env(&sb.path().join("replica-a"), &config("token.key"), &[]);
    let b = Server::start_config_env(&sb.path().join("replica-b"), &config("token.key"), &[]);
    let c = Server::start_config_env(&sb.path().join("replica-c"), &config("other.key"), &[]);
    let http = client();
    let token: Value = http
        .get(format!(
            "{}/token?scope=repository:weights/a:pull,push",
            a.url
        ))
        .basic_auth("writer", Some(PASSWORD))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let t = token["token"].as_str().unwrap();
    let upload = |url: &str| {
        http.post(format!("{url}/v2/weights/a/blobs/uploads/"))
            .bearer_auth(t)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(upload(&a.url), 202);
    assert_eq!(upload(&b.url), 202, "replica B refused replica A's token");
    assert_eq!(
        upload(&c.url),
        401,
        "a replica with another signing key took the token"
    );
    drop(pg);
}

/// Garbage collection on both replicas, on their timers and by hand,
/// while pushes on B upload bytes that churn on A has just made garbage
/// of (pushed, deleted, purged with a retention of 0): every push that
/// succeeded pulls back identical from the other replica. The grace
/// period is 0, so only the store-wide GC lease, push claims, link times
/// in the shared store and the sweep sequence (`App::settle`) keep what a
/// push relies on.
#[test]
fn garbage_collection_on_both_replicas_with_pushes_in_flight_deletes_no_reachable_blob() {
    let sb = Sandbox::new();
    let moto = Moto::start();
    moto.create_bucket(BUCKET);
    let pg = sealvol_tests::Postgres::start();
    let config = replica_config(
        "gc_grace_seconds = 0\nretention_seconds = 0\ngc_interval_seconds = 1\n",
        &moto,
        sb.path(),
        &pg,
    );
    let a = Server::start_config_env(&sb.path().join("replica-a"), &config, &[]);
    let b = Server::start_config_env(&sb.path().join("replica-b"), &config, &[]);
    let hosts = [host(&a), host(&b)];
    let ok = |out: std::process::Output, what: &str| {
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };

    let deadline = std::time::Instant::now() + Duration::from_secs(25);
    let (garbage, churned) = std::sync::mpsc::channel::<(u64, std::path::PathBuf)>();
    let (sb, ok, churn_host) = (&sb, &ok, &hosts[0]);
    let kept: Vec<(String, std::path::PathBuf)> = std::thread::scope(|scope| {
        // Churn on A: each round's bytes pushed, deleted, and handed to B
        // once the next passes may be sweeping them.
        scope.spawn(move || {
            let r = &churn_host;
            let mut i = 0;
            while std::time::Instant::now() < deadline {
                let dir = sb.path().join(format!("churn-{i}"));
                write(&dir.join("round.bin"), &noise(2 << 20, 500 + i), 0o644);
                let volume = format!("churn/c{i}");
                ok(
                    sb.sealvol(
                        r,
                        &["push", s(&dir), &format!("{r}/{volume}:v"), "--no-cache"],
                    ),
                    "churn push",
                );
                ok(
                    sb.sealvol(r, &["rm", "-r", &format!("bdn:{volume}"), "--yes"]),
                    "churn rm",
                );
                std::thread::sleep(Duration::from_millis(900 + 150 * (i % 4)));
                garbage.send((i, dir)).unwrap();
                i += 1;
            }
        });
        // Collection by hand on both, besides their timers.
        let collectors: Vec<_> = (0..2)
            .map(|c| {
                let (sb, r) = (&sb, hosts[c].clone());
                scope.spawn(move || {
                    let mut deleted = 0;
                    while std::time::Instant::now() < deadline {
                        let out = sb.sealvol(&r, &["gc", "--output", "json"]);
                        let err = String::from_utf8_lossy(&out.stderr);
                        if out.status.success() {
                            let report: Value = serde_json::from_slice(&out.stdout).unwrap();
                            deleted += report["blobs_deleted"].as_u64().unwrap();
                        } else {
                            assert!(
                                err.contains("garbage collection is running on"),
                                "gc: {err}"
                            );
                        }
                    }
                    deleted
                })
            })
            .collect();
        // Pushes to be kept, on B: each round's bytes and a file of its own.
        let r = &hosts[1];
        let mut kept = Vec::new();
        for (i, churn) in churned {
            let dir = sb.path().join(format!("keep-{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::copy(churn.join("round.bin"), dir.join("round.bin")).unwrap();
            write(&dir.join("own.bin"), &noise(600 << 10, 9000 + i), 0o644);
            let target = format!("{r}/keep/k{i}:v1");
            // Bytes a sweep on A takes as B stores them are answered 503
            // and uploaded again by the client: every push succeeds.
            ok(
                sb.sealvol(r, &["push", s(&dir), &target, "--no-cache"]),
                "push",
            );
            kept.push((format!("keep/k{i}:v1"), dir));
        }
        let deleted: u64 = collectors.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(
            deleted > 0,
            "no pass by hand deleted anything while pushes ran"
        );
        kept
    });
    assert!(kept.len() >= 4, "too few pushes succeeded: {}", kept.len());
    // One more pass on each, with nothing in flight, then every kept
    // version pulls back identical from the replica it was not pushed to.
    for r in &hosts {
        let settled = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let out = sb.sealvol(r, &["gc", "--output", "json"]);
            if out.status.success() {
                break;
            }
            // Only the other replica's timer may be in the way.
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("garbage collection is running on")
                    && std::time::Instant::now() < settled,
                "gc: {err}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    eprintln!("{} pushes kept", kept.len());
    for (i, (name, dir)) in kept.iter().enumerate() {
        let r = &hosts[0];
        let out = sb.path().join(format!("pulled-{i}"));
        let pulled = sb.sealvol(r, &["pull", &format!("{r}/{name}"), s(&out), "--no-cache"]);
        assert!(
            pulled.status.success(),
            "{name} no longer pulls after garbage collection: {}",
            String::from_utf8_lossy(&pulled.stderr)
        );
        assert_same_tree(dir, &out);
    }
    // The servers stop before PostgreSQL (declared after it).
}
