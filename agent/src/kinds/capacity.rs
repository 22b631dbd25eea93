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

use iohr_domain::capacity::{CapacityPlan, CapacityResult, Sweep, SweepPoint, knee_of, rate_text};
use iohr_domain::kind::Kind as Contract;
use iohr_domain::load::{LoadResult, Share};
use iohr_domain::quantile::Percentile;
use iohr_domain::{FrameKind, RunStatus};
use serde_json::{Value, json};

use super::registry::{Kind, indented, read};
use super::{FrameSender, Outcome, RunContext, emit, to_json};
use crate::dry_run::Described;
use crate::load;

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
            return finish(&plan, sweep, points, units, Some("cancelled".to_string()));
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
        sweep.record(step, point.meets_slo, &point.broke.join("; "));
        let mut shown = to_json(&point);
        if let Some(fields) = shown.as_object_mut() {
            // The step's seconds carry its histograms already.
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
        let cool = !point.meets_slo && !plan.cooldown.is_zero() && sweep.next().is_some();
        points.push(point);
        // What an overloaded step left queued at the target would load the next step.
        if cool {
            tokio::select! {
                () = tokio::time::sleep(plan.cooldown) => {}
                () = cancel.cancelled() => {
                    return finish(&plan, sweep, points, units, Some("cancelled".to_string()));
                }
            }
        }
    }
    finish(&plan, sweep, points, units, None)
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
    let knee = knee_of(&points);
    let max_rate = sweep.max_rate_meeting_slo();
    let mut notes = Vec::new();
    let thin: Vec<String> = points
        .iter()
        .filter(|p| matches!(p.p99, Percentile::Insufficient { .. }) && p.p99_us.is_some())
        .map(|p| rate_text(p.offered))
        .collect();
    if !thin.is_empty() {
        notes.push(format!(
            "p99 judged on its histogram's value with too few samples for an interval at {}: longer steps or higher rates make it firm",
            thin.join(", ")
        ));
    }
    let answered = points
        .iter()
        .any(|p| p.counts.responses.values().sum::<u64>() > 0);
    let (status, reason) = if stopped.is_some() {
        (RunStatus::Cancelled, Some("cancelled".to_string()))
    } else if !answered {
        let errors: Vec<String> = points
            .iter()
            .flat_map(|p| p.counts.errors.iter())
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        (
            RunStatus::Error,
            Some(format!(
                "target unreachable: no request got an answer ({})",
                errors.join(", ")
            )),
        )
    } else {
        match (max_rate, plan.floor) {
            (None, _) => (
                RunStatus::Failed,
                Some(format!("no step met the SLO: {}", sweep.stopped_because())),
            ),
            (Some(rate), Some(floor)) if rate < floor => (
                RunStatus::Failed,
                Some(format!(
                    "the highest rate meeting the SLO, {}, is under the floor of {}",
                    rate_text(rate),
                    rate_text(floor)
                )),
            ),
            (Some(_), _) => (RunStatus::Passed, None),
        }
    };
    let result = CapacityResult {
        slo: plan.slo,
        floor: plan.floor,
        max_rate_meeting_slo: max_rate,
        stopped_because: stopped.unwrap_or_else(|| sweep.stopped_because()),
        points,
        knee,
        step_seconds: plan.step.as_secs_f64(),
        discard_seconds: plan.discard.as_secs_f64(),
        notes,
    };
    let result: Value = to_json(&result);
    Outcome {
        status,
        reason,
        result,
        units_spent,
    }
}
