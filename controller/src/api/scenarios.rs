//! `POST /scenarios`: stores a scenario version, whose id is the hash of its canonical JSON.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::{Caller, RunScope};
use super::error::{ApiError, JsonBody};
use super::runs::{MAX_NAME, parse_kind, validate_spec};
use crate::Shared;
use crate::store::format_ms;

/// A scenario to store: its name, kind and spec (checked as a run's inline spec is).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateScenario {
    #[schema(min_length = 1, max_length = 200)]
    name: String,
    #[schema(value_type = iohr_domain::RunKind)]
    kind: String,
    /// The kind's spec (see `CreateRun.spec`).
    #[schema(value_type = Object)]
    spec: serde_json::Value,
}

/// A stored scenario version: `version` is the hash of the spec's canonical JSON.
#[derive(Debug, Serialize, ToSchema)]
pub struct StoredScenario {
    id: String,
    version: String,
    #[schema(value_type = iohr_domain::RunKind)]
    kind: String,
    #[schema(value_type = Object)]
    spec: serde_json::Value,
    created_at: String,
}

/// Store a scenario version (the same spec twice is one version).
///
/// Scope: `reliability:run`.
#[utoipa::path(
    post,
    path = "/v1/reliability/scenarios",
    tag = "scenarios",
    operation_id = "create_scenario",
    security(("bearer" = [])),
    request_body = CreateScenario,
    responses(
        (status = 201, description = "The scenario version", body = StoredScenario),
        (status = 400, description = "`malformed_json`, `invalid_body`, `unknown_kind`, `invalid_name`, `invalid_spec`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 409, description = "`conflict`", body = super::openapi::ApiErrorBody),
        (status = 413, description = "`body_too_large`", body = super::openapi::ApiErrorBody),
        (status = 415, description = "`unsupported_media_type`: send JSON", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn create(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    JsonBody(body): JsonBody<CreateScenario>,
) -> Result<(StatusCode, Json<StoredScenario>), ApiError> {
    let kind = parse_kind(&body.kind)?;
    if body.name.is_empty() || body.name.len() > MAX_NAME {
        return Err(ApiError::bad_request(
            "invalid_name",
            format!("name must be 1 to {MAX_NAME} characters"),
        ));
    }
    validate_spec(kind, &body.spec)?;
    let scenario = shared
        .store
        .put_scenario(caller.account_id(), &body.name, kind.as_str(), &body.spec)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(StoredScenario {
            id: scenario.id,
            version: scenario.version,
            kind: scenario.kind,
            spec: scenario.spec,
            created_at: format_ms(scenario.created_at),
        }),
    ))
}
