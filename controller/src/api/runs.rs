//! `POST /runs`, `GET /runs/{id}`, `GET /runs`, `POST /runs/{id}/cancel`.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use iohr_domain::faults::confirmation::{
    DEFAULT_CONFIRM_WITHIN, MAX_CONFIRM_WITHIN, confirmation_hash,
};
use iohr_domain::replay::{LoggedRequest, ReplaySpec};
use iohr_domain::run::ScenarioRef;
use iohr_domain::scenario_kind::ScenarioSpec;
use iohr_domain::{Executor, RunKind, RunRecord, RunStatus, StartedBy};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::auth::{Caller, ReadScope, RunScope};
use super::error::{ApiError, JsonBody};
use super::run_guards;
use crate::Shared;
use crate::store::{AuditLine, NewRun, RunFilter, format_ms, now_ms};

/// A new run: its kind, where, against what, and either an inline `spec` or a stored
/// `scenario`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    #[schema(value_type = RunKind)]
    pub kind: String,
    /// One of the account's environments (`staging`, `production`).
    pub environment: String,
    /// The service under test, `http://host:port` (https for load, replay and capacity).
    pub target: String,
    /// The kind's spec, inline: its fields are the kind's (docs/checks, docs/load.md,
    /// docs/scenario.md, docs/faults.md, docs/capacity.md), checked at this POST
    /// (`invalid_spec` names the field).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub spec: Option<serde_json::Value>,
    #[serde(default)]
    pub scenario: Option<ScenarioRef>,
    /// The name an inline spec is stored under (default `inline-KIND`).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200)]
    pub scenario_name: Option<String>,
    /// `any` (default), `cloud` or `agent:NAME`.
    #[serde(default)]
    #[schema(pattern = "^(any|cloud|agent:.+)$")]
    pub executor: Option<String>,
    /// The change the run is for, such as `core#212`.
    #[serde(default)]
    #[schema(max_length = 200)]
    pub change: Option<String>,
    /// How long a production faults run waits for a person's confirmation (`30m`; default
    /// 1 h, at most 24 h).
    #[serde(default)]
    pub confirm_within: Option<String>,
}

/// The longest name, change reference or cancel reason accepted.
pub const MAX_NAME: usize = 200;

/// A kind named in a request body.
pub fn parse_kind(text: &str) -> Result<RunKind, ApiError> {
    text.parse().map_err(|e: iohr_domain::run::UnknownWord| {
        ApiError::bad_request("unknown_kind", e.to_string())
    })
}

/// Validates a spec for its kind; returns the units the run may spend.
pub fn validate_spec(kind: RunKind, spec: &serde_json::Value) -> Result<u64, ApiError> {
    super::limits::spec_cost(kind, spec, None).map(|cost| cost.units)
}

/// A replay `from_run`: the earlier scenario run of this account (finished), its spec's
/// operations and its record's request log, written into the spec the run stores, so the
/// replay is self-contained and two replays of one run are one scenario version.
async fn resolve_replay(
    shared: &Shared,
    account_id: &str,
    spec: &serde_json::Value,
) -> Result<serde_json::Value, ApiError> {
    let invalid = |m: String| ApiError::bad_request("invalid_spec", m);
    let replay = ReplaySpec::from_json(spec).map_err(|e| invalid(e.to_string()))?;
    let from = replay.from_run.clone().unwrap_or_default();
    let earlier = shared
        .store
        .run_of_account(account_id, &from)
        .await?
        .ok_or_else(|| invalid(format!("spec.from_run: run {from:?} does not exist")))?;
    if earlier.kind != RunKind::Scenario || !earlier.status.is_finished() {
        return Err(invalid(format!(
            "spec.from_run: run {from} is a {} run that is {}; a replay takes a finished scenario run",
            earlier.kind, earlier.status
        )));
    }
    let log: Vec<LoggedRequest> = earlier
        .result
        .as_ref()
        .and_then(|r| r.get("requests"))
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .filter(|log: &Vec<LoggedRequest>| !log.is_empty())
        .ok_or_else(|| invalid(format!("spec.from_run: run {from} recorded no requests")))?;
    let stored = shared
        .store
        .scenario(account_id, &earlier.scenario_version)
        .await?
        .ok_or_else(|| invalid(format!("spec.from_run: the scenario of run {from} is gone")))?;
    let scenario = ScenarioSpec::from_json(&stored.spec).map_err(|e| invalid(e.to_string()))?;
    let resolved = replay.resolve_from_scenario(&scenario, log);
    serde_json::to_value(&resolved).map_err(|e| invalid(e.to_string()))
}

