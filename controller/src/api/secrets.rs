//! `/secrets`: the account's secrets, which a run's headers name as `${secret:NAME}` and
//! which the controller gives only to the agent that runs that run, with its lease. Write
//! only: a PUT stores a value (sealed, `store/account_secrets.rs`), a GET lists names and
//! times, never a value. Writing and deleting need `reliability:admin` (a person of the
//! account); listing needs `reliability:read`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::auth::{AdminScope, Caller, ReadScope};
use super::error::{ApiError, JsonBody};
use crate::Shared;
use crate::store::{MAX_SECRET_BYTES, MAX_SECRETS_PER_ACCOUNT, SecretPut, SecretRow};
use iohr_domain::request::{MAX_SECRET_NAME, is_secret_name};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutBody {
    /// The secret's value: 1 to 4096 bytes, no control characters (it is sent as a
    /// header's value). Never shown again.
    #[schema(min_length = 1, max_length = 4096)]
    value: String,
}

/// An account secret as listed: never its value.
#[allow(dead_code)] // a schema: the answer is written by `SecretRow::to_api`
#[derive(utoipa::ToSchema)]
pub struct Secret {
    /// `A-Z`, `0-9` and `_`, at most 64.
    name: String,
    created_by: String,
    created_at: String,
    updated_by: String,
    updated_at: String,
}

/// The account's secrets, by name.
#[allow(dead_code)] // a schema
#[derive(utoipa::ToSchema)]
pub struct SecretList {
    secrets: Vec<Secret>,
}

/// 503 `secrets_unavailable` when the controller has no secrets key to seal `what` (a
/// secret's value, a forge's token) with: nothing is ever stored in clear.
pub(super) fn can_seal(shared: &Shared, what: &str) -> Result<(), ApiError> {
    if shared.store.seals_secrets() {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "secrets_unavailable",
        format!(
            "the controller has no secrets key to seal the {what} with, and never stores one in clear; its operator runs `iohr-controller init` (docs/security.md)"
        ),
    ))
}

/// A sealed value's put as its answer: 201 when it was created, 200 when it replaced one.
pub(super) fn put_answer(
    replaced: bool,
    row: serde_json::Value,
) -> (StatusCode, Json<serde_json::Value>) {
    let status = if replaced {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    (status, Json(row))
}

/// A sealed value's delete as its answer: 204, or 404 naming `what` when there was none.
pub(super) fn delete_answer(deleted: bool, what: &str) -> Result<StatusCode, ApiError> {
    if deleted {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(what))
    }
}

fn checked_name(name: &str) -> Result<(), ApiError> {
    if is_secret_name(name) {
        return Ok(());
    }
    Err(ApiError::bad_request(
        "invalid_name",
        format!("a secret's name is 1 to {MAX_SECRET_NAME} of A-Z, 0-9 and '_'"),
    ))
}

fn checked_value(value: &str) -> Result<(), ApiError> {
    let why = if value.is_empty() {
        "the value is empty"
    } else if value.len() > MAX_SECRET_BYTES {
        "the value is longer than 4096 bytes"
    } else if value.chars().any(|c| c.is_control() && c != '\t') {
        "the value holds a control character (it is sent as a header's value)"
    } else {
        return Ok(());
    };
    Err(ApiError::bad_request("invalid_secret", why))
}

/// Store a secret under `name` (or replace its value). The value is never shown again:
/// runs name it as `${secret:NAME}` in a header.
///
/// Scope: `reliability:admin`.
#[utoipa::path(
    put,
    path = "/v1/reliability/secrets/{name}",
    tag = "secrets",
    operation_id = "put_secret",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The secret's name: A-Z, 0-9 and '_', at most 64")),
    request_body = PutBody,
    responses(
        (status = 200, description = "Replaced: the secret's name and times, never its value", body = Secret),
        (status = 201, description = "Created: the secret's name and times, never its value", body = Secret),
        (status = 400, description = "`malformed_json`, `invalid_body`, `invalid_name`, `invalid_secret` (empty, over 4096 bytes, a control character)", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:admin`", body = super::openapi::ApiErrorBody),
        (status = 429, description = "`too_many_secrets`: the account holds 100; delete one first", body = super::openapi::ApiErrorBody),
        (status = 503, description = "`secrets_unavailable`: the controller has no secrets key (values are never stored in clear); `store_unavailable`, `busy`, `shutting_down`: retry later", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn put(
    State(shared): State<Shared>,
    caller: Caller<AdminScope>,
    Path(name): Path<String>,
    body: Result<JsonBody<PutBody>, ApiError>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    checked_name(&name)?;
    let JsonBody(body) = body?;
    checked_value(&body.value)?;
    can_seal(&shared, "value")?;
    let put = shared
        .store
        .put_account_secret(caller.account_id(), &name, &body.value, &caller.actor())
        .await?;
    let (replaced, row) = match put {
        SecretPut::Created(row) => (false, row),
        SecretPut::Updated(row) => (true, row),
        SecretPut::TooMany => {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_secrets",
                format!(
                    "the account holds {MAX_SECRETS_PER_ACCOUNT} secrets, the limit; delete one first"
                ),
            ));
        }
    };
    tracing::info!(secret = %name, actor = %caller.actor(), "account secret stored");
    Ok(put_answer(replaced, row.to_api()))
}

/// The account's secrets: names and times, never a value.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/secrets",
    tag = "secrets",
    operation_id = "list_secrets",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The secrets, by name", body = SecretList),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn list(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let secrets = shared.store.account_secrets(caller.account_id()).await?;
    let secrets: Vec<_> = secrets.iter().map(SecretRow::to_api).collect();
    Ok(Json(serde_json::json!({ "secrets": secrets })))
}

/// Delete a secret. A queued run that names it ends `error` when it is leased.
///
/// Scope: `reliability:admin`.
#[utoipa::path(
    delete,
    path = "/v1/reliability/secrets/{name}",
    tag = "secrets",
    operation_id = "delete_secret",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The secret's name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`invalid_name`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:admin`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such secret in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn delete(
    State(shared): State<Shared>,
    caller: Caller<AdminScope>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    checked_name(&name)?;
    let deleted = shared
        .store
        .delete_account_secret(caller.account_id(), &name, &caller.actor())
        .await?;
    let answer = delete_answer(deleted, &format!("secret {name}"))?;
    tracing::info!(secret = %name, actor = %caller.actor(), "account secret deleted");
    Ok(answer)
}
