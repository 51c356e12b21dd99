//! The S3 gateway (SPEC.md §10): sealed versions served read-only over
//! the S3 API, on a listener of its own (`[s3] addr`), so that boto3,
//! fsspec/s3fs and the Run:ai model streamer (vLLM's and SGLang's
//! `s3://` loader) read volumes with no sealvol code.
//!
//! `s3s` does the protocol: it parses path-style requests, checks AWS
//! signatures (SigV4 headers, presigned URLs, `UNSIGNED-PAYLOAD`), and
//! writes S3's XML, errors included. What is ours:
//!
//! - [`addressing`]: buckets are namespaces and keys name a version's
//!   files; the listing order and its pages;
//! - [`access`]: the secrets signatures are checked with (API keys'), the
//!   subject, and the registry's policy deciding, as for `/v2`;
//! - [`gateway`]: the operations, over `service::files`, which checks
//!   every piece it serves against the version's chain.
//!
//! What it is not: a writer (every write is refused, `MethodNotAllowed`),
//! a virtual-hosted-style endpoint (namespaces need not be DNS names), nor
//! a reader of versions under deeper names than `NAMESPACE/VOLUME`.

pub mod access;
pub mod addressing;
pub mod gateway;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use s3s::service::{S3Service, S3ServiceBuilder};
use tower::ServiceExt as _;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::auth::Auth;
use crate::http::Timeouts;
use crate::state::app::App;

/// Bucket names as namespaces have them; whether one exists is the
/// operation's question (`NoSuchBucket`), not a malformed request.
struct Namespaces;

impl s3s::validation::NameValidation for Namespaces {
    fn validate_bucket_name(&self, name: &str) -> bool {
        addressing::volume_name(name, "x").is_some()
    }
}

/// What the gateway's handler holds.
#[derive(Clone)]
struct Gateway {
    s3: S3Service,
    /// The registry has no users to sign as: credentials are dropped and
    /// every request is anonymous, as an open registry ignores the
    /// credentials clients keep for it on `/v2`.
    open: bool,
}

/// The gateway's router, with the registry's timeouts, metrics and panic
/// handling as layers.
pub fn router(app: Arc<App>, auth: Arc<Auth>, timeouts: Timeouts) -> Router {
    let open = auth.users.is_none();
    let mut builder = S3ServiceBuilder::new(gateway::Gateway {
        app: Arc::clone(&app),
        auth: Arc::clone(&auth),
    });
    builder.set_auth(access::Signers { app });
    builder.set_access(access::Policy { auth });
    builder.set_validation(Namespaces);
    let state = Gateway {
        s3: builder.build(),
        open,
    };
    Router::new()
        .fallback(serve)
        .with_state(state)
        .layer(axum::middleware::from_fn(
            crate::http::layers::record_metrics,
        ))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeouts.request,
        ))
        .layer(TraceLayer::new_for_http())
        .layer(CatchPanicLayer::custom(panicked as fn(_) -> Response))
}

async fn serve(State(gw): State<Gateway>, mut req: Request) -> Response {
    if gw.open {
        anonymous(&mut req);
    }
    match gw.s3.oneshot(req).await {
        Ok(resp) => resp.map(Body::new),
        Err(e) => {
            tracing::error!("S3 gateway: {e:?}");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "internal error; the registry's log says more",
            )
        }
    }
}

/// `req` without what would make it signed: its `Authorization` header
/// and a presigned URL's `X-Amz-*` query parameters.
fn anonymous(req: &mut Request) {
    req.headers_mut().remove(header::AUTHORIZATION);
    let Some(query) = req.uri().query() else {
        return;
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| {
            let name = p.split('=').next().unwrap_or("");
            !name.to_ascii_lowercase().starts_with("x-amz-")
        })
        .collect();
    let path = req.uri().path();
    let rebuilt = if kept.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    if let Ok(uri) = rebuilt.parse() {
        *req.uri_mut() = uri;
    }
}

/// An S3 error answer the gateway writes itself, where `s3s` does not.
fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{}</Message></Error>",
        quick_xml::escape::escape(message)
    );
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    resp
}

fn panicked(why: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let why = why
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| why.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!("an S3 request panicked: {why}");
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        "internal error; the registry's log says more",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_registry_reads_signed_requests_as_anonymous_ones() {
        let mut req = Request::builder()
            .uri("/w/v/x?X-Amz-Signature=ab&partNumber=1&x-amz-date=1&X-Amz-Credential=k")
            .header(header::AUTHORIZATION, "AWS4-HMAC-SHA256 Credential=k")
            .body(Body::empty())
            .unwrap();
        anonymous(&mut req);
        assert_eq!(req.uri().to_string(), "/w/v/x?partNumber=1");
        assert!(req.headers().get(header::AUTHORIZATION).is_none());
    }
}
