//! The volume lifecycle through the registry's own router, in process:
//! versions pushed as plain OCI content, the volume API, expiry on a
//! controlled clock, garbage collection, and a property test of random
//! interleavings that checks no blob of an alive or restorable version is
//! ever lost. (End-to-end tests with the real binary and the CLI live in
//! `tests/tests/lifecycle.rs`.)

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use proptest::prelude::*;
use sealvol_registry::server::open_app;
use sealvol_registry::state::app::{App, Lifetimes};
use sealvol_spec::api;
use sealvol_spec::oci::{build_version, build_version_with_blob, VersionMeta, MT_TREE_BLOB_V1};
use sealvol_spec::tree::{Entry, EntryData};
use sealvol_spec::{ChunkingParams, Sha256Digest, TreeFormat, TreeIndex};
use serde_json::{json, Value};
use tower::ServiceExt;

const REPO: &str = "ns/vol";
const DAY: i64 = 86_400;

struct Reg {
    app: Arc<App>,
    router: axum::Router,
    _dir: tempfile::TempDir,
}

/// A version ready to push: every blob and manifest it needs.
#[derive(Clone, Debug)]
struct Built {
    b3: String,
    index: String,
    index_bytes: Vec<u8>,
    /// Chunks and small blobs.
    blobs: Vec<(String, Vec<u8>)>,
    /// Tree, shard and view manifests: digest, media type, bytes.
    manifests: Vec<(String, String, Vec<u8>)>,
}

/// A version whose files are `contents` (each one chunk, since they are
/// smaller than the minimum chunk size).
fn build(contents: &[Vec<u8>]) -> Built {
    build_as(contents, "2026-12-02T00:00:00Z", TreeFormat::V2)
}

/// The format 1 encoding of `tree` (SPEC.md §2.6), as a release 1 client
/// wrote it: each chunk record with a BLAKE3 of the chunk, no chaining
/// values. Files here are of one chunk, whose BLAKE3 is the file's.
fn encode_v1(tree: &TreeIndex) -> Vec<u8> {
    sealvol_spec::tree::encode_entries(TreeFormat::V1, tree.params(), tree.entries(), &|e, _| {
        match &e.data {
            EntryData::File { blake3, chunks, .. } if chunks.len() == 1 => *blake3,
            _ => panic!("files of one chunk only"),
        }
    })
}

/// The version of `contents`, its index stamped `created` (another stamp
/// gives the same version other index bytes), its tree in `format`.
fn build_as(contents: &[Vec<u8>], created: &str, format: TreeFormat) -> Built {
    let entries = contents
        .iter()
        .enumerate()
        .map(|(i, data)| Entry {
            path: format!("f{i}"),
            mode: 0o644,
            data: EntryData::file_of(data, &[]),
        })
        .collect();
    let tree = TreeIndex::new(ChunkingParams::default(), entries).unwrap();
    let meta = VersionMeta {
        created: created.into(),
        source: None,
    };
    let v = match format {
        TreeFormat::V2 => build_version(&tree, &meta).unwrap(),
        TreeFormat::V1 => {
            let blob = encode_v1(&tree);
            let old = TreeIndex::decode(&blob).unwrap();
            assert_eq!(old.format(), TreeFormat::V1);
            assert_eq!(old.version_digest(), tree.version_digest());
            build_version_with_blob(&old, blob, MT_TREE_BLOB_V1, &meta).unwrap()
        }
    };
    let mut blobs: Vec<(String, Vec<u8>)> = contents
        .iter()
        .map(|c| (Sha256Digest::of(c).to_string(), c.clone()))
        .collect();
    blobs.extend(
        v.blobs
            .iter()
            .map(|b| (b.digest().to_string(), b.bytes.clone())),
    );
    Built {
        b3: v.digest.to_string(),
        index: v.index.digest().to_string(),
        index_bytes: v.index.bytes.clone(),
        blobs,
        manifests: v
            .manifests
            .iter()
            .map(|m| {
                (
                    m.digest().to_string(),
                    m.descriptor.media_type().to_string(),
                    m.bytes.clone(),
                )
            })
            .collect(),
    }
}

const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";

