//! `GET /v1/reliability/compare?before=ID&after=ID`: what is different now
//! ([`iohr_domain::compare`]). Both runs must be the caller's; another account's run is
//! 404, as everywhere. Findings the after run has and the before run lacks are
//! differences too.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use iohr_domain::compare::{Comparison, NOISE_FLOOR, Refusal, Side, add_new_findings, compare};
use serde::Deserialize;

use super::auth::{Caller, ReadScope};
use super::error::ApiError;
use crate::Shared;
use crate::store::RunRow;

/// Seconds a refused comparison is told to wait: one comparison takes well under one.
const COMPARES_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CompareQuery {
    /// The earlier run's id.
    before: String,
    /// The later run's id.
    after: String,
    /// The noise floor as a share (default 0.02).
    #[param(minimum = 0.0, exclusive_maximum = 1.0)]
    noise_floor: Option<f64>,
}

fn side(run: &RunRow) -> Side<'_> {
    Side {
        id: &run.id,
        kind: run.kind,
        scenario_version: &run.scenario_version,
        environment: &run.environment,
        target: &run.target,
        status: run.status,
        result: run.result.as_ref(),
    }
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
        (status = 404, description = "`not_found`: no such run in this account", body = super::openapi::ApiErrorBody),
        (status = 409, description = "`not_comparable`, `not_finished`, `generator_saturated` (either run's generator set the pace for part of its measure: the difference cannot be trusted)", body = super::openapi::ApiErrorBody),
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

/// The comparison of two of an account's runs, for REST and gRPC alike.
pub async fn compare_runs(
    shared: &Shared,
    account_id: &str,
    before: &str,
    after: &str,
    noise_floor: Option<f64>,
) -> Result<Comparison, ApiError> {
    let noise_floor = noise_floor.unwrap_or(NOISE_FLOOR);
    if !(0.0..1.0).contains(&noise_floor) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "noise_floor is a share between 0 and 1, such as 0.02",
        ));
    }
    // A place first: 429 at once when every one is taken, before anything is read.
    let admitted = shared.compares.admit(account_id).map_err(|full| {
        ApiError::too_many(
            full.code(),
            format!("{full}; retry shortly"),
            COMPARES_RETRY_AFTER,
        )
    })?;
    let mut runs = Vec::with_capacity(2);
    for id in [before, after] {
        let run = shared
            .store
            .run_of_account(account_id, id)
            .await?
            .ok_or_else(|| ApiError::not_found(&format!("run {id}")))?;
        runs.push(run);
    }
    // Tens of milliseconds of CPU for long load runs: on a blocking thread.
    let computed = admitted
        .run(move || {
            let mut comparison = compare(&side(&runs[0]), &side(&runs[1]), noise_floor)?;
            add_new_findings(&mut comparison, &runs[0].findings, &runs[1].findings);
            Ok::<_, Refusal>(comparison)
        })
        .await
        .map_err(|error| {
            tracing::error!(%error, "a comparison failed");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "compare_failed",
                "the comparison failed; this is a bug, please report it",
            )
        })?;
    computed.map_err(|refusal| {
        let code = match refusal {
            Refusal::Different { .. } | Refusal::Kind(_) => "not_comparable",
            Refusal::NotFinished { .. } => "not_finished",
            Refusal::GeneratorSaturated { .. } => "generator_saturated",
        };
        ApiError::new(StatusCode::CONFLICT, code, refusal.to_string())
    })
}
