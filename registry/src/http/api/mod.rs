//! The volume API (SPEC.md §7.3, §8.3): JSON under `/api/v1`, beside the
//! OCI API and over the same store. `http::router` holds its table; the handlers
//! are in [`volumes`], [`syncs`] and [`admin`] (garbage collection, API
//! keys, secrets). A volume name holds slashes, so the segment `-`
//! separates it from what follows, as GitLab's routes do.

pub mod admin;
pub mod syncs;
pub mod volumes;

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::error::{Code, RegistryError, Result};
use crate::http::extract::MAX_API_BODY as MAX_BODY;
use crate::http::query::Page;

pub(crate) async fn no_such_endpoint() -> RegistryError {
    RegistryError::with_status(Code::Unsupported, StatusCode::NOT_FOUND, "no such endpoint")
}

pub(crate) async fn method_not_supported() -> RegistryError {
    RegistryError::new(Code::Unsupported, "method not supported on this endpoint")
}

pub(crate) fn invalid(why: impl Into<String>) -> RegistryError {
    RegistryError::new(Code::Invalid, why)
}
pub(crate) fn json_response(status: StatusCode, v: impl serde::Serialize) -> Result<Response> {
    let body = serde_json::to_vec(&v).map_err(RegistryError::internal)?;
    Ok((status, [(header::CONTENT_TYPE, "application/json")], body).into_response())
}
pub(crate) fn ok(v: impl serde::Serialize) -> Result<Response> {
    json_response(StatusCode::OK, v)
}
/// A page of a list, with the `Link` to the next one when there is one
/// (SPEC.md §7.2).
pub(crate) fn ok_page(v: impl serde::Serialize, link: Option<String>) -> Result<Response> {
    let mut resp = ok(v)?;
    if let Some(link) = link {
        let value = header::HeaderValue::from_str(&link).map_err(RegistryError::internal)?;
        resp.headers_mut().insert(header::LINK, value);
    }
    Ok(resp)
}
pub(crate) fn page_of(q: Option<&str>) -> Result<Page> {
    Page::of(q).map_err(invalid)
}
pub(crate) async fn body<T: for<'de> Deserialize<'de>>(req_body: Body) -> Result<T> {
    let bytes = crate::http::extract::read_body(req_body, MAX_BODY, Code::Invalid).await?;
    let bytes = if bytes.is_empty() {
        bytes::Bytes::from_static(b"{}")
    } else {
        bytes
    };
    serde_json::from_slice(&bytes).map_err(|e| invalid(format!("request body: {e}")))
}
/// `expires_at`: an RFC 3339 time or null.
pub(crate) fn parse_time(t: Option<&str>) -> Result<Option<u64>> {
    let Some(t) = t else { return Ok(None) };
    let at = humantime::parse_rfc3339_weak(t)
        .map_err(|e| invalid(format!("expires_at {t:?} is not an RFC 3339 time: {e}")))?;
    Ok(Some(
        at.duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| invalid(format!("expires_at {t:?} is before 1970")))?
            .as_secs(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::extract::check_digest;

    #[test]
    fn digests_and_times() {
        assert!(check_digest(&format!("b3:{}", "a".repeat(64))).is_ok());
        assert!(check_digest(&format!("sha256:{}", "a".repeat(64))).is_ok());
        assert!(check_digest("b3:abc").is_err());
        assert_eq!(
            parse_time(Some("1970-01-02T00:00:00Z")).unwrap(),
            Some(86_400)
        );
        assert!(parse_time(Some("tomorrow")).is_err());
        assert_eq!(parse_time(None).unwrap(), None);
    }
}
