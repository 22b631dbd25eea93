//! `POST /runs`, `GET /runs/{id}`, `GET /runs`, `POST /runs/{id}/cancel`.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use iohr_domain::{RunKind, RunRecord, RunStatus};
use serde::Deserialize;

use super::auth::{Caller, ReadScope, RunScope};
use super::error::{ApiError, JsonBody};
use super::run_start;
pub use super::run_start::{CreateRun, MAX_NAME, parse_kind, validate_spec};
use crate::Shared;
use crate::store::{AuditLine, RunFilter, now_ms};

pub async fn create(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    JsonBody(body): JsonBody<CreateRun>,
) -> Result<impl IntoResponse, ApiError> {
    let account = &caller.0.account;
    let checked = run_start::check(&shared, account, &body, true).await?;
    let started_by = run_start::started_by_caller(
        caller.0.person.as_deref(),
        &caller.0.id,
        body.change.clone(),
    );
    let new = run_start::prepare(&shared, account, &body, checked, started_by, now_ms());
    let run = run_start::submit(&shared, account, &new, &caller.actor(), None).await?;
    Ok((StatusCode::CREATED, Json(run.to_record())))
}

pub async fn get(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path(id): Path<String>,
) -> Result<Json<RunRecord>, ApiError> {
    let run = shared
        .store
        .run_of_account(caller.account_id(), &id)
        .await?
        .ok_or_else(|| ApiError::not_found(&format!("run {id}")))?;
    Ok(Json(run.to_record()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    status: Option<String>,
    kind: Option<String>,
    environment: Option<String>,
    agent: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

pub async fn list(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query?;
    let status = super::page::filter::<RunStatus>(query.status)?;
    let kind = super::page::filter::<RunKind>(query.kind)?;
    let limit = super::page::page_limit(query.limit)?;
    let filter = RunFilter {
        status,
        kind,
        environment: query.environment,
        agent: query.agent,
        limit,
        cursor: query.cursor,
    };
    let (runs, next) = shared.store.list_runs(caller.account_id(), &filter).await?;
    let runs: Vec<RunRecord> = runs.iter().map(|r| r.to_record()).collect();
    Ok(super::page::page_answer("runs", &runs, next))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    #[serde(default)]
    reason: Option<String>,
}

/// How long a cancel waits for the run to end before answering with where it stands.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

pub async fn cancel(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<impl IntoResponse, ApiError> {
    // The body is optional: nothing, or {"reason": "..."}.
    let body: CancelBody = if body.iter().all(u8::is_ascii_whitespace) {
        CancelBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request("invalid_body", e.to_string()))?
    };
    let run = shared
        .store
        .run_of_account(caller.account_id(), &id)
        .await?
        .ok_or_else(|| ApiError::not_found(&format!("run {id}")))?;
    if run.status.is_finished() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "already_finished",
            format!("run {id} already ended {}", run.status),
        ));
    }
    let reason = body
        .reason
        .map(|r| r.chars().take(MAX_NAME).collect::<String>())
        .unwrap_or_else(|| format!("cancelled by {}", caller.actor()));
    let mut viewer = shared.hub.subscribe_internal(&id);
    let account_id = caller.account_id().to_string();
    let actor = caller.actor();
    // The cancel, its wait and its audit line run apart from the request: a client that
    // hangs up does not stop the cancel or lose its audit line.
    let outcome = tokio::spawn(async move {
        shared.dispatcher.cancel(&id, &reason).await?;
        let wait = async {
            loop {
                match viewer.frames.recv().await {
                    Ok(frame) if frame.kind == "finished" => return,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        };
        let _ = tokio::time::timeout(CANCEL_WAIT, wait).await;
        let run = shared
            .store
            .run_of_account(&account_id, &id)
            .await?
            .ok_or_else(|| ApiError::not_found(&format!("run {id}")))?;
        let line = AuditLine {
            at: 0,
            actor,
            action: "run.cancel".into(),
            run_id: Some(id.clone()),
            targets: Some(run.target.clone()),
            outcome: run.status.to_string(),
            ..Default::default()
        };
        shared.store.audit(&account_id, &line).await?;
        Ok::<_, ApiError>(run)
    });
    let run = outcome.await.map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the controller is stopping",
        )
    })??;
    let status = if run.status.is_finished() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(run.to_record())))
}
