//! `oci://` sync jobs (SPEC.md §8.1) between two volumes of one registry
//! served on loopback, in process: the source's chunks are checked by
//! SHA-256, each file through the chain (its bytes must hash to the BLAKE3
//! the source tree gives), format 1 sources import too, and the version the
//! job seals carries a format 2 tree with every file's chaining values.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use sealvol_registry::server::open_app;
use sealvol_registry::state::app::{App, Lifetimes};
use sealvol_spec::chain::PIECE;
use sealvol_spec::oci::{
    artifact_layers, build_version, build_version_with_blob, sha256_of, BuiltVersion, VersionIndex,
    VersionMeta, MT_TREE_BLOB_V1, MT_TREE_MANIFEST,
};
use sealvol_spec::tree::{Entry, EntryData};
use sealvol_spec::{ChunkingParams, Sha256Digest, TreeFormat, TreeIndex};
use serde_json::{json, Value};
use tower::ServiceExt;

const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";

struct Reg {
    app: Arc<App>,
    router: axum::Router,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Reg {
    /// A registry on a loopback port with one sync worker.
    async fn start() -> Reg {
        let dir = tempfile::tempdir().unwrap();
        let app = Arc::new(open_app(dir.path(), Lifetimes::default()).await.unwrap());
        // The jobs read from this same registry, on loopback.
        *app.syncs.net.write().unwrap() = sealvol_sync::NetPolicy::local();
        let router = common::router_of(&app);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = router.clone();
        tokio::spawn(async move { axum::serve(listener, served).await });
        sealvol_registry::service::syncs::runner::spawn_workers(Arc::clone(&app), 1);
        Reg {
            app,
            router,
            port,
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

    /// Pushes `v` into `repo` with the chunk blobs `data` holds.
    async fn push(&self, repo: &str, v: &BuiltVersion, data: &[&[u8]]) {
        let mut blobs = chunk_blobs(data);
        blobs.extend(v.blobs.iter().map(|b| b.bytes.clone()));
        for bytes in blobs {
            let d = Sha256Digest::of(&bytes);
            let (s, _) = self
                .call(
                    Method::POST,
                    &format!("/v2/{repo}/blobs/uploads/?digest={d}"),
                    None,
                    bytes,
                )
                .await;
            assert_eq!(s, StatusCode::CREATED);
        }
        for m in &v.manifests {
            let (s, _) = self
                .call(
                    Method::PUT,
                    &format!("/v2/{repo}/manifests/{}", m.digest()),
                    Some(m.descriptor.media_type().as_ref()),
                    m.bytes.clone(),
                )
                .await;
            assert_eq!(s, StatusCode::CREATED);
        }
        let (s, _) = self
            .call(
                Method::PUT,
                &format!("/v2/{repo}/manifests/{}", v.index.digest()),
                Some(INDEX_TYPE),
                v.index.bytes.clone(),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED);
    }

    /// Runs a sync job to its end; answers the job.
    async fn sync(&self, source: String, dest: &str) -> Value {
        let (s, job) = self
            .api(
                Method::POST,
                "/syncs",
                Some(json!({"source": source, "dest": {"name": dest}})),
            )
            .await;
        assert!(s.is_success(), "{s} {job}");
        let id = job["id"].as_str().unwrap().to_string();
        for _ in 0..1200 {
            let (_, job) = self.api(Method::GET, &format!("/syncs/{id}"), None).await;
            if ["READY", "FAILED", "CANCELED"].contains(&job["state"].as_str().unwrap()) {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("sync {id} did not finish");
    }

    fn uri(&self, repo: &str, v: &BuiltVersion) -> String {
        format!("oci://127.0.0.1:{}/{repo}@{}", self.port, v.digest)
    }

    async fn manifest(&self, repo: &str, reference: &str) -> Vec<u8> {
        let (s, b) = self
            .call(
                Method::GET,
                &format!("/v2/{repo}/manifests/{reference}"),
                None,
                vec![],
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{repo} {reference}");
        b
    }

    /// The tree of the version `reference` names in `repo`.
    async fn tree(&self, repo: &str, reference: &str) -> TreeIndex {
        let ix = VersionIndex::parse(&self.manifest(repo, reference).await).unwrap();
        let tm = sha256_of(&ix.tree_manifest).unwrap();
        let layers = artifact_layers(
            &self.manifest(repo, &tm.to_string()).await,
            MT_TREE_MANIFEST,
        )
        .unwrap();
        let blob = sha256_of(&layers[0]).unwrap();
        let bytes = self.app.blobs.get(&blob).await.unwrap().unwrap();
        TreeIndex::decode(&bytes).unwrap()
    }

    async fn version(&self, repo: &str, b3: &str) -> Value {
        let (s, v) = self
            .api(
                Method::GET,
                &format!("/volumes/{repo}/-/versions/{b3}"),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v
    }
}

/// The chunk blobs files are made of, from their bytes.
fn chunk_blobs(data: &[&[u8]]) -> Vec<Vec<u8>> {
    data.iter()
        .flat_map(|d| cut(d).into_iter().map(|(a, b)| d[a..b].to_vec()))
        .collect()
}

/// Three chunks per file (or fewer for small ones): the sync re-chunks
/// them with the registry's own parameters.
fn cut(data: &[u8]) -> Vec<(usize, usize)> {
    let step = data.len().div_ceil(3).max(1);
    (0..data.len())
        .step_by(step)
        .map(|a| (a, (a + step).min(data.len())))
        .collect()
}

fn lengths(data: &[u8]) -> Vec<usize> {
    cut(data).into_iter().map(|(a, b)| b - a).collect()
}

fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn file(path: &str, data: &[u8]) -> Entry {
    Entry {
        path: path.into(),
        mode: 0o644,
        data: EntryData::file_of(data, &lengths(data)),
    }
}

/// An entry whose chunks hold `served` while its BLAKE3 and chaining
/// values (consistent with each other) are those of `claimed`.
fn forged(path: &str, served: &[u8], claimed: &[u8]) -> Entry {
    let mut e = file(path, claimed);
    let EntryData::File { chunks, .. } = &mut e.data else {
        unreachable!()
    };
    *chunks = match EntryData::file_of(served, &lengths(served)) {
        EntryData::File { chunks, .. } => chunks,
        _ => unreachable!(),
    };
    e
}

fn meta() -> VersionMeta {
    VersionMeta {
        created: "2026-12-02T00:00:00Z".into(),
        source: None,
    }
}

fn v2(entries: Vec<Entry>) -> (TreeIndex, BuiltVersion) {
    let tree = TreeIndex::new(ChunkingParams::default(), entries).unwrap();
    let v = build_version(&tree, &meta()).unwrap();
    (tree, v)
}

/// The same files with a format 1 tree (SPEC.md §2.6): chunk records carry
/// a BLAKE3 of their own (zeros here: readers skip it) and files no
/// chaining values.
fn v1(entries: Vec<Entry>) -> BuiltVersion {
    let tree = TreeIndex::new(ChunkingParams::default(), entries).unwrap();
    let out = sealvol_spec::tree::encode_entries(
        TreeFormat::V1,
        tree.params(),
        tree.entries(),
        &|_, _| sealvol_spec::B3Digest([0; 32]),
    );
    let old = TreeIndex::decode(&out).unwrap();
    assert_eq!(old.format(), TreeFormat::V1);
    build_version_with_blob(&old, out, MT_TREE_BLOB_V1, &meta()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oci_imports_check_files_through_the_chain() {
    let reg = Reg::start().await;
    let big = noise(PIECE as usize * 3 / 2 + 17, 1);
    let small = noise(5000, 2);
    let mut other = big.clone();
    other[PIECE as usize + 100] ^= 1;

    // A format 2 source: imported, the result's chain is the source's.
    let (tree, good) = v2(vec![file("big.bin", &big), file("small.bin", &small)]);
    reg.push("ns/src", &good, &[&big, &small]).await;
    let job = reg.sync(reg.uri("ns/src", &good), "ns/dst").await;
    assert_eq!(job["state"], "READY", "{job}");
    assert_eq!(job["version"]["digest"], good.digest.to_string());
    let copied = reg.tree("ns/dst", "head").await;
    assert_eq!(copied.format(), TreeFormat::V2);
    assert_eq!(copied.version_digest(), good.digest);
    for path in ["big.bin", "small.bin"] {
        let pieces = |t: &TreeIndex| match &t.get(path).unwrap().data {
            EntryData::File { pieces, .. } => pieces.clone(),
            _ => unreachable!(),
        };
        assert_eq!(pieces(&copied), pieces(&tree), "{path}");
    }

    // Chunks that match their SHA-256 but not the file's BLAKE3 (its
    // chaining values are another file's): the file fails by name.
    let (_, bad) = v2(vec![
        forged("big.bin", &big, &other),
        file("ok.bin", &small),
    ]);
    reg.push("ns/src", &bad, &[&big, &small]).await;
    let job = reg.sync(reg.uri("ns/src", &bad), "ns/bad").await;
    assert_eq!(job["state"], "FAILED", "{job}");
    assert_eq!(job["error"]["code"], "CHECKSUM_MISMATCH", "{job}");
    let msg = job["error"]["message"].as_str().unwrap();
    assert!(msg.contains("big.bin"), "{msg}");
    assert!(msg.starts_with("oci://127.0.0.1:"), "{msg}");

    // A format 1 source: checked by SHA-256 and whole-file BLAKE3 alone,
    // and sealed here with a format 2 tree.
    let old = v1(vec![file("a.bin", &big), file("b.bin", &noise(10, 3))]);
    reg.push("ns/old", &old, &[&big, &noise(10, 3)]).await;
    let job = reg.sync(reg.uri("ns/old", &old), "ns/new").await;
    assert_eq!(job["state"], "READY", "{job}");
    let copied = reg.tree("ns/new", "head").await;
    assert_eq!(copied.format(), TreeFormat::V2);
    assert_eq!(copied.version_digest(), old.digest);
    let old_bad = v1(vec![forged("a.bin", &big, &other)]);
    reg.push("ns/old", &old_bad, &[&big]).await;
    let job = reg.sync(reg.uri("ns/old", &old_bad), "ns/new2").await;
    assert_eq!(job["error"]["code"], "CHECKSUM_MISMATCH", "{job}");
    assert!(job["error"]["message"].as_str().unwrap().contains("a.bin"));
}

/// A sync into a volume that holds the same version with a format 1 tree
/// re-publishes it with the job's format 2 tree (SPEC.md §7.1): the
/// version's index moves, its sequence does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_republishes_a_format_1_version_with_a_format_2_tree() {
    let reg = Reg::start().await;
    let data = noise(PIECE as usize + 5, 4);
    let old = v1(vec![file("w.bin", &data)]);
    reg.push("ns/dst", &old, &[&data]).await;
    let (_, src) = v2(vec![file("w.bin", &data)]);
    reg.push("ns/src", &src, &[&data]).await;
    let before = reg.version("ns/dst", &old.digest.to_string()).await;

    let job = reg.sync(reg.uri("ns/src", &src), "ns/dst").await;
    assert_eq!(job["state"], "READY", "{job}");
    let after = reg.version("ns/dst", &old.digest.to_string()).await;
    assert_ne!(after["index_digest"], before["index_digest"]);
    assert_eq!(after["index_digest"], job["version"]["index_digest"]);
    assert_eq!(after["sequence"], before["sequence"]);
    assert_eq!(reg.tree("ns/dst", "head").await.format(), TreeFormat::V2);

    // Again: the format 2 index is kept, nothing changes.
    let job = reg.sync(reg.uri("ns/src", &src), "ns/dst").await;
    assert_eq!(job["state"], "READY", "{job}");
    assert_eq!(
        reg.version("ns/dst", &old.digest.to_string()).await["index_digest"],
        after["index_digest"]
    );
}
