//! Replay: a recorded log's requests sent again with their spacing, on the load engine.

use std::time::Duration;

use serde_json::Value;

use super::{Kind, LiveView, ResultPlot, RunKind, Traits};
use crate::compare::Comparison;
use crate::cost::RunCost;
use crate::finding::{Found, RunFacts};
use crate::load::{AgentLoss, LoadPlan, Share, Threshold, check_split};
use crate::replay::ReplaySpec;
use crate::request::SpecError;

pub struct Replay;

/// A replay runs as a load plan of the log's arrivals.
#[derive(Debug, Clone)]
pub struct ReplayPlan {
    pub load: LoadPlan,
    /// Kept for describing the run: the plan's gaps are already divided by it.
    pub speed: f64,
}

impl Kind for Replay {
    const KIND: RunKind = RunKind::Replay;
    const TRAITS: Traits = Traits {
        exclusive: true,
        https: true,
        confirmed_in_production: false,
        compared: true,
        split: true,
    };
    type Spec = ReplaySpec;
    type Plan = ReplayPlan;

    fn spec(value: &Value) -> Result<ReplaySpec, SpecError> {
        ReplaySpec::from_json(value)
    }

    fn plan(spec: &ReplaySpec) -> Result<ReplayPlan, SpecError> {
        Ok(ReplayPlan {
            load: spec.plan()?,
            speed: spec.speed,
        })
    }

    fn cost(_spec: &ReplaySpec, plan: &ReplayPlan) -> RunCost {
        RunCost::bounded(
            plan.load.units_to_reserve().unwrap_or(0),
            plan.load.run_length(),
            "the log's span over spec.speed",
        )
    }

    fn check_split(plan: &ReplayPlan, count: u32) -> Result<(), SpecError> {
        check_split(&plan.load, count)
    }

    /// Every `count`-th request of the log, from the share's index.
    fn merge_shares(
        _plan: &ReplayPlan,
        results: &[Value],
    ) -> Result<super::MergedRun, crate::load::MergeError> {
        super::MergedRun::of_load(results)
    }

    fn share(plan: ReplayPlan, share: Share) -> Result<ReplayPlan, SpecError> {
        Ok(ReplayPlan {
            load: plan.load.share(share)?,
            speed: plan.speed,
        })
    }

    fn abort_thresholds(plan: &ReplayPlan) -> Vec<Threshold> {
        plan.load.abort_thresholds()
    }

    /// `from_run`: the controller writes that scenario run's operations and request log
    /// into the spec it stores.
    fn reads_earlier_run(value: &Value) -> bool {
        value.get("from_run").is_some()
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

    fn on_agent_lost(spec: &ReplaySpec) -> AgentLoss {
        spec.on_agent_lost
    }

    fn findings(facts: &RunFacts, found: &mut Vec<Found>) {
        super::load::operation_errors(facts, found)
    }

    fn compare(before: Value, after: Value, out: &mut Comparison) {
        super::load::compare_load_values(before, after, out)
    }

    // It loads the target: at most hourly.
    const SCHEDULE_FLOOR: Duration = Duration::from_secs(3600);
    const STRESS_SAMPLED: bool = true;
    const HALTED: bool = false;
    const LIVE_VIEW: LiveView = LiveView::Seconds;
    const RESULT_PLOT: ResultPlot = ResultPlot::Seconds;

    fn measured_seconds(_spec: &Value) -> Option<u64> {
        None
    }
}
