//! How large a request body may be, by endpoint, enforced as one layer
//! before any handler reads: a `Content-Length` over the limit is refused
//! at once, and a body without one is cut off where it passes the limit,
//! so an oversized request is never read whole. Blob uploads stream to
//! disk and have no limit here.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{Code, RegistryError};

/// A `/api/v1` JSON body (SPEC.md §7.3).
pub const MAX_API_BODY: usize = 64 << 10;
/// A `POST /token` form: a user name, a password and a few scopes.
pub const MAX_TOKEN_FORM: usize = 8 << 10;
/// A manifest, as CNCF distribution and zot.
pub const MAX_MANIFEST: usize = 4 << 20;

/// The limit on a request to `path`; `None` for bodies that stream.
pub fn limit(path: &str) -> Option<usize> {
    if path == "/api/v1" || path.starts_with("/api/v1/") {
        return Some(MAX_API_BODY);
    }
    if path == "/token" {
        return Some(MAX_TOKEN_FORM);
    }
    match crate::http::oci::route(path) {
        Some(crate::http::oci::Route::Manifest(..)) => Some(MAX_MANIFEST),
        _ => None,
    }
}

/// The answer to a body over `max` bytes.
pub fn too_large(max: usize) -> RegistryError {
    RegistryError::with_status(
        Code::SizeInvalid,
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than {max} bytes"),
    )
}

/// Reads a whole request body of at most `max` bytes. A body over the
/// limit is answered 413; one that stopped arriving (the server's
/// `[http] idle_timeout_seconds`) 408; one that broke off 400 with
/// `code`: each is the client's doing, never the server's.
pub async fn read_body(body: Body, max: usize, code: Code) -> Result<bytes::Bytes, RegistryError> {
    axum::body::to_bytes(body, max)
        .await
        .map_err(|e| body_error(&e, max, code))
}

/// What a failed read of a request body is answered with (see
/// [`read_body`]).
pub fn body_error(e: &(dyn std::error::Error + 'static), max: usize, code: Code) -> RegistryError {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.is::<http_body_util::LengthLimitError>() {
            return too_large(max);
        }
        if c.is::<tower_http::timeout::TimeoutError>() {
            return RegistryError::with_status(
                code,
                StatusCode::REQUEST_TIMEOUT,
                "the request body stopped arriving",
            );
        }
        cause = c.source();
    }
    RegistryError::new(code, format!("the request body broke off: {e}"))
}

/// How far past its limit a declared body is still read (and dropped)
/// before the refusal. A client writes its whole body before it reads the
/// answer; refused while still writing, it sees a reset connection instead
/// of the 413. Larger bodies are refused at once, unread.
const DRAIN_BEYOND: u64 = 8 << 20;

/// Reads and drops `body`, at most `max` bytes of it.
async fn drain(body: Body, max: u64) {
    use http_body_util::BodyExt as _;
    let mut body = http_body_util::Limited::new(body, max as usize);
    while let Some(Ok(_)) = body.frame().await {}
}

/// The layer.
pub async fn limit_bodies(req: Request, next: Next) -> Response {
    let Some(max) = limit(req.uri().path()) else {
        return next.run(req).await;
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > max as u64) {
        if n <= max as u64 + DRAIN_BEYOND {
            drain(req.into_body(), n).await;
        }
        return too_large(max).into_response();
    }
    // Handlers read with `to_bytes(body, max)` as well; this makes the
    // limit hold for every reader, and fail as soon as it is passed.
    next.run(req.map(|b| Body::new(http_body_util::Limited::new(b, max))))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_by_endpoint() {
        assert_eq!(limit("/api/v1/volumes/w/a"), Some(MAX_API_BODY));
        assert_eq!(limit("/api/v1"), Some(MAX_API_BODY));
        assert_eq!(limit("/token"), Some(MAX_TOKEN_FORM));
        assert_eq!(limit("/v2/w/a/manifests/latest"), Some(MAX_MANIFEST));
        assert_eq!(limit("/v2/w/a/blobs/uploads/u"), None);
        assert_eq!(limit("/v2/w/a/blobs/uploads/"), None);
        assert_eq!(limit("/api/v10"), None);
    }
}
