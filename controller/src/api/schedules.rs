//! `POST/GET /schedules`, `GET/PATCH/DELETE /schedules/{id}`: runs started by a cron
//! expression in UTC (see docs/operations.md, "Schedules").

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use iohr_domain::RunKind;
use iohr_domain::run::ScenarioRef;
use serde::{Deserialize, Serialize};

use super::auth::{Caller, ReadScope, RunScope};
use super::error::{ApiError, JsonBody};
use crate::Shared;
pub use crate::resources::schedules::ScheduleRecord;
use crate::resources::schedules::{self, ScheduleRequest, record};
use crate::runs::RunRequest;
use crate::store::{ScheduleChange, now_ms};

/// A run's POST body plus `name` and `cron`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSchedule {
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    /// Five fields, minute first, as crontab (or six with seconds first), in UTC.
    pub cron: String,
    /// Created paused with `false` (default `true`).
    #[serde(default)]
    pub enabled: Option<bool>,
    #[schema(value_type = RunKind)]
    pub kind: String,
    pub environment: String,
    pub target: String,
    /// The kind's spec, inline (stored as a scenario version when the schedule is made).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub spec: Option<serde_json::Value>,
    #[serde(default)]
    pub scenario: Option<ScenarioRef>,
    #[serde(default)]
    pub scenario_name: Option<String>,
    #[serde(default)]
    pub executor: Option<String>,
    #[serde(default)]
    pub change: Option<String>,
    #[serde(default)]
    pub confirm_within: Option<String>,
    /// Each fire's run split over this many agents, as a POSTed run's `agents`.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 64)]
    pub agents: Option<u32>,
}

/// What a PATCH may change: the name, the expression, enabled or paused.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchSchedule {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub cron: Option<String>,
    #[serde(default)]
    pub enabled: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartedByRef {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
}

/// The account's schedules.
#[allow(dead_code)] // a schema: the list is written with `json!`
#[derive(utoipa::ToSchema)]
pub struct ScheduleList {
    schedules: Vec<ScheduleRecord>,
}

/// Make a schedule: a run's request and a cron expression in UTC.
///
/// Scope: `reliability:run`.
#[utoipa::path(
    post,
    path = "/v1/reliability/schedules",
    tag = "schedules",
    operation_id = "create_schedule",
    security(("bearer" = [])),
    request_body = CreateSchedule,
    responses(
        (status = 201, description = "The schedule with its next fire times", body = ScheduleRecord),
        (status = 400, description = "`malformed_json`, `invalid_body`, `invalid_name`, `invalid_cron`, and every refusal of `POST /runs` but the queue's", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 422, description = "`schedule_too_frequent` (names the floor), `too_many_schedules`, `target_not_allowed` and `unknown_secret` (as `POST /runs`)", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn create(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    JsonBody(body): JsonBody<CreateSchedule>,
) -> Result<impl IntoResponse, ApiError> {
    let request = ScheduleRequest {
        name: body.name,
        cron: body.cron,
        enabled: body.enabled,
        run: RunRequest {
            kind: body.kind,
            environment: body.environment,
            target: body.target,
            spec: body.spec,
            scenario: body.scenario,
            scenario_name: body.scenario_name,
            executor: body.executor,
            change: body.change,
            confirm_within: body.confirm_within,
            agents: body.agents,
        },
    };
    let record = schedules::create(&shared, &caller.0.account, request, caller.actor()).await?;
    Ok((StatusCode::CREATED, Json(record)))
}

/// The account's schedules, each with its next fire times.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/schedules",
    tag = "schedules",
    operation_id = "list_schedules",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The schedules", body = ScheduleList),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn list(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let schedules = schedules::list(&shared.store, caller.account_id()).await?;
    Ok(Json(serde_json::json!({ "schedules": schedules })))
}

/// One schedule.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/schedules/{id}",
    tag = "schedules",
    operation_id = "get_schedule",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The schedule's id")),
    responses(
        (status = 200, description = "The schedule", body = ScheduleRecord),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such schedule in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn get(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleRecord>, ApiError> {
    let row = schedules::row(&shared.store, caller.account_id(), &id).await?;
    Ok(Json(record(&row, now_ms())))
}

/// Rename a schedule, change its expression, pause or resume it.
///
/// Scope: `reliability:run`.
#[utoipa::path(
    patch,
    path = "/v1/reliability/schedules/{id}",
    tag = "schedules",
    operation_id = "patch_schedule",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The schedule's id")),
    request_body = PatchSchedule,
    responses(
        (status = 200, description = "The schedule", body = ScheduleRecord),
        (status = 400, description = "`malformed_json`, `invalid_body`, `invalid_name`, `invalid_cron`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such schedule in this account", body = super::openapi::ApiErrorBody),
        (status = 422, description = "`schedule_too_frequent`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn patch(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<PatchSchedule>,
) -> Result<Json<ScheduleRecord>, ApiError> {
    let change = ScheduleChange {
        name: body.name,
        cron: body.cron,
        enabled: body.enabled,
    };
    let changed = schedules::patch(
        &shared.store,
        caller.account_id(),
        &id,
        change,
        &caller.actor(),
    )
    .await?;
    Ok(Json(changed))
}

/// Delete a schedule; the runs it started stay.
///
/// Scope: `reliability:run`.
#[utoipa::path(
    delete,
    path = "/v1/reliability/schedules/{id}",
    tag = "schedules",
    operation_id = "delete_schedule",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The schedule's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such schedule in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn delete(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    schedules::delete(&shared.store, caller.account_id(), &id, &caller.actor()).await?;
    Ok(StatusCode::NO_CONTENT)
}
