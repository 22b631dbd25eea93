//! Checks: HTTP surface checks and invariants, one verdict each.

use std::time::Duration;

use serde_json::Value;

use super::{Kind, LiveView, ResultPlot, RunKind, Traits};
use crate::checks::{ChecksResult, ChecksSpec};
use crate::compare::{Comparison, compare_checks, not_compared};
use crate::cost::RunCost;
use crate::finding::{FindingKind, Found, RunFacts};
use crate::request::SpecError;

pub struct Checks;

impl Kind for Checks {
    const KIND: RunKind = RunKind::Checks;
    const TRAITS: Traits = Traits {
        exclusive: false,
        https: false,
        confirmed_in_production: false,
        compared: true,
        split: false,
    };
    type Spec = ChecksSpec;
    type Plan = ChecksSpec;

    fn spec(value: &Value) -> Result<ChecksSpec, SpecError> {
        ChecksSpec::from_json(value)
    }

    fn plan(spec: &ChecksSpec) -> Result<ChecksSpec, SpecError> {
        Ok(spec.clone())
    }

    fn cost(spec: &ChecksSpec, _plan: &ChecksSpec) -> RunCost {
        RunCost::unbounded(spec.checks.len() as u64)
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
        checks_findings(facts.result, found)
    }

    fn compare(before: Value, after: Value, out: &mut Comparison) {
        match (
            serde_json::from_value::<ChecksResult>(before),
            serde_json::from_value::<ChecksResult>(after),
        ) {
            (Ok(b), Ok(a)) => compare_checks(&b, &a, out),
            _ => not_compared(out),
        }
    }

    // Cheap enough to watch every minute.
    const SCHEDULE_FLOOR: Duration = Duration::from_secs(60);
    const STRESS_SAMPLED: bool = false;
    const HALTED: bool = false;
    const LIVE_VIEW: LiveView = LiveView::Nothing;
    const RESULT_PLOT: ResultPlot = ResultPlot::Nothing;

    fn measured_seconds(_spec: &Value) -> Option<u64> {
        None
    }
}

/// A failing check and a broken invariant are a finding each.
fn checks_findings(result: &Value, found: &mut Vec<Found>) {
    let Ok(result) = serde_json::from_value::<ChecksResult>(result.clone()) else {
        return;
    };
    for check in result.checks.iter().filter(|c| !c.passed) {
        let mut why = check.failures.join("; ");
        if why.is_empty() {
            why = check.error.clone().unwrap_or_else(|| "failed".to_string());
        }
        found.push(Found::new(
            FindingKind::CheckFailed,
            check.name.clone(),
            format!("check {} failed", check.name),
            why,
        ));
    }
    for invariant in result.invariants.iter().filter(|i| !i.passed) {
        found.push(Found::new(
            FindingKind::InvariantBroken,
            invariant.name.clone(),
            format!("invariant {} broken", invariant.name),
            invariant.failures.join("; "),
        ));
    }
}
