//! Faults: chaos experiments in the Chaos Toolkit's shape.

use std::time::Duration;

use serde_json::Value;

use super::{Kind, LiveView, ResultPlot, RunKind, Traits};
use crate::compare::{Comparison, compare_faults, not_compared};
use crate::cost::RunCost;
use crate::faults::{Experiment, Journal};
use crate::finding::{FindingKind, Found, RunFacts};
use crate::request::SpecError;

pub struct Faults;

impl Kind for Faults {
    const KIND: RunKind = RunKind::Faults;
    const TRAITS: Traits = Traits {
        exclusive: true,
        https: false,
        confirmed_in_production: true,
        compared: true,
        split: false,
    };
    type Spec = Experiment;
    type Plan = Experiment;

    fn spec(value: &Value) -> Result<Experiment, SpecError> {
        Experiment::from_json(value)
    }

    fn plan(spec: &Experiment) -> Result<Experiment, SpecError> {
        Ok(spec.clone())
    }

    fn cost(spec: &Experiment, _plan: &Experiment) -> RunCost {
        RunCost::unbounded(spec.expected_requests())
    }

    fn applied_faults(plan: &Experiment) -> Vec<String> {
        plan.fault_names().into_iter().map(String::from).collect()
    }

    fn merges_seconds() -> bool {
        false
    }

    fn judges_steps() -> bool {
        false
    }

    fn finds_on_error() -> bool {
        true
    }

    /// A probe's url must name the run's own target.
    fn check_target(plan: &Experiment, target: &str) -> Result<(), SpecError> {
        plan.check_target(target)
    }

    fn findings(facts: &RunFacts, found: &mut Vec<Found>) {
        faults_findings(facts.result, found)
    }

    fn compare(before: Value, after: Value, out: &mut Comparison) {
        match (
            serde_json::from_value::<Journal>(before),
            serde_json::from_value::<Journal>(after),
        ) {
            (Ok(b), Ok(a)) => compare_faults(&b, &a, out),
            _ => not_compared(out),
        }
    }

    // It loads the target: at most hourly.
    const SCHEDULE_FLOOR: Duration = Duration::from_secs(3600);
    const STRESS_SAMPLED: bool = true;
    const HALTED: bool = true;
    const LIVE_VIEW: LiveView = LiveView::Timeline;
    const RESULT_PLOT: ResultPlot = ResultPlot::Nothing;

    fn measured_seconds(_spec: &Value) -> Option<u64> {
        None
    }
}

/// A faults run's journal: probes that missed after the method, faults never undone.
fn faults_findings(result: &Value, found: &mut Vec<Found>) {
    if result.get("deviated").and_then(Value::as_bool) == Some(true) {
        let probes = result["steady_states"]["after"]["probes"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        for probe in probes.iter().filter(|p| p["tolerance_met"] == false) {
            let name = probe["activity"]["name"].as_str().unwrap_or("probe");
            let detail = probe["exception"]
                .as_str()
                .unwrap_or("its tolerance was not met")
                .to_string();
            found.push(Found::new(
                FindingKind::SteadyStateDeviated,
                name.to_string(),
                format!("steady state deviated under faults: probe {name}"),
                detail,
            ));
        }
    }
    let ledger = result["ledger"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for entry in ledger.iter().filter(|e| e["undone_at"].is_null()) {
        let activity = entry["activity"].as_str().unwrap_or("fault");
        let fault = entry["fault"]["fault"].as_str().unwrap_or("fault");
        found.push(Found::new(
            FindingKind::FaultLeftApplied,
            activity.to_string(),
            format!("{fault} fault {activity} could not be undone"),
            format!(
                "the agent's ledger keeps it (entry {}) and undoes it again at its next start; {}",
                entry["id"].as_str().unwrap_or("?"),
                result["reason"].as_str().unwrap_or("rollback failed")
            ),
        ));
    }
}
