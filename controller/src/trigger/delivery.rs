//! `POST /v1/reliability/triggers/{id}/deliveries`: a forge's delivery, authenticated by
//! its signature (no bearer token), read into a change ([`super::change`]) and started
//! through the run-lifecycle layer as a schedule's fire is.
//!
//! Answers, each a JSON body with a `code`: 404 `not_found` for an unknown or paused
//! trigger alike (nothing read, nothing stored); 401 `bad_signature` (nothing stored);
//! 400 `invalid_delivery` without a usable delivery id; 413 `body_too_large` over 1 MiB;
//! 202 `started` with the runs, `ignored` with the reason (logged), `duplicate_delivery`
//! for an id seen before (nothing started), `refused` when the run could not start
//! (logged; the same id sent again tries again).

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use iohr_domain::StartedBy;
use iohr_domain::run::ScenarioRef;
use serde_json::{Value, json};

use super::change::{Change, Parsed};
use super::{generic, github, gitlab};
use crate::Shared;
use crate::error::ApiError;
use crate::in_flight::Slot;
use crate::resources::triggers::substitute::{self, shorten};
use crate::runs::start::{self, RunRequest};
use crate::store::{Claimed, RunRow, TriggerDelivery, TriggerRow, now_ms};

/// The largest delivery taken (GitHub's pull request payloads are tens of KiB).
pub const MAX_DELIVERY_BYTES: usize = 1024 * 1024;
/// The longest delivery id taken.
const MAX_DELIVERY_ID: usize = 200;

fn accepted(body: Value) -> Response {
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

/// Takes one delivery.
pub async fn receive(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    slot: Option<axum::Extension<Slot>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    // Unknown and paused read alike: a sender learns nothing of which. An id no trigger
    // can have (a NUL, which PostgreSQL stores none of; too long) is unknown too.
    if id.contains('\0') || id.len() > MAX_DELIVERY_ID {
        return Err(ApiError::not_found("trigger"));
    }
    let trigger = match shared.store.trigger_by_id(&id).await? {
        Some(trigger) if trigger.enabled => trigger,
        _ => return Err(ApiError::not_found("trigger")),
    };
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("deliveries are limited to {MAX_DELIVERY_BYTES} bytes"),
            )
        } else {
            ApiError::bad_request("invalid_body", rejection.body_text())
        }
    })?;
    let secret = shared.store.trigger_secret(&trigger).map_err(|error| {
        tracing::error!(trigger = %trigger.id, %error, "a trigger's secret does not open");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "secrets_unavailable",
            "the controller cannot open this trigger's secret; its operator checks the secrets key (docs/security.md)",
        )
    })?;
    let verified = match trigger.source.as_str() {
        "github" => github::verified(&secret, &headers, &body),
        "gitlab" => gitlab::verified(&secret, &headers),
        _ => generic::verified(&secret, &headers, &body),
    };
    if !verified {
        tracing::info!(trigger = %trigger.id, "a delivery's signature did not verify");
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "bad_signature",
            "the delivery's signature is missing or does not verify with this trigger's secret",
        ));
    }
    // Authenticated: from here the delivery counts in its account's share of requests.
    if let Some(axum::Extension(slot)) = slot {
        slot.take(&shared.requests, &trigger.account_id)
            .map_err(crate::in_flight::refusal)?;
    }
    let (delivery_id, event) = match trigger.source.as_str() {
        "github" => github::delivery(&headers),
        "gitlab" => gitlab::delivery(&headers),
        _ => (generic::delivery(&headers), Some("generic")),
    };
    let delivery_id = match delivery_id {
        Some(d)
            if !d.is_empty() && d.len() <= MAX_DELIVERY_ID && !d.chars().any(char::is_control) =>
        {
            d
        }
        _ => {
            return Err(ApiError::bad_request(
                "invalid_delivery",
                format!(
                    "the delivery has no id of 1 to {MAX_DELIVERY_ID} characters (X-GitHub-Delivery, Idempotency-Key, webhook-id)"
                ),
            ));
        }
    };
    let event = shorten(event.unwrap_or("(none)"));
    let parsed = match serde_json::from_slice::<Value>(&body) {
        Err(_) => Parsed::Ignore(
            "the body is not JSON (a GitHub webhook's content type must be application/json)"
                .into(),
        ),
        Ok(payload) => match trigger.source.as_str() {
            "github" => github::parse(&event, &payload),
            "gitlab" => gitlab::parse(&event, &payload),
            _ => generic::parse(&payload),
        },
    };
    // The targets are made before anything is stored: a value that cannot stand in them
    // is a reason to ignore the delivery, as an invalid value is.
    let parsed = match parsed {
        Parsed::Start(change) => match Targets::of(&trigger, &change) {
            Ok(targets) => Ok((change, targets)),
            Err(why) => Err(why),
        },
        Parsed::Ignore(why) => Err(why),
    };
    let mut log = TriggerDelivery {
        delivery_id: delivery_id.to_string(),
        at: now_ms(),
        event,
        outcome: "starting".into(),
        reason: None,
        run_id: None,
        baseline_run_id: None,
    };
    if let Err(why) = &parsed {
        log.outcome = "ignored".into();
        log.reason = Some(why.clone());
    }
    if let Claimed::Seen(seen) = shared.store.claim_delivery(&trigger.id, &log).await? {
        return Ok(accepted(json!({
            "code": "duplicate_delivery",
            "message": "this delivery id was taken before; nothing is started again",
            "outcome": seen.outcome,
            "run": seen.run_id,
            "baseline_run": seen.baseline_run_id,
        })));
    }
    let (change, targets) = match parsed {
        Ok(found) => found,
        Err(why) => {
            tracing::info!(trigger = %trigger.id, delivery = %delivery_id, %why, "delivery ignored");
            return Ok(accepted(json!({"code": "ignored", "reason": why})));
        }
    };
    match start_runs(&shared, &trigger, &change, &targets).await {
        Ok((run, before)) => {
            let before_id = before.as_ref().map(|b| b.id.clone());
            shared
                .store
                .finish_delivery(
                    &trigger.id,
                    delivery_id,
                    "started",
                    None,
                    Some(&run.id),
                    before_id.as_deref(),
                )
                .await?;
            tracing::info!(trigger = %trigger.id, delivery = %delivery_id, run = %run.id, change = %change.label(), "trigger started a run");
            Ok(accepted(json!({
                "code": "started",
                "run": run.id,
                "baseline_run": before_id,
                "change": change.label(),
                "commit": change.sha,
                "base": change.base(),
            })))
        }
        Err((why, before)) => {
            let before_id = before.map(|b| b.id);
            shared
                .store
                .finish_delivery(
                    &trigger.id,
                    delivery_id,
                    "refused",
                    Some(&why),
                    None,
                    before_id.as_deref(),
                )
                .await?;
            tracing::info!(trigger = %trigger.id, delivery = %delivery_id, %why, "a delivery's run was refused");
            Ok(accepted(json!({"code": "refused", "reason": why})))
        }
    }
}

