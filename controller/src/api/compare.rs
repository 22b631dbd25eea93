//! `GET /v1/reliability/compare?before=ID&after=ID`: what is different now
//! ([`iohr_domain::compare`]). Both runs must be the caller's; another account's run is
//! 404, as everywhere. Findings the after run has and the before run lacks are
//! differences too.

use axum::Json;
use axum::extract::{Query, State};
use iohr_domain::compare::Comparison;
use serde::Deserialize;

use super::auth::{Caller, ReadScope};
use super::error::ApiError;
use crate::Shared;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CompareQuery {
    /// The earlier run's id, or `baseline`: the after run's found baseline
    /// (`GET /runs/{id}/baseline`; one on the trigger's base target compares as if on
    /// the after run's target, and the notes say so).
    before: String,
    /// The later run's id.
    after: String,
    /// The noise floor as a share (default 0.02).
    #[param(minimum = 0.0, exclusive_maximum = 1.0)]
    noise_floor: Option<f64>,
}

/// What is different now: two finished runs of one scenario, environment and target.
///
/// Scope: `reliability:read`. `verdict` is `regressed`, `improved` or `unchanged`.
#[utoipa::path(
    get,
    path = "/v1/reliability/compare",
    tag = "compare",
    operation_id = "compare_runs",
    security(("bearer" = [])),
    params(CompareQuery),
    responses(
        (status = 200, description = "The comparison", body = Comparison),
        (status = 400, description = "`invalid_query`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such run in this account; `no_baseline`: `before=baseline` and the after run has none (the message names the rule)", body = super::openapi::ApiErrorBody),
        (status = 409, description = "`not_comparable`, `not_finished` (also a fresh baseline still running), `generator_saturated` (either run's generator set the pace for part of its measure: the difference cannot be trusted)", body = super::openapi::ApiErrorBody),
        (status = 429, description = "`too_many_compares`: the controller's bound; `too_many_account_compares`: this account's share of it (`Retry-After`)", body = super::openapi::ApiErrorBody),
        (status = 500, description = "`compare_failed`: a bug", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn get(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    query: Result<Query<CompareQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Comparison>, ApiError> {
    let Query(query) = query?;
    compare_runs(
        &shared,
        caller.account_id(),
        &query.before,
        &query.after,
        query.noise_floor,
    )
    .await
    .map(Json)
}

/// The comparison of two of an account's runs, for REST and gRPC alike: the layer's
/// [`crate::runs::compare::compare_runs`], its refusals as API errors.
pub async fn compare_runs(
    shared: &Shared,
    account_id: &str,
    before: &str,
    after: &str,
    noise_floor: Option<f64>,
) -> Result<Comparison, ApiError> {
    crate::runs::compare::compare_runs(shared, account_id, before, after, noise_floor)
        .await
        .map_err(ApiError::from)
}