/// Start a run.
///
/// Scope: `reliability:run`. The run is stored `queued` (or `refused` when over the
/// month's units); a production faults run waits for a person's confirmation.
#[utoipa::path(
    post,
    path = "/v1/reliability/runs",
    tag = "runs",
    operation_id = "create_run",
    security(("bearer" = [])),
    request_body(content = CreateRun, content_type = "application/json", example = json!({
        "kind": "checks",
        "environment": "staging",
        "target": "http://127.0.0.1:9",
        "spec": {"checks": [{"name": "home", "method": "GET", "path": "/", "expect_status": 200}]},
        "change": "core#212"
    })),
    responses(
        (status = 201, description = "The run as stored", body = RunRecord),
        (status = 400, description = "`malformed_json`, `invalid_body`, `unknown_kind`, `unknown_environment`, `invalid_confirm_within`, `invalid_target`, `invalid_executor`, `unknown_agent`, `invalid_change`, `invalid_spec`, `invalid_scenario_name`, `unknown_scenario`, `kind_mismatch`, `spec_or_scenario`, `run_too_long`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 409, description = "`conflict`", body = super::openapi::ApiErrorBody),
        (status = 413, description = "`body_too_large`", body = super::openapi::ApiErrorBody),
        (status = 415, description = "`unsupported_media_type`: send JSON", body = super::openapi::ApiErrorBody),
        (status = 429, description = "`too_many_queued`: the plan's queue is full (`Retry-After`)", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn create(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    JsonBody(body): JsonBody<CreateRun>,
) -> Result<impl IntoResponse, ApiError> {
    let account = &caller.0.account;
    let kind = parse_kind(&body.kind)?;
    let environments = shared.store.environments(&account.id).await?;
    let Some(environment) = environments.iter().find(|e| e.name == body.environment) else {
        let known: Vec<_> = environments.iter().map(|e| e.name.as_str()).collect();
        return Err(ApiError::bad_request(
            "unknown_environment",
            format!(
                "environment {:?} does not exist; this account has: {}",
                body.environment,
                known.join(", ")
            ),
        ));
    };
    let needs_confirmation = kind.traits().confirmed_in_production && environment.production;
    let confirm_within = confirmation_window(body.confirm_within.as_deref(), needs_confirmation)?;
    let target = run_guards::target(&body.target)?;
    if target.starts_with("https://") && !kind.traits().https {
        return Err(ApiError::bad_request(
            "invalid_target",
            "target: https targets are supported by load, replay and capacity runs only so far; use http://",
        ));
    }
    let executor: Executor = match &body.executor {
        None => Executor::Any,
        Some(text) => text.parse().map_err(|e: iohr_domain::run::UnknownWord| {
            ApiError::bad_request("invalid_executor", e.to_string())
        })?,
    };
    run_guards::known_executor(&shared, &account.id, &executor).await?;
    if body.change.as_ref().is_some_and(|c| c.len() > MAX_NAME) {
        return Err(ApiError::bad_request(
            "invalid_change",
            format!("change is limited to {MAX_NAME} characters"),
        ));
    }
    super::limits::check_queue_room(&shared, account).await?;
    let resolved;
    let spec = match (kind, &body.spec) {
        (RunKind::Replay, Some(spec)) if spec.get("from_run").is_some() => {
            resolved = resolve_replay(&shared, &account.id, spec).await?;
            Some(&resolved)
        }
        (_, spec) => spec.as_ref(),
    };
    let scenario = match (spec, &body.scenario) {
        (Some(spec), None) => {
            validate_spec(kind, spec)?;
            let name = body
                .scenario_name
                .clone()
                .unwrap_or_else(|| format!("inline-{kind}"));
            if name.is_empty() || name.len() > MAX_NAME {
                return Err(ApiError::bad_request(
                    "invalid_scenario_name",
                    format!("scenario_name must be 1 to {MAX_NAME} characters"),
                ));
            }
            shared
                .store
                .put_scenario(&account.id, &name, kind.as_str(), spec)
                .await?
        }
        (None, Some(reference)) => {
            let found = shared
                .store
                .named_scenario(&account.id, &reference.id, &reference.version)
                .await?
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "unknown_scenario",
                        format!(
                            "scenario {} version {} does not exist",
                            reference.id, reference.version
                        ),
                    )
                })?;
            if found.kind != kind.as_str() {
                return Err(ApiError::bad_request(
                    "kind_mismatch",
                    format!(
                        "scenario {} is of kind {}, not {kind}",
                        found.id, found.kind
                    ),
                ));
            }
            found
        }
        _ => {
            return Err(ApiError::bad_request(
                "spec_or_scenario",
                "give either spec (inline) or scenario {id, version}, not both or neither",
            ));
        }
    };
    // A faults probe's url must name the run's own target.
    let cost = super::limits::spec_cost(kind, &scenario.spec, Some(&target))?;
    super::limits::check_length(kind, &cost, account)?;
    let units = cost.units;
    let confirmation = confirm_within.map(|within| {
        let hash = confirmation_hash(&scenario.version, &target, &body.environment);
        (hash, now_ms() + within.as_millis() as i64)
    });
    let reason = match &confirmation {
        Some((hash, deadline)) => Some(format!(
            "waiting for a person's confirmation of {hash} until {} (POST /v1/reliability/runs/ID/confirm)",
            format_ms(*deadline)
        )),
        None => {
            run_guards::waiting_reason(&shared, &account.id, kind, &body.environment, &executor)
        }
    };
    let started_by = match &caller.0.person {
        Some(person) => StartedBy {
            kind: "person".into(),
            id: person.clone(),
            change: body.change.clone(),
        },
        None => StartedBy {
            kind: "token".into(),
            id: caller.0.id.clone(),
            change: body.change.clone(),
        },
    };
    // The dispatcher's place is taken before the commit (503 `busy` when its queue is
    // full), so the send after it cannot fail and nothing is stored unannounced.
    let slot = match &confirmation {
        None => Some(shared.dispatcher.reserve()?),
        Some(_) => None,
    };
    let run = shared
        .store
        .insert_run(
            &NewRun {
                account_id: account.id.clone(),
                kind,
                scenario_id: scenario.id,
                scenario_version: scenario.version,
                environment: body.environment.clone(),
                target,
                executor,
                started_by,
                units_reserved: units as i64,
                reason,
                confirmation,
            },
            &caller.actor(),
        )
        .await?;
    match slot {
        _ if run.status == RunStatus::Refused => {
            // Over the month's unit budget: stored ended, with its reason.
            tracing::info!(run = %run.id, account = %account.name, reason = ?run.reason, "run refused by the plan");
        }
        // No await between the commit and this: a client gone now cannot leave a stored
        // run the dispatcher does not know.
        Some(slot) => {
            slot.run_queued(&run, account.max_running);
            tracing::info!(run = %run.id, kind = %kind, account = %account.name, "run queued");
        }
        // Queued only once a person confirms it (see `confirm`); the dispatcher ends it
        // `refused` if nobody does in time.
        None => {
            tracing::info!(run = %run.id, account = %account.name, "production faults run waits for a confirmation");
        }
    }
    Ok((StatusCode::CREATED, Json(run.to_record())))
}

