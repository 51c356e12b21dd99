//! The wire: parse once ([`routes`], [`extract`]), call a service,
//! answer ([`respond`]). [`router`] is the registry's table of endpoints
//! and its layer stack.

pub mod access;
pub mod api;
pub mod extract;
pub mod hf;
pub mod layers;
pub mod oci;
pub(crate) mod query;
pub mod respond;
pub mod routes;
pub mod s3;
pub mod token;
pub mod ui;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::HeaderValue;
use axum::response::IntoResponse;
use axum::routing::{any, delete, get, post, put, MethodRouter};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};
use tower_http::trace::TraceLayer;

use crate::auth::Auth;
use crate::state::app::App;

/// How long a request may take, and how long its body may stall
/// (`[http]` of `registry.toml`).
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub request: Duration,
    pub idle_body: Duration,
}

/// The registry's router with its layers; `auth` decides who may do what.
pub fn router(
    app: Arc<App>,
    auth: Arc<Auth>,
    timeouts: Timeouts,
    prometheus: PrometheusHandle,
) -> Router {
    // A pull-through cache serves /v2 only: its /api/v1 and /hf answer
    // 404.
    let volumes = match app.upstream {
        Some(_) => Router::new(),
        None => api_router()
            .merge(ui::router())
            .route("/hf/{*rest}", any(hf::dispatch)),
    };
    // /v2 is the store's, or a pull-through cache's: decided here, once.
    let v2 = match app.upstream.clone() {
        None => any(oci::dispatch),
        Some(up) => any(move |State(app): State<Arc<App>>, req: Request| {
            oci::dispatch_cached(app, Arc::clone(&up), req)
        }),
    };
    Router::new()
        .route(
            "/metrics",
            get(move || async move { prometheus.render().into_response() }),
        )
        // Probes for a kubelet or a load balancer, which send no
        // credentials (/v2/ answers them 401 once [auth] is on). The
        // registry listens only after its store is open and migrated, so
        // answering at all means ready; neither says anything about the
        // data.
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(|| async { "ok\n" }))
        .merge(volumes)
        .fallback(v2)
        .with_state(app)
        .route(
            "/token",
            get(token::token)
                .post(token::token)
                .with_state(Arc::clone(&auth)),
        )
        // Blob bodies stream to disk; the others are bounded by
        // `layers::limit_bodies`, before the auth layers so an unauthenticated client
        // cannot make them read a large body either.
        .layer(DefaultBodyLimit::disable())
        // Outermost first on the way in: metrics see every answer, the
        // CSRF check runs before credentials are checked, and the auth
        // layer before any handler.
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&auth),
            layers::authorize,
        ))
        .layer(axum::middleware::from_fn_with_state(auth, layers::csrf))
        .layer(axum::middleware::from_fn(layers::limit_bodies))
        .layer(axum::middleware::from_fn(layers::record_metrics))
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            timeouts.request,
        ))
        // A body that stops arriving fails its reader (`extract::read_body`
        // answers 408), rather than holding the request until the timeout
        // above, an hour by default.
        .layer(RequestBodyTimeoutLayer::new(timeouts.idle_body))
        .layer(SetResponseHeaderLayer::overriding(
            axum::http::HeaderName::from_static("docker-distribution-api-version"),
            HeaderValue::from_static("registry/2.0"),
        ))
        .layer(TraceLayer::new_for_http())
        // Outermost, so a panic in any layer or handler becomes a 500 with
        // an OCI error body (the layers it unwinds through do not record
        // that request; the panic is logged instead).
        .layer(layers::catch_panics())
}

/// The volume API's routes (SPEC.md §7.3, §8.3): each path and method to
/// its handler. A path this API lacks answers 404 and a method a path does
/// not take 405, both `UNSUPPORTED`, so a client can tell "no such API"
/// from a refusal.
/// `/api/v1` (SPEC.md §7.3, §8.3), the API's table: each path and method
/// to its handler. A path this API lacks answers 404 and a method a path
/// does not take 405, both `UNSUPPORTED`.
fn api_router() -> Router<Arc<App>> {
    let r = |m: MethodRouter<Arc<App>>| m.fallback(api::method_not_supported);
    Router::new()
        .route("/api/v1", r(get(api::volumes::api_info)))
        .route("/api/v1/", r(get(api::volumes::api_info)))
        .route("/api/v1/namespaces", r(get(api::volumes::namespaces)))
        .route("/api/v1/volumes", r(get(api::volumes::volumes)))
        .route("/api/v1/volumes/{*path}", any(api::volumes::volume))
        .route("/api/v1/gc", r(post(api::admin::gc)))
        .route(
            "/api/v1/keys",
            r(get(api::admin::list_keys).post(api::admin::create_key)),
        )
        .route("/api/v1/keys/{id}", r(delete(api::admin::revoke_key)))
        .route("/api/v1/whoami", r(get(api::volumes::whoami)))
        .route(
            "/api/v1/syncs",
            r(get(api::syncs::list_syncs).post(api::syncs::create_sync)),
        )
        .route("/api/v1/syncs/{id}", r(get(api::syncs::describe_sync)))
        .route(
            "/api/v1/syncs/{id}/cancel",
            r(post(api::syncs::cancel_sync)),
        )
        .route(
            "/api/v1/schedules",
            r(get(api::syncs::list_schedules).post(api::syncs::create_schedule)),
        )
        .route(
            "/api/v1/schedules/{id}",
            r(get(api::syncs::describe_schedule).delete(api::syncs::delete_schedule)),
        )
        .route(
            "/api/v1/schedules/{id}/pause",
            r(post(api::syncs::pause_schedule)),
        )
        .route(
            "/api/v1/schedules/{id}/resume",
            r(post(api::syncs::resume_schedule)),
        )
        .route("/api/v1/secrets", r(get(api::admin::list_secrets)))
        .route(
            "/api/v1/secrets/{name}",
            r(put(api::admin::set_secret).delete(api::admin::delete_secret)),
        )
        .route("/api/v1/{*rest}", any(api::no_such_endpoint))
}
