//! `POST/GET /triggers`, `GET/PATCH/DELETE /triggers/{id}`, `GET /triggers/{id}/log`:
//! runs started by a forge's deliveries (a pull request opened or pushed to), a stored run
//! as a schedule's without a clock. The deliveries themselves are taken by the trigger
//! surface (`crate::trigger`), which needs no token: the signature authenticates them.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use iohr_domain::RunKind;
use iohr_domain::run::ScenarioRef;
use serde::Deserialize;

use super::auth::{Caller, ReadScope, RunScope};
use super::error::{ApiError, JsonBody};
use super::run_start::{self, CreateRun, parse_kind};
use crate::Shared;
use crate::resources::schedules::check_name;
use crate::resources::triggers::substitute::{Values, substitute};
use crate::resources::triggers::{self as layer, delivery_path};
pub use crate::resources::triggers::{DeliveryRecord, TriggerRecord};
use crate::runs::guards;
use crate::store::{MAX_TRIGGERS, NewTrigger, StoreError};

/// The baseline window when a trigger names none, and the longest one taken.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);
pub const MAX_WINDOW: Duration = Duration::from_secs(90 * 24 * 3600);
const MIN_WINDOW: Duration = Duration::from_secs(60);

/// A run's POST body (as a schedule's) plus `name`, `source` and the baseline rule.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTrigger {
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    /// Whose deliveries it takes: `github`, `gitlab` or `generic` (Standard Webhooks).
    #[schema(pattern = "^(github|gitlab|generic)$")]
    pub source: String,
    /// Created paused with `false` (default `true`).
    #[serde(default)]
    pub enabled: Option<bool>,
    #[schema(value_type = RunKind)]
    pub kind: String,
    pub environment: String,
    /// The service under test; may hold `{pr}`, `{sha}` and `{branch}`, substituted with a
    /// delivery's validated values (inside the host, letters, digits and `-` only).
    pub target: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub spec: Option<serde_json::Value>,
    #[serde(default)]
    pub scenario: Option<ScenarioRef>,
    #[serde(default)]
    pub scenario_name: Option<String>,
    #[serde(default)]
    pub executor: Option<String>,
    #[serde(default)]
    pub confirm_within: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 64)]
    pub agents: Option<u32>,
    /// How far back a passed run on the base branch is a baseline: `1m` to `90d`
    /// (default `7d`).
    #[serde(default)]
    pub window: Option<String>,
    /// Where a baseline may have run besides the target, and where a fresh before-run
    /// goes (default: the target with the base branch); may hold the same placeholders.
    #[serde(default)]
    pub base_target: Option<String>,
    /// Start a before-run on the base branch beside each pull request's after-run.
    #[serde(default)]
    pub fresh_baseline: bool,
}

/// What a PATCH may change: paused or resumed.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchTrigger {
    pub enabled: bool,
}

/// A new trigger, with the secret shown this once.
#[allow(dead_code)] // a schema: the answer is written with `json!`
#[derive(utoipa::ToSchema)]
pub struct CreatedTrigger {
    #[schema(inline)]
    trigger: TriggerRecord,
    /// The secret the forge signs with (GitHub's webhook secret, GitLab's secret token,
    /// a Standard Webhooks `whsec_` secret): shown once, never again.
    secret: String,
    /// Where to send deliveries: this API's address and the trigger's `delivery_path`.
    url: String,
}

/// The account's triggers.
#[allow(dead_code)] // a schema
#[derive(utoipa::ToSchema)]
pub struct TriggerList {
    triggers: Vec<TriggerRecord>,
}

/// A trigger's deliveries, newest first.
#[allow(dead_code)] // a schema
#[derive(utoipa::ToSchema)]
pub struct DeliveryList {
    deliveries: Vec<DeliveryRecord>,
}

