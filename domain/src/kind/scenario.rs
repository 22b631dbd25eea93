//! Scenario: a recorded, replayable drive of operations.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::{Kind, RunKind, Traits};
use crate::compare::{Comparison, not_compared};
use crate::cost::RunCost;
use crate::finding::{ErrorLimit, Found, RunFacts, operation_findings};
use crate::load::{Counts, status_class};
use crate::request::SpecError;
use crate::scenario_kind::ScenarioSpec;

pub struct Scenario;

impl Kind for Scenario {
    const KIND: RunKind = RunKind::Scenario;
    const TRAITS: Traits = Traits {
        exclusive: false,
        https: false,
        confirmed_in_production: false,
        compared: false,
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

    fn compare(_before: Value, _after: Value, out: &mut Comparison) {
        not_compared(out)
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
        let mut counts = Counts::default();
        for (status, n) in &self.by_status {
            *counts
                .responses
                .entry(status_class(*status).to_string())
                .or_default() += n;
            counts.requests += n;
        }
        for (kind, n) in &self.errors {
            *counts.errors.entry(kind.clone()).or_default() += n;
            counts.requests += n;
        }
        counts
    }
}
