//! `GET /v1/reliability/runs/{id}/baseline`: the run a run is compared with, found by
//! the rule in `runs/baseline.rs`, and the rule that found it (or found nothing).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use iohr_domain::RunRecord;
use serde::Deserialize;

use super::auth::{Caller, ReadScope};
use super::error::ApiError;
use crate::Shared;
use crate::runs::baseline::{Baseline, BaselineError, Rule, baseline_by_rule};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BaselineQueryParams {
    /// The change a baseline ran for, `owner/repo@main`, for a run that names no base
    /// (a run a trigger started for a pull request has its own).
    #[param(max_length = 400)]
    base: Option<String>,
}

/// A run's baseline and the rule that found it.
#[allow(dead_code)] // a schema: the answer is written with `json!`
#[derive(utoipa::ToSchema)]
pub struct BaselineAnswer {
    /// The baseline's run record.
    run: RunRecord,
    /// `false` while a fresh before-run is still queued or running: compare it once it
    /// has ended.
    ended: bool,
    rule: Rule,
}

/// A run's baseline: the fresh before-run a trigger started beside it, or the latest
/// passed run of the same scenario version, environment and target (or the trigger's
/// base target) on the run's base change, within the trigger's window (7 days when no
/// trigger started it).
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/runs/{id}/baseline",
    tag = "runs",
    operation_id = "get_run_baseline",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id"), BaselineQueryParams),
    responses(
        (status = 200, description = "The baseline (`ended: false` while a fresh before-run still runs) and its rule", body = BaselineAnswer),
        (status = 400, description = "`invalid_query`: the base query parameter is not owner/repo@branch", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such run in this account; `no_baseline`: no run meets the rule (the message says which rule found nothing)", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn get(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path(id): Path<String>,
    query: Result<Query<BaselineQueryParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query?;
    let account_id = caller.account_id();
    let (found, rule) = baseline_by_rule(&shared.store, account_id, &id, query.base.as_deref())
        .await
        .map_err(|e| match e {
            BaselineError::Store(e) => ApiError::from(e),
            BaselineError::InvalidBase(why) => ApiError::bad_request("invalid_query", why),
        })?;
    let (run, ended) = match found {
        Baseline::Found(run) => (run, true),
        Baseline::Waiting(run) => (run, false),
        Baseline::Missing(why) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "no_baseline",
                format!("no baseline: {why}"),
            ));
        }
    };
    let record = shared.store.run_record(&run).await?;
    Ok(Json(
        serde_json::json!({"run": record, "ended": ended, "rule": rule}),
    ))
}