impl Reg {
    async fn new(policy: Lifetimes) -> Reg {
        let dir = tempfile::tempdir().unwrap();
        let app = Arc::new(open_app(dir.path(), policy).await.unwrap());
        let router = common::router_of(&app);
        Reg {
            app,
            router,
            _dir: dir,
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> (StatusCode, Vec<u8>) {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(c) = content_type {
            b = b.header("content-type", c);
        }
        let resp = self
            .router
            .clone()
            .oneshot(b.body(Body::from(body)).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, bytes.to_vec())
    }

    async fn api(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let body = body.map_or_else(Vec::new, |b| b.to_string().into_bytes());
        let (s, b) = self
            .call(
                method,
                &format!("/api/v1{path}"),
                Some("application/json"),
                body,
            )
            .await;
        (s, serde_json::from_slice(&b).unwrap_or(Value::Null))
    }

    /// Uploads the blobs and child manifests of a version: a push up to
    /// its last step.
    async fn upload(&self, b: &Built) -> StatusCode {
        match self.upload_blobs(b).await {
            StatusCode::CREATED => self.put_shards(b).await,
            s => s,
        }
    }

    /// The first step of a push: every blob.
    async fn upload_blobs(&self, b: &Built) -> StatusCode {
        for (d, bytes) in &b.blobs {
            let (s, _) = self
                .call(
                    Method::POST,
                    &format!("/v2/{REPO}/blobs/uploads/?digest={d}"),
                    None,
                    bytes.clone(),
                )
                .await;
            if s != StatusCode::CREATED {
                return s;
            }
        }
        StatusCode::CREATED
    }

    /// The second step: tree, shard and view manifests.
    async fn put_shards(&self, b: &Built) -> StatusCode {
        for (d, mt, bytes) in &b.manifests {
            let (s, _) = self
                .call(
                    Method::PUT,
                    &format!("/v2/{REPO}/manifests/{d}"),
                    Some(mt),
                    bytes.clone(),
                )
                .await;
            if s != StatusCode::CREATED {
                return s;
            }
        }
        StatusCode::CREATED
    }

    /// The last step of a push: the index, by digest.
    async fn seal(&self, b: &Built) -> StatusCode {
        self.call(
            Method::PUT,
            &format!("/v2/{REPO}/manifests/{}", b.index),
            Some(INDEX_TYPE),
            b.index_bytes.clone(),
        )
        .await
        .0
    }

    async fn push(&self, b: &Built) {
        assert_eq!(self.upload(b).await, StatusCode::CREATED);
        assert_eq!(self.seal(b).await, StatusCode::CREATED);
    }

    /// The volume's versions; none before its first seal.
    async fn versions(&self, all: bool) -> Vec<Value> {
        let q = if all { "?include_tombstoned=true" } else { "" };
        let (s, v) = self
            .api(Method::GET, &format!("/volumes/{REPO}/-/versions{q}"), None)
            .await;
        if s == StatusCode::NOT_FOUND && v["errors"][0]["code"] == "VOLUME_UNKNOWN" {
            return Vec::new();
        }
        assert_eq!(s, StatusCode::OK, "{v}");
        // What the client reads (SPEC.md §7.3).
        serde_json::from_value::<api::VersionList>(v.clone()).unwrap();
        v["versions"].as_array().unwrap().clone()
    }

    /// The volume record, checked to be what the client reads.
    async fn volume(&self) -> api::Volume {
        let (s, v) = self
            .api(Method::GET, &format!("/volumes/{REPO}"), None)
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"))
    }

    async fn manifest_status(&self, reference: &str) -> StatusCode {
        self.call(
            Method::GET,
            &format!("/v2/{REPO}/manifests/{reference}"),
            None,
            vec![],
        )
        .await
        .0
    }

    async fn gc(&self, dry_run: bool) -> Value {
        let q = if dry_run { "?dry_run=true" } else { "" };
        let (s, v) = self.api(Method::POST, &format!("/gc{q}"), None).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        serde_json::from_value::<api::GcReport>(v.clone()).unwrap();
        v
    }

    /// Whether every blob and manifest of `b` is still stored and visible
    /// in the repository (the index itself may be hidden by a delete).
    async fn intact(&self, b: &Built) -> Result<(), String> {
        for (d, _) in &b.blobs {
            let digest: Sha256Digest = d.parse().unwrap();
            if self.app.blobs.size(&digest).await.unwrap().is_none() {
                return Err(format!("blob {d} is gone"));
            }
            let (repo, dd) = (REPO.to_string(), d.clone());
            let m = Arc::clone(&self.app.meta);
            if m.blob_size(&repo, &dd).unwrap().is_none() {
                return Err(format!("blob {d} is no longer linked"));
            }
        }
        for (d, _, _) in b
            .manifests
            .iter()
            .chain([(b.index.clone(), String::new(), vec![])].iter())
        {
            let digest: Sha256Digest = d.parse().unwrap();
            if self.app.blobs.size(&digest).await.unwrap().is_none() {
                return Err(format!("manifest bytes {d} are gone"));
            }
        }
        for (d, _, _) in &b.manifests {
            if self.app.meta.manifest(REPO, d).unwrap().is_none() {
                return Err(format!("manifest {d} is no longer recorded"));
            }
        }
        Ok(())
    }
}

fn policy() -> Lifetimes {
    Lifetimes {
        retention_seconds: 7 * DAY as u64,
        gc_grace_seconds: 3600,
        claim_ttl_seconds: 60,
        ..Lifetimes::default()
    }
}

fn find<'a>(versions: &'a [Value], b3: &str) -> &'a Value {
    versions
        .iter()
        .find(|v| v["digest"] == b3)
        .unwrap_or_else(|| panic!("{b3} not listed in {versions:?}"))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn delete_restore_expiry_and_reclaim() {
    rt().block_on(async {
        let reg = Reg::new(policy()).await;
        let v1 = build(&[b"shared".to_vec(), b"only in v1".to_vec()]);
        let v2 = build(&[b"shared".to_vec(), b"only in v2".to_vec()]);
        reg.push(&v1).await;
        reg.push(&v2).await;

        // Both sealed, newest first; head is the last sealed, and the
        // registry set the digest tags itself.
        let vs = reg.versions(false).await;
        assert_eq!(vs.len(), 2);
        assert_eq!(vs[0]["digest"], v2.b3);
        assert_eq!(vs[0]["is_head"], true);
        assert_eq!(vs[1]["is_head"], false);
        assert!(vs[0]["sequence"].as_u64() > vs[1]["sequence"].as_u64());
        let b3tag = |b: &Built| format!("b3-{}", &b.b3[3..]);
        assert_eq!(reg.manifest_status(&b3tag(&v1)).await, StatusCode::OK);
        let head = reg
            .call(
                Method::GET,
                &format!("/v2/{REPO}/manifests/head"),
                None,
                vec![],
            )
            .await;
        assert_eq!(head.1, v2.index_bytes);

        // Tags, one with an expiry; reserved tags are refused.
        let (s, t) = reg
            .api(
                Method::PUT,
                &format!("/volumes/{REPO}/-/tags/prod"),
                Some(json!({"digest": v1.b3, "expires_at": "2100-01-01T00:00:00Z"})),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{t}");
        assert_eq!(t["expires_at"], "2100-01-01T00:00:00Z");
        let (s, _) = reg
            .api(
                Method::PUT,
                &format!("/volumes/{REPO}/-/tags/dev"),
                Some(json!({"digest": v2.index})),
            )
            .await;
        assert_eq!(s, StatusCode::OK);
        let (s, e) = reg
            .api(
                Method::PUT,
                &format!("/volumes/{REPO}/-/tags/head"),
                Some(json!({"digest": v1.b3})),
            )
            .await;
        assert_eq!(
            (s, e["errors"][0]["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("TAG_RESERVED"))
        );
        let (_, vol) = reg
            .api(Method::GET, &format!("/volumes/{REPO}"), None)
            .await;
        assert_eq!(vol["alive"], 2);
        assert_eq!(vol["untagged"], 0);
        assert_eq!(vol["head"]["digest"], v2.b3);
        assert_eq!(vol["tags"].as_array().unwrap().len(), 2);

        // Delete v2: out of the OCI view, its tags gone, head back on v1.
        let (s, d) = reg
            .api(
                Method::DELETE,
                &format!("/volumes/{REPO}/-/versions/{}", v2.b3),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{d}");
        assert_eq!(d["lifecycle"], "TOMBSTONED");
        assert_eq!(reg.manifest_status(&v2.index).await, StatusCode::NOT_FOUND);
        assert_eq!(reg.manifest_status("dev").await, StatusCode::NOT_FOUND);
        assert_eq!(
            reg.manifest_status(&b3tag(&v2)).await,
            StatusCode::NOT_FOUND
        );
        let vs = reg.versions(false).await;
        assert_eq!(vs.len(), 1);
        assert_eq!(vs[0]["is_head"], true);
        assert_eq!(reg.versions(true).await.len(), 2);

        // A pass three days later keeps everything v2 needs.
        reg.app.clock.advance(3 * DAY);
        let report = reg.gc(false).await;
        assert_eq!(report["versions_purged"], 0);
        reg.intact(&v2).await.unwrap();

        // Restore: back in the OCI view and head again (newest), without
        // its tags.
        let (s, r) = reg
            .api(
                Method::POST,
                &format!("/volumes/{REPO}/-/versions/{}/restore", v2.b3),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!(r["lifecycle"], "ALIVE");
        assert_eq!(r["is_head"], true);
        assert_eq!(r["tags"], json!([]));
        assert_eq!(reg.manifest_status(&v2.index).await, StatusCode::OK);
        assert_eq!(reg.manifest_status(&b3tag(&v2)).await, StatusCode::OK);
        assert_eq!(reg.manifest_status("dev").await, StatusCode::NOT_FOUND);
        let (s, e) = reg
            .api(
                Method::POST,
                &format!("/volumes/{REPO}/-/versions/{}/restore", v2.b3),
                None,
            )
            .await;
        assert_eq!(
            (s, e["errors"][0]["code"].as_str()),
            (StatusCode::CONFLICT, Some("NOT_DELETED"))
        );

        // A tag that expires goes at the next pass after its time.
        let soon = sealvol_registry::clock::rfc3339(reg.app.now() + 3600);
        reg.api(
            Method::PUT,
            &format!("/volumes/{REPO}/-/tags/canary"),
            Some(json!({"digest": v2.b3, "expires_at": soon})),
        )
        .await;
        assert_eq!(reg.gc(false).await["tags_expired"], 0);
        reg.app.clock.advance(2 * 3600);
        assert_eq!(reg.gc(false).await["tags_expired"], 1);
        assert_eq!(reg.manifest_status("canary").await, StatusCode::NOT_FOUND);

        // Delete v2 again and let the retention pass: restore is refused,
        // and garbage collection reclaims what only v2 used.
        reg.api(
            Method::DELETE,
            &format!("/volumes/{REPO}/-/versions/{}", v2.b3),
            None,
        )
        .await;
        reg.app.clock.advance(8 * DAY);
        let (s, e) = reg
            .api(
                Method::POST,
                &format!("/volumes/{REPO}/-/versions/{}/restore", v2.b3),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::GONE, "{e}");
        assert_eq!(e["errors"][0]["code"], "RETENTION_EXPIRED");
        let dry = reg.gc(true).await;
        let report = reg.gc(false).await;
        assert_eq!(report["versions_purged"], 1, "{report}");
        for k in [
            "versions_purged",
            "manifests_deleted",
            "blobs_deleted",
            "bytes_reclaimed",
        ] {
            assert_eq!(
                dry[k], report[k],
                "dry run and real pass differ on {k}: {dry} {report}"
            );
        }
        assert!(report["bytes_reclaimed"].as_u64().unwrap() > 0);
        let only_v2 = Sha256Digest::of(b"only in v2");
        let shared = Sha256Digest::of(b"shared");
        assert_eq!(reg.app.blobs.size(&only_v2).await.unwrap(), None);
        assert!(reg.app.blobs.size(&shared).await.unwrap().is_some());
        reg.intact(&v1).await.unwrap();
        let (s, e) = reg
            .api(
                Method::POST,
                &format!("/volumes/{REPO}/-/versions/{}/restore", v2.b3),
                None,
            )
            .await;
        assert_eq!(
            (s, e["errors"][0]["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("VERSION_UNKNOWN"))
        );
        // A second pass finds nothing more.
        let again = reg.gc(false).await;
        assert_eq!(again["blobs_deleted"], 0, "{again}");

        // Volume expiry deletes every version (restorable).
        let at = sealvol_registry::clock::rfc3339(reg.app.now() + 60);
        let (s, vol) = reg
            .api(
                Method::PATCH,
                &format!("/volumes/{REPO}"),
                Some(json!({"expires_at": at})),
            )
            .await;
        assert_eq!((s, &vol["expires_at"]), (StatusCode::OK, &json!(at)));
        reg.app.clock.advance(120);
        assert_eq!(reg.gc(false).await["volumes_expired"], 1);
        let (_, vol) = reg
            .api(Method::GET, &format!("/volumes/{REPO}"), None)
            .await;
        assert_eq!(
            (vol["alive"].as_u64(), vol["tombstoned"].as_u64()),
            (Some(0), Some(1))
        );
        assert_eq!(vol["head"], Value::Null);
        assert_eq!(vol["expires_at"], Value::Null);
        reg.intact(&v1).await.unwrap();
    });
}

#[test]
fn oci_clients_see_one_truth() {
    rt().block_on(async {
        let reg = Reg::new(policy()).await;
        let v1 = build(&[b"a".to_vec()]);
        let v2 = build(&[b"b".to_vec()]);
        reg.push(&v1).await;
        // A plain client pushes v2 under a tag: that seals it too.
        assert_eq!(reg.upload(&v2).await, StatusCode::CREATED);
        let (s, _) = reg
            .call(
                Method::PUT,
                &format!("/v2/{REPO}/manifests/latest"),
                Some(INDEX_TYPE),
                v2.index_bytes.clone(),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED);
        let vs = reg.versions(false).await;
        assert_eq!(vs[0]["digest"], v2.b3);
        assert_eq!(vs[0]["tags"], json!(["latest"]));
        assert_eq!(vs[0]["is_head"], true);
        // Storing v1's index again is no seal: head stays.
        assert_eq!(reg.seal(&v1).await, StatusCode::CREATED);
        assert_eq!(find(&reg.versions(false).await, &v2.b3)["is_head"], true);

        // An OCI DELETE of the index tombstones the version.
        let (s, _) = reg
            .call(
                Method::DELETE,
                &format!("/v2/{REPO}/manifests/{}", v2.index),
                None,
                vec![],
            )
            .await;
        assert_eq!(s, StatusCode::ACCEPTED);
        let all = reg.versions(true).await;
        assert_eq!(find(&all, &v2.b3)["lifecycle"], "TOMBSTONED");
        assert_eq!(find(&all, &v1.b3)["is_head"], true);
        // Pushing it again brings it back as a new seal.
        reg.push(&v2).await;
        let vs = reg.versions(false).await;
        assert_eq!((vs.len(), &vs[0]["digest"]), (2, &json!(v2.b3)));
        assert_eq!(vs[0]["is_head"], true);

        let (s, ns) = reg.api(Method::GET, "/namespaces", None).await;
        assert_eq!((s, ns), (StatusCode::OK, json!({"namespaces": ["ns"]})));
        let (_, vols) = reg.api(Method::GET, "/volumes?namespace=ns", None).await;
        assert_eq!(vols["volumes"][0]["name"], REPO);
        let (s, e) = reg.api(Method::GET, "/volumes/ns/none", None).await;
        assert_eq!(
            (s, e["errors"][0]["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("VOLUME_UNKNOWN"))
        );
    });
}

#[test]
fn push_claims_exclude_each_other_and_lapse() {
    rt().block_on(async {
        let reg = Reg::new(policy()).await;
        let path = format!("/volumes/{REPO}/-/claim");
        let (s, a) = reg
            .api(Method::POST, &path, Some(json!({"holder": "a"})))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{a}");
        let (s, e) = reg
            .api(Method::POST, &path, Some(json!({"holder": "b"})))
            .await;
        assert_eq!(s, StatusCode::CONFLICT);
        assert_eq!(e["errors"][0]["code"], "PUSH_IN_PROGRESS");
        let token = a["token"].as_str().unwrap();
        let (s, _) = reg.api(Method::PUT, &format!("{path}/{token}"), None).await;
        assert_eq!(s, StatusCode::OK);
        // A holder that stops renewing loses the claim after its time.
        reg.app.clock.advance(61);
        let (s, _) = reg.api(Method::PUT, &format!("{path}/{token}"), None).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        let (s, b) = reg
            .api(Method::POST, &path, Some(json!({"holder": "b"})))
            .await;
        assert_eq!(s, StatusCode::CREATED);
        let (s, _) = reg
            .api(
                Method::DELETE,
                &format!("{path}/{}", b["token"].as_str().unwrap()),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::NO_CONTENT);
        let (s, _) = reg
            .api(Method::POST, &path, Some(json!({"holder": "c"})))
            .await;
        assert_eq!(s, StatusCode::CREATED);
    });
}

#[test]
fn a_push_within_the_grace_period_survives_collection() {
    rt().block_on(async {
        let reg = Reg::new(policy()).await;
        let v1 = build(&[b"x".to_vec(), b"y".to_vec()]);
        // Chunks are up, nothing references them yet: a pass half an hour
        // later keeps them; then the shards are up and the index is not,
        // and another pass keeps those.
        assert_eq!(reg.upload_blobs(&v1).await, StatusCode::CREATED);
        reg.app.clock.advance(1800);
        let report = reg.gc(false).await;
        assert_eq!(report["blobs_deleted"], 0, "{report}");
        assert_eq!(reg.put_shards(&v1).await, StatusCode::CREATED);
        reg.app.clock.advance(1800);
        let report = reg.gc(false).await;
        assert_eq!(report["manifests_deleted"], 0, "{report}");
        assert_eq!(reg.seal(&v1).await, StatusCode::CREATED);
        reg.intact(&v1).await.unwrap();
        // A push abandoned for longer than the grace period is reclaimed.
        let v2 = build(&[b"abandoned".to_vec()]);
        assert_eq!(reg.upload(&v2).await, StatusCode::CREATED);
        reg.app.clock.advance(2 * 3600);
        let report = reg.gc(false).await;
        assert!(report["blobs_deleted"].as_u64().unwrap() >= 1, "{report}");
        assert_eq!(
            reg.app
                .blobs
                .size(&Sha256Digest::of(b"abandoned"))
                .await
                .unwrap(),
            None
        );
        reg.intact(&v1).await.unwrap();
        // Re-checking a blob with HEAD renews its grace.
        let v3 = build(&[b"x".to_vec(), b"z".to_vec()]);
        assert_eq!(reg.upload_blobs(&v3).await, StatusCode::CREATED);
        reg.app.clock.advance(2 * 3600);
        for (d, _) in &v3.blobs {
            let (s, _) = reg
                .call(Method::HEAD, &format!("/v2/{REPO}/blobs/{d}"), None, vec![])
                .await;
            assert_eq!(s, StatusCode::OK);
        }
        // The pass comes between the check and the manifests that use it.
        reg.gc(false).await;
        assert_eq!(reg.put_shards(&v3).await, StatusCode::CREATED);
        assert_eq!(reg.seal(&v3).await, StatusCode::CREATED);
        reg.intact(&v3).await.unwrap();
    });
}

/// One step of the property test.
#[derive(Clone, Debug)]
enum Op {
    /// Upload version `n`'s blobs (a push's first step).
    Upload(usize),
    /// Store its tree, shard and view manifests (the second).
    Shards(usize),
    /// Store version `n`'s index (the end of a push).
    Seal(usize),
    Tag(usize, &'static str),
    Rm(usize),
    Restore(usize),
    Gc,
    /// Move the clock by this many seconds.
    Wait(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..5usize).prop_map(Op::Upload),
        3 => (0..5usize).prop_map(Op::Shards),
        3 => (0..5usize).prop_map(Op::Seal),
        1 => (0..5usize, prop_oneof![Just("prod"), Just("dev")]).prop_map(|(n, t)| Op::Tag(n, t)),
        2 => (0..5usize).prop_map(Op::Rm),
        2 => (0..5usize).prop_map(Op::Restore),
        3 => Just(Op::Gc),
        2 => prop_oneof![Just(600i64), Just(2 * 3600), Just(3 * DAY), Just(8 * DAY)].prop_map(Op::Wait),
    ]
}

/// Five versions over a pool of six chunks, so they share some.
fn catalog() -> Vec<Built> {
    let chunk = |i: usize| format!("chunk number {i}").into_bytes();
    (0..5)
        .map(|n| build(&[chunk(n), chunk(n + 1), chunk(5 - n % 2)]))
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Alive,
    /// Deleted at this registry time.
    Deleted(u64),
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::Direct(
            "tests/lifecycle.proptest-regressions",
        ))),
        ..ProptestConfig::default()
    })]

    /// Whatever the order of pushes, tags, deletes, restores, passes and
    /// waits: every version the registry calls alive or restorable keeps
    /// every blob and manifest it needs, `head` is the alive version sealed
    /// last, a restore within retention succeeds, and a push whose uploads
    /// are younger than the grace period can be sealed.
    #[test]
    fn no_alive_or_restorable_version_loses_a_blob(ops in proptest::collection::vec(op(), 1..30)) {
        let versions = catalog();
        rt().block_on(async {
            let reg = Reg::new(policy()).await;
            let retention = policy().retention_seconds;
            let grace = policy().gc_grace_seconds;
            let mut state: BTreeMap<usize, State> = BTreeMap::new();
            let mut sealed_order: Vec<usize> = Vec::new();
            // When each version's blobs and shards were last stored
            // (registry time).
            let mut uploaded: BTreeMap<usize, u64> = BTreeMap::new();
            let mut sharded: BTreeMap<usize, u64> = BTreeMap::new();
            for op in &ops {
                let now = reg.app.now();
                match op {
                    Op::Upload(n) => {
                        assert_eq!(reg.upload_blobs(&versions[*n]).await, StatusCode::CREATED);
                        uploaded.insert(*n, now);
                    }
                    Op::Shards(n) => {
                        // Blobs uploaded within the grace period are there.
                        let fresh = uploaded.get(n).is_some_and(|t| t + grace > now + 1);
                        let s = reg.put_shards(&versions[*n]).await;
                        if fresh {
                            assert_eq!(s, StatusCode::CREATED, "shards of {n} after {ops:?}");
                        }
                        if s == StatusCode::CREATED {
                            sharded.insert(*n, now);
                        }
                    }
                    Op::Seal(n) => {
                        let fresh = sharded.get(n).is_some_and(|t| t + grace > now + 1);
                        let s = reg.seal(&versions[*n]).await;
                        if fresh || state.get(n) == Some(&State::Alive) {
                            assert_eq!(s, StatusCode::CREATED, "sealing {n} after {ops:?}");
                        }
                        if s == StatusCode::CREATED {
                            if state.get(n) != Some(&State::Alive) {
                                sealed_order.retain(|v| v != n);
                                sealed_order.push(*n);
                            }
                            state.insert(*n, State::Alive);
                        }
                    }
                    Op::Tag(n, t) => {
                        let (s, _) = reg
                            .api(Method::PUT, &format!("/volumes/{REPO}/-/tags/{t}"),
                                 Some(json!({"digest": versions[*n].b3})))
                            .await;
                        let alive = state.get(n) == Some(&State::Alive);
                        assert_eq!(s.is_success(), alive, "tagging {n}: {s}");
                    }
                    Op::Rm(n) => {
                        let (s, _) = reg
                            .api(Method::DELETE, &format!("/volumes/{REPO}/-/versions/{}", versions[*n].b3), None)
                            .await;
                        let alive = state.get(n) == Some(&State::Alive);
                        assert_eq!(s.is_success(), alive, "deleting {n}: {s}");
                        if alive {
                            state.insert(*n, State::Deleted(now));
                        }
                    }
                    Op::Restore(n) => {
                        let (s, e) = reg
                            .api(Method::POST, &format!("/volumes/{REPO}/-/versions/{}/restore", versions[*n].b3), None)
                            .await;
                        match state.get(n) {
                            Some(State::Deleted(at)) if at + retention > now => {
                                assert_eq!(s, StatusCode::OK, "restoring {n}: {e}");
                                state.insert(*n, State::Alive);
                            }
                            _ => assert!(!s.is_success(), "restored {n} unexpectedly: {e}"),
                        }
                    }
                    Op::Gc => {
                        reg.gc(false).await;
                    }
                    Op::Wait(secs) => reg.app.clock.advance(*secs),
                }
                // The invariant, after every step.
                let now = reg.app.now();
                for (n, s) in &state {
                    let keep = match s {
                        State::Alive => true,
                        State::Deleted(at) => at + retention > now,
                    };
                    if keep {
                        if let Err(e) = reg.intact(&versions[*n]).await {
                            panic!("version {n} ({s:?}) lost data: {e} after {op:?} in {ops:?}");
                        }
                    }
                }
                let listed = reg.versions(true).await;
                let alive_listed: HashSet<String> = listed
                    .iter()
                    .filter(|v| v["lifecycle"] == "ALIVE")
                    .map(|v| v["digest"].as_str().unwrap().to_string())
                    .collect();
                let alive_model: HashSet<String> = state
                    .iter()
                    .filter(|(_, s)| **s == State::Alive)
                    .map(|(n, _)| versions[*n].b3.clone())
                    .collect();
                assert_eq!(alive_listed, alive_model, "after {op:?}");
                let head = sealed_order
                    .iter()
                    .rev()
                    .find(|n| state.get(n) == Some(&State::Alive));
                let listed_head: Vec<&str> = listed
                    .iter()
                    .filter(|v| v["is_head"] == true)
                    .map(|v| v["digest"].as_str().unwrap())
                    .collect();
                assert_eq!(
                    listed_head,
                    head.map(|n| versions[*n].b3.as_str()).into_iter().collect::<Vec<_>>(),
                    "head after {op:?} in {ops:?}"
                );
            }
        });
    }
}

impl Reg {
    /// The index digest `reference` (a tag) names in the OCI view.
    async fn tag_target(&self, tag: &str) -> Option<String> {
        let (s, body) = self
            .call(
                Method::GET,
                &format!("/v2/{REPO}/manifests/{tag}"),
                None,
                vec![],
            )
            .await;
        (s == StatusCode::OK).then(|| Sha256Digest::of(&body).to_string())
    }

    async fn volume_sequence(&self) -> u64 {
        let (s, v) = self
            .api(Method::GET, &format!("/volumes/{REPO}"), None)
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v["sequence"].as_u64().unwrap()
    }

    /// Stores `b`'s index under a tag, as `oras`/`crane` push by tag.
    async fn seal_as(&self, b: &Built, tag: &str) -> StatusCode {
        self.call(
            Method::PUT,
            &format!("/v2/{REPO}/manifests/{tag}"),
            Some(INDEX_TYPE),
            b.index_bytes.clone(),
        )
        .await
        .0
    }
}

fn b3tag(b: &Built) -> String {
    format!("b3-{}", &b.b3[3..])
}

/// SPEC.md §7.1: another index of an alive version (a client re-publishing
/// it with a format 2 tree, a copy with other index bytes) is the version's
/// current index from then on, under all its tags, but not a new seal.
#[test]
fn a_new_index_of_an_alive_version_is_a_republication() {
    rt().block_on(async {
        let reg = Reg::new(policy()).await;
        let files = [b"kept".to_vec(), b"weights".to_vec()];
        let a_v1 = build_as(&files, "2026-12-02T00:00:00Z", TreeFormat::V1);
        let b = build(&[b"newer".to_vec()]);
        reg.push(&a_v1).await;
        reg.app.clock.advance(60);
        reg.push(&b).await;
        let (s, t) = reg
            .api(
                Method::PUT,
                &format!("/volumes/{REPO}/-/tags/prod"),
                Some(json!({"digest": a_v1.b3})),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{t}");
        let before = find(&reg.versions(false).await, &a_v1.b3).clone();
        let seq = reg.volume_sequence().await;
        assert_eq!(reg.tag_target("prod").await, Some(a_v1.index.clone()));

        // The same version, re-published with a format 2 tree, later.
        reg.app.clock.advance(3600);
        let a_v2 = build_as(&files, "2026-12-03T00:00:00Z", TreeFormat::V2);
        assert_eq!(a_v2.b3, a_v1.b3);
        assert_ne!(a_v2.index, a_v1.index);
        reg.push(&a_v2).await;
        let after = find(&reg.versions(false).await, &a_v1.b3).clone();
        assert_eq!(after["index_digest"], a_v2.index);
        assert_eq!(after["sequence"], before["sequence"]);
        assert_eq!(after["created_at"], before["created_at"]);
        assert_eq!(after["is_head"], false);
        assert_eq!(after["tags"], json!(["prod"]));
        assert_eq!(reg.volume_sequence().await, seq);
        assert_eq!(reg.tag_target("prod").await, Some(a_v2.index.clone()));
        assert_eq!(
            reg.tag_target(&b3tag(&a_v1)).await,
            Some(a_v2.index.clone())
        );
        assert_eq!(reg.tag_target("head").await, Some(b.index.clone()));
        // The old index stays, by digest and through collection.
        assert_eq!(reg.manifest_status(&a_v1.index).await, StatusCode::OK);
        reg.app.clock.advance(2 * 3600);
        reg.gc(false).await;
        reg.intact(&a_v1).await.unwrap();
        reg.intact(&a_v2).await.unwrap();

        // Re-publishing the head version moves head with it, and nothing
        // else changes; storing the current index again changes nothing.
        let b2 = build_as(&[b"newer".to_vec()], "2027-01-01T00:00:00Z", TreeFormat::V2);
        reg.push(&b2).await;
        reg.push(&b2).await;
        assert_eq!(reg.tag_target("head").await, Some(b2.index.clone()));
        assert_eq!(reg.tag_target(&b3tag(&b)).await, Some(b2.index.clone()));
        let vs = reg.versions(false).await;
        assert_eq!(vs[0]["digest"], b.b3);
        assert_eq!(vs[0]["is_head"], true);
        assert_eq!(reg.volume_sequence().await, seq);

        // A delete through any of a version's indexes hides them all.
        let (s, _) = reg
            .call(
                Method::DELETE,
                &format!("/v2/{REPO}/manifests/{}", a_v1.index),
                None,
                vec![],
            )
            .await;
        assert_eq!(s, StatusCode::ACCEPTED);
        assert_eq!(
            reg.manifest_status(&a_v2.index).await,
            StatusCode::NOT_FOUND
        );
        assert_eq!(reg.tag_target("prod").await, None);
    });
}

/// An index with a format 1 tree never replaces one with a format 2 tree:
/// it is stored, but every tag stays on (or goes to) the format 2 index.
#[test]
fn a_format_1_index_does_not_downgrade_a_format_2_one() {
    rt().block_on(async {
        let reg = Reg::new(policy()).await;
        let files = [b"model".to_vec()];
        let v2 = build_as(&files, "2026-12-02T00:00:00Z", TreeFormat::V2);
        let v1 = build_as(&files, "2026-12-01T00:00:00Z", TreeFormat::V1);
        reg.push(&v2).await;
        let before = find(&reg.versions(false).await, &v2.b3).clone();
        let seq = reg.volume_sequence().await;

        assert_eq!(reg.upload(&v1).await, StatusCode::CREATED);
        assert_eq!(reg.seal(&v1).await, StatusCode::CREATED);
        // Pushed by tag: the tag names the version, at its format 2 index.
        assert_eq!(reg.seal_as(&v1, "legacy").await, StatusCode::CREATED);
        let after = find(&reg.versions(false).await, &v2.b3).clone();
        assert_eq!(after["index_digest"], v2.index);
        assert_eq!(after["sequence"], before["sequence"]);
        assert_eq!(after["is_head"], true);
        assert_eq!(reg.tag_target("head").await, Some(v2.index.clone()));
        assert_eq!(reg.tag_target(&b3tag(&v2)).await, Some(v2.index.clone()));
        assert_eq!(reg.tag_target("legacy").await, Some(v2.index.clone()));
        // Only the user tag counted as a change.
        assert_eq!(reg.volume_sequence().await, seq + 1);
        assert_eq!(reg.manifest_status(&v1.index).await, StatusCode::OK);

        // Deleted and pushed again as format 1: a new seal, still on the
        // format 2 index, which comes back with it.
        let (s, _) = reg
            .api(
                Method::DELETE,
                &format!("/volumes/{REPO}/-/versions/{}", v2.b3),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(reg.seal(&v1).await, StatusCode::CREATED);
        let back = find(&reg.versions(false).await, &v2.b3).clone();
        assert_eq!(back["index_digest"], v2.index);
        assert!(back["sequence"].as_u64() > before["sequence"].as_u64());
        assert_eq!(reg.tag_target("head").await, Some(v2.index.clone()));
        assert_eq!(reg.manifest_status(&v2.index).await, StatusCode::OK);
    });
}

/// SPEC.md §7.1: "Pushing the same version again also brings it back, as
/// a new seal", whatever its index bytes.
#[test]
fn a_deleted_version_pushed_again_is_a_new_seal() {
    rt().block_on(async {
        let reg = Reg::new(policy()).await;
        let a = build(&[b"first".to_vec()]);
        let b = build(&[b"second".to_vec()]);
        reg.push(&a).await;
        reg.push(&b).await;
        let first = find(&reg.versions(false).await, &a.b3).clone();
        let (s, _) = reg
            .api(
                Method::DELETE,
                &format!("/volumes/{REPO}/-/versions/{}", a.b3),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::OK);
        let seq = reg.volume_sequence().await;

        reg.app.clock.advance(60);
        let a2 = build_as(&[b"first".to_vec()], "2027-02-02T00:00:00Z", TreeFormat::V2);
        assert_eq!(a2.b3, a.b3);
        reg.push(&a2).await;
        let vs = reg.versions(false).await;
        assert_eq!(vs[0]["digest"], a.b3);
        assert_eq!(vs[0]["lifecycle"], "ALIVE");
        assert_eq!(vs[0]["is_head"], true);
        assert_eq!(vs[0]["index_digest"], a2.index);
        assert!(vs[0]["sequence"].as_u64() > find(&vs, &b.b3)["sequence"].as_u64());
        assert_eq!(vs[0]["created_at"], first["created_at"]);
        assert!(reg.volume_sequence().await > seq);
        assert_eq!(reg.tag_target("head").await, Some(a2.index.clone()));
        assert_eq!(reg.tag_target(&b3tag(&a)).await, Some(a2.index.clone()));
        // Its first index is back in the OCI view too.
        assert_eq!(reg.manifest_status(&a.index).await, StatusCode::OK);
    });
}

/// SPEC.md §7.3: a plain OCI client may tag a manifest that is not a
/// version, `head` even; the volume's record leaves such a tag out (and
/// shows no head while `head` names one), so every `Tag` and `head` names
/// a version. The OCI view keeps the tag.
#[test]
fn tags_on_manifests_that_are_not_versions_are_not_the_volumes() {
    rt().block_on(async {
        let reg = Reg::new(policy()).await;
        let v1 = build(&[b"a".to_vec()]);
        reg.push(&v1).await;
        let (s, _) = reg
            .api(
                Method::PUT,
                &format!("/volumes/{REPO}/-/tags/prod"),
                Some(json!({"digest": v1.b3})),
            )
            .await;
        assert_eq!(s, StatusCode::OK);
        // The tree manifest: OCI content of the volume, not a version.
        let (_, media_type, bytes) = v1.manifests[0].clone();
        for tag in ["extra", "head"] {
            let (s, _) = reg
                .call(
                    Method::PUT,
                    &format!("/v2/{REPO}/manifests/{tag}"),
                    Some(&media_type),
                    bytes.clone(),
                )
                .await;
            assert_eq!(s, StatusCode::CREATED, "{tag}");
            let vol = reg.volume().await;
            let tags: Vec<&str> = vol.tags.iter().map(|t| t.tag.as_str()).collect();
            assert_eq!(tags, ["prod"], "{tag}");
            assert_eq!(vol.tags[0].digest.to_string(), v1.b3);
            assert_eq!(vol.tags[0].index_digest.to_string(), v1.index);
            if tag == "extra" {
                let head = vol.head.expect("head still names v1");
                assert_eq!(head.digest.to_string(), v1.b3);
            } else {
                assert_eq!(vol.head, None);
                assert_eq!(reg.versions(false).await[0]["is_head"], false);
            }
        }
        let (s, listed) = reg
            .call(Method::GET, &format!("/v2/{REPO}/tags/list"), None, vec![])
            .await;
        assert_eq!(s, StatusCode::OK);
        let listed: Value = serde_json::from_slice(&listed).unwrap();
        assert!(
            listed["tags"].as_array().unwrap().contains(&json!("extra")),
            "{listed}"
        );
    });
}

/// The volume API's router answers paths it lacks with 404 and methods a
/// path does not take with 405, both `UNSUPPORTED` (SPEC.md §7.2), and
/// refuses a malformed name, digest or tag in a path before any handler
/// runs.
#[test]
fn unknown_paths_methods_and_malformed_path_values_are_clear_errors() {
    rt().block_on(async {
        let reg = Reg::new(policy()).await;
        let code = |v: &Value| v["errors"][0]["code"].as_str().unwrap_or("").to_string();
        let cases: [(Method, String, StatusCode, &str); 8] = [
            (
                Method::GET,
                "/nonsense".into(),
                StatusCode::NOT_FOUND,
                "UNSUPPORTED",
            ),
            (
                Method::GET,
                "/volumes/w/a/-/nonsense".into(),
                StatusCode::NOT_FOUND,
                "UNSUPPORTED",
            ),
            (
                Method::GET,
                "/gc".into(),
                StatusCode::METHOD_NOT_ALLOWED,
                "UNSUPPORTED",
            ),
            (
                Method::POST,
                "/volumes/w/a".into(),
                StatusCode::METHOD_NOT_ALLOWED,
                "UNSUPPORTED",
            ),
            (
                Method::GET,
                "/volumes/onlyone".into(),
                StatusCode::BAD_REQUEST,
                "NAME_INVALID",
            ),
            (
                Method::GET,
                "/volumes/w/a/-/versions/b3:00".into(),
                StatusCode::BAD_REQUEST,
                "INVALID",
            ),
            (
                Method::DELETE,
                "/volumes/w/a/-/tags/bad%20tag".into(),
                StatusCode::BAD_REQUEST,
                "INVALID",
            ),
            (
                Method::GET,
                format!("/volumes/w/a/-/versions/b3:{}", "0".repeat(64)),
                StatusCode::NOT_FOUND,
                "VOLUME_UNKNOWN",
            ),
        ];
        for (method, path, status, want) in cases {
            let (s, v) = reg.api(method.clone(), &path, None).await;
            assert_eq!(
                (s, code(&v).as_str()),
                (status, want),
                "{method} {path}: {v}"
            );
        }
    });
}

impl Reg {
    /// `GET /api/v1{path}`: status, body and the `Link` to the next page.
    async fn get_page(&self, path: &str) -> (StatusCode, Value, Option<String>) {
        let req = Request::builder()
            .uri(format!("/api/v1{path}"))
            .body(Body::empty())
            .unwrap();
        let resp = self.router.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let link = resp
            .headers()
            .get("link")
            .map(|l| l.to_str().unwrap().to_string());
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            link,
        )
    }

    async fn get_ok<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        let (s, v, _) = self.get_page(path).await;
        assert_eq!(s, StatusCode::OK, "{path}: {v}");
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{path}: {e}: {v}"))
    }
}

/// The path and query of a `Link: <…>; rel="next"` header.
fn next_of(link: &str) -> String {
    let inner = link.strip_prefix('<').unwrap().split_once('>').unwrap().0;
    assert!(link.ends_with("rel=\"next\""), "{link}");
    inner.strip_prefix("/api/v1").unwrap().to_string()
}

#[test]
fn entries_diffs_and_stats_of_a_volumes_versions() {
    rt().block_on(async {
        let reg = Reg::new(policy()).await;
        let (a, b, c, d) = (
            vec![1u8; 1000],
            vec![2u8; 2000],
            vec![3u8; 3000],
            vec![4u8; 4000],
        );
        // v2 keeps f0, changes f1 and adds f2.
        let v1 = build(&[a.clone(), b.clone()]);
        let v2 = build(&[a.clone(), c.clone(), d.clone()]);
        reg.push(&v1).await;
        reg.push(&v2).await;

        // Entries: the root of v1, a page at a time, following `Link`.
        let root = format!("/volumes/{REPO}/-/versions/{}/entries", v1.b3);
        let all: api::EntryList = reg.get_ok(&root).await;
        let paths: Vec<&str> = all.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["f0", "f1"]);
        assert_eq!(all.entries[1].kind, api::EntryKind::File);
        assert_eq!(
            (all.entries[1].size, all.entries[1].mode.as_str()),
            (2000, "0644")
        );
        let (s, first, link) = reg.get_page(&format!("{root}?n=1")).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(first["entries"][0]["path"], "f0");
        let next = next_of(&link.expect("a next page"));
        assert!(next.ends_with("n=1&last=f0"), "{next}");
        let (_, second, link) = reg.get_page(&next).await;
        assert_eq!(second["entries"][0]["path"], "f1");
        assert_eq!(link, None, "the last page has no Link");
        // A file lists itself; a path the version lacks is PATH_UNKNOWN.
        let one: api::EntryList = reg.get_ok(&format!("{root}?path=f1")).await;
        assert_eq!(one.entries.len(), 1);
        let (s, e, _) = reg.get_page(&format!("{root}?path=nope")).await;
        assert_eq!(
            (s, e["errors"][0]["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("PATH_UNKNOWN"))
        );

        // The diff, computed as `sealvol diff` computes it.
        let diff: sealvol_spec::diff::Diff = reg
            .get_ok(&format!(
                "/volumes/{REPO}/-/versions/{}/diff/{}",
                v1.b3, v2.b3
            ))
            .await;
        let names = |v: &[api::EntryInfo]| v.iter().map(|e| e.path.clone()).collect::<Vec<_>>();
        assert_eq!(names(&diff.added), ["f2"]);
        assert!(diff.removed.is_empty());
        assert_eq!(diff.changed.len(), 1);
        assert_eq!(diff.changed[0].path, "f1");
        assert_eq!(diff.unchanged_files, 1);
        assert_eq!(diff.new_chunk_bytes, 7000);
        assert!((diff.shared_chunk_fraction - 1000.0 / 8000.0).abs() < 1e-9);
        // By index digest too; an unknown version is VERSION_UNKNOWN.
        let (s, _, _) = reg
            .get_page(&format!(
                "/volumes/{REPO}/-/versions/{}/diff/{}",
                v2.index, v1.b3
            ))
            .await;
        assert_eq!(s, StatusCode::OK);
        let (s, e, _) = reg
            .get_page(&format!(
                "/volumes/{REPO}/-/versions/{}/diff/b3:{}",
                v1.b3,
                "0".repeat(64)
            ))
            .await;
        assert_eq!(
            (s, e["errors"][0]["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("VERSION_UNKNOWN"))
        );

        // Stats: two versions of 3000 and 8000 bytes, four distinct
        // chunks (a is shared).
        let stats_path = format!("/volumes/{REPO}/-/stats");
        let st: api::VolumeStats = reg.get_ok(&stats_path).await;
        assert_eq!(
            (st.versions, st.logical_bytes, st.stored_bytes, st.chunks),
            (2, 11_000, 10_000, 4)
        );
        // A delete keeps the bytes while the version can be restored.
        reg.api(
            Method::DELETE,
            &format!("/volumes/{REPO}/-/versions/{}", v1.b3),
            None,
        )
        .await;
        let st: api::VolumeStats = reg.get_ok(&stats_path).await;
        assert_eq!((st.versions, st.stored_bytes), (2, 10_000));
        // Past the retention, the purge takes b out: rebuilt on read.
        reg.app.clock.advance(8 * DAY);
        assert_eq!(reg.gc(false).await["versions_purged"], 1);
        let st: api::VolumeStats = reg.get_ok(&stats_path).await;
        assert_eq!(
            (st.versions, st.logical_bytes, st.stored_bytes, st.chunks),
            (1, 8000, 8000, 3)
        );
        // A new seal grows the rebuilt set by its new chunks only.
        let v3 = build(&[a.clone(), b.clone(), c.clone()]);
        reg.push(&v3).await;
        let st: api::VolumeStats = reg.get_ok(&stats_path).await;
        assert_eq!(
            (st.versions, st.logical_bytes, st.stored_bytes, st.chunks),
            (2, 14_000, 10_000, 4)
        );
        let (s, e, _) = reg.get_page("/volumes/ns/none/-/stats").await;
        assert_eq!(
            (s, e["errors"][0]["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("VOLUME_UNKNOWN"))
        );
    });
}

#[test]
fn version_and_volume_lists_page_with_link_headers() {
    rt().block_on(async {
        let reg = Reg::new(policy()).await;
        let vs: Vec<Built> = (0..5u8).map(|i| build(&[vec![i; 100]])).collect();
        for v in &vs {
            reg.push(v).await;
        }
        // Newest first, two at a time.
        let mut path = format!("/volumes/{REPO}/-/versions?n=2");
        let mut seen = Vec::new();
        loop {
            let (s, v, link) = reg.get_page(&path).await;
            assert_eq!(s, StatusCode::OK, "{v}");
            let page: api::VersionList = serde_json::from_value(v).unwrap();
            assert!(page.versions.len() <= 2);
            seen.extend(page.versions.iter().map(|v| v.digest.to_string()));
            match link {
                Some(l) => path = next_of(&l),
                None => break,
            }
        }
        let newest_first: Vec<String> = vs.iter().rev().map(|v| v.b3.clone()).collect();
        assert_eq!(seen, newest_first);
        // Without n, everything and no Link.
        let (_, v, link) = reg.get_page(&format!("/volumes/{REPO}/-/versions")).await;
        assert_eq!(v["versions"].as_array().unwrap().len(), 5);
        assert_eq!(link, None);
        // The volume list pages by name, its Link keeping the filter.
        let (_, v, link) = reg.get_page("/volumes?namespace=ns&n=1").await;
        assert_eq!(v["volumes"][0]["name"], REPO);
        assert_eq!(link, None, "one volume, one page");
        let (s, e, _) = reg.get_page("/volumes?n=lots").await;
        assert_eq!(
            (s, e["errors"][0]["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("INVALID"))
        );
        // whoami on the open loopback registry: anonymous, allowed all.
        let me: api::WhoAmI = reg.get_ok(&format!("/whoami?repository={REPO}")).await;
        assert!(me.anonymous && !me.authentication, "{me:?}");
        assert_eq!(me.actions, api::Action::ALL.to_vec());
    });
}
