//! How an error is answered, once for every route: a [`RegistryError`]
//! becomes distribution's error JSON with its status, a failure on our
//! side a 500 whose details go to the log, a panicked handler a 500 too.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::RegistryError;
use serde_json::Value;

/// 500 with distribution's `UNKNOWN` error body: for failures on our side,
/// whose details go to the log rather than to the client. (`UNKNOWN` is
/// not one of [`crate::error::Code`]'s, which are the codes a handler may choose.)
pub fn unknown(message: &str) -> Response {
    let body = serde_json::json!({"errors": [{"code": "UNKNOWN", "message": message}]});
    let mut resp = (StatusCode::INTERNAL_SERVER_ERROR, body.to_string()).into_response();
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

/// What the catch-panic layer answers for a handler that panicked: a bug,
/// logged, never a dropped connection or a dead worker.
pub fn panicked(why: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked: {}", panic_message(&why));
    unknown("internal error; the registry's log says more")
}

/// What a panic said, when it said it with a string.
pub fn panic_message(why: &Box<dyn std::any::Any + Send + 'static>) -> String {
    why.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| why.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

impl IntoResponse for RegistryError {
    fn into_response(self) -> Response {
        let (status, code, message) = match self {
            RegistryError::Oci {
                code,
                message,
                status,
            } => (
                status.unwrap_or(crate::error::default_status(code)),
                code,
                message,
            ),
            RegistryError::Internal(m) => {
                tracing::error!("{m}");
                return unknown("internal error; the registry's log says more");
            }
            RegistryError::Damaged(m) => {
                tracing::error!("{m}");
                return unknown(&m);
            }
            RegistryError::Upstream(m) => {
                tracing::warn!("{m}");
                let mut resp = unknown(&m);
                *resp.status_mut() = StatusCode::BAD_GATEWAY;
                return resp;
            }
        };
        let body = sealvol_spec::api::ErrorBody::new(code, message);
        let body = serde_json::to_string(&body).expect("an error body serializes");
        let mut resp = (status, body).into_response();
        resp.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        resp
    }
}

/// A header value from text that is one (digests, sizes, paths we made).
pub(crate) fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A JSON body with its content type.
pub(crate) struct Json(pub(crate) Value);

impl IntoResponse for Json {
    fn into_response(self) -> Response {
        (
            [(header::CONTENT_TYPE, "application/json")],
            self.0.to_string(),
        )
            .into_response()
    }
}