/// Where a delivery's runs go: the after-run's target, and a fresh before-run's.
struct Targets {
    after: String,
    before: Option<String>,
}

impl Targets {
    fn of(trigger: &TriggerRow, change: &Change) -> Result<Targets, String> {
        let after = substitute::substitute(&trigger.target, &change.head_values())?;
        // A fresh baseline only for a change with a base: a pull request's.
        let before = match (&trigger.fresh_baseline, &change.base_branch) {
            (true, Some(_)) => {
                let template = trigger.base_target.as_deref().unwrap_or(&trigger.target);
                Some(
                    substitute::substitute(template, &change.base_values())
                        .map_err(|why| format!("the fresh baseline's target: {why}"))?,
                )
            }
            _ => None,
        };
        Ok(Targets { after, before })
    }
}

fn request(trigger: &TriggerRow, target: &str, change: String) -> RunRequest {
    RunRequest {
        kind: trigger.kind.clone(),
        environment: trigger.environment.clone(),
        target: target.to_string(),
        spec: None,
        scenario: Some(ScenarioRef {
            id: trigger.scenario_id.clone(),
            version: trigger.scenario_version.clone(),
        }),
        scenario_name: None,
        executor: Some(trigger.executor.clone()),
        change: Some(change),
        confirm_within: trigger.confirm_within.clone(),
        agents: trigger.agents,
    }
}

/// The after-run (and first the fresh before-run, when the trigger asks for one), started
/// by the layer with the account's plan applied; else why not, and any before-run started.
async fn start_runs(
    shared: &Shared,
    trigger: &TriggerRow,
    change: &Change,
    targets: &Targets,
) -> Result<(RunRow, Option<RunRow>), (String, Option<RunRow>)> {
    let account = shared
        .store
        .account(&trigger.account_id)
        .await
        .map_err(|e| (e.to_string(), None))?;
    let actor = format!("trigger:{}", trigger.id);
    let started_by = |label: String, commit: Option<String>, base: Option<String>| StartedBy {
        kind: "trigger".into(),
        id: trigger.id.clone(),
        change: Some(label),
        commit,
        base,
        forge: change.forge,
    };
    let before = match (&targets.before, change.base()) {
        (Some(target), Some(base)) => {
            let request = request(trigger, target, base.clone());
            let by = started_by(base, change.base_sha.clone(), None);
            let run = start::start(shared, &account, &request, by, &actor, now_ms(), None)
                .await
                .map_err(|e| (format!("the fresh baseline: {}", e.reason()), None))?;
            Some(run)
        }
        _ => None,
    };
    let request = request(trigger, &targets.after, change.label());
    let by = started_by(change.label(), Some(change.sha.clone()), change.base());
    let now = now_ms();
    let checked = match start::check(shared, &account, &request, true).await {
        Ok(checked) => checked,
        Err(e) => return Err((e.reason(), before)),
    };
    let mut new = start::prepare(shared, &account, &request, checked, by, now);
    new.baseline_run = before.as_ref().map(|b| b.id.clone());
    match start::submit(shared, &account, &new, &actor, None).await {
        Ok(run) => Ok((run, before)),
        Err(e) => Err((e.reason(), before)),
    }
}
