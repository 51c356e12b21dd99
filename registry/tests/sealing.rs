//! A sealed version never changes, whatever a pusher sends: an index that
//! claims a version is checked as a reader checks it before it is stored
//! (its tree decodes and hashes to the version it claims, its chunk
//! manifests list the tree's chunks), and a version that an earlier
//! release stored unchecked and that no longer reads fails alone, never
//! the whole volume. In process, through the registry's own router.

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use sealvol_registry::server::open_app;
use sealvol_registry::state::app::{App, Lifetimes};
use sealvol_registry::store::meta::volumes::Sealed;
use sealvol_registry::store::meta::{ManifestRecord, References};
use sealvol_spec::oci::{build_version, BuiltVersion, VersionMeta, ANN_ROLE};
use sealvol_spec::tree::{Entry, EntryData};
use sealvol_spec::{ChunkingParams, TreeIndex};
use serde_json::Value;
use tower::ServiceExt;

const REPO: &str = "ns/vol";
const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

struct Reg {
    app: Arc<App>,
    router: axum::Router,
    _dir: tempfile::TempDir,
}

/// What a request got back.
struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The OCI error code of a failed answer.
    fn code(&self) -> String {
        self.json()["errors"][0]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// A version of `files` (name, bytes), each one chunk.
fn build(files: &[(&str, &[u8])]) -> BuiltVersion {
    let entries = files
        .iter()
        .map(|(path, data)| Entry {
            path: path.to_string(),
            mode: 0o644,
            data: EntryData::file_of(data, &[]),
        })
        .collect();
    let tree = TreeIndex::new(ChunkingParams::default(), entries).unwrap();
    build_version(
        &tree,
        &VersionMeta {
            created: "2026-12-02T00:00:00Z".into(),
            source: None,
        },
    )
    .unwrap()
}

/// `index` with the entries of roles `a` and `b` trading roles.
fn swap_roles(index: &[u8], a: &str, b: &str) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(index).unwrap();
    for m in v["manifests"].as_array_mut().unwrap() {
        let role = &mut m["annotations"][ANN_ROLE];
        if role == a {
            *role = Value::from(b);
        } else if role == b {
            *role = Value::from(a);
        }
    }
    serde_json::to_vec(&v).unwrap()
}

fn sha256(bytes: &[u8]) -> String {
    sealvol_spec::Sha256Digest::of(bytes).to_string()
}

impl Reg {
    async fn new() -> Reg {
        let dir = tempfile::tempdir().unwrap();
        let app = Arc::new(open_app(dir.path(), Lifetimes::default()).await.unwrap());
        let router = common::router_of(&app);
        Reg {
            app,
            router,
            _dir: dir,
        }
    }

