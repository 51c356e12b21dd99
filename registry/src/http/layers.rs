//! The tower layers every request passes before its handler, stacked in
//! `http::router` (SPEC.md §7.5):
//!
//! - [`authorize`] reads the request's [`Credentials`], asks `auth` who
//!   sent them, asks [`crate::http::access::need`] what the route needs
//!   and the policy whether the caller has it, answers 401 (with the
//!   challenge) or 403 `DENIED` itself, and otherwise hands the handler a
//!   [`Caller`] in the request's extensions, for the decisions that need
//!   a body or a stored record (sync jobs) and for filtering listings;
//! - [`csrf`] refuses `/api/v1` writes a web page could forge: no JSON
//!   content type (a CORS "simple request") or a foreign `Origin`;
//! - [`limit_bodies`] bounds a request body by endpoint before any
//!   handler reads: a `Content-Length` over the limit is refused at once,
//!   and a body without one is cut off where it passes the limit, so an
//!   oversized request is never read whole. Blob uploads stream to disk
//!   and have no limit here.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use tower_http::catch_panic::CatchPanicLayer;

use crate::auth::caller::denied_line;
use crate::auth::policy::Subject;
use crate::auth::{Auth, Caller, Credentials};
use crate::error::{Code, RegistryError};
use crate::http::access::{self, Action, Need};
use crate::http::extract::{too_large, MAX_API_BODY, MAX_TOKEN_FORM};
use crate::http::hf;
use crate::http::routes::{oci, route, Oci, Route};

/// What a request presents: its `Authorization` header, else (on the web
/// view's pages) its session cookie.
fn credentials(headers: &HeaderMap, web: bool) -> Credentials {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return match crate::http::ui::session::token_of(headers) {
            Some(token) if web => Credentials::Session(token.to_string()),
            _ => Credentials::None,
        };
    };
    let bearer = value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"));
    if let Some((_, token)) = bearer {
        let token = token.trim();
        // An API key's `id:secret` line sent as a bearer token, as clients
        // that take one token send it (huggingface_hub's HF_TOKEN): the
        // same as Basic credentials. A JWT never holds a `:`.
        if let Some((id, secret)) = token.split_once(':') {
            if id.starts_with(sealvol_spec::api::API_KEY_PREFIX) {
                return Credentials::Basic {
                    user: id.to_string(),
                    password: secret.to_string(),
                };
            }
        }
        return Credentials::Bearer(token.to_string());
    }
    match basic_credentials(value) {
        Ok((user, password)) => Credentials::Basic { user, password },
        Err(why) => Credentials::Malformed(why),
    }
}

/// The token scope a request needing `need` asks for.
fn scope_of(need: &Need) -> Option<String> {
    match need {
        Need::Repository { name, action } => Some(match action {
            // Docker clients ask for both when they push.
            Action::Push => format!("repository:{name}:pull,push"),
            a => format!("repository:{name}:{}", a.as_str()),
        }),
        Need::Listing => Some("registry:catalog:*".into()),
        _ => None,
    }
}

