//! The plan's limits a new run meets at its POST: what its spec costs (the units it
//! reserves, the longest it can last), the plan's cap on how long it lasts, and the answer
//! when the account's queue is full. The queue's bound and the unit budget are decided
//! again in the transaction that stores the run (`store::admission`); the queue check here
//! only spares a full account the writes before it (its inline scenario).

use std::time::Duration;

use iohr_domain::RunKind;
use iohr_domain::cost::RunCost;

use super::error::ApiError;
use crate::Shared;
use crate::store::Account;

pub use crate::error::{QUEUED_RETRY_AFTER, too_many_queued};

/// Validates a spec for its kind and says what it may cost (the kind's contract,
/// `iohr_domain::kind`); with a target, also that the spec stays on it.
pub fn spec_cost(
    kind: RunKind,
    spec: &serde_json::Value,
    target: Option<&str>,
) -> Result<RunCost, ApiError> {
    iohr_domain::kind::cost(kind, spec, target)
        .map_err(|e| ApiError::bad_request("invalid_spec", e.to_string()))
}

/// Refuses a run longer than its account's plan allows, naming both and the limit.
pub fn check_length(kind: RunKind, cost: &RunCost, account: &Account) -> Result<(), ApiError> {
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

/// Refuses a new run at once when the account's queue is already full, before anything of
/// it is written; the store decides again as it stores the run.
pub async fn check_queue_room(shared: &Shared, account: &Account) -> Result<(), ApiError> {
    if shared.store.queued_runs(&account.id).await? >= account.max_queued {
        return Err(too_many_queued(account.max_queued));
    }
    Ok(())
}
