//! `POST /runs`, `GET /runs/{id}`, `GET /runs`, `POST /runs/{id}/cancel`.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use iohr_domain::{RunKind, RunRecord, RunStatus};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::auth::{Caller, ReadScope, RunScope};
use super::error::{ApiError, JsonBody};
use super::run_start;
pub use super::run_start::{CreateRun, MAX_NAME, parse_kind};
use crate::Shared;
use crate::store::{RunFilter, now_ms};

/// Start a run.
///
/// Scope: `reliability:run`. The run is stored `queued` (or `refused` when over the
/// month's units); a production faults run waits for a person's confirmation.
#[utoipa::path(
    post,
    path = "/v1/reliability/runs",
    tag = "runs",
    operation_id = "create_run",
    security(("bearer" = [])),
    request_body(content = CreateRun, content_type = "application/json", example = json!({
        "kind": "checks",
        "environment": "staging",
        "target": "http://127.0.0.1:9",
        "spec": {"checks": [{"name": "home", "method": "GET", "path": "/", "expect_status": 200}]},
        "change": "core#212"
    })),
    responses(
        (status = 201, description = "The run as stored", body = RunRecord),
        (status = 400, description = "`malformed_json`, `invalid_body`, `unknown_kind`, `unknown_environment`, `invalid_confirm_within`, `invalid_target`, `invalid_executor`, `unknown_agent`, `invalid_change`, `invalid_spec`, `invalid_scenario_name`, `unknown_scenario`, `kind_mismatch`, `spec_or_scenario`, `run_too_long`, `invalid_agents`, `agents_not_placeable`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 422, description = "`target_not_allowed`: `executor: cloud` with a target that is a literal loopback, link-local, private, shared, unique-local, unspecified, multicast or metadata address (docs/security.md); `unknown_secret`: a header names `${secret:NAME}` the account does not have (nothing stored)", body = super::openapi::ApiErrorBody),
        (status = 429, description = "`too_many_queued`: the plan's queue is full (`Retry-After`)", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn create(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    JsonBody(body): JsonBody<CreateRun>,
) -> Result<impl IntoResponse, ApiError> {
    let account = &caller.0.account;
    let checked = run_start::check(&shared, account, &body, true).await?;
    let started_by = run_start::started_by_caller(
        caller.0.person.as_deref(),
        &caller.0.id,
        body.change.clone(),
    );
    let new = run_start::prepare(&shared, account, &body, checked, started_by, now_ms());
    let run = run_start::submit(&shared, account, &new, &caller.actor(), None).await?;
    Ok((
        StatusCode::CREATED,
        Json(shared.store.run_record(&run).await?),
    ))
}

/// A run.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/runs/{id}",
    tag = "runs",
    operation_id = "get_run",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The run", body = RunRecord),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such run in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn get(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path(id): Path<String>,
) -> Result<Json<RunRecord>, ApiError> {
    let run = crate::runs::read::get(&shared.store, caller.account_id(), &id).await?;
    Ok(Json(run))
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only runs with this status.
    #[param(value_type = Option<RunStatus>)]
    pub(crate) status: Option<String>,
    /// Only runs of this kind.
    #[param(value_type = Option<RunKind>)]
    pub(crate) kind: Option<String>,
    /// Only runs in this environment.
    pub(crate) environment: Option<String>,
    /// Only runs the agent of this id took.
    pub(crate) agent: Option<String>,
    /// Only runs of this scenario (its id; every version).
    pub(crate) scenario: Option<String>,
    /// The page size (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub(crate) limit: Option<u32>,
    /// The `next_cursor` of the page before (the id of its last row: a lowercase UUID).
    #[param(
        min_length = 36,
        max_length = 36,
        pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
    )]
    pub(crate) cursor: Option<String>,
}

impl ListQuery {
    /// The filter this query asks for, or the 400 that says what is wrong with it.
    fn filter(self) -> Result<RunFilter, ApiError> {
        Ok(RunFilter {
            status: super::page::filter::<RunStatus>(self.status)?,
            kind: super::page::filter::<RunKind>(self.kind)?,
            environment: self.environment,
            agent: self.agent,
            scenario: self.scenario,
            limit: super::page::page_limit(self.limit)?,
            cursor: super::page::id_cursor(self.cursor)?,
        })
    }
}

/// The account's runs, newest first, a page at a time.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/runs",
    tag = "runs",
    operation_id = "list_runs",
    security(("bearer" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "A page of runs", body = super::openapi::RunPage),
        (status = 400, description = "`invalid_query`, `invalid_cursor`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn list(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query?;
    let filter = query.filter()?;
    let page = crate::runs::read::list(&shared.store, caller.account_id(), &filter).await?;
    Ok(super::page::page_answer(
        "runs",
        &page.items,
        page.next_cursor,
    ))
}

/// Optional: why (kept to 200 characters).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    #[serde(default)]
    reason: Option<String>,
}

/// Cancel a run.
///
/// Scope: `reliability:run`. Waits up to 5 s for the run to end: 200 when it has, 202 with
/// where it stands when not yet. The body is optional.
#[utoipa::path(
    post,
    path = "/v1/reliability/runs/{id}/cancel",
    tag = "runs",
    operation_id = "cancel_run",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id")),
    request_body(content = Option<CancelBody>, content_type = "application/json"),
    responses(
        (status = 200, description = "The run, ended", body = RunRecord),
        (status = 202, description = "The run, still stopping", body = RunRecord),
        (status = 400, description = "`malformed_json`, `invalid_body`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such run in this account", body = super::openapi::ApiErrorBody),
        (status = 409, description = "`already_finished`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn cancel(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<impl IntoResponse, ApiError> {
    // The body is optional: nothing, `null` or {"reason": "..."}.
    let body: CancelBody = super::error::optional_body(&body)?;
    let reason = body
        .reason
        .map(|r| r.chars().take(MAX_NAME).collect::<String>())
        .unwrap_or_else(|| format!("cancelled by {}", caller.actor()));
    let cancelled =
        crate::runs::cancel::cancel(&shared, caller.account_id(), &id, reason, caller.actor())
            .await?;
    let status = if cancelled.status.is_finished() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(cancelled.record)))
}

#[cfg(test)]
mod tests {
    use super::ListQuery;

    #[test]
    fn a_cursor_that_is_no_run_id_is_invalid_cursor() {
        crate::query::cursor_tests::takes_only_ids(|cursor| {
            ListQuery {
                cursor,
                ..ListQuery::default()
            }
            .filter()
            .map(|filter| filter.cursor)
        });
    }
}
