//! Requests that must not hurt the registry, through its own router in
//! process: malformed query strings and references, oversized bodies, a
//! panicking handler.

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, Uri};
use sealvol_registry::server::open_app;
use sealvol_registry::state::app::{App, Lifetimes};
use serde_json::Value;
use tower::ServiceExt;

struct Reg {
    router: axum::Router,
    _app: Arc<App>,
    _dir: tempfile::TempDir,
}

impl Reg {
    async fn new() -> Reg {
        let dir = tempfile::tempdir().unwrap();
        let app = Arc::new(open_app(dir.path(), Lifetimes::default()).await.unwrap());
        let router = common::router_of(&app);
        Reg {
            router,
            _app: app,
            _dir: dir,
        }
    }

    /// `path` may hold raw non-ASCII bytes, as a client may send them.
    async fn call(
        &self,
        method: Method,
        path: &[u8],
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let uri = Uri::from_maybe_shared(bytes::Bytes::copy_from_slice(path)).unwrap();
        let mut b = Request::builder().method(method).uri(uri);
        if let Some(c) = content_type {
            b = b.header("content-type", c);
        }
        if !body.is_empty() {
            b = b.header("content-length", body.len());
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
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// Pushes an empty image manifest tagged `tag` to `repo`.
    async fn push(&self, repo: &str, tag: &str) {
        let config = b"{}".to_vec();
        let d = sha256(&config);
        let (s, _) = self
            .call(
                Method::POST,
                format!("/v2/{repo}/blobs/uploads/?digest={d}").as_bytes(),
                None,
                config,
            )
            .await;
        assert_eq!(s, StatusCode::CREATED);
        let m = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": d, "size": 2},
            "layers": [],
        });
        let (s, body) = self
            .call(
                Method::PUT,
                format!("/v2/{repo}/manifests/{tag}").as_bytes(),
                Some("application/vnd.oci.image.manifest.v1+json"),
                m.to_string().into_bytes(),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{body}");
    }
}

fn sha256(b: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)))
}

fn code(body: &Value) -> &str {
    body["errors"][0]["code"].as_str().unwrap_or("")
}

/// `%a` followed by a multi-byte character once sliced a `&str` inside a
/// character, and the request panicked.
#[tokio::test]
async fn list_endpoints_take_any_last() {
    let reg = Reg::new().await;
    reg.push("ns/vol", "a").await;
    for path in [
        "/v2/ns/vol/tags/list?last=%a\u{e9}",
        "/v2/ns/vol/tags/list?n=1&last=%\u{e9}",
        "/v2/_catalog?last=%a\u{e9}",
        "/v2/_catalog?n=1&last=%%\u{e9}%",
        "/v2/ns/vol/referrers/sha256:0000000000000000000000000000000000000000000000000000000000000000?artifactType=%a\u{e9}",
        "/api/v1/volumes?namespace=%a\u{e9}",
    ] {
        let (s, body) = reg.call(Method::GET, path.as_bytes(), None, vec![]).await;
        assert_eq!(s, StatusCode::OK, "{path}: {body}");
    }
}

#[tokio::test]
async fn a_malformed_reference_is_an_unknown_manifest_except_to_put() {
    let reg = Reg::new().await;
    reg.push("ns/vol", "a").await;
    for reference in ["-bad", "a%20b", "x:y", "sha256:zz", &"t".repeat(200)] {
        let path = format!("/v2/ns/vol/manifests/{reference}");
        let (s, body) = reg.call(Method::GET, path.as_bytes(), None, vec![]).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "GET {reference}: {body}");
        assert_eq!(code(&body), "MANIFEST_UNKNOWN", "GET {reference}");
        let (s, _) = reg.call(Method::HEAD, path.as_bytes(), None, vec![]).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "HEAD {reference}");
    }
    let (s, body) = reg
        .call(
            Method::PUT,
            b"/v2/ns/vol/manifests/-bad",
            Some("application/vnd.oci.image.manifest.v1+json"),
            b"{}".to_vec(),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(code(&body), "MANIFEST_INVALID");
}

