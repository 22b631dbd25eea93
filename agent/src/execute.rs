//! Starting the executor of an accepted lease: it streams its frames into the lease table
//! and leaves its completion there when it ends.

use std::sync::Arc;

use iohr_domain::RunKind;
use serde_json::json;

use crate::kinds::faults::FaultsConfig;
use crate::kinds::registry::{self, Leased};
use crate::kinds::{Outcome, RunContext};
use crate::leases::Leases;
use crate::load::TargetOptions;

mod ending;
#[cfg(debug_assertions)]
mod test_hook;

use ending::Ending;

pub use crate::kinds::registry::{Plan, RunOf, SUPPORTED_KINDS};

/// Parses an offered spec; the error is the reason the offer is refused.
pub fn plan(kind: RunKind, spec_json: &str) -> Result<Plan, String> {
    let value: serde_json::Value =
        serde_json::from_str(spec_json).map_err(|e| format!("spec is not JSON: {e}"))?;
    Plan::parse(kind, &value)
}

/// Runs a plan to its outcome, sending frames as it goes (used by leases and by `exec`).
/// A kind that sends load runs with a stress sampler beside it ([`crate::stress`]): its
/// `stress` frames, and the result's `generator_saturated` when the generator set the pace.
pub async fn run_plan(plan: Plan, ctx: &RunContext) -> Outcome {
    if plan.kind() == RunKind::Checks {
        return plan.run(ctx).await;
    }
    let watch = crate::stress::watch(ctx.frames.clone(), &ctx.cancel);
    let ctx = ctx.clone().with_stress(Some(watch.meter()));
    let mut outcome = plan.run(&ctx).await;
    crate::stress::qualify(&mut outcome.result, watch.finish().await);
    outcome
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

/// Starts an accepted lease's run in the background. The executor runs in a task of its
/// own under a supervisor holding the run's `Ending` (`execute/ending.rs`): a panic in the executor (or its
/// task aborted) still ends the run, `error` with `executor failed: ...`.
pub fn start(
    leases: &Leases,
    agent: &str,
    options: &TargetOptions,
    faults: Option<Arc<FaultsConfig>>,
    accepted: Accepted,
) {
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
    let ctx = RunContext::new(target.clone(), leases.frame_sender(&lease_id))
        .with_options(options.clone())
        .with_cancel(cancel)
        .with_faults(faults);
    tokio::spawn(async move {
        let executor = tokio::spawn(async move {
            #[cfg(debug_assertions)]
            test_hook::maybe_panic(&ctx.cancel).await;
            let mut outcome = run_plan(plan, &ctx).await;
            let lease = Leased {
                target: &target,
                environment: &environment,
                scenario_id: &scenario_id,
                scenario_version: &scenario_version,
            };
            outcome.result = registry::stored(kind, outcome.result, &lease);
            outcome
        });
        let joined = executor.await;
        ending.finish(joined);
    });
}
