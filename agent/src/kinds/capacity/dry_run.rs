//! The dry run of a `capacity` plan.

use iohr_domain::RunKind;
use iohr_domain::capacity::{CapacityPlan, Slo, rate_text};
use iohr_domain::load::{HttpVersion, LoadPlan, Share};
use iohr_domain::text::decimal;
use serde::Serialize;

use crate::dry_run::{
    Described, DryRun, OperationDry, PlanLines, duration_text, millis, ms_text, operation_lines,
    share_field, share_line, transport_line,
};
use crate::kinds::RunContext;
use crate::load;

#[derive(Debug, Clone, Serialize)]
pub struct CapacityDry {
    pub operations: Vec<OperationDry>,
    /// The grid, ascending: the sweep stops at the first step that breaks the SLO.
    pub rates: Vec<f64>,
    /// Bisection rounds between the last step that met the SLO and the first that did not.
    pub bisect: u32,
    pub step_ms: u64,
    /// The first part of each step, run and not judged.
    pub discard_ms: u64,
    /// The pause after a step that broke the SLO.
    pub cooldown_ms: u64,
    pub slo: Slo,
    pub floor: Option<f64>,
    /// A share of a run split over agents (`exec --share`): `"INDEX/COUNT"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<Share>,
    /// The most connections each step may use.
    pub connections: u32,
    pub timeout_ms: u64,
    pub http: HttpVersion,
    /// The most requests the sweep may send: every step, and every bisection round at the
    /// top rate.
    pub max_requests: u64,
}

impl CapacityDry {
    pub fn new(plan: &CapacityPlan, step: &LoadPlan) -> CapacityDry {
        CapacityDry {
            operations: step.operations.iter().map(OperationDry::new).collect(),
            rates: plan.grid.clone(),
            bisect: plan.bisect,
            step_ms: millis(plan.step),
            discard_ms: millis(plan.discard),
            cooldown_ms: millis(plan.cooldown),
            slo: plan.slo,
            floor: plan.floor,
            share: share_field(plan.share_of()),
            connections: plan.connections(),
            timeout_ms: millis(step.timeout),
            http: step.http,
            max_requests: plan.expected_requests(),
        }
    }
}

impl PlanLines for CapacityDry {
    fn lines(&self) -> Vec<String> {
        let mut lines = operation_lines(&self.operations);
        let rates: Vec<String> = self.rates.iter().map(|r| rate_text(*r)).collect();
        let mut steps = format!(
            "steps: {}, stopping at the first that breaks the SLO",
            rates.join(", ")
        );
        if self.bisect > 0 {
            steps.push_str(&format!(
                "; then up to {} bisection rounds between the last good and the first bad rate",
                self.bisect
            ));
        }
        lines.push(steps);
        lines.push(format!(
            "each step: {}, the first {} run and not judged; {} cooldown after a step that breaks the SLO",
            ms_text(self.step_ms),
            ms_text(self.discard_ms),
            ms_text(self.cooldown_ms)
        ));
        lines.push(format!(
            "SLO: p99 <= {}, error rate <= {}%",
            duration_text(self.slo.p99_us / 1000.0),
            decimal(self.slo.error_rate * 100.0, 2)
        ));
        if let Some(floor) = self.floor {
            lines.push(format!("floor: {} (the run fails below)", rate_text(floor)));
        }
        lines.extend(self.share.map(share_line));
        lines.push(format!("connections: at most {}", self.connections));
        lines.push(transport_line(self.timeout_ms, self.http, 1));
        lines.push(format!("requests: at most {}", self.max_requests));
        lines
    }
}

/// Every step runs the same load plan at its own rate: the first is prepared as a run
/// prepares it (see [`crate::kinds::load::dry_run::describe`]).
pub fn dry_run(plan: &CapacityPlan, ctx: &RunContext) -> Result<Option<Described>, String> {
    let step = plan.step_plan(plan.grid.first().copied().unwrap_or(0.0));
    load::prepare(&step, &ctx.run_id, &ctx.target, &ctx.options, &ctx.env_fn())?;
    DryRun::new(
        RunKind::Capacity,
        &ctx.target,
        CapacityDry::new(plan, &step),
    )
    .described()
    .map(Some)
}