    async fn call(&self, method: Method, path: &str, ct: Option<&str>, body: Vec<u8>) -> Answer {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(c) = ct {
            b = b.header("content-type", c);
        }
        let resp = (self.router.clone())
            .oneshot(b.body(Body::from(body)).unwrap())
            .await
            .unwrap();
        let (status, headers) = (resp.status(), resp.headers().clone());
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec();
        Answer {
            status,
            headers,
            body,
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.call(Method::GET, path, None, Vec::new()).await
    }

    async fn put_manifest(&self, reference: &str, media_type: &str, bytes: &[u8]) -> Answer {
        self.call(
            Method::PUT,
            &format!("/v2/{REPO}/manifests/{reference}"),
            Some(media_type),
            bytes.to_vec(),
        )
        .await
    }

    /// Every blob of `v` and its chunks (`files`' contents).
    async fn upload_blobs(&self, v: &BuiltVersion, files: &[(&str, &[u8])]) {
        let blobs = (v.blobs.iter().map(|b| b.bytes.clone()))
            .chain(files.iter().map(|(_, data)| data.to_vec()));
        for bytes in blobs {
            let d = sha256(&bytes);
            let a = self
                .call(
                    Method::POST,
                    &format!("/v2/{REPO}/blobs/uploads/?digest={d}"),
                    None,
                    bytes,
                )
                .await;
            assert_eq!(a.status, StatusCode::CREATED, "{}", a.text());
        }
    }

    /// A push up to its index: blobs, then tree, shard and view manifests.
    async fn upload(&self, v: &BuiltVersion, files: &[(&str, &[u8])]) {
        self.upload_blobs(v, files).await;
        for m in &v.manifests {
            let a = (self.put_manifest(&m.digest().to_string(), MANIFEST_TYPE, &m.bytes)).await;
            assert_eq!(a.status, StatusCode::CREATED, "{}", a.text());
        }
    }

    /// A whole push: `upload`, the index by digest, then `tags`.
    async fn push(&self, v: &BuiltVersion, files: &[(&str, &[u8])], tags: &[&str]) {
        self.upload(v, files).await;
        let index = v.index.digest().to_string();
        for reference in std::iter::once(index.as_str()).chain(tags.iter().copied()) {
            let a = self
                .put_manifest(reference, INDEX_TYPE, &v.index.bytes)
                .await;
            assert_eq!(a.status, StatusCode::CREATED, "{reference}: {}", a.text());
        }
    }

    /// The index digest `reference` resolves to.
    async fn resolves(&self, reference: &str) -> String {
        let a = self.get(&format!("/v2/{REPO}/manifests/{reference}")).await;
        assert_eq!(a.status, StatusCode::OK, "{reference}: {}", a.text());
        a.headers["docker-content-digest"]
            .to_str()
            .unwrap()
            .to_string()
    }

    /// The version record of `b3` from the volume API.
    async fn version(&self, b3: &str) -> Value {
        let a = self
            .get(&format!("/api/v1/volumes/{REPO}/-/versions/{b3}"))
            .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text());
        a.json()
    }
}

