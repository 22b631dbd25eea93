//! The load engine, used by the `load` and `replay` kinds (and by `iohr-agent exec`).
//!
//! - [`schedule`]: open-model arrival times, constant or ramping (k6's
//!   `ramping-arrival-rate` semantics).
//! - [`client`]: connections (HTTP/1.1, h2, h2c, rustls).
//! - [`h1`]: the HTTP/1.1 connection driver.
//! - [`poller`]: the closed model's busy polling on a current-thread runtime.
//! - [`request`]: operations built once, cloned per request.
//! - [`recorder`]: counters and HdrHistograms in a few shards; constant memory.
//! - [`engine`]: the dispatcher, the workers and the once-a-second reporter.
//!
//! [`run`] turns a plan into the run's outcome: the merged histograms per operation and
//! in total, percentiles with their intervals, thresholds, late and dropped counts.

pub mod client;
mod deadline;
pub mod engine;
pub mod h1;
pub mod h2;
pub mod poller;
pub mod recorder;
pub mod request;
pub mod schedule;

use std::sync::Arc;

use crate::request::Trace;
use crate::run_context::{Outcome, RunContext};
use crate::secrets::EnvRefusal;
use client::Endpoint;
use engine::{Arrivals, Engine, LATE_TOLERANCE, Report};
use iohr_domain::RunStatus;
use iohr_domain::load::{
    LoadPlan, LoadResult, Model, OperationResult, WarmupResult, judge_all, summarise_latency,
};
use request::PreparedOp;
use schedule::{ArrivalSchedule, Stage};

pub use crate::run_context::TargetOptions;

/// Runs a load plan (or a replay's) against the context's target. `F`, the agent's
/// faults configuration, is not the engine's business.
pub async fn run<F>(plan: LoadPlan, ctx: &RunContext<F>) -> Outcome {
    let prepared = prepare(&plan, &ctx.run_id, &ctx.target, &ctx.options, &ctx.env_fn());
    let (endpoint, operations) = match prepared {
        Ok((endpoint, operations)) => (Arc::new(endpoint), Arc::new(operations)),
        Err(e) => return Outcome::error(e, 0),
    };
    let arrivals = match (plan.model, &plan.recorded) {
        (Model::Closed, _) => None,
        (Model::Open, Some(list)) => Some(Arrivals::Recorded(list.clone())),
        (Model::Open, None) => {
            let stages = plan
                .stages
                .iter()
                .map(|(duration, target_rate)| Stage {
                    duration: *duration,
                    target_rate: *target_rate,
                })
                .collect();
            match ArrivalSchedule::ramping(plan.start_rate, stages) {
                Ok(s) => Some(Arrivals::Schedule(s)),
                Err(e) => return Outcome::error(e.to_string(), 0),
            }
        }
    };
    let warmup_rate = plan.warmup_rate();
    let engine = Engine {
        endpoint,
        operations,
        plan: plan.clone(),
        arrivals,
        warmup_rate,
        stress: ctx.stress.clone(),
    };
    let report = match engine.run(&ctx.frames, ctx.cancel.clone()).await {
        Ok(report) => report,
        Err(e) => return Outcome::error(e.to_string(), 0),
    };
    outcome(&plan, report)
}

