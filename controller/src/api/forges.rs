//! `/forges`: the account's forge credentials (a token and the API's base URL per forge,
//! which the forge reporter writes pull request comments and commit statuses with) and
//! the reporter's log. Write only: a PUT stores the token (sealed,
//! `store/forge_credentials.rs`), a GET lists forges and URLs, never a token. Writing and
//! deleting need `reliability:admin`, as secrets do; reading needs `reliability:read`.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use iohr_domain::run::Forge;
use serde::Deserialize;

use super::auth::{AdminScope, Caller, ReadScope};
use super::error::{ApiError, JsonBody};
use crate::Shared;
use crate::forge::credentials::{checked_api_url, checked_token, default_api_url};
use crate::store::{ForgeCredentialRow, MAX_REPORT_LOG_PER_ACCOUNT, ReportLogLine};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutBody {
    /// The token: a GitHub token that may write issue comments and commit statuses of
    /// the repositories, or a GitLab token with `api` scope. 1 to 1024 printable
    /// characters without spaces. Never shown again.
    #[schema(min_length = 1, max_length = 1024)]
    token: String,
    /// The API's base URL: `https://api.github.com` (the default for `github`),
    /// `https://HOST/api/v3` for GitHub Enterprise, `https://gitlab.com/api/v4` (the
    /// default for `gitlab`) or a self-hosted GitLab's `https://HOST/api/v4`.
    #[schema(max_length = 512)]
    api_url: Option<String>,
}

/// A forge's credentials as listed: never the token.
#[allow(dead_code)] // a schema: the answer is written by `ForgeCredentialRow::to_api`
#[derive(utoipa::ToSchema)]
pub struct ForgeCredential {
    /// `github` or `gitlab`.
    forge: String,
    api_url: String,
    created_by: String,
    created_at: String,
    updated_by: String,
    updated_at: String,
}

/// The forges the account has credentials for.
#[allow(dead_code)] // a schema
#[derive(utoipa::ToSchema)]
pub struct ForgeList {
    forges: Vec<ForgeCredential>,
}

/// One attempt of the forge reporter: what it sent and how it went, never a body, a
/// token or the forge's answer.
#[allow(dead_code)] // a schema: written by `ReportLogLine::to_api`
#[derive(utoipa::ToSchema)]
pub struct ForgeReport {
    at: String,
    forge: String,
    /// The change: `owner/repo#N` or `owner/repo@BRANCH`.
    change: String,
    run_id: Option<String>,
    commit: Option<String>,
    /// The commit status sent (GitHub's or GitLab's word).
    state: Option<String>,
    /// `reported`, `failed` (retried on the schedule), `gave_up` or `no_credentials`.
    outcome: String,
    /// A failure's class: `http_status`, `timeout`, `connect_failed`, `denied`, `tls`,
    /// `bad_answer`, `store`, `compare_busy`, `internal`.
    detail: Option<String>,
    status_code: Option<i64>,
    /// The attempt's number since the change last moved.
    attempt: i64,
}

