//! The `replay` kind: the load engine with a log's arrivals in place of a schedule.

pub mod dry_run;

use iohr_domain::kind::Kind as Contract;
use iohr_domain::load::Share;
use serde_json::Value;

use super::registry::Kind;
use super::{Outcome, RunContext};
use crate::dry_run::Described;

pub struct Replay;

pub use iohr_domain::kind::replay::ReplayPlan;

impl Kind for Replay {
    type Contract = iohr_domain::kind::replay::Replay;
    type Plan = ReplayPlan;

    fn from_contract(plan: ReplayPlan) -> ReplayPlan {
        plan
    }

    fn share(plan: ReplayPlan, share: Share) -> Result<ReplayPlan, String> {
        <Self::Contract as Contract>::share(plan, share).map_err(|e| e.to_string())
    }

    async fn run(plan: ReplayPlan, ctx: &RunContext) -> Outcome {
        crate::load::run(plan.load, ctx).await
    }

    fn dry_run(plan: &ReplayPlan, ctx: &RunContext) -> Result<Option<Described>, String> {
        dry_run::dry_run(&plan.load, plan.speed, ctx)
    }

    fn summary(result: &Value) -> Option<Vec<String>> {
        super::load::summary(result)
    }
}
