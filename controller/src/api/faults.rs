//! Production faults: `POST /runs/{id}/confirm` (a person confirms the exact experiment and
//! target) and `POST /halt` (stop every faults run of the account now).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use iohr_domain::RunRecord;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::{Caller, PersonRunScope, RunScope};
use super::error::{ApiError, JsonBody};
use super::runs::MAX_NAME;
use crate::Shared;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfirmBody {
    /// The run's `confirmation.hash`: what the person read and confirms.
    pub hash: String,
}

/// A person confirms a production faults run; an API token never can.
///
/// Scope: `reliability:run`, on a person's token.
#[utoipa::path(
    post,
    path = "/v1/reliability/runs/{id}/confirm",
    tag = "faults",
    operation_id = "confirm_run",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id")),
    request_body = ConfirmBody,
    responses(
        (status = 200, description = "The run, confirmed and queued", body = RunRecord),
        (status = 400, description = "`malformed_json`, `invalid_body`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`; `person_required`: an API token", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such run in this account", body = super::openapi::ApiErrorBody),
        (status = 409, description = "`not_awaiting_confirmation`, `hash_mismatch`, `confirmation_lapsed`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn confirm(
    State(shared): State<Shared>,
    caller: Caller<PersonRunScope>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<ConfirmBody>,
) -> Result<(StatusCode, Json<RunRecord>), ApiError> {
    // The rule let only a person's token through.
    let person = caller.0.person.clone().unwrap_or_default();
    let run =
        crate::runs::confirm::confirm(&shared, &caller.0.account, &id, &body.hash, &person).await?;
    Ok((StatusCode::OK, Json(run.to_record())))
}

/// Optional: why (kept to 200 characters).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HaltBody {
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Halted {
    /// The faults runs this halt cancelled (none when nothing was running: a halt is
    /// idempotent).
    pub halted: Vec<String>,
}

/// Cancels every queued or running faults run of the account; each agent undoes its
/// faults as it stops.
///
/// Scope: `reliability:run`. Idempotent; the body is optional.
#[utoipa::path(
    post,
    path = "/v1/reliability/halt",
    tag = "faults",
    operation_id = "halt",
    security(("bearer" = [])),
    request_body(content = Option<HaltBody>, content_type = "application/json"),
    responses(
        (status = 200, description = "The faults runs cancelled", body = Halted),
        (status = 400, description = "`malformed_json`, `invalid_body`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn halt(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    body: axum::body::Bytes,
) -> Result<Json<Halted>, ApiError> {
    let body: HaltBody = super::error::optional_body(&body)?;
    let actor = caller.actor();
    let reason = match body.reason {
        Some(r) => format!(
            "halted by {actor}: {}",
            r.chars().take(MAX_NAME).collect::<String>()
        ),
        None => format!("halted by {actor}"),
    };
    let halted = crate::runs::cancel::halt(&shared, caller.account_id(), &reason, actor).await?;
    Ok(Json(Halted { halted }))
}
