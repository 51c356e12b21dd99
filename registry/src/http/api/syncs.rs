//! `/api/v1/syncs`: sync jobs (SPEC.md §8.3); what they do is
//! `service::syncs`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use sealvol_spec::api;

use crate::auth::Caller;
use crate::error::Result;
use crate::http::api::{body, json_response, ok};
use crate::http::extract::Param;
use crate::http::query::param as query_value;
use crate::state::app::App;

/// `POST /api/v1/syncs`.
pub(crate) async fn create_sync(
    State(app): State<Arc<App>>,
    caller: Caller,
    req_body: Body,
) -> Result<Response> {
    let b: api::SyncRequest = body(req_body).await?;
    json_response(
        StatusCode::CREATED,
        crate::service::syncs::jobs::create(&app, &caller, b).await?,
    )
}
/// `GET /api/v1/syncs[?dest=NAME]`.
pub(crate) async fn list_syncs(
    State(app): State<Arc<App>>,
    caller: Caller,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    let dest = query_value(q.as_deref(), "dest");
    ok(crate::service::syncs::jobs::list(&app, &caller, dest).await?)
}
/// `GET /api/v1/syncs/ID`.
pub(crate) async fn describe_sync(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param,
) -> Result<Response> {
    ok(crate::service::syncs::jobs::describe(&app, &caller, &id).await?)
}
/// `POST /api/v1/syncs/ID/cancel`.
pub(crate) async fn cancel_sync(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param,
) -> Result<Response> {
    ok(crate::service::syncs::jobs::cancel(&app, &caller, id).await?)
}
