//! `/api/v1/syncs` and `/api/v1/schedules`: sync jobs (SPEC.md §8.3) and
//! their schedules (§8.6); what they do is `service::syncs`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
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

/// `POST /api/v1/schedules`.
pub(crate) async fn create_schedule(
    State(app): State<Arc<App>>,
    caller: Caller,
    req_body: Body,
) -> Result<Response> {
    let b: api::ScheduleRequest = body(req_body).await?;
    json_response(
        StatusCode::CREATED,
        crate::service::syncs::schedules::create(&app, &caller, b).await?,
    )
}
/// `GET /api/v1/schedules[?dest=NAME]`.
pub(crate) async fn list_schedules(
    State(app): State<Arc<App>>,
    caller: Caller,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    let dest = query_value(q.as_deref(), "dest");
    ok(crate::service::syncs::schedules::list(&app, &caller, dest).await?)
}
/// `GET /api/v1/schedules/ID`.
pub(crate) async fn describe_schedule(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param,
) -> Result<Response> {
    ok(crate::service::syncs::schedules::describe(&app, &caller, &id).await?)
}
/// `POST /api/v1/schedules/ID/pause`.
pub(crate) async fn pause_schedule(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param,
) -> Result<Response> {
    ok(crate::service::syncs::schedules::set_paused(&app, &caller, &id, true).await?)
}
/// `POST /api/v1/schedules/ID/resume`.
pub(crate) async fn resume_schedule(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param,
) -> Result<Response> {
    ok(crate::service::syncs::schedules::set_paused(&app, &caller, &id, false).await?)
}
/// `DELETE /api/v1/schedules/ID`.
pub(crate) async fn delete_schedule(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param,
) -> Result<Response> {
    crate::service::syncs::schedules::delete(&app, &caller, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
