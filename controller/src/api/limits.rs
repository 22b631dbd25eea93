//! The plan's limits a new run meets at its POST: what its spec costs (the units it
//! reserves, the longest it can last), the plan's cap on how long it lasts, and the answer
//! when the account's queue is full. The queue's bound and the unit budget are decided
//! again in the transaction that stores the run (`store::admission`); the queue check here
//! only spares a full account the writes before it (its inline scenario).

use std::time::Duration;

use axum::http::StatusCode;
use iohr_domain::RunKind;
use iohr_domain::capacity::CapacitySpec;
use iohr_domain::checks::ChecksSpec;
use iohr_domain::faults::Experiment;
use iohr_domain::load::LoadSpec;
use iohr_domain::replay::ReplaySpec;
use iohr_domain::scenario_kind::ScenarioSpec;

use super::error::ApiError;
use crate::Shared;
use crate::store::Account;

/// How long a client told `too_many_queued` waits before trying again: queued runs start
/// as running ones end, seconds to an hour later; half a minute keeps retries cheap.
pub const QUEUED_RETRY_AFTER: Duration = Duration::from_secs(30);

/// What a valid spec may cost.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecCost {
    /// The units (requests) the run reserves.
    pub units: u64,
    /// The longest the run can last and what in the spec makes it so, for the kinds whose
    /// length the plan caps (load, replay, capacity).
    pub length: Option<(Duration, &'static str)>,
}

fn invalid(e: impl ToString) -> ApiError {
    ApiError::bad_request("invalid_spec", e.to_string())
}

/// Validates a spec for its kind and says what it may cost.
pub fn spec_cost(kind: RunKind, spec: &serde_json::Value) -> Result<SpecCost, ApiError> {
    let unbounded = |units: u64| SpecCost {
        units,
        length: None,
    };
    match kind {
        RunKind::Checks => {
            let spec = ChecksSpec::from_json(spec).map_err(invalid)?;
            Ok(unbounded(spec.checks.len() as u64))
        }
        RunKind::Load => {
            let spec = LoadSpec::from_json(spec).map_err(invalid)?;
            let plan = spec.plan().map_err(invalid)?;
            let what = match (plan.warmup_length().is_zero(), spec.stages.is_empty()) {
                (true, true) => "spec.duration",
                (true, false) => "spec.stages",
                (false, true) => "spec.warmup + spec.duration",
                (false, false) => "spec.warmup + spec.stages",
            };
            Ok(SpecCost {
                // A closed-model run's count is not known before it runs: it reserves
                // nothing and spends what it sends.
                units: plan.units_to_reserve().unwrap_or(0),
                length: Some((plan.run_length(), what)),
            })
        }
        RunKind::Scenario => {
            let spec = ScenarioSpec::from_json(spec).map_err(invalid)?;
            Ok(unbounded(spec.total_requests()))
        }
        RunKind::Replay => {
            let plan = ReplaySpec::from_json(spec)
                .and_then(|spec| spec.plan())
                .map_err(invalid)?;
            Ok(SpecCost {
                units: plan.units_to_reserve().unwrap_or(0),
                length: Some((plan.run_length(), "the log's span over spec.speed")),
            })
        }
        RunKind::Faults => {
            let experiment = Experiment::from_json(spec).map_err(invalid)?;
            Ok(unbounded(experiment.expected_requests()))
        }
        RunKind::Capacity => {
            let plan = CapacitySpec::from_json(spec)
                .and_then(|spec| spec.plan())
                .map_err(invalid)?;
            Ok(SpecCost {
                units: plan.expected_requests(),
                length: Some((
                    plan.run_length(),
                    "the whole sweep (its steps, bisection rounds and cooldowns)",
                )),
            })
        }
    }
}

/// Refuses a run longer than its account's plan allows, naming both and the limit.
pub fn check_length(kind: RunKind, cost: &SpecCost, account: &Account) -> Result<(), ApiError> {
    let Some((length, what)) = cost.length else {
        return Ok(());
    };
    let limit = Duration::from_millis(u64::try_from(account.max_run_duration_ms).unwrap_or(0));
    if length <= limit {
        return Ok(());
    }
    Err(ApiError::bad_request(
        "run_too_long",
        format!(
            "{what} {} is over this plan's limit of {} for {kind} runs (a plan can raise it: iohr-controller account set-plan --max-run-duration)",
            humantime::format_duration(length),
            humantime::format_duration(limit),
        ),
    ))
}

/// 429 `too_many_queued`: the account has as many queued runs as its plan allows.
pub fn too_many_queued(limit: i64) -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_queued",
        format!(
            "this account has {limit} queued runs, its plan's limit; retry once some have started (a plan can raise it: iohr-controller account set-plan --max-queued)"
        ),
    )
    .retry_after(QUEUED_RETRY_AFTER)
}

/// Refuses a new run at once when the account's queue is already full, before anything of
/// it is written; the store decides again as it stores the run.
pub async fn check_queue_room(shared: &Shared, account: &Account) -> Result<(), ApiError> {
    if shared.store.queued_runs(&account.id).await? >= account.max_queued {
        return Err(too_many_queued(account.max_queued));
    }
    Ok(())
}
