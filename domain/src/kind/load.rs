//! Load: an open or closed model against the target's operations.

use std::time::Duration;

use serde_json::Value;

use super::{Kind, LiveView, ResultPlot, RunKind, Traits};
use crate::compare::{Comparison, compare_load, not_compared};
use crate::cost::RunCost;
use crate::finding::{Found, NamedCounts, RunFacts, operation_findings, spec_error_limit};
use crate::load::{AgentLoss, LoadPlan, LoadResult, LoadSpec, Share, Threshold, check_split};
use crate::request::SpecError;

pub struct Load;

impl Kind for Load {
    const KIND: RunKind = RunKind::Load;
    const TRAITS: Traits = Traits {
        exclusive: true,
        https: true,
        confirmed_in_production: false,
        compared: true,
        split: true,
    };
    type Spec = LoadSpec;
    type Plan = LoadPlan;

    fn spec(value: &Value) -> Result<LoadSpec, SpecError> {
        LoadSpec::from_json(value)
    }

    fn plan(spec: &LoadSpec) -> Result<LoadPlan, SpecError> {
        spec.plan()
    }

    fn cost(spec: &LoadSpec, plan: &LoadPlan) -> RunCost {
        let what = match (plan.warmup_length().is_zero(), spec.stages.is_empty()) {
            (true, true) => "spec.duration",
            (true, false) => "spec.stages",
            (false, true) => "spec.warmup + spec.duration",
            (false, false) => "spec.warmup + spec.stages",
        };
        // A closed-model run's count is not known before it runs: it reserves nothing
        // and spends what it sends.
        RunCost::bounded(
            plan.units_to_reserve().unwrap_or(0),
            plan.run_length(),
            what,
        )
    }

    fn check_split(plan: &LoadPlan, count: u32) -> Result<(), SpecError> {
        check_split(plan, count)
    }

    fn merge_shares(
        _plan: &LoadPlan,
        results: &[Value],
    ) -> Result<super::MergedRun, crate::load::MergeError> {
        super::MergedRun::of_load(results)
    }

    fn share(plan: LoadPlan, share: Share) -> Result<LoadPlan, SpecError> {
        plan.share(share)
    }

    fn abort_thresholds(plan: &LoadPlan) -> Vec<Threshold> {
        plan.abort_thresholds()
    }

    fn merges_seconds() -> bool {
        true
    }

    fn judges_steps() -> bool {
        false
    }

    fn finds_on_error() -> bool {
        false
    }

    fn on_agent_lost(spec: &LoadSpec) -> AgentLoss {
        spec.on_agent_lost
    }

    fn findings(facts: &RunFacts, found: &mut Vec<Found>) {
        operation_errors(facts, found)
    }

    fn compare(before: Value, after: Value, out: &mut Comparison) {
        compare_load_values(before, after, out)
    }

    // It loads the target: at most hourly.
    const SCHEDULE_FLOOR: Duration = Duration::from_secs(3600);
    const STRESS_SAMPLED: bool = true;
    const HALTED: bool = false;
    const LIVE_VIEW: LiveView = LiveView::Seconds;
    const RESULT_PLOT: ResultPlot = ResultPlot::Seconds;

    fn measured_seconds(spec: &Value) -> Option<u64> {
        measured_seconds(spec)
    }
}

/// An operation over the spec's error-rate limit (load and replay results).
pub(crate) fn operation_errors(facts: &RunFacts, found: &mut Vec<Found>) {
    let limit = spec_error_limit(facts.spec);
    if let Some(ops) = facts.result.get("operations") {
        let ops: Vec<NamedCounts> = serde_json::from_value(ops.clone()).unwrap_or_default();
        let counts = ops.into_iter().map(|op| (op.name, op.counts));
        operation_findings(counts, &limit, found);
    }
}

/// Two load results (load and replay) compared.
pub(crate) fn compare_load_values(before: Value, after: Value, out: &mut Comparison) {
    match (
        serde_json::from_value::<LoadResult>(before),
        serde_json::from_value::<LoadResult>(after),
    ) {
        (Ok(b), Ok(a)) => compare_load(&b, &a, out),
        _ => not_compared(out),
    }
}

/// The measured seconds of a load spec as sent: its `duration`, or the sum of its
/// `stages` (read from the JSON alone, so that a progress bar needs no planned spec).
fn measured_seconds(spec: &Value) -> Option<u64> {
    let seconds = |text: &Value| {
        text.as_str()
            .and_then(|t| humantime::parse_duration(t).ok())
    };
    if let Some(duration) = spec.get("duration").and_then(seconds) {
        return Some(duration.as_secs());
    }
    let stages = spec.get("stages")?.as_array()?;
    let mut total = Duration::ZERO;
    for stage in stages {
        total += stage.get("duration").and_then(seconds)?;
    }
    (!stages.is_empty()).then_some(total.as_secs())
}