/// The reporter's log, newest first.
#[allow(dead_code)] // a schema
#[derive(utoipa::ToSchema)]
pub struct ForgeReportList {
    reports: Vec<ForgeReport>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReportQuery {
    /// Lines, newest first: 1 to 500, default 100.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

fn checked_forge(forge: &str) -> Result<Forge, ApiError> {
    forge
        .parse()
        .map_err(|_| ApiError::bad_request("invalid_forge", "the forge is github or gitlab"))
}

/// Store the account's credentials for a forge (or replace them). The token is never
/// shown again.
///
/// Scope: `reliability:admin`.
#[utoipa::path(
    put,
    path = "/v1/reliability/forges/{forge}",
    tag = "forges",
    operation_id = "put_forge",
    security(("bearer" = [])),
    params(("forge" = String, Path, description = "`github` or `gitlab`")),
    request_body = PutBody,
    responses(
        (status = 200, description = "Replaced: the forge and its URL, never the token", body = ForgeCredential),
        (status = 201, description = "Stored: the forge and its URL, never the token", body = ForgeCredential),
        (status = 400, description = "`malformed_json`, `invalid_body`, `invalid_forge`, `invalid_token`, `invalid_api_url`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:admin`", body = super::openapi::ApiErrorBody),
        (status = 422, description = "`target_not_allowed`: the api_url is a loopback, link-local, private, unique-local, unspecified or metadata address or name, or the controller's own (docs/security.md)", body = super::openapi::ApiErrorBody),
        (status = 503, description = "`secrets_unavailable`: the controller has no secrets key (tokens are never stored in clear); `store_unavailable`, `busy`, `shutting_down`: retry later", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn put(
    State(shared): State<Shared>,
    caller: Caller<AdminScope>,
    Path(forge): Path<String>,
    body: Result<JsonBody<PutBody>, ApiError>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let forge = checked_forge(&forge)?;
    let JsonBody(body) = body?;
    let invalid =
        |e: crate::forge::credentials::Invalid| ApiError::bad_request(e.code(), e.to_string());
    checked_token(&body.token).map_err(invalid)?;
    let given = body.api_url.as_deref().unwrap_or(default_api_url(forge));
    let (api_url, uri) = checked_api_url(given).map_err(invalid)?;
    super::outbound::allowed_target(&shared, caller.account_id(), &uri).await?;
    super::secrets::can_seal(&shared, "token")?;
    let (replaced, row) = shared
        .store
        .put_forge_credentials(
            caller.account_id(),
            forge,
            &api_url,
            &body.token,
            &caller.actor(),
        )
        .await?;
    tracing::info!(forge = forge.as_str(), %api_url, actor = %caller.actor(), "forge credentials stored");
    Ok(super::secrets::put_answer(replaced, row.to_api()))
}

/// The forges the account has credentials for, with their API URLs: never a token.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/forges",
    tag = "forges",
    operation_id = "list_forges",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The forges", body = ForgeList),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn list(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let rows = shared.store.forge_credentials(caller.account_id()).await?;
    let forges: Vec<_> = rows.iter().map(ForgeCredentialRow::to_api).collect();
    Ok(Json(serde_json::json!({ "forges": forges })))
}

/// Delete the account's credentials for a forge: its changes are no longer reported.
///
/// Scope: `reliability:admin`.
#[utoipa::path(
    delete,
    path = "/v1/reliability/forges/{forge}",
    tag = "forges",
    operation_id = "delete_forge",
    security(("bearer" = [])),
    params(("forge" = String, Path, description = "`github` or `gitlab`")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`invalid_forge`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:admin`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: the account has no credentials for this forge", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn delete(
    State(shared): State<Shared>,
    caller: Caller<AdminScope>,
    Path(forge): Path<String>,
) -> Result<StatusCode, ApiError> {
    let forge = checked_forge(&forge)?;
    let deleted = shared
        .store
        .delete_forge_credentials(caller.account_id(), forge, &caller.actor())
        .await?;
    let answer =
        super::secrets::delete_answer(deleted, &format!("{} credentials", forge.as_str()))?;
    tracing::info!(forge = forge.as_str(), actor = %caller.actor(), "forge credentials deleted");
    Ok(answer)
}

/// The forge reporter's log of this account: each attempt to write a change's comment
/// and commit status, newest first (the newest 500 are kept).
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/forges/reports",
    tag = "forges",
    operation_id = "list_forge_reports",
    security(("bearer" = [])),
    params(ReportQuery),
    responses(
        (status = 200, description = "The attempts, newest first", body = ForgeReportList),
        (status = 400, description = "`invalid_query`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn reports(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    query: Result<Query<ReportQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=MAX_REPORT_LOG_PER_ACCOUNT as u32).contains(&limit) {
        return Err(ApiError::bad_request("invalid_query", "limit is 1 to 500"));
    }
    let lines = shared
        .store
        .forge_report_log(caller.account_id(), limit)
        .await?;
    let reports: Vec<_> = lines.iter().map(ReportLogLine::to_api).collect();
    Ok(Json(serde_json::json!({ "reports": reports })))
}
