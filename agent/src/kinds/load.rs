//! The `load` kind: the load engine ([`crate::load`]) on the spec's plan.

pub mod dry_run;

use iohr_domain::kind::Kind as Contract;
use iohr_domain::load::{LoadPlan, LoadResult, Share};
use serde_json::Value;

use super::registry::{Kind, indented, read};
use super::{Outcome, RunContext};
use crate::dry_run::Described;

pub struct Load;

impl Kind for Load {
    type Contract = iohr_domain::kind::load::Load;
    type Plan = LoadPlan;

    fn from_contract(plan: LoadPlan) -> LoadPlan {
        plan
    }

    fn share(plan: LoadPlan, share: Share) -> Result<LoadPlan, String> {
        <Self::Contract as Contract>::share(plan, share).map_err(|e| e.to_string())
    }

    async fn run(plan: LoadPlan, ctx: &RunContext) -> Outcome {
        crate::load::run(plan, ctx).await
    }

    fn dry_run(plan: &LoadPlan, ctx: &RunContext) -> Result<Option<Described>, String> {
        dry_run::dry_run(plan, ctx)
    }

    fn summary(result: &Value) -> Option<Vec<String>> {
        summary(result)
    }
}

/// A load result's summary, indented under the status line (replay's and, read as a
/// load result, every kind's without a summary of its own).
pub fn summary(result: &Value) -> Option<Vec<String>> {
    read::<LoadResult>(result).map(|r| indented(r.summary()))
}
