//! The `replay` kind: the load engine with a log's arrivals in place of a schedule.

pub mod dry_run;

use iohr_domain::load::LoadPlan;
use iohr_domain::replay::ReplaySpec;
use serde_json::Value;

use super::registry::Kind;
use super::{Outcome, RunContext};
use crate::dry_run::Described;

pub struct Replay;

/// A replay runs as a load plan of the log's arrivals; `speed` is kept for describing it
/// (its gaps are already divided by it).
#[derive(Debug, Clone)]
pub struct ReplayPlan {
    pub plan: LoadPlan,
    pub speed: f64,
}

impl Kind for Replay {
    type Plan = ReplayPlan;

    fn plan(spec: &Value) -> Result<ReplayPlan, String> {
        ReplaySpec::from_json(spec)
            .and_then(|spec| {
                spec.plan().map(|plan| ReplayPlan {
                    plan,
                    speed: spec.speed,
                })
            })
            .map_err(|e| e.to_string())
    }

    async fn run(plan: ReplayPlan, ctx: &RunContext) -> Outcome {
        crate::load::run(plan.plan, ctx).await
    }

    fn dry_run(plan: &ReplayPlan, ctx: &RunContext) -> Result<Option<Described>, String> {
        dry_run::dry_run(&plan.plan, plan.speed, ctx)
    }

    fn summary(result: &Value) -> Option<Vec<String>> {
        super::load::summary(result)
    }
}
