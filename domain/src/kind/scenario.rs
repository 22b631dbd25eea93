//! Scenario: a recorded, replayable drive of operations.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::{Kind, LiveView, ResultPlot, RunKind, Traits};
use crate::compare::{Comparison, compare_scenario, not_compared};
use crate::cost::RunCost;
use crate::finding::{ErrorLimit, Found, RunFacts, operation_findings};
use crate::load::Counts;
use crate::request::SpecError;
use crate::scenario_kind::ScenarioSpec;
use crate::scenario_kind::record::{ScenarioRecord, op_counts};

pub struct Scenario;

impl Kind for Scenario {
    const KIND: RunKind = RunKind::Scenario;
    const TRAITS: Traits = Traits {
        exclusive: false,
        https: false,
        confirmed_in_production: false,
        compared: true,
        split: false,
    };
    type Spec = ScenarioSpec;
    type Plan = ScenarioSpec;

    fn spec(value: &Value) -> Result<ScenarioSpec, SpecError> {
        ScenarioSpec::from_json(value)
    }

    fn plan(spec: &ScenarioSpec) -> Result<ScenarioSpec, SpecError> {
        Ok(spec.clone())
    }

    fn cost(spec: &ScenarioSpec, _plan: &ScenarioSpec) -> RunCost {
        RunCost::unbounded(spec.total_requests())
    }

    fn merges_seconds() -> bool {
        false
    }

    fn judges_steps() -> bool {
        false
    }

    fn finds_on_error() -> bool {
        false
    }

    fn findings(facts: &RunFacts, found: &mut Vec<Found>) {
        if let Some(ops) = facts.result.get("ops") {
            let ops: Vec<ScenarioOp> = serde_json::from_value(ops.clone()).unwrap_or_default();
            let counts = ops
                .into_iter()
                .map(|op| (format!("{} {}", op.method, op.path), op.counts()));
            operation_findings(counts, &ErrorLimit::default(), found);
        }
    }

    /// An inline scenario is stored under its own slug (`orders-before-fix`), as the
    /// record and the replay command name it.
    fn stored_name(spec: &ScenarioSpec) -> Option<String> {
        Some(spec.slug.clone())
    }

    fn compare(before: Value, after: Value, out: &mut Comparison) {
        match (
            serde_json::from_value::<ScenarioRecord>(before),
            serde_json::from_value::<ScenarioRecord>(after),
        ) {
            (Ok(b), Ok(a)) => compare_scenario(&b, &a, out),
            _ => not_compared(out),
        }
    }

    // Cheap enough to watch every minute.
    const SCHEDULE_FLOOR: Duration = Duration::from_secs(60);
    const STRESS_SAMPLED: bool = true;
    const HALTED: bool = false;
    // It sends no seconds (its requests follow each other): its page has nothing to draw
    // live, and its result says it when it ends; its record's requests, one by one, give
    // each operation's seconds once it has.
    const LIVE_VIEW: LiveView = LiveView::Nothing;
    const RESULT_PLOT: ResultPlot = ResultPlot::Requests;

    fn measured_seconds(_spec: &Value) -> Option<u64> {
        None
    }
}

/// An operation of a scenario record, as its findings read it.
#[derive(Deserialize)]
struct ScenarioOp {
    method: String,
    path: String,
    #[serde(default)]
    by_status: BTreeMap<u16, u64>,
    #[serde(default)]
    errors: BTreeMap<String, u64>,
}

impl ScenarioOp {
    fn counts(&self) -> Counts {
        op_counts(&self.by_status, &self.errors)
    }
}
