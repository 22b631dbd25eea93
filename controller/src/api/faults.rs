//! Production faults: `POST /runs/{id}/confirm` (a person confirms the exact experiment and
//! target) and `POST /halt` (stop every faults run of the account now).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use iohr_domain::{RunKind, RunRecord};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::{Caller, PersonRunScope, RunScope};
use super::error::{ApiError, JsonBody};
use super::runs::MAX_NAME;
use crate::Shared;
use crate::store::{AuditLine, ConfirmRefusal};

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
        (status = 413, description = "`body_too_large`", body = super::openapi::ApiErrorBody),
        (status = 415, description = "`unsupported_media_type`: send JSON", body = super::openapi::ApiErrorBody),
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
    let account = &caller.0.account;
    // Taken before the confirmation commits, as for a new run (see `runs::create`).
    let slot = shared.dispatcher.reserve()?;
    let outcome = shared
        .store
        .confirm_run(&account.id, &id, &body.hash, &person, |run| {
            // No longer waiting for a person; maybe for an agent, which it then says.
            super::run_guards::waiting_reason(
                &shared,
                &run.account_id,
                run.kind,
                &run.environment,
                &run.executor,
            )
        })
        .await
        .map_err(|e| match e {
            crate::store::StoreError::NotFound(_) => ApiError::not_found(&format!("run {id}")),
            other => other.into(),
        })?;
    match outcome {
        Ok(run) => {
            slot.run_queued(&run, account.max_running);
            tracing::info!(run = %run.id, %person, "production faults run confirmed and queued");
            Ok((StatusCode::OK, Json(run.to_record())))
        }
        Err(ConfirmRefusal::NotAwaiting(why)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_awaiting_confirmation",
            format!("run {id}: {why}"),
        )),
        Err(ConfirmRefusal::HashMismatch { expected }) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "hash_mismatch",
            format!(
                "run {id} waits for a confirmation of {expected}; the hash sent names another experiment or target"
            ),
        )),
        Err(ConfirmRefusal::Lapsed) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "confirmation_lapsed",
            format!("run {id}: its confirmation deadline has passed"),
        )),
    }
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
        (status = 413, description = "`body_too_large`", body = super::openapi::ApiErrorBody),
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
    let account_id = caller.account_id().to_string();
    // The kinds a halt stops are their contracts' (`Kind::HALTED`): the experiments.
    let mut runs = Vec::new();
    for kind in RunKind::ALL.into_iter().filter(|k| k.halted()) {
        runs.extend(
            shared
                .store
                .unfinished_runs_of_kind(&account_id, kind.as_str())
                .await?,
        );
    }
    let mut halted = Vec::with_capacity(runs.len());
    for run in runs {
        shared
            .dispatcher
            .cancel(&run.id, &reason)
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "shutting_down",
                    "the controller is stopping",
                )
            })?;
        halted.push(run.id);
    }
    let line = AuditLine {
        at: 0,
        actor,
        action: "halt".into(),
        run_id: None,
        targets: None,
        outcome: format!("{} faults runs cancelled", halted.len()),
        ..Default::default()
    };
    shared.store.audit(&account_id, &line).await?;
    tracing::warn!(account = %account_id, runs = halted.len(), "halt");
    Ok(Json(Halted { halted }))
}
