//! `POST /scenarios` stores a scenario version (its id the hash of its canonical JSON)
//! under a name; `GET /scenarios` lists the names, `GET /scenarios/{id}` one name's
//! versions with their runs, `GET /scenarios/{id}/versions/{version}` one version's spec.
//! Names label versions: a version may have several, and a name given is always kept.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::auth::{Caller, ReadScope, RunScope};
use super::error::{ApiError, JsonBody};
use super::page::{page_answer, page_limit};
use super::runs::{MAX_NAME, parse_kind, validate_spec};
use crate::Shared;
use crate::store::{Scenario, Stored, format_ms};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateScenario {
    name: String,
    kind: String,
    spec: Value,
}

/// 201 when something was stored (a new version, or a new name for a stored one), 200
/// when the name already labelled that version; `stored` says which.
pub async fn create(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    JsonBody(body): JsonBody<CreateScenario>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let kind = parse_kind(&body.kind)?;
    if body.name.is_empty() || body.name.len() > MAX_NAME {
        return Err(ApiError::bad_request(
            "invalid_name",
            format!("name must be 1 to {MAX_NAME} characters"),
        ));
    }
    validate_spec(kind, &body.spec)?;
    let (scenario, stored) = shared
        .store
        .store_scenario(caller.account_id(), &body.name, kind.as_str(), &body.spec)
        .await?;
    let status = match stored {
        Stored::Exists => StatusCode::OK,
        Stored::Created | Stored::Named => StatusCode::CREATED,
    };
    let mut answer = version_json(&scenario);
    answer["stored"] = json!(stored.as_str());
    Ok((status, Json(answer)))
}

fn version_json(scenario: &Scenario) -> Value {
    json!({
        "id": scenario.id,
        "version": scenario.version,
        "kind": scenario.kind,
        "spec": scenario.spec,
        "created_at": format_ms(scenario.created_at),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    limit: Option<u32>,
    cursor: Option<String>,
}

/// The names in order, each with its kind, how many versions and the newest.
pub async fn list(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query?;
    let limit = page_limit(query.limit)?;
    let (names, next) = shared
        .store
        .list_scenarios(caller.account_id(), query.cursor.as_deref(), limit)
        .await?;
    let names: Vec<Value> = names
        .iter()
        .map(|n| {
            json!({
                "id": n.id, "kind": n.kind, "versions": n.versions,
                "latest_version": n.latest_version, "latest_at": format_ms(n.latest_at),
            })
        })
        .collect();
    Ok(page_answer("scenarios", &names, next))
}

/// One name: its versions newest first, each with the runs of that name and version.
pub async fn get(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let versions = shared
        .store
        .scenario_versions(caller.account_id(), &id)
        .await?;
    let Some(newest) = versions.first() else {
        return Err(ApiError::not_found(&format!("scenario {id}")));
    };
    let kind = shared
        .store
        .scenario(caller.account_id(), &newest.version)
        .await?
        .map(|s| s.kind)
        .unwrap_or_default();
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            json!({
                "version": v.version, "created_at": format_ms(v.created_at),
                "runs": v.runs, "last_run": v.last_run,
            })
        })
        .collect();
    Ok(Json(json!({"id": id, "kind": kind, "versions": versions})))
}

/// One version of a name, with its spec.
pub async fn version(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path((id, version)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let scenario = shared
        .store
        .named_scenario(caller.account_id(), &id, &version)
        .await?
        .ok_or_else(|| ApiError::not_found(&format!("scenario {id} version {version}")))?;
    Ok(Json(version_json(&scenario)))
}
