//! Starting the executor of an accepted lease: it streams its frames into the lease table
//! and leaves its completion there when it ends.

use iohr_domain::RunKind;
use iohr_domain::capacity::{CapacityPlan, CapacitySpec};
use iohr_domain::checks::ChecksSpec;
use iohr_domain::faults::Experiment;
use iohr_domain::load::{LoadPlan, LoadSpec};
use iohr_domain::replay::ReplaySpec;
use iohr_domain::scenario_kind::{ScenarioRecord, ScenarioSpec, shell_quote};
use serde_json::json;

use crate::kinds::faults::FaultsPlan;
use crate::kinds::{self, FrameSender, Outcome};
use crate::leases::Leases;
use crate::load::{self, TargetOptions};

mod ending;
#[cfg(debug_assertions)]
mod test_hook;

use ending::Ending;

/// The kinds this agent can execute.
pub const SUPPORTED_KINDS: [RunKind; 6] = [
    RunKind::Checks,
    RunKind::Load,
    RunKind::Scenario,
    RunKind::Replay,
    RunKind::Faults,
    RunKind::Capacity,
];

/// A spec parsed for its kind, ready to run.
#[derive(Debug, Clone)]
pub enum Plan {
    Checks(ChecksSpec),
    Load(LoadPlan),
    /// A replay runs as a load plan of the log's arrivals; `speed` is kept for describing
    /// it (its gaps are already divided by it).
    Replay {
        plan: LoadPlan,
        speed: f64,
    },
    Scenario(ScenarioSpec),
    Faults(Box<FaultsPlan>),
    Capacity(CapacityPlan),
}

/// Parses an offered spec; the error is the reason the offer is refused.
pub fn plan(kind: RunKind, spec_json: &str) -> Result<Plan, String> {
    let value: serde_json::Value =
        serde_json::from_str(spec_json).map_err(|e| format!("spec is not JSON: {e}"))?;
    match kind {
        RunKind::Checks => ChecksSpec::from_json(&value)
            .map(Plan::Checks)
            .map_err(|e| e.to_string()),
        RunKind::Load => LoadSpec::from_json(&value)
            .and_then(|spec| spec.plan())
            .map(Plan::Load)
            .map_err(|e| e.to_string()),
        // A replay is the engine with the log's arrivals in place of a schedule.
        RunKind::Replay => ReplaySpec::from_json(&value)
            .and_then(|spec| {
                spec.plan().map(|plan| Plan::Replay {
                    plan,
                    speed: spec.speed,
                })
            })
            .map_err(|e| e.to_string()),
        RunKind::Scenario => ScenarioSpec::from_json(&value)
            .map(Plan::Scenario)
            .map_err(|e| e.to_string()),
        RunKind::Faults => Experiment::from_json(&value)
            .map(|experiment| {
                Plan::Faults(Box::new(FaultsPlan {
                    run_id: String::new(),
                    experiment,
                    confirmed_by: None,
                    dry_run: false,
                }))
            })
            .map_err(|e| e.to_string()),
        RunKind::Capacity => CapacitySpec::from_json(&value)
            .and_then(|spec| spec.plan())
            .map(Plan::Capacity)
            .map_err(|e| e.to_string()),
    }
}

/// Runs a plan to its outcome, sending frames as it goes (used by leases and by `exec`).
pub async fn run_plan(
    plan: Plan,
    target: &str,
    options: &TargetOptions,
    frames: &kinds::FrameSender,
    cancel: tokio_util::sync::CancellationToken,
) -> Outcome {
    match plan {
        Plan::Checks(spec) => kinds::checks::run(spec, target, frames, cancel).await,
        Plan::Load(plan) | Plan::Replay { plan, .. } => {
            load::run(plan, target, options, frames, cancel).await
        }
        Plan::Scenario(spec) => kinds::scenario::run(spec, target, frames, cancel).await,
        Plan::Faults(plan) => match &options.faults {
            Some(config) => kinds::faults::run(*plan, target, config, frames, cancel).await,
            None => Outcome::error("this agent has no faults configuration".into(), 0),
        },
        Plan::Capacity(plan) => kinds::capacity::run(plan, target, options, frames, cancel).await,
    }
}

/// An offer this agent accepted.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub lease_id: String,
    pub epoch: u64,
    pub run_id: String,
    pub kind: RunKind,
    pub plan: Plan,
    pub target: String,
    pub environment: String,
    /// The stored scenario the spec is a version of.
    pub scenario_id: String,
    pub scenario_version: String,
}

/// A scenario record as the controller will store it: no request body (see
/// `ScenarioRecord::without_bodies`).
fn stored_record(result: serde_json::Value, command: String) -> serde_json::Value {
    match serde_json::from_value::<ScenarioRecord>(result.clone()) {
        Ok(record) => serde_json::to_value(record.without_bodies(command)).unwrap_or(result),
        Err(_) => result,
    }
}

/// Starts an accepted lease's run in the background. The executor runs in a task of its
/// own under a supervisor holding the run's [`Ending`]: a panic in the executor (or its
/// task aborted) still ends the run, `error` with `executor failed: ...`.
pub fn start(leases: &Leases, agent: &str, options: &TargetOptions, accepted: Accepted) {
    let Accepted {
        lease_id,
        epoch,
        run_id,
        kind,
        plan,
        target,
        environment,
        scenario_id,
        scenario_version,
    } = accepted;
    let cancel = leases.insert(&lease_id, epoch, &run_id, kind);
    leases.push_frame(
        &lease_id,
        "started",
        json!({"agent": agent, "kind": kind, "target": target}).to_string(),
    );
    // Made before anything can fail, so the run ends whatever happens from here.
    let ending = Ending::new(leases, &lease_id, &run_id, cancel.clone());
    // The executor's frames go straight into the table: every one is there before the
    // completion that counts them.
    let frames = FrameSender::lease(leases, &lease_id);
    let options = options.clone();
    tokio::spawn(async move {
        let executor = tokio::spawn(async move {
            #[cfg(debug_assertions)]
            test_hook::maybe_panic(&cancel).await;
            let mut outcome = run_plan(plan, &target, &options, &frames, cancel).await;
            if kind == RunKind::Scenario {
                let command = format!(
                    "iohr reliability run --kind scenario --environment {} --target {} --scenario {} --version {} --wait",
                    shell_quote(&environment),
                    shell_quote(&target),
                    shell_quote(&scenario_id),
                    shell_quote(&scenario_version)
                );
                outcome.result = stored_record(outcome.result, command);
            }
            outcome
        });
        let joined = executor.await;
        ending.finish(joined);
    });
}
