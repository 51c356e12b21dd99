//! Logging in to the web view: the form trades a user's password (or an
//! API key's id and secret) for a session cookie holding a token the
//! registry signs ([`crate::auth::tokens::Issuer::session`]): `HttpOnly` (no
//! script reads it), `Secure`, `SameSite=Strict` (no other site's page
//! sends it) and scoped to `/ui`. The auth layer reads it for `/ui` paths
//! only, so it opens nothing under `/v2` or `/api/v1`, and it names only
//! the subject: the policy decides each request, so a change of policy or
//! a revoked key applies at once.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;

use crate::auth::{Auth, Caller};
use crate::http::ui::pages;
use crate::http::ui::reply::{error_page, field, form, html, see_other};
use crate::state::app::App;

/// The cookie's name.
pub(crate) const COOKIE: &str = "sealvol_session";

/// Where to go after logging in: a `/ui` path only, so the form cannot
/// send a user elsewhere.
fn next_of(next: &str) -> String {
    let local = next.starts_with("/ui/") && !next.starts_with("//") && !next.contains('\\');
    if local {
        next.to_string()
    } else {
        "/ui/".to_string()
    }
}

/// The session token a request's cookies hold.
pub(crate) fn token_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| {
            let (k, v) = c.trim().split_once('=')?;
            (k == COOKIE && !v.is_empty()).then_some(v)
        })
}

/// `GET /ui/login[?next=PATH]`.
pub(super) async fn login_form(caller: Caller, RawQuery(q): RawQuery) -> Response {
    let who = pages::Who::of(&caller, None);
    let next = next_of(&crate::http::query::param(q.as_deref(), "next").unwrap_or_default());
    html(StatusCode::OK, pages::login(&who, &next, None))
}

/// `POST /ui/login`: checks the credentials as Basic auth would, then
/// sets the cookie and goes on to `next`.
pub(super) async fn login(State(_app): State<Arc<App>>, caller: Caller, body: Body) -> Response {
    let who = pages::Who::of(&caller, None);
    let fields = match form(body).await {
        Ok(f) => f,
        Err(e) => return error_page(&who, e),
    };
    let next = next_of(&field(&fields, "next"));
    let (user, password) = (field(&fields, "username"), password_of(&fields));
    let auth: &Auth = caller.auth();
    match auth.session_for(&user, &password).await {
        Ok(Some((token, ttl))) => {
            let mut resp = see_other(&next);
            let cookie = format!(
                "{COOKIE}={token}; Path=/ui; Max-Age={ttl}; HttpOnly; Secure; SameSite=Strict"
            );
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                resp.headers_mut().insert(header::SET_COOKIE, v);
            }
            resp
        }
        Ok(None) => html(
            StatusCode::OK,
            pages::login(
                &who,
                &next,
                Some("This registry has no authentication: everyone may use it as is."),
            ),
        ),
        Err(why) => html(
            StatusCode::UNAUTHORIZED,
            pages::login(&who, &next, Some(&format!("Not logged in: {why}."))),
        ),
    }
}

/// The password as typed: not trimmed, since it may begin or end with a
/// space.
fn password_of(fields: &[(String, String)]) -> String {
    fields
        .iter()
        .find(|(k, _)| k == "password")
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// `POST /ui/logout`: forgets the cookie.
pub(super) async fn logout() -> Response {
    let mut resp = see_other("/ui/login");
    let cookie = format!("{COOKIE}=; Path=/ui; Max-Age=0; HttpOnly; Secure; SameSite=Strict");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_in_the_view() {
        assert_eq!(next_of("/ui/volumes/w/a"), "/ui/volumes/w/a");
        assert_eq!(next_of("https://evil.example/"), "/ui/");
        assert_eq!(next_of("//evil.example/ui/"), "/ui/");
        assert_eq!(next_of("/ui/\\evil"), "/ui/");
        assert_eq!(next_of(""), "/ui/");
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; sealvol_session=tok.en; c=d"),
        );
        assert_eq!(token_of(&h), Some("tok.en"));
        h.insert(header::COOKIE, HeaderValue::from_static("sealvol_session="));
        assert_eq!(token_of(&h), None);
    }
}
