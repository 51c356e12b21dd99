//! What handlers take from a request, parsed once at the edge: the
//! caller the auth layer put in its extensions, and whole bodies read
//! within their limit.

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;

use crate::auth::Caller;
use crate::error::{Code, RegistryError};

/// The caller a handler runs for. A handler reached without the auth
/// layer (never in `sealvol serve`) gets an anonymous caller with no
/// rights, so a missing layer fails closed.
pub fn caller(req: &Request) -> Caller {
    caller_of(req.extensions())
}

fn caller_of(extensions: &axum::http::Extensions) -> Caller {
    extensions
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(Caller::anonymous)
}

/// Handlers take the caller as an extractor.
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Caller, Self::Rejection> {
        Ok(caller_of(&parts.extensions))
    }
}

/// A `/api/v1` JSON body (SPEC.md §7.3).
pub const MAX_API_BODY: usize = 64 << 10;
/// A `POST /token` form: a user name, a password and a few scopes.
pub const MAX_TOKEN_FORM: usize = 8 << 10;
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