/// 401 with the challenge a client answers by logging in: the token
/// flow where the registry issues tokens, else Basic.
fn unauthorized(auth: &Auth, why: &str, need: &Need) -> Response {
    if let Need::Web { path } = need {
        // A page asks the browser to log in, not for a Basic dialog.
        let mut resp = StatusCode::SEE_OTHER.into_response();
        let to = format!("/ui/login?next={}", crate::http::query::encode(path));
        if let Ok(v) = HeaderValue::from_str(&to) {
            resp.headers_mut().insert(header::LOCATION, v);
        }
        return resp;
    }
    let mut resp = RegistryError::new(Code::Unauthorized, why).into_response();
    let challenge = match auth.issuer() {
        Some(i) => i.challenge(scope_of(need).as_deref()),
        None => "Basic realm=\"sealvol\"".to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}

/// 403 `DENIED`, with the `insufficient_scope` challenge of RFC 6750
/// where the registry issues tokens: clients that answer any 401 or
/// 403 by asking for a token (oras-py) then see the refusal at once
/// instead of retrying.
fn forbidden(auth: &Auth, why: String, need: &Need) -> Response {
    let mut resp = RegistryError::new(Code::Denied, why).into_response();
    if let Some(i) = auth.issuer() {
        let challenge = format!(
            "{},error=\"insufficient_scope\"",
            i.challenge(scope_of(need).as_deref())
        );
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
    }
    resp
}

/// The auth layer: authenticate, decide what the route needs, hand the
/// caller on.
pub async fn authorize(State(auth): State<Arc<Auth>>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let route = route(&path);
    let web = matches!(route, Some(Route::Web(_)));
    // The Hub gateway's clients read refusals in the Hub's dialect.
    let hub = matches!(route, Some(Route::Hf(_)));
    let get = req.method() == Method::GET;
    let need = access::need(req.method(), &path);
    // Where a page that needs a login sends the browser back to.
    let login = Need::Web { path };
    let presented = credentials(req.headers(), web);
    let (subject, grant) = match auth.identify(&presented).await {
        Ok(s) => s,
        Err(_) if hub => return hf::refusal(hf::Refused::BadCredentials, ""),
        Err(why) => return unauthorized(&auth, why, if web { &login } else { &need }),
    };
    let policy = auth.policy();
    // Anonymous callers are asked to log in, and so is a token that lacks
    // the scope (the client asks for another); known users are refused.
    let refuse = |repository: &str, action: &str, retry: bool| -> Response {
        denied_line(&subject, repository, action);
        if hub {
            let why = format!("{} may not {action} {repository}", subject.name());
            return match subject {
                Subject::Anonymous => {
                    hf::refusal(hf::Refused::Anonymous, "authentication required")
                }
                _ => hf::refusal(hf::Refused::Forbidden, &why),
            };
        }
        match subject {
            Subject::Anonymous if web && get => {
                unauthorized(&auth, "authentication required", &login)
            }
            Subject::Anonymous => unauthorized(&auth, "authentication required", &need),
            _ if retry => unauthorized(&auth, "the token does not grant this", &need),
            _ => forbidden(
                &auth,
                format!("{} may not {action} {repository}", subject.name()),
                &need,
            ),
        }
    };
    match &need {
        Need::Nothing | Need::Web { .. } => {}
        // `GET /v2/` is where clients learn the registry's challenge:
        // with authentication on, a request without credentials is
        // challenged there even where anonymous callers may pull, as
        // distribution and Docker Hub do. Answered 200, a client that
        // holds credentials (oci-client, docker) concludes that none are
        // needed, never sends them, and has its pushes refused. Anonymous
        // clients answer the challenge with an anonymous token.
        Need::Base
            if matches!(route, Some(Route::Oci(Oci::Base)))
                && matches!(presented, Credentials::None)
                && auth.issuer().is_some() =>
        {
            return unauthorized(&auth, "authentication required", &need);
        }
        Need::Base | Need::Listing | Need::SyncJob(_) | Need::NewSync => {
            if !policy.knows(&subject) {
                return refuse("", "use", false);
            }
        }
        Need::Admin => {
            if !policy.is_admin(&subject) {
                return refuse("", "administer", false);
            }
        }
        Need::Repository { name, action } => {
            let (name, action) = (name.as_str(), *action);
            if !policy.allows(&subject, name, action) {
                return refuse(name, action.as_str(), false);
            }
            if grant.as_ref().is_some_and(|g| !g.grants(name, action)) {
                return refuse(name, action.as_str(), true);
            }
            // A cross-repository mount from a repository the caller may
            // not read becomes a plain upload, as in distribution.
            if let Some(from) = access::mount_source(req.uri().query()) {
                if !policy.allows(&subject, &from, Action::Pull) {
                    let path = req.uri().path().to_string();
                    if let Ok(uri) = path.parse() {
                        *req.uri_mut() = uri;
                    }
                }
            }
        }
    }
    req.extensions_mut()
        .insert(Caller::new(subject, grant, Arc::clone(&auth)));
    next.run(req).await
}

/// The user and password of a `Basic` `Authorization` value; `Err` says
/// what is wrong with it.
#[doc(hidden)] // pub for the fuzz targets (fuzz/)
pub fn basic_credentials(value: &HeaderValue) -> Result<(String, String), &'static str> {
    let value = value
        .to_str()
        .map_err(|_| "malformed Authorization header")?;
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(crate::auth::UNSUPPORTED_SCHEME);
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .map_err(|_| "malformed Basic credentials")?;
    let decoded = String::from_utf8(decoded).map_err(|_| "malformed Basic credentials")?;
    let (user, password) = decoded
        .split_once(':')
        .ok_or("malformed Basic credentials")?;
    Ok((user.to_string(), password.to_string()))
}

