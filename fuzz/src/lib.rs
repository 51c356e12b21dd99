//! What the registry fuzz targets share: one registry per fuzzing process,
//! built as `sealvol serve` builds it (the data folder opened by
//! `server::open_app`, the auth of a loopback `Config::default()`, the
//! router with every layer), over a temporary data folder, and a way to
//! send it a request and read its whole answer.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use metrics_exporter_prometheus::PrometheusBuilder;
use sealvol_registry::state::app::{App, Lifetimes};
use sealvol_registry::server::{open_app, router, Config};
use sha2::{Digest, Sha256};
use tower::ServiceExt;

/// A registry in process, alive until the fuzzing process exits.
pub struct Registry {
    pub rt: tokio::runtime::Runtime,
    pub router: axum::Router,
    pub app: Arc<App>,
    _dir: tempfile::TempDir,
}

/// The process's registry, made on first use.
pub fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let dir = tempfile::Builder::new()
            .prefix("sealvol-fuzz-")
            .tempdir()
            .expect("a temporary data folder");
        let (app, router) = rt.block_on(async {
            let app = Arc::new(
                open_app(dir.path(), Lifetimes::default())
                    .await
                    .expect("open the data folder"),
            );
            let config = Config::default();
            let auth = config
                .auth(config.addr, Arc::clone(&app.meta))
                .expect("loopback auth");
            let handle = PrometheusBuilder::new().build_recorder().handle();
            let router = router(Arc::clone(&app), auth, &config, handle);
            (app, router)
        });
        Registry {
            rt,
            router,
            app,
            _dir: dir,
        }
    })
}

/// An answer read whole.
pub struct Answer {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: bytes::Bytes,
}

impl Registry {
    /// Sends `req` through the router and reads the whole answer.
    pub fn send(&self, req: Request<Body>) -> Answer {
        self.rt.block_on(async {
            let resp: Response<Body> = self
                .router
                .clone()
                .oneshot(req)
                .await
                .expect("the router is infallible");
            let (parts, body) = resp.into_parts();
            let body = axum::body::to_bytes(body, 1 << 26)
                .await
                .expect("an answer body reads");
            Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            }
        })
    }
}

/// Fails the run on a server error: for any request a client may send,
/// the registry answers 4xx rather than 500 (a 500 is a fault of ours).
pub fn assert_not_5xx(what: &dyn std::fmt::Debug, a: &Answer) {
    assert!(
        !a.status.is_server_error(),
        "{what:?} answered {}: {}",
        a.status,
        String::from_utf8_lossy(&a.body)
    );
}

/// `sha256:<hex>` of `data`.
pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}
