//! What a page of the web view answers (HTML with its security headers,
//! a redirect, an error page) and the form fields it reads.

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sealvol_spec::api;

use crate::error::{RegistryError, Result};
use crate::http::ui::pages;

/// The content security policy of every page: nothing but this origin,
/// no inline script or style, no framing.
const CSP: &str = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'";

/// A redirect after a form post, or to a canonical path.
pub(crate) fn see_other(to: &str) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

/// An HTML page with the headers every page carries.
pub(crate) fn html(status: StatusCode, markup: maud::Markup) -> Response {
    let mut resp = (status, markup).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// A failure as a page: the error's message, with its status.
pub(crate) fn error_page(who: &pages::Who, e: RegistryError) -> Response {
    // Logged here, once: the page is the answer, not the error's JSON.
    let status = e.status();
    if status.is_server_error() {
        tracing::error!(error = %e, "web view");
    }
    html(status, pages::error(who, status, &e.to_string()))
}

/// The fields of a posted form.
pub(crate) async fn form(body: Body) -> Result<Vec<(String, String)>> {
    let max = crate::http::extract::MAX_API_BODY;
    let bytes = crate::http::extract::read_body(body, max, api::ErrorCode::Invalid).await?;
    Ok(form_urlencoded::parse(&bytes).into_owned().collect())
}

pub(crate) fn field(fields: &[(String, String)], key: &str) -> String {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default()
}