/// Refuses `/api/v1` requests a web page could send on the operator's
/// behalf (SPEC.md §7.5): writes without `Content-Type: application/json`
/// (a form or a `text/plain` fetch needs no preflight), and anything from
/// another origin.
pub async fn csrf(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if matches!(route(path), Some(Route::Web(_))) {
        // A form post of the web view comes from one of its own pages:
        // browsers send the page's Origin with every POST.
        let read = req.method() == Method::GET || req.method() == Method::HEAD;
        let own = req
            .headers()
            .get(header::ORIGIN)
            .is_some_and(|o| auth.origins().iter().any(|a| a.as_bytes() == o.as_bytes()));
        if !read && !own {
            return RegistryError::new(
                Code::Denied,
                "a form of the web view is posted from its own pages only",
            )
            .into_response();
        }
        return next.run(req).await;
    }
    if path != "/api/v1" && !path.starts_with("/api/v1/") {
        return next.run(req).await;
    }
    let headers = req.headers();
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
    let foreign = headers
        .get(header::ORIGIN)
        .is_some_and(|o| !auth.origins().iter().any(|a| a.as_bytes() == o.as_bytes()));
    if cross_site || foreign {
        return RegistryError::new(Code::Denied, "cross-origin requests are refused")
            .into_response();
    }
    let method = req.method();
    if method != Method::GET && method != Method::HEAD {
        let essence = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            });
        let secret_put = method == Method::PUT && path.starts_with("/api/v1/secrets/");
        let ok = match essence.as_deref() {
            Some("application/json") => true,
            Some("application/octet-stream") => secret_put,
            _ => false,
        };
        if !ok {
            let want = if secret_put {
                "application/octet-stream"
            } else {
                "application/json"
            };
            return RegistryError::with_status(
                Code::Unsupported,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("{method} {path} needs Content-Type: {want}"),
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// The limit on a request to `path`; `None` for bodies that stream.
pub fn limit(path: &str) -> Option<usize> {
    if path == "/api/v1" || path.starts_with("/api/v1/") {
        return Some(MAX_API_BODY);
    }
    if path == "/token" {
        return Some(MAX_TOKEN_FORM);
    }
    match oci(path) {
        Some(Oci::Manifest(..)) => Some(crate::service::manifests::MAX_MANIFEST),
        _ => None,
    }
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

/// Counts every answer and times it, by method and status.
/// Counts requests and their latency by method and status.
pub async fn record_metrics(req: Request, next: Next) -> Response {
    let method = req.method().to_string();
    let started = Instant::now();
    let resp = next.run(req).await;
    let labels = [
        ("method", method),
        ("status", resp.status().as_u16().to_string()),
    ];
    metrics::counter!("sealvol_http_requests_total", &labels).increment(1);
    metrics::histogram!("sealvol_http_request_duration_seconds", &labels)
        .record(started.elapsed().as_secs_f64());
    resp
}

/// The layer that turns a panicking request into a 500 `UNKNOWN` answer.
pub fn catch_panics() -> CatchPanicLayer<fn(Box<dyn std::any::Any + Send + 'static>) -> Response> {
    CatchPanicLayer::custom(crate::http::respond::panicked as fn(_) -> Response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_key_line_as_a_bearer_token_is_read_as_basic_credentials() {
        let of = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            credentials(&h, false)
        };
        match of("Bearer svk_0123:s3cr:et") {
            Credentials::Basic { user, password } => {
                assert_eq!((user.as_str(), password.as_str()), ("svk_0123", "s3cr:et"))
            }
            other => panic!("{other:?}"),
        }
        // A JWT, or a line of no key, stays a bearer token.
        assert!(matches!(
            of("Bearer eyJhbGciOi.x.y"),
            Credentials::Bearer(_)
        ));
        assert!(matches!(of("bearer alice:pw"), Credentials::Bearer(_)));
    }

    #[test]
    fn limits_by_endpoint() {
        assert_eq!(limit("/api/v1/volumes/w/a"), Some(MAX_API_BODY));
        assert_eq!(limit("/api/v1"), Some(MAX_API_BODY));
        assert_eq!(limit("/token"), Some(MAX_TOKEN_FORM));
        assert_eq!(
            limit("/v2/w/a/manifests/latest"),
            Some(crate::service::manifests::MAX_MANIFEST)
        );
        assert_eq!(limit("/v2/w/a/blobs/uploads/u"), None);
        assert_eq!(limit("/v2/w/a/blobs/uploads/"), None);
        assert_eq!(limit("/api/v10"), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any header value parses or is refused without panicking; a
        /// user (without `:`) and password round-trip through the header.
        #[test]
        fn basic_credentials_parse_any_header_and_round_trip(
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            user in "[^:]{0,16}",
            password in "\\PC{0,16}",
        ) {
            if let Ok(v) = HeaderValue::from_bytes(&junk) {
                let _ = basic_credentials(&v);
            }
            let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            let v = HeaderValue::from_str(&format!("Basic {b64}")).unwrap();
            proptest::prop_assert_eq!(basic_credentials(&v), Ok((user.clone(), password.clone())));
            // Another scheme, or base64 that lost its padding, is refused.
            let bearer = HeaderValue::from_str(&format!("Bearer {b64}")).unwrap();
            proptest::prop_assert!(basic_credentials(&bearer).is_err());
            if b64.ends_with('=') {
                let cut = HeaderValue::from_str(&format!("Basic {}", b64.trim_end_matches('='))).unwrap();
                proptest::prop_assert!(basic_credentials(&cut).is_err());
            }
        }
    }
}