/// What a run builds before its first connection: the target's endpoint (its TLS roots
/// read) and each operation's request (credential headers resolved from `env`, the run's
/// trace context). The dry run calls it too, so that it refuses what a run would.
pub fn prepare(
    plan: &LoadPlan,
    run_id: &str,
    target: &str,
    options: &TargetOptions,
    env: &impl Fn(iohr_domain::request::Reference<'_>) -> Result<String, EnvRefusal>,
) -> Result<(Endpoint, Vec<PreparedOp>), String> {
    let endpoint = Endpoint::new(target, plan.http, options.extra_ca.as_deref())
        .map_err(|e| e.to_string())?
        .with_egress(options.egress.clone());
    let trace = Trace::new(run_id, plan.trace_sample);
    let operations = plan
        .operations
        .iter()
        .map(|op| PreparedOp::traced(op, &endpoint, env, Some(&trace)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    Ok((endpoint, operations))
}

fn outcome(plan: &LoadPlan, report: Report) -> Outcome {
    match result(plan, &report) {
        Ok((result, status, reason)) => {
            let units_spent = report.measure.schedule.sent + report.warmup.schedule.sent;
            Outcome {
                status,
                reason,
                result: serde_json::to_value(&result).unwrap_or_default(),
                units_spent,
            }
        }
        Err(e) => Outcome::error(e.to_string(), 0),
    }
}

type Judged = (LoadResult, RunStatus, Option<String>);

fn result(
    plan: &LoadPlan,
    report: &Report,
) -> Result<Judged, iohr_domain::histogram::HistogramError> {
    let measure = &report.measure;
    let latency = measure.total_latency()?;
    let counts = measure.total_counts();
    let seconds = report.measured.as_secs_f64();
    let operations = plan
        .operations
        .iter()
        .enumerate()
        .map(|(i, op)| {
            let counts = measure.tallies[i].counts();
            Ok(OperationResult {
                name: op.display_name(),
                method: op.method.clone(),
                path: op.path.clone(),
                error_rate: counts.error_rate(),
                counts,
                latency: summarise_latency(&measure.latency[i])?,
                blocks: report.operation_blocks.get(i).cloned().unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<_>, iohr_domain::histogram::HistogramError>>()?;
    let thresholds = judge_all(&plan.thresholds, &latency, &counts);
    let schedule = measure.schedule;
    let warmup_requests = report.warmup.total_counts().requests;
    let intended_rate = (plan.model == Model::Open && seconds > 0.0)
        .then(|| plan.expected_requests().unwrap_or(0) as f64 / plan.duration.as_secs_f64());
    let mut result = LoadResult {
        model: plan.model,
        http: plan.http,
        connections: plan.connections,
        intended_rate,
        achieved_rate: if seconds > 0.0 {
            counts.requests as f64 / seconds
        } else {
            0.0
        },
        measured_seconds: seconds,
        warmup: WarmupResult {
            plan: plan.warmup,
            requests: warmup_requests,
            discarded: true,
        },
        error_rate: counts.error_rate(),
        intended: schedule.intended,
        sent: schedule.sent,
        late: schedule.late,
        dropped: schedule.dropped,
        late_tolerance_ms: LATE_TOLERANCE.as_millis() as u64,
        latency: summarise_latency(&latency)?,
        uncorrected_latency: summarise_latency(&measure.uncorrected)?,
        operations,
        thresholds,
        aborted: report.aborted.clone(),
        notes: Vec::new(),
        blocks: report.blocks.clone(),
        block_seconds: report.block_seconds,
        operation_block_seconds: report.operation_block_seconds,
        slow_seconds: report.slow_seconds.clone(),
        counts,
    };
    result.notes = result.standard_notes();
    let (status, reason) = match result.verdict(report.cancelled) {
        // A share's part of the samples does not judge the run's thresholds (a p99 it
        // has too few samples for, say): the controller judges them on the shares'
        // merged result. The share's result still shows what its part observed.
        (RunStatus::Failed, _) if !plan.share.is_whole() && result.aborted.is_none() => {
            result
                .notes
                .push("thresholds are judged on the whole run, the shares merged".to_string());
            (RunStatus::Passed, None)
        }
        verdict => verdict,
    };
    Ok((result, status, reason))
}

#[cfg(test)]
mod range_tests;

#[cfg(test)]
mod share_tests;

#[cfg(test)]
mod tests {
    use iohr_domain::load::LoadSpec;

    use super::*;

    /// `iohr-agent exec` on one CPU: the closed model on a current-thread runtime, with its
    /// poller (unless this machine's cgroup grants less than one CPU), against a
    /// keep-alive server on the same thread.
    #[tokio::test]
    async fn a_closed_run_on_one_thread_keeps_up_and_ends_on_time() {
        assert!(poller::Poller::on_current_thread());
        let target = super::range_tests::serve_ok().await;
        let spec = serde_json::json!({
            "operations": [{"path": "/"}], "model": "closed", "connections": 4,
            "duration": "1s", "warmup": 20
        });
        let plan = LoadSpec::from_json(&spec)
            .and_then(|s| s.plan())
            .expect("plan");
        let (tx, _rx) = crate::frames::FrameSender::channel();
        let started = std::time::Instant::now();
        let outcome = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            run(plan, &RunContext::<()>::new(target, tx)),
        )
        .await
        .expect("the run ends");
        assert_eq!(outcome.status, RunStatus::Passed, "{:?}", outcome.reason);
        // A one-second measure after a 20-request warm-up: the poller does not hold the
        // run past its end.
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let result: LoadResult = serde_json::from_value(outcome.result).expect("a load result");
        assert!(result.counts.requests > 100, "{:?}", result.counts);
        assert_eq!(
            result.counts.responses.get("2xx").copied(),
            Some(result.counts.requests)
        );
        assert_eq!(result.warmup.requests, 20);
    }
}
