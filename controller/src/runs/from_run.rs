//! A spec that names an earlier run (a replay's `from_run`): that finished scenario run's
//! operations and request log are written into the spec the run stores, so the replay is
//! self-contained and two replays of one run are one scenario version.

use iohr_domain::RunKind;
use iohr_domain::replay::{LoggedRequest, ReplaySpec};
use iohr_domain::scenario_kind::ScenarioSpec;

use super::error::{Refusal, StartError};
use crate::Shared;

/// The spec with the earlier run of this account written into it.
pub async fn resolve(
    shared: &Shared,
    account_id: &str,
    spec: &serde_json::Value,
) -> Result<serde_json::Value, StartError> {
    let invalid = |m: String| StartError::refused(Refusal::InvalidSpec, m);
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
