//! The `capacity` kind: a sweep of constant-rate steps through the load engine, each
//! judged against the SLO on what follows its discarded first seconds, the sweep's next
//! rate decided by `iohr_domain::capacity::Sweep`, and the knee found over the points.
//!
//! Each step is one engine run whose warm-up is the step's discarded part, cut at the
//! step's end: under overload the engine would otherwise go on sending its backlog after
//! the step, and the completions per second would look like the offered rate. The
//! achieved rate is the completions during the judged part, warm-up requests that
//! completed in it included (the engine counts those as warm-up). Frames: a
//! `phase` frame when a step starts and one when it ends (with its point), and the
//! engine's per-second `load` frames in between, each marked with its step and rate.

pub mod dry_run;

use std::time::Duration;

use iohr_domain::FrameKind;
use iohr_domain::capacity::{
    CANCELLED, CapacityPlan, CapacityResult, Sweep, SweepPoint, rate_text,
};
use iohr_domain::kind::Kind as Contract;
use iohr_domain::load::{LoadResult, Share};
use serde_json::{Value, json};

use super::registry::{Kind, indented, read};
use super::{FrameSender, Outcome, RunContext, emit, to_json};
use crate::dry_run::Described;
use crate::load;
use crate::verdicts::StepVerdict;

pub struct Capacity;

impl Kind for Capacity {
    type Contract = iohr_domain::kind::capacity::Capacity;
    type Plan = CapacityPlan;

    fn from_contract(plan: CapacityPlan) -> CapacityPlan {
        plan
    }

    fn share(plan: CapacityPlan, share: Share) -> Result<CapacityPlan, String> {
        <Self::Contract as Contract>::share(plan, share).map_err(|e| e.to_string())
    }

    async fn run(plan: CapacityPlan, ctx: &RunContext) -> Outcome {
        run(plan, ctx).await
    }

    fn dry_run(plan: &CapacityPlan, ctx: &RunContext) -> Result<Option<Described>, String> {
        dry_run::dry_run(plan, ctx)
    }

    fn summary(result: &Value) -> Option<Vec<String>> {
        read::<CapacityResult>(result).map(|r| indented(r.summary()))
    }
}

/// What one step measured.
struct Measured {
    load: LoadResult,
    /// Requests completed per second during the judged part, whenever sent.
    achieved: f64,
}

/// How one step's engine run ended.
enum StepEnd {
    Measured(Box<Measured>),
    /// The engine could not run (a bad target, an unresolvable header): no result.
    Failed(String),
}

/// Sweeps the plan's rates against the context's target, one engine run per step.
pub async fn run(plan: CapacityPlan, ctx: &RunContext) -> Outcome {
    let (frames, cancel) = (&ctx.frames, &ctx.cancel);
    let mut sweep = Sweep::new(plan.grid.clone(), plan.bisect);
    let mut points: Vec<SweepPoint> = Vec::new();
    let mut units = 0u64;
    while let Some(step) = sweep.next() {
        let number = points.len() as u32 + 1;
        emit(
            frames,
            FrameKind::Phase,
            json!({
                "phase": format!("step {number} {} {}: start", step.stage.as_str(), rate_text(step.rate)),
                "event": "start", "step": number, "stage": step.stage, "offered": step.rate,
                "step_ms": plan.step.as_millis() as u64, "discard_ms": plan.discard.as_millis() as u64,
            }),
        ).await;
        tracing::info!(
            step = number,
            stage = step.stage.as_str(),
            rate = step.rate,
            "capacity step"
        );
        let (end, spent) = run_step(&plan, step.rate, number, ctx).await;
        units += spent;
        if cancel.is_cancelled() {
            return finish(&plan, sweep, points, units, Some(CANCELLED.to_string()));
        }
        let result = match end {
            StepEnd::Measured(result) => result,
            StepEnd::Failed(reason) => return Outcome::error(reason, units),
        };
        let point = SweepPoint::judge(
            number,
            step,
            &result.load,
            result.achieved,
            &plan.slo,
            plan.share_of(),
        );
        let mut shown = to_json(&point);
        if let Some(fields) = shown.as_object_mut()
            && plan.share_of().is_whole()
        {
            // The step's seconds carry its histograms already; a share's point keeps its
            // own, which the controller adds to the other shares' to judge the step.
            fields.remove("histogram");
        }
        emit(
            frames,
            FrameKind::Phase,
            json!({
                "phase": format!("step {number} {}", point.line()),
                "event": "end", "step": number, "point": shown,
            }),
        )
        .await;
        let verdict = match shared_verdict(&plan, number, ctx).await {
            Shared::Own => None,
            Shared::Given(verdict) => Some(verdict),
            Shared::Cancelled => {
                points.push(point);
                return finish(&plan, sweep, points, units, Some(CANCELLED.to_string()));
            }
            Shared::Missing => {
                return Outcome::error(
                    format!(
                        "no verdict on step {number} from the controller within {} s",
                        VERDICT_WITHIN.as_secs()
                    ),
                    units,
                );
            }
        };
        let (meets_slo, why) = match &verdict {
            Some(v) => (v.meets_slo, v.reason.clone()),
            None => (point.meets_slo, point.broke.join("; ")),
        };
        if verdict.is_some() {
            // The live view shows what the sweep goes on from: the whole's verdict.
            let verdict_text = if meets_slo {
                "meets the SLO".to_string()
            } else {
                format!("breaks the SLO ({why})")
            };
            emit(
                frames,
                FrameKind::Phase,
                json!({
                    "phase": format!("step {number} on every share: {verdict_text}"),
                    "event": "verdict", "step": number, "meets_slo": meets_slo, "broke": why,
                }),
            )
            .await;
        }
        sweep.record(step, meets_slo, &why);
        // The shares start the next step together.
        let mut pause = verdict.map_or(Duration::ZERO, |v| v.start_after);
        if !meets_slo && sweep.next().is_some() {
            // What an overloaded step left queued at the target would load the next step.
            pause += plan.cooldown;
        }
        points.push(point);
        if !pause.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = cancel.cancelled() => {
                    return finish(&plan, sweep, points, units, Some(CANCELLED.to_string()));
                }
            }
        }
    }
    finish(&plan, sweep, points, units, None)
}