fn check_window(text: Option<&str>) -> Result<i64, ApiError> {
    let Some(text) = text else {
        return Ok(DEFAULT_WINDOW.as_millis() as i64);
    };
    match humantime::parse_duration(text) {
        Ok(window) if (MIN_WINDOW..=MAX_WINDOW).contains(&window) => Ok(window.as_millis() as i64),
        _ => Err(ApiError::bad_request(
            "invalid_window",
            "window is a duration from 1m to 90d, such as 7d",
        )),
    }
}

/// A target template checked as the target it makes with sample values.
fn sample_target(template: &str, what: &str) -> Result<String, ApiError> {
    let made = substitute(template, &Values::sample())
        .map_err(|why| ApiError::bad_request("invalid_target", format!("{what}: {why}")))?;
    if made.contains(['{', '}']) {
        return Err(ApiError::bad_request(
            "invalid_target",
            format!("{what}: only {{pr}}, {{sha}} and {{branch}} are substituted"),
        ));
    }
    guards::target(&made).map_err(ApiError::from)
}

/// The secret a new trigger of `source` is given.
fn new_secret(source: &str) -> String {
    match source {
        // Standard Webhooks secrets are `whsec_` and base64, as the outbox's.
        "generic" => crate::outbox::signing::new_secret(),
        _ => {
            use rand::RngCore;
            let mut bytes = [0u8; 32];
            rand::rng().fill_bytes(&mut bytes);
            hex::encode(bytes)
        }
    }
}

/// The API's own address as the caller reached it.
fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .filter(|p| *p == "https")
        .unwrap_or("http");
    format!("{scheme}://{host}")
}

fn too_many() -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "too_many_triggers",
        format!("an account has at most {MAX_TRIGGERS} triggers; delete one first"),
    )
}

/// Make a trigger: a run's request that a forge's deliveries start, and the rule its
/// baseline is found by. The answer holds the secret, shown this once.
///
/// Scope: `reliability:run`.
#[utoipa::path(
    post,
    path = "/v1/reliability/triggers",
    tag = "triggers",
    operation_id = "create_trigger",
    security(("bearer" = [])),
    request_body = CreateTrigger,
    responses(
        (status = 201, description = "The trigger, its secret (shown once) and the URL deliveries go to", body = CreatedTrigger),
        (status = 400, description = "`malformed_json`, `invalid_body`, `invalid_name`, `invalid_source`, `invalid_window`, `invalid_target` (also for a placeholder in a host), and every refusal of `POST /runs` but the queue's", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 422, description = "`too_many_triggers`, `target_not_allowed` and `unknown_secret` (as `POST /runs`)", body = super::openapi::ApiErrorBody),
        (status = 503, description = "`secrets_unavailable`: the controller has no secrets key (a trigger's secret is never stored in clear)", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn create(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    headers: HeaderMap,
    body: Result<JsonBody<CreateTrigger>, ApiError>,
) -> Result<impl IntoResponse, ApiError> {
    let JsonBody(body) = body?;
    let account = &caller.0.account;
    check_name(&body.name)?;
    if !matches!(body.source.as_str(), "github" | "gitlab" | "generic") {
        return Err(ApiError::bad_request(
            "invalid_source",
            "source is github, gitlab or generic",
        ));
    }
    let window_ms = check_window(body.window.as_deref())?;
    parse_kind(&body.kind)?;
    let target = sample_target(&body.target, "target")?;
    if let Some(base) = &body.base_target {
        sample_target(base, "base_target")?;
    }
    if !shared.store.seals_secrets() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "secrets_unavailable",
            "the controller has no secrets key to seal the trigger's secret with, and never stores one in clear; its operator runs `iohr-controller init` (docs/security.md)",
        ));
    }
    // Counted before the scenario is stored (nothing half-stored), and again in the
    // insert's transaction.
    if shared.store.triggers(&account.id).await?.len() as i64 >= MAX_TRIGGERS {
        return Err(too_many());
    }
    let run = CreateRun {
        kind: body.kind,
        environment: body.environment,
        target,
        spec: body.spec,
        scenario: body.scenario,
        scenario_name: body.scenario_name,
        executor: body.executor,
        change: None,
        confirm_within: body.confirm_within,
        agents: body.agents,
    };
    // The same checks as a POSTed run's, on the target a delivery's sample values make;
    // the queue's room is checked at each delivery.
    let checked = run_start::check(&shared, account, &run, false).await?;
    let secret = new_secret(&body.source);
    let new = NewTrigger {
        account_id: account.id.clone(),
        name: body.name,
        source: body.source,
        secret: secret.clone(),
        kind: checked.kind.as_str().to_string(),
        scenario_id: checked.scenario.id,
        scenario_version: checked.scenario.version,
        environment: run.environment,
        target: body.target,
        executor: checked.executor.to_string(),
        confirm_within: run.confirm_within,
        agents: (checked.agents > 1).then_some(checked.agents),
        base_target: body.base_target,
        window_ms,
        fresh_baseline: body.fresh_baseline,
        enabled: body.enabled.unwrap_or(true),
        created_by: caller.actor(),
    };
    let record = match layer::create(&shared.store, &new).await {
        Err(StoreError::Conflict(_)) => return Err(too_many()),
        other => other?,
    };
    tracing::info!(trigger = %record.id, account = %account.name, source = %record.source, "trigger created");
    let url = format!("{}{}", base_url(&headers), delivery_path(&record.id));
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({"trigger": record, "secret": secret, "url": url})),
    ))
}

