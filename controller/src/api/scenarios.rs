//! `POST /scenarios`: stores a scenario version, whose id is the hash of its canonical JSON.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;

use super::auth::{Caller, RunScope};
use super::error::{ApiError, JsonBody};
use super::runs::{MAX_NAME, parse_kind, validate_spec};
use crate::Shared;
use crate::store::format_ms;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateScenario {
    name: String,
    kind: String,
    spec: serde_json::Value,
}

pub async fn create(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    JsonBody(body): JsonBody<CreateScenario>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
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
        Json(serde_json::json!({
            "id": scenario.id,
            "version": scenario.version,
            "kind": scenario.kind,
            "spec": scenario.spec,
            "created_at": format_ms(scenario.created_at),
        })),
    ))
}