/// How long a run waits for its confirmation: only production faults runs do.
fn confirmation_window(text: Option<&str>, needed: bool) -> Result<Option<Duration>, ApiError> {
    let invalid = |message: String| ApiError::bad_request("invalid_confirm_within", message);
    match (text, needed) {
        (None, false) => Ok(None),
        (Some(_), false) => Err(invalid(
            "confirm_within applies only to faults runs in a production environment".into(),
        )),
        (None, true) => Ok(Some(DEFAULT_CONFIRM_WITHIN)),
        (Some(text), true) => {
            let within = humantime::parse_duration(text)
                .map_err(|e| invalid(format!("confirm_within: {e} (such as 30m)")))?;
            if within.is_zero() || within > MAX_CONFIRM_WITHIN {
                return Err(invalid(
                    "confirm_within must be above 0 and at most 24h".into(),
                ));
            }
            Ok(Some(within))
        }
    }
}

/// A run.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/runs/{id}",
    tag = "runs",
    operation_id = "get_run",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The run", body = RunRecord),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such run in this account", body = super::openapi::ApiErrorBody),
    )
)]
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

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only runs with this status.
    #[param(value_type = Option<RunStatus>)]
    status: Option<String>,
    /// Only runs of this kind.
    #[param(value_type = Option<RunKind>)]
    kind: Option<String>,
    /// Only runs in this environment.
    environment: Option<String>,
    /// Only runs the agent of this id took.
    agent: Option<String>,
    /// The page size (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// The `next_cursor` of the page before.
    cursor: Option<String>,
}

/// The account's runs, newest first, a page at a time.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/runs",
    tag = "runs",
    operation_id = "list_runs",
    security(("bearer" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "A page of runs", body = super::openapi::RunPage),
        (status = 400, description = "`invalid_query`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
    )
)]
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

/// Optional: why (kept to 200 characters).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    #[serde(default)]
    reason: Option<String>,
}

/// How long a cancel waits for the run to end before answering with where it stands.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// Cancel a run.
///
/// Scope: `reliability:run`. Waits up to 5 s for the run to end: 200 when it has, 202 with
/// where it stands when not yet. The body is optional.
#[utoipa::path(
    post,
    path = "/v1/reliability/runs/{id}/cancel",
    tag = "runs",
    operation_id = "cancel_run",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id")),
    request_body(content = Option<CancelBody>, content_type = "application/json"),
    responses(
        (status = 200, description = "The run, ended", body = RunRecord),
        (status = 202, description = "The run, still stopping", body = RunRecord),
        (status = 400, description = "`malformed_json`, `invalid_body`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such run in this account", body = super::openapi::ApiErrorBody),
        (status = 409, description = "`already_finished`", body = super::openapi::ApiErrorBody),
        (status = 413, description = "`body_too_large`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn cancel(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<impl IntoResponse, ApiError> {
    // The body is optional: nothing, `null` or {"reason": "..."}.
    let body: CancelBody = super::error::optional_body(&body)?;
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
