//! `GET /token` and `POST /token`: the registry's token server, as the
//! distribution token spec answers. Who may have which scopes is
//! `auth::tokens`'.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::auth::{Auth, Credentials};
use crate::error::{Code, RegistryError};

/// The Basic credentials of `headers` (a bearer token is refused here).
fn basic_of(headers: &HeaderMap) -> Credentials {
    match headers.get(header::AUTHORIZATION) {
        None => Credentials::None,
        Some(v) => match crate::http::layers::basic_credentials(v) {
            Ok((user, password)) => Credentials::Basic { user, password },
            Err(why) => Credentials::Malformed(why),
        },
    }
}

/// `GET /token` (Basic credentials, or none for what anonymous callers
/// may do) and `POST /token` (the OAuth2 password form): a token for the
/// scopes asked, as the distribution token spec answers.
pub async fn token(State(auth): State<Arc<Auth>>, req: Request) -> Response {
    let Some(issuer) = auth.issuer() else {
        return RegistryError::with_status(
            Code::Unsupported,
            StatusCode::NOT_FOUND,
            "this registry has no [auth]: no token is needed",
        )
        .into_response();
    };
    let basic_challenge = |why: &str| {
        let mut resp = RegistryError::new(Code::Unauthorized, why).into_response();
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"sealvol\""),
        );
        resp
    };
    let mut params: Vec<(String, String)> = req
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let subject = if req.method() == Method::POST {
        let max = crate::http::extract::MAX_TOKEN_FORM;
        let body = match crate::http::extract::read_body(req.into_body(), max, Code::Invalid).await
        {
            Ok(b) => b,
            Err(e) => return e.into_response(),
        };
        params.extend(form_urlencoded::parse(&body).into_owned());
        let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        if get("grant_type").as_deref() != Some("password") {
            return RegistryError::new(Code::Unsupported, "grant_type must be password")
                .into_response();
        }
        let (user, password) = (
            get("username").unwrap_or_default(),
            get("password").unwrap_or_default(),
        );
        match auth
            .authenticate(&Credentials::login(&user, &password))
            .await
        {
            Ok(s) => s,
            Err(why) => return basic_challenge(why),
        }
    } else {
        match auth.authenticate(&basic_of(req.headers())).await {
            Ok(s) => s,
            Err(why) => return basic_challenge(why),
        }
    };
    if let Some((_, service)) = params.iter().find(|(k, _)| k == "service") {
        if service != issuer.service() {
            return RegistryError::new(
                Code::Denied,
                format!("tokens here are for service {:?}", issuer.service()),
            )
            .into_response();
        }
    }
    let scopes: Vec<String> = params
        .iter()
        .filter(|(k, _)| k == "scope")
        .map(|(_, v)| v.clone())
        .collect();
    match issuer.issue(auth.policy(), &subject, &scopes, crate::auth::unix_now()) {
        Ok(answer) => axum::Json(answer).into_response(),
        Err(why) => RegistryError::with_status(Code::Unsupported, StatusCode::BAD_REQUEST, why)
            .into_response(),
    }
}