/// The longest a share waits for the controller's verdict on a step: the other shares'
/// steps end within milliseconds of its own, unless their agents are gone (then the
/// controller ends the run).
const VERDICT_WITHIN: Duration = Duration::from_secs(60);

/// Where a step's verdict comes from.
enum Shared {
    /// The run is the whole sweep (or runs without a controller): it judges its steps.
    Own,
    /// A share of a split sweep: the controller's verdict on the merged step.
    Given(StepVerdict),
    Cancelled,
    Missing,
}

/// The verdict on step `number` when this run is a share of a split sweep.
async fn shared_verdict(plan: &CapacityPlan, number: u32, ctx: &RunContext) -> Shared {
    let Some(verdicts) = ctx
        .verdicts
        .as_ref()
        .filter(|_| !plan.share_of().is_whole())
    else {
        return Shared::Own;
    };
    match verdicts.ask(number, VERDICT_WITHIN, &ctx.cancel).await {
        Some(verdict) => Shared::Given(verdict),
        None if ctx.cancel.is_cancelled() => Shared::Cancelled,
        None => Shared::Missing,
    }
}

/// One step: the engine at a constant rate, cut at the step's end, its `load` frames
/// marked with the step. Returns how it ended and the requests it sent.
async fn run_step(plan: &CapacityPlan, rate: f64, number: u32, ctx: &RunContext) -> (StepEnd, u64) {
    // The step's engine sends into a channel that never waits; the forwarder waits for room
    // in the agent's bound (a capacity run is exclusive: without the controller it stops
    // after one lease TTL, so the channel holds at most that many seconds of frames).
    let (tx, mut rx) = FrameSender::channel();
    let forward = {
        let frames = ctx.frames.clone();
        tokio::spawn(async move {
            // Completions of warm-up requests up to the judged part's start.
            let mut warmup_before = 0u64;
            while let Some(mut frame) = rx.recv().await {
                if frame.data["phase"] == "warmup" {
                    warmup_before += frame.data["requests"].as_u64().unwrap_or(0);
                }
                if let Some(fields) = frame.data.as_object_mut() {
                    fields.insert("step".to_string(), json!(number));
                    fields.insert("offered".to_string(), json!(rate));
                }
                frames.send(frame).await;
            }
            warmup_before
        })
    };
    let step_cancel = ctx.cancel.child_token();
    let stopper = {
        let token = step_cancel.clone();
        let ends = tokio::time::Instant::now() + plan.step;
        tokio::spawn(async move {
            tokio::time::sleep_until(ends).await;
            token.cancel();
        })
    };
    // The step's context holds the channel's only sender: dropping it ends the forwarder.
    let step = ctx.part::<()>(tx, step_cancel);
    let outcome = load::run(plan.step_plan(rate), &step).await;
    stopper.abort();
    drop(step);
    let warmup_before = forward.await.unwrap_or(0);
    // The step's own cut ends the engine `cancelled`; its result is what was measured.
    let end = match serde_json::from_value::<LoadResult>(outcome.result) {
        Ok(load) => {
            // Warm-up requests that completed in the judged part count there: they took
            // the place of the judged part's last requests, still in flight at the cut.
            let warmup_after = load.warmup.requests.saturating_sub(warmup_before);
            let achieved = if load.measured_seconds > 0.0 {
                (load.counts.requests + warmup_after) as f64 / load.measured_seconds
            } else {
                0.0
            };
            StepEnd::Measured(Box::new(Measured { load, achieved }))
        }
        Err(_) => StepEnd::Failed(
            outcome
                .reason
                .unwrap_or_else(|| "the load engine gave no result".to_string()),
        ),
    };
    (end, outcome.units_spent)
}

fn finish(
    plan: &CapacityPlan,
    sweep: Sweep,
    points: Vec<SweepPoint>,
    units_spent: u64,
    stopped: Option<String>,
) -> Outcome {
    let concluded = CapacityResult::conclude(plan, &sweep, points, stopped);
    Outcome {
        status: concluded.status,
        reason: concluded.reason,
        result: to_json(&concluded.result),
        units_spent,
    }
}