#[tokio::test]
async fn a_panicking_handler_answers_500_with_an_oci_error() {
    let app = axum::Router::new()
        .route(
            "/boom",
            axum::routing::get(|| async {
                if true {
                    panic!("boom");
                }
            }),
        )
        .layer(sealvol_registry::http::layers::catch_panics());
    let resp = app
        .oneshot(Request::get("/boom").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let body: Value = serde_json::from_slice(
        &axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(code(&body), "UNKNOWN");
}

/// Bodies over their endpoint's limit are refused with 413 `SIZE_INVALID`,
/// declared or not.
#[tokio::test]
async fn oversized_bodies_are_refused() {
    let reg = Reg::new().await;
    let cases: [(Method, &str, Option<&str>, usize); 4] = [
        (
            Method::PUT,
            "/api/v1/volumes/ns/vol/-/tags/prod",
            Some("application/json"),
            (64 << 10) + 1,
        ),
        (
            Method::POST,
            "/api/v1/volumes/ns/vol/-/claim",
            Some("application/json"),
            (64 << 10) + 1,
        ),
        (
            Method::POST,
            "/token",
            Some("application/x-www-form-urlencoded"),
            (8 << 10) + 1,
        ),
        (
            Method::PUT,
            "/v2/ns/vol/manifests/latest",
            Some("application/vnd.oci.image.manifest.v1+json"),
            (4 << 20) + 1,
        ),
    ];
    for (method, path, ct, size) in cases {
        // Declared: refused before the body is read.
        let (s, body) = reg
            .call(method.clone(), path.as_bytes(), ct, vec![b' '; size])
            .await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{method} {path}: {body}");
        assert_eq!(code(&body), "SIZE_INVALID", "{method} {path}");
        if path == "/token" {
            continue; // without [auth], /token reads no body
        }
        // Streamed without a length: cut off where it passes the limit.
        let chunks = (0..size.div_ceil(1024)).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1024]));
        let mut b = Request::builder().method(method.clone()).uri(path);
        if let Some(c) = ct {
            b = b.header("content-type", c);
        }
        let req = b
            .body(Body::from_stream(futures_util::stream::iter(chunks)))
            .unwrap();
        let resp = reg.router.clone().oneshot(req).await.unwrap();
        assert_eq!(
            resp.status(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "{method} {path} streamed"
        );
    }
}

#[tokio::test]
async fn a_claim_holder_is_bounded() {
    let reg = Reg::new().await;
    let long = serde_json::json!({"holder": "h".repeat(257)}).to_string();
    let (s, body) = reg
        .call(
            Method::POST,
            b"/api/v1/volumes/ns/vol/-/claim",
            Some("application/json"),
            long.into_bytes(),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
    let ok = serde_json::json!({"holder": "h".repeat(256)}).to_string();
    let (s, body) = reg
        .call(
            Method::POST,
            b"/api/v1/volumes/ns/vol/-/claim",
            Some("application/json"),
            ok.into_bytes(),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
}

/// The volume handler reads its path percent-decoded; so does the access
/// table (`access::need`), which must name the same volume.
#[tokio::test]
async fn volume_paths_are_decoded_as_the_access_table_decodes_them() {
    use sealvol_registry::http::access::{need, Action, Need};
    let reg = Reg::new().await;
    let (_, body) = reg
        .call(Method::GET, b"/api/v1/volumes/ns%2Fvol", None, vec![])
        .await;
    // Not NAME_INVALID for `ns%2Fvol`: the handler looked up `ns/vol`.
    assert_eq!(code(&body), "VOLUME_UNKNOWN", "{body}");
    assert_eq!(
        need(&Method::POST, "/api/v1/volumes/ns/vol%2F-%2Fclaim"),
        Need::Repository {
            name: "ns/vol".into(),
            action: Action::Push
        }
    );
}
