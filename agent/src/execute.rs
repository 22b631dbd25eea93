//! Starting the executor of an accepted lease: it streams its frames into the lease table
//! and leaves its completion there when it ends.

use std::sync::Arc;
use std::time::Duration;

use iohr_domain::RunKind;
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::kinds::faults::FaultsConfig;
use crate::kinds::registry::{self, Leased};
use crate::kinds::{EnvVars, Outcome, RunContext};
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
/// A kind whose contract says so (`Kind::STRESS_SAMPLED`: the kinds that send load) runs
/// with a stress sampler beside it ([`crate::stress`]): its `stress` frames, and the
/// result's `generator_saturated` when the generator set the pace.
pub async fn run_plan(plan: Plan, ctx: &RunContext) -> Outcome {
    if !plan.kind().stress_sampled() {
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
    /// When a share of a split run starts, with the other shares (see [`start_at`]).
    pub start_at: Option<Instant>,
    /// A share of a split run: it starts only once the controller says every share holds
    /// its lease ([`iohr_proto::START_STEP`]).
    pub split: bool,
    /// The account secrets the offer carried (`${secret:NAME}`), by name.
    pub secrets: std::collections::BTreeMap<String, String>,
}

/// The longest a share waits for the others to hold their leases (one lapsed and was
/// offered to another agent, say) before it ends `error`.
pub const START_WITHIN: Duration = Duration::from_secs(60);

/// Waits until every share of a split run holds its lease, and then for the instant
/// the controller gave them all. `Err`: they did not within [`START_WITHIN`]. A cancel
/// ends the wait early (and the run then ends `cancelled` at once).
async fn wait_for_the_others(ctx: &RunContext) -> Result<(), String> {
    let Some(verdicts) = &ctx.verdicts else {
        return Ok(());
    };
    match verdicts
        .ask(iohr_proto::START_STEP, START_WITHIN, &ctx.cancel)
        .await
    {
        Some(start) => {
            tokio::select! {
                _ = tokio::time::sleep(start.start_after.min(MAX_START_AFTER)) => {}
                _ = ctx.cancel.cancelled() => {}
            }
            Ok(())
        }
        None if ctx.cancel.is_cancelled() => Ok(()),
        None => Err(format!(
            "the run's other shares did not all start within {} s",
            START_WITHIN.as_secs()
        )),
    }
}

/// The longest an offer may make its run wait to start: a controller asking for more is
/// not believed, so no offer can park an agent's run.
pub const MAX_START_AFTER: Duration = Duration::from_secs(10);

/// When the run of an offer received at `received` starts: `start_after_ms` later
/// (bounded by [`MAX_START_AFTER`]), or at once for 0.
pub fn start_at(received: Instant, start_after_ms: u32) -> Option<Instant> {
    (start_after_ms > 0)
        .then(|| received + Duration::from_millis(u64::from(start_after_ms)).min(MAX_START_AFTER))
}

/// Waits for a run's start; a cancel ends the wait early.
async fn wait_for_start(start_at: Option<Instant>, cancel: &CancellationToken) {
    if let Some(at) = start_at {
        tokio::select! {
            _ = tokio::time::sleep_until(at) => {}
            _ = cancel.cancelled() => {}
        }
    }
}

/// Starts an accepted lease's run in the background. The executor runs in a task of its
/// own under a supervisor holding the run's `Ending` (`execute/ending.rs`): a panic in the executor (or its
/// task aborted) still ends the run, `error` with `executor failed: ...`.
pub fn start(
    leases: &Leases,
    agent: &str,
    options: &TargetOptions,
    env: EnvVars,
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
        start_at,
        split,
        secrets,
    } = accepted;
    let spans = crate::telemetry::LeaseSpans::accepted(&run_id, kind, agent, &lease_id);
    let cancel = leases.insert(&lease_id, epoch, &run_id, kind);
    leases.scrub(&lease_id, secrets.values().cloned());
    let env = env.with_account_secrets(secrets);
    let mut started = json!({"agent": agent, "kind": kind, "target": target});
    if let Some(at) = start_at {
        // How long this share waits for the others: the run's clock starts after it.
        let wait = at.saturating_duration_since(Instant::now()).as_millis();
        started["start_after_ms"] = u64::try_from(wait).unwrap_or(u64::MAX).into();
    }
    leases.push_frame(&lease_id, "started", started.to_string());
    // Made before anything can fail, so the run ends whatever happens from here.
    let ending = Ending::new(leases, &lease_id, &run_id, cancel.clone());
    // The executor's frames go straight into the table: every one is there before the
    // completion that counts them.
    let ctx = RunContext::new(target.clone(), leases.frame_sender(&lease_id))
        .with_run_id(run_id.clone())
        .with_options(options.clone())
        .with_env(env)
        .with_cancel(cancel)
        .with_faults(faults)
        .with_verdicts(leases.verdicts(&lease_id));
    let execute = spans.execute();
    let table = leases.clone();
    tokio::spawn(async move {
        let executor = tokio::spawn(
            async move {
                #[cfg(debug_assertions)]
                test_hook::maybe_panic(&ctx.cancel).await;
                // A cancelled wait runs the plan all the same: cancelled at once, it ends
                // `cancelled` with its (empty) measure, as any cancelled run.
                wait_for_start(start_at, &ctx.cancel).await;
                let together = if split {
                    wait_for_the_others(&ctx).await
                } else {
                    Ok(())
                };
                let mut outcome = match together {
                    Ok(()) => match ctx.options.egress.preflight(&target).await {
                        Ok(()) => run_plan(plan, &ctx).await,
                        // Said at once, before anything is sent; each connection checks again.
                        Err(why) => Outcome::error(format!("target refused: {why}"), 0),
                    },
                    Err(why) => Outcome::error(why, 0),
                };
                let lease = Leased {
                    target: &target,
                    environment: &environment,
                    scenario_id: &scenario_id,
                    scenario_version: &scenario_version,
                };
                outcome.result = registry::stored(kind, outcome.result, &lease);
                outcome
            }
            .instrument(execute),
        );
        let joined = executor.await;
        spans.ended(joined.as_ref().ok(), table.frames_pushed(&lease_id));
        ending.finish(joined);
    });
}

#[cfg(test)]
mod tests;
