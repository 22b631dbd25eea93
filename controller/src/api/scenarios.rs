//! `POST /scenarios` stores a scenario version (its id the hash of its canonical JSON)
//! under a name; `GET /scenarios` lists the names, `GET /scenarios/{id}` one name's
//! versions with their runs, `GET /scenarios/{id}/versions/{version}` one version's spec.
//! Names label versions: a version may have several, and a name given is always kept.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::{Caller, ReadScope, RunScope};
use super::error::{ApiError, JsonBody};
use super::page::{Cursor, page_limit};
use crate::Shared;
pub use crate::resources::scenarios::{NameEntry, NamePage, NameVersions, VersionEntry};
use crate::store::{Scenario, Stored, format_ms};

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

/// A stored scenario version under a name: `version` is the hash of the spec's canonical
/// JSON.
#[derive(Debug, Serialize, ToSchema)]
pub struct StoredScenario {
    /// The name (the one given, when storing).
    id: String,
    version: String,
    #[schema(value_type = iohr_domain::RunKind)]
    kind: String,
    #[schema(value_type = Object)]
    spec: serde_json::Value,
    created_at: String,
    /// What storing did: `created` (a new version), `named` (a stored version got this
    /// name), `exists` (this name named it already). Only in `POST /scenarios` answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = "^(created|named|exists)$")]
    stored: Option<&'static str>,
}

impl StoredScenario {
    fn of(scenario: Scenario, stored: Option<Stored>) -> StoredScenario {
        StoredScenario {
            id: scenario.id,
            version: scenario.version,
            kind: scenario.kind,
            spec: scenario.spec,
            created_at: format_ms(scenario.created_at),
            stored: stored.map(Stored::as_str),
        }
    }
}

/// Store a scenario version under a name (the same spec twice is one version; a name
/// given is kept).
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
        (status = 200, description = "`exists`: this name already named this version", body = StoredScenario),
        (status = 201, description = "`created` or `named`: stored", body = StoredScenario),
        (status = 400, description = "`malformed_json`, `invalid_body`, `unknown_kind`, `invalid_name`, `invalid_spec`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn create(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    JsonBody(body): JsonBody<CreateScenario>,
) -> Result<(StatusCode, Json<StoredScenario>), ApiError> {
    let (scenario, stored) = crate::resources::scenarios::create(
        &shared.store,
        caller.account_id(),
        &body.name,
        &body.kind,
        &body.spec,
    )
    .await?;
    let status = match stored {
        Stored::Exists => StatusCode::OK,
        Stored::Created | Stored::Named => StatusCode::CREATED,
    };
    Ok((status, Json(StoredScenario::of(scenario, Some(stored)))))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// The page size (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub(crate) limit: Option<u32>,
    /// The `next_cursor` of the page before (opaque: its last name, in base64url).
    #[param(
        min_length = 2,
        max_length = 267,
        pattern = "^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?$"
    )]
    pub(crate) cursor: Option<String>,
}

/// The account's scenario names, in order, a page at a time.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/scenarios",
    tag = "scenarios",
    operation_id = "list_scenarios",
    security(("bearer" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "A page of names", body = NamePage),
        (status = 400, description = "`invalid_query`, `invalid_cursor`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn list(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<NamePage>, ApiError> {
    let Query(query) = query?;
    let limit = page_limit(query.limit)?;
    let cursor = Cursor::Name.read(query.cursor)?;
    let mut page = crate::resources::scenarios::list(
        &shared.store,
        caller.account_id(),
        cursor.as_deref(),
        limit,
    )
    .await?;
    page.next_cursor = page.next_cursor.map(|name| Cursor::Name.write(&name));
    Ok(Json(page))
}

/// One scenario name: its versions newest first, with their runs.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/scenarios/{id}",
    tag = "scenarios",
    operation_id = "get_scenario",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The scenario's name")),
    responses(
        (status = 200, description = "The name's versions", body = NameVersions),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such name in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn get(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path(id): Path<String>,
) -> Result<Json<NameVersions>, ApiError> {
    let versions =
        crate::resources::scenarios::versions(&shared.store, caller.account_id(), &id).await?;
    Ok(Json(versions))
}

/// One version of a scenario name, with its spec.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/scenarios/{id}/versions/{version}",
    tag = "scenarios",
    operation_id = "get_scenario_version",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The scenario's name"),
        ("version" = String, Path, description = "The version (`sha256:...`)"),
    ),
    responses(
        (status = 200, description = "The version", body = StoredScenario),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: the name does not label that version", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn version(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path((id, version)): Path<(String, String)>,
) -> Result<Json<StoredScenario>, ApiError> {
    let scenario = shared
        .store
        .named_scenario(caller.account_id(), &id, &version)
        .await?
        .ok_or_else(|| ApiError::not_found(&format!("scenario {id} version {version}")))?;
    Ok(Json(StoredScenario::of(scenario, None)))
}