/// The account's triggers.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/triggers",
    tag = "triggers",
    operation_id = "list_triggers",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The triggers", body = TriggerList),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn list(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let triggers = layer::list(&shared.store, caller.account_id()).await?;
    Ok(Json(serde_json::json!({ "triggers": triggers })))
}

/// One trigger (never its secret).
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/triggers/{id}",
    tag = "triggers",
    operation_id = "get_trigger",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The trigger's id")),
    responses(
        (status = 200, description = "The trigger", body = TriggerRecord),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such trigger in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn get(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path(id): Path<String>,
) -> Result<Json<TriggerRecord>, ApiError> {
    let row = layer::row(&shared.store, caller.account_id(), &id).await?;
    Ok(Json(layer::record(&row)))
}

/// Pause or resume a trigger: a paused trigger's deliveries are answered 404, as an
/// unknown trigger's, and start nothing.
///
/// Scope: `reliability:run`.
#[utoipa::path(
    patch,
    path = "/v1/reliability/triggers/{id}",
    tag = "triggers",
    operation_id = "patch_trigger",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The trigger's id")),
    request_body = PatchTrigger,
    responses(
        (status = 200, description = "The trigger", body = TriggerRecord),
        (status = 400, description = "`malformed_json`, `invalid_body`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such trigger in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn patch(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    Path(id): Path<String>,
    body: Result<JsonBody<PatchTrigger>, ApiError>,
) -> Result<Json<TriggerRecord>, ApiError> {
    let JsonBody(body) = body?;
    let changed = layer::set_enabled(
        &shared.store,
        caller.account_id(),
        &id,
        body.enabled,
        &caller.actor(),
    )
    .await?;
    Ok(Json(changed))
}

/// Delete a trigger and its delivery log; the runs it started stay.
///
/// Scope: `reliability:run`.
#[utoipa::path(
    delete,
    path = "/v1/reliability/triggers/{id}",
    tag = "triggers",
    operation_id = "delete_trigger",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The trigger's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such trigger in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn delete(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    layer::delete(&shared.store, caller.account_id(), &id, &caller.actor()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A trigger's delivery log, newest first (the newest 1000): each delivery's id, event,
/// outcome and why, and the runs it started. Never a body.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/triggers/{id}/log",
    tag = "triggers",
    operation_id = "list_trigger_deliveries",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The trigger's id")),
    responses(
        (status = 200, description = "The deliveries", body = DeliveryList),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such trigger in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn deliveries(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let deliveries = layer::deliveries(&shared.store, caller.account_id(), &id).await?;
    Ok(Json(serde_json::json!({ "deliveries": deliveries })))
}
