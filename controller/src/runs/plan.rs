//! A run's spec read once: the kind's contract (`iohr_domain::kind`, through its registry
//! `visit`) reads and plans it, and everything a run's start asks of it is taken from
//! that one plan: the cost, whether it stays on its target, whether it splits over the
//! agents asked, the thresholds a split run is judged on, the faults it applies.

use iohr_domain::RunKind;
use iohr_domain::cost::RunCost;
use iohr_domain::kind::{Kind, KindVisitor, visit};
use iohr_domain::load::Threshold;
use iohr_domain::request::SpecError;
use serde_json::Value;

/// A spec read and planned for its kind. The checks that depend on the run's target and
/// agents are made with the plan and kept, so that the start reports them in its order
/// (after the scenario is stored, as it always has).
#[derive(Debug, Clone)]
pub struct PlannedRun {
    pub kind: RunKind,
    /// The units it reserves and, for the kinds a plan caps, the longest it lasts.
    pub cost: RunCost,
    /// Whether the spec stays on the run's target (faults' probes).
    pub on_target: Result<(), SpecError>,
    /// Whether it splits over the agents asked; `None` when one agent was asked.
    pub split: Option<Result<(), SpecError>>,
    /// The thresholds that stop it early (`abort_on_fail`).
    pub abort_on: Vec<Threshold>,
    /// The faults it applies, for its audit line.
    pub faults: Vec<String>,
}

impl PlannedRun {
    /// Reads and plans `spec` for `kind`, for a run against `target` over `agents` agents.
    pub fn of(
        kind: RunKind,
        spec: &Value,
        target: &str,
        agents: Option<u32>,
    ) -> Result<PlannedRun, SpecError> {
        visit(
            kind,
            Planning {
                spec,
                target,
                agents,
            },
        )
    }
}

struct Planning<'a> {
    spec: &'a Value,
    target: &'a str,
    agents: Option<u32>,
}

impl KindVisitor for Planning<'_> {
    type Output = Result<PlannedRun, SpecError>;
    fn visit<K: Kind>(self) -> Self::Output {
        let (spec, plan) = K::read(self.spec)?;
        Ok(PlannedRun {
            kind: K::KIND,
            cost: K::cost(&spec, &plan),
            on_target: K::check_target(&plan, self.target),
            split: self
                .agents
                .filter(|n| *n != 1)
                .map(|n| K::check_split(&plan, n)),
            abort_on: K::abort_thresholds(&plan),
            faults: K::applied_faults(&plan),
        })
    }
}

/// Whether a spec of `kind` names an earlier run whose record is written into it before
/// it is stored (a replay's `from_run`).
pub fn reads_earlier_run(kind: RunKind, spec: &Value) -> bool {
    struct ReadsEarlier<'a>(&'a Value);
    impl KindVisitor for ReadsEarlier<'_> {
        type Output = bool;
        fn visit<K: Kind>(self) -> bool {
            K::reads_earlier_run(self.0)
        }
    }
    visit(kind, ReadsEarlier(spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_spec_that_does_not_read_names_its_field() {
        let error = PlannedRun::of(
            RunKind::Checks,
            &json!({"checks": []}),
            "http://127.0.0.1:9",
            None,
        )
        .err()
        .map(|e| e.field);
        assert_eq!(error.as_deref(), Some("spec.checks"));
    }

    #[test]
    fn a_kind_on_one_agent_refuses_a_split_and_one_agent_is_not_asked() {
        let spec = json!({"checks": [{"name": "home", "method": "GET", "path": "/", "expect_status": 200}]});
        let one = PlannedRun::of(RunKind::Checks, &spec, "http://127.0.0.1:9", Some(1));
        assert_eq!(one.map(|p| p.split), Ok(None));
        let two = PlannedRun::of(RunKind::Checks, &spec, "http://127.0.0.1:9", Some(2));
        let field = two.map(|p| p.split.map(|s| s.map_err(|e| e.field)));
        assert_eq!(field, Ok(Some(Err("agents".to_string()))));
    }

    #[test]
    fn only_a_replay_from_an_earlier_run_reads_one() {
        assert!(reads_earlier_run(
            RunKind::Replay,
            &json!({"from_run": "r1"})
        ));
        assert!(!reads_earlier_run(
            RunKind::Replay,
            &json!({"requests": []})
        ));
        assert!(!reads_earlier_run(
            RunKind::Load,
            &json!({"from_run": "r1"})
        ));
    }
}
