//! Capacity: a sweep of load steps, the highest rate that meets an SLO and the knee.

use std::time::Duration;

use serde_json::Value;

use super::{Kind, LiveView, ResultPlot, RunKind, Traits};
use crate::capacity::{CapacityPlan, CapacitySpec};
use crate::compare::{Comparison, compare_capacity_values};
use crate::cost::RunCost;
use crate::finding::{CAPACITY_SUBJECT, FindingKind, Found, RunFacts};
use crate::load::Share;
use crate::request::SpecError;

pub struct Capacity;

impl Kind for Capacity {
    const KIND: RunKind = RunKind::Capacity;
    const TRAITS: Traits = Traits {
        exclusive: true,
        https: true,
        confirmed_in_production: false,
        compared: true,
        split: true,
    };
    type Spec = CapacitySpec;
    type Plan = CapacityPlan;

    fn spec(value: &Value) -> Result<CapacitySpec, SpecError> {
        CapacitySpec::from_json(value)
    }

    fn plan(spec: &CapacitySpec) -> Result<CapacityPlan, SpecError> {
        spec.plan()
    }

    fn cost(_spec: &CapacitySpec, plan: &CapacityPlan) -> RunCost {
        RunCost::bounded(
            plan.expected_requests(),
            plan.run_length(),
            "the whole sweep (its steps, bisection rounds and cooldowns)",
        )
    }

    fn merges_seconds() -> bool {
        false
    }

    fn judges_steps() -> bool {
        true
    }

    fn finds_on_error() -> bool {
        false
    }

    fn check_split(plan: &CapacityPlan, count: u32) -> Result<(), SpecError> {
        plan.check_split(count)
    }

    fn merge_shares(
        plan: &CapacityPlan,
        results: &[Value],
    ) -> Result<super::MergedRun, crate::load::MergeError> {
        crate::capacity::merge_results(plan, results)
    }

    fn share(plan: CapacityPlan, share: Share) -> Result<CapacityPlan, SpecError> {
        plan.share(share)
    }

    fn findings(facts: &RunFacts, found: &mut Vec<Found>) {
        capacity_findings(facts.spec, facts.result, found)
    }

    fn compare(before: Value, after: Value, out: &mut Comparison) {
        compare_capacity_values(before, after, out)
    }

    // It loads the target: at most hourly.
    const SCHEDULE_FLOOR: Duration = Duration::from_secs(3600);
    const STRESS_SAMPLED: bool = true;
    const HALTED: bool = false;
    const LIVE_VIEW: LiveView = LiveView::Seconds;
    const RESULT_PLOT: ResultPlot = ResultPlot::Sweep;

    fn measured_seconds(_spec: &Value) -> Option<u64> {
        None
    }
}

/// A capacity under the spec's floor is a finding.
fn capacity_findings(spec: Option<&Value>, result: &Value, found: &mut Vec<Found>) {
    let Some(floor) = spec.and_then(|s| s.get("floor")).and_then(Value::as_f64) else {
        return;
    };
    // Absent: the result says nothing about it. Null: no step met the SLO.
    let Some(max) = result.get("max_rate_meeting_slo") else {
        return;
    };
    let detail = match max.as_f64() {
        Some(rate) if rate >= floor => return,
        Some(rate) => format!("the highest rate meeting the SLO is {rate:.1}/s, floor {floor}/s"),
        None if max.is_null() => format!("no rate met the SLO, floor {floor}/s"),
        None => return,
    };
    found.push(Found::new(
        FindingKind::CapacityBelowFloor,
        CAPACITY_SUBJECT.to_string(),
        format!("capacity below its floor of {floor}/s"),
        detail,
    ));
}