/// Refused with `status` and `code`, and the message says `why`.
fn refused(a: &Answer, status: StatusCode, code: &str, why: &str) {
    assert_eq!(a.status, status, "{}", a.text());
    assert_eq!(a.code(), code, "{}", a.text());
    let message = a.json()["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains(why), "{why:?} not in {message:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_that_is_not_the_version_it_claims_is_refused_and_moves_nothing() {
    let reg = Reg::new().await;
    let files: &[(&str, &[u8])] = &[("a.bin", b"alpha"), ("b.bin", b"beta")];
    let v = build(files);
    let (b3, hex) = (v.digest.to_string(), v.digest.hex());
    let digest_tag = format!("b3-{hex}");
    reg.push(&v, files, &[&digest_tag, "head", "prod"]).await;
    let index = v.index.digest().to_string();
    let before = reg.version(&b3).await;
    assert_eq!(before["index_digest"], index.as_str());

    // The copy: the version annotation kept, tree and chunks
    // roles swapped. By tag and by digest.
    let swapped = swap_roles(&v.index.bytes, "tree", "chunks");
    for reference in ["anything".to_string(), sha256(&swapped)] {
        let a = reg.put_manifest(&reference, INDEX_TYPE, &swapped).await;
        refused(
            &a,
            StatusCode::BAD_REQUEST,
            "MANIFEST_INVALID",
            "not a tree manifest",
        );
    }
    let a = reg.get(&format!("/v2/{REPO}/manifests/anything")).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "nothing was tagged");

    // Another version's tree under this version's annotation.
    let other_files: &[(&str, &[u8])] = &[("c.bin", b"gamma")];
    let other = build(other_files);
    reg.upload(&other, other_files).await;
    let mut claim: Value = serde_json::from_slice(&other.index.bytes).unwrap();
    claim["annotations"][sealvol_spec::oci::ANN_VERSION] = Value::from(b3.as_str());
    let claim = serde_json::to_vec(&claim).unwrap();
    let a = reg.put_manifest("prod", INDEX_TYPE, &claim).await;
    refused(
        &a,
        StatusCode::BAD_REQUEST,
        "MANIFEST_INVALID",
        &format!("version digest is {}", other.digest),
    );

    // Chunk manifests that leave a chunk of the tree out.
    let mut short: Value = serde_json::from_slice(&v.index.bytes).unwrap();
    (short["manifests"].as_array_mut().unwrap()).retain(|m| m["annotations"][ANN_ROLE] != "chunks");
    let short = serde_json::to_vec(&short).unwrap();
    let a = reg.put_manifest("prod", INDEX_TYPE, &short).await;
    refused(
        &a,
        StatusCode::BAD_REQUEST,
        "MANIFEST_INVALID",
        "in none of its chunk manifests",
    );

    // A descriptor that lies about the size of what it names, and an
    // annotation that lies about the tree: containerd would refuse the
    // first, the volume API would show the second.
    let mut lying: Value = serde_json::from_slice(&v.index.bytes).unwrap();
    let view = (lying["manifests"].as_array_mut().unwrap().iter_mut())
        .find(|m| m["annotations"][ANN_ROLE] == "view")
        .unwrap();
    view["size"] = Value::from(view["size"].as_u64().unwrap() + 1);
    let lying = serde_json::to_vec(&lying).unwrap();
    let a = reg.put_manifest("prod", INDEX_TYPE, &lying).await;
    refused(&a, StatusCode::BAD_REQUEST, "MANIFEST_INVALID", "bytes of");
    let mut lying: Value = serde_json::from_slice(&v.index.bytes).unwrap();
    lying["annotations"][sealvol_spec::oci::ANN_SIZE] = Value::from("1");
    let lying = serde_json::to_vec(&lying).unwrap();
    let a = reg.put_manifest("prod", INDEX_TYPE, &lying).await;
    refused(
        &a,
        StatusCode::BAD_REQUEST,
        "MANIFEST_INVALID",
        "its tree holds 9",
    );

    // A tree manifest that was never pushed: push it first.
    let later_files: &[(&str, &[u8])] = &[("d.bin", b"delta")];
    let later = build(later_files);
    reg.upload_blobs(&later, later_files).await;
    let a = reg
        .put_manifest(
            &later.index.digest().to_string(),
            INDEX_TYPE,
            &later.index.bytes,
        )
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text());
    assert_eq!(a.code(), "MANIFEST_BLOB_UNKNOWN", "{}", a.text());

    // An index that says it is a version by its artifactType alone.
    let mut bare: Value = serde_json::from_slice(&v.index.bytes).unwrap();
    bare["annotations"] = serde_json::json!({});
    let a = (reg.put_manifest("bare", INDEX_TYPE, &serde_json::to_vec(&bare).unwrap())).await;
    refused(
        &a,
        StatusCode::BAD_REQUEST,
        "MANIFEST_INVALID",
        "not a version",
    );

    // The digest tag names its version only.
    let config = b"{}";
    let a = reg
        .call(
            Method::POST,
            &format!("/v2/{REPO}/blobs/uploads/?digest={}", sha256(config)),
            None,
            config.to_vec(),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    let image = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256(config), "size": 2},
        "layers": [],
    });
    let image = serde_json::to_vec(&image).unwrap();
    let a = reg.put_manifest(&digest_tag, MANIFEST_TYPE, &image).await;
    refused(
        &a,
        StatusCode::BAD_REQUEST,
        "MANIFEST_INVALID",
        "digest tag",
    );
    let a = (reg.put_manifest(
        &format!("b3-{}", other.digest.hex()),
        INDEX_TYPE,
        &v.index.bytes,
    ))
    .await;
    refused(
        &a,
        StatusCode::BAD_REQUEST,
        "MANIFEST_INVALID",
        "digest tag",
    );

    // Nothing moved, and every read of the version still works.
    let after = reg.version(&b3).await;
    assert_eq!(after, before);
    for reference in [digest_tag.as_str(), "head", "prod"] {
        assert_eq!(reg.resolves(reference).await, index, "{reference}");
    }
    let reads = [
        format!("/api/v1/volumes/{REPO}/-/versions/{b3}/entries"),
        format!("/api/v1/volumes/{REPO}/-/versions/{b3}/diff/{b3}"),
        format!("/api/v1/volumes/{REPO}/-/stats"),
        format!("/ui/volumes/{REPO}"),
        format!("/ui/volumes/{REPO}/-/versions/{b3}"),
    ];
    for path in &reads {
        let a = reg.get(path).await;
        assert_eq!(a.status, StatusCode::OK, "{path}: {}", a.text());
    }

    // The version itself, stored again, is still accepted.
    let a = reg.put_manifest("again", INDEX_TYPE, &v.index.bytes).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text());
    assert_eq!(reg.resolves("again").await, index);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_version_fails_alone() {
    let reg = Reg::new().await;
    let good_files: &[(&str, &[u8])] = &[("a.bin", b"alpha")];
    let good = build(good_files);
    reg.push(&good, good_files, &["head"]).await;

    // What a release that sealed unchecked indexes left behind: a version
    // whose index names a chunk manifest as its tree and the other way
    // round, its chunks and tree format unknown.
    let bad_files: &[(&str, &[u8])] = &[("b.bin", b"beta")];
    let bad = build(bad_files);
    reg.upload(&bad, bad_files).await;
    let swapped = swap_roles(&bad.index.bytes, "tree", "chunks");
    let digest = sha256(&swapped);
    reg.app
        .blobs
        .put(&digest.parse().unwrap(), swapped.clone().into())
        .await
        .unwrap();
    let children: Vec<String> = bad
        .manifests
        .iter()
        .map(|m| m.digest().to_string())
        .collect();
    let sealed = Sealed {
        version: bad.digest.to_string(),
        size: None,
        files: None,
        tree: None,
        chunks: None,
    };
    let record = ManifestRecord {
        media_type: INDEX_TYPE.into(),
        size: swapped.len() as u64,
        subject: None,
        stored_at: 0,
    };
    let refs = References {
        blobs: Vec::new(),
        children,
    };
    reg.app
        .meta
        .put_manifest(REPO, &digest, &record, &refs, None, None, Some(&sealed), 0)
        .unwrap()
        .unwrap();
    let (g, b) = (good.digest.to_string(), bad.digest.to_string());

    // The volume, its versions, its stats and its pages read.
    for path in [
        format!("/api/v1/volumes/{REPO}"),
        format!("/api/v1/volumes/{REPO}/-/versions"),
        format!("/api/v1/volumes/{REPO}/-/stats"),
        format!("/api/v1/volumes/{REPO}/-/versions/{g}/entries"),
        format!("/api/v1/volumes/{REPO}/-/versions/{g}/diff/{g}"),
        format!("/ui/volumes/{REPO}"),
        format!("/ui/volumes/{REPO}/-/versions/{g}"),
    ] {
        let a = reg.get(&path).await;
        assert_eq!(a.status, StatusCode::OK, "{path}: {}", a.text());
    }
    let stats = reg
        .get(&format!("/api/v1/volumes/{REPO}/-/stats"))
        .await
        .json();
    assert_eq!(stats["versions"], 2, "{stats}");
    assert_eq!(stats["chunks"], 1, "the good version's chunk: {stats}");

    // The damaged one says so, by name, and alone.
    for path in [
        format!("/api/v1/volumes/{REPO}/-/versions/{b}/entries"),
        format!("/api/v1/volumes/{REPO}/-/versions/{g}/diff/{b}"),
    ] {
        let a = reg.get(&path).await;
        assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR, "{path}");
        let message = a.json()["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            message.contains(&b) && message.contains("damaged"),
            "{path}: {message}"
        );
    }
    let a = reg.get(&format!("/ui/volumes/{REPO}/-/versions/{b}")).await;
    assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        a.text().contains("damaged"),
        "the view's own page: {}",
        a.text()
    );
    assert!(a.text().contains("<html"), "{}", a.text());

    // Pushing the version again puts a readable index in its place.
    let a = (reg.put_manifest(
        &bad.index.digest().to_string(),
        INDEX_TYPE,
        &bad.index.bytes,
    ))
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text());
    let a = reg
        .get(&format!("/api/v1/volumes/{REPO}/-/versions/{b}/entries"))
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
}
