//! `/api/v1/gc`, `/api/v1/keys` and `/api/v1/secrets`: what only an
//! admin may do (SPEC.md §7.4, §7.5, §8.4).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sealvol_spec::api;

use crate::auth::Caller;
use crate::error::{Code, RegistryError, Result};
use crate::http::api::{body, invalid, json_response, ok, parse_time};
use crate::http::extract::Param;
use crate::http::query::flag as query_flag;
use crate::state::app::App;

/// `POST /api/v1/gc[?dry_run=true]`.
pub(crate) async fn gc(State(app): State<Arc<App>>, RawQuery(q): RawQuery) -> Result<Response> {
    let dry_run = query_flag(q.as_deref(), "dry_run");
    ok(crate::service::gc::collect(&app, dry_run).await?)
}
/// `GET /api/v1/keys`.
pub(crate) async fn list_keys(State(app): State<Arc<App>>) -> Result<Response> {
    ok(api::ApiKeyList {
        keys: crate::service::keys::list(&app).await?,
    })
}
/// `POST /api/v1/keys`: the answer holds the secret, once.
pub(crate) async fn create_key(
    State(app): State<Arc<App>>,
    caller: Caller,
    req_body: Body,
) -> Result<Response> {
    let by = caller.subject.name().to_string();
    let b: api::ApiKeyRequest = body(req_body).await?;
    let expires = parse_time(b.expires_at.as_deref())?;
    let key = crate::service::keys::create(&app, b, expires, by).await?;
    json_response(StatusCode::CREATED, key)
}
/// `DELETE /api/v1/keys/ID`.
pub(crate) async fn revoke_key(State(app): State<Arc<App>>, Param(id): Param) -> Result<Response> {
    crate::service::keys::revoke(&app, id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
/// `GET /api/v1/secrets`.
pub(crate) async fn list_secrets(State(app): State<Arc<App>>) -> Result<Response> {
    ok(crate::service::syncs::jobs::list_secrets(&app).await?)
}
/// Largest secret value (SPEC.md §8.3).
const MAX_SECRET: usize = 64 << 10;

/// `PUT /api/v1/secrets/NAME?for=URI…[&dest=GLOB…]`.
pub(crate) async fn set_secret(
    State(app): State<Arc<App>>,
    Param(name): Param,
    RawQuery(q): RawQuery,
    req_body: Body,
) -> Result<Response> {
    let (mut for_sources, mut dest) = (Vec::new(), Vec::new());
    let pairs = q
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty());
    for kv in pairs {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "for" => for_sources.push(crate::http::query::decode(v)),
            "dest" => dest.push(crate::http::query::decode(v)),
            other => {
                return Err(RegistryError::new(
                    Code::Invalid,
                    format!("unknown parameter {other}; use for= and dest="),
                ))
            }
        }
    }
    let name = crate::service::syncs::jobs::check_secret(&name, &for_sources, &dest)?;
    let value = crate::http::extract::read_body(req_body, MAX_SECRET, Code::Invalid)
        .await
        .map_err(|e| match e.status() {
            StatusCode::PAYLOAD_TOO_LARGE => {
                invalid(format!("a secret is at most {MAX_SECRET} bytes"))
            }
            _ => e,
        })?;
    crate::service::syncs::jobs::set_secret(&app, name, for_sources, dest, value).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
/// `DELETE /api/v1/secrets/NAME`.
pub(crate) async fn delete_secret(
    State(app): State<Arc<App>>,
    Param(name): Param,
) -> Result<Response> {
    crate::service::syncs::jobs::delete_secret(&app, &name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
