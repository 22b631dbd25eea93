//! The dry run of a `replay` plan.

use iohr_domain::RunKind;
use iohr_domain::load::{HttpVersion, LoadPlan, Share};
use iohr_domain::text::decimal;
use serde::Serialize;

use crate::dry_run::{
    Described, DryRun, OperationDry, PlanLines, duration_text, millis, operation_lines,
    share_field, share_line, thresholds_line, transport_line,
};
use crate::kinds::RunContext;
use crate::load;

#[derive(Debug, Clone, Serialize)]
pub struct ReplayDry {
    pub requests: u64,
    /// From the first request's start to the last one's, after the speed-up.
    pub span_ms: f64,
    pub speed: f64,
    pub operations: Vec<OperationDry>,
    /// A share of a run split over agents (`exec --share`): `"INDEX/COUNT"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<Share>,
    /// The most connections it may use.
    pub connections: u32,
    pub timeout_ms: u64,
    pub http: HttpVersion,
    pub thresholds: Vec<String>,
    pub abort_on_fail: bool,
}

impl ReplayDry {
    pub fn new(plan: &LoadPlan, speed: f64) -> ReplayDry {
        let recorded = plan.recorded.as_deref().unwrap_or_default();
        let mut operations: Vec<OperationDry> =
            plan.operations.iter().map(OperationDry::new).collect();
        for op in &mut operations {
            op.weight = None;
            op.requests = Some(0);
        }
        let kept = recorded
            .iter()
            .enumerate()
            .filter(|(k, _)| plan.share.keeps(*k as u64));
        for (_, (_, i)) in kept {
            if let Some(n) = operations.get_mut(*i).and_then(|op| op.requests.as_mut()) {
                *n += 1;
            }
        }
        ReplayDry {
            requests: plan.expected_requests().unwrap_or(0),
            span_ms: recorded
                .last()
                .map_or(0.0, |(offset, _)| offset.as_secs_f64() * 1000.0),
            speed,
            operations,
            share: share_field(plan.share),
            connections: plan.connections,
            timeout_ms: millis(plan.timeout),
            http: plan.http,
            thresholds: plan.thresholds.iter().map(|t| t.to_string()).collect(),
            abort_on_fail: plan.abort_on_fail,
        }
    }
}

impl PlanLines for ReplayDry {
    fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "requests: {} over {}, the log's spacing at speed {}x",
            self.requests,
            duration_text(self.span_ms),
            decimal(self.speed, 3)
        )];
        lines.extend(self.share.map(share_line));
        lines.extend(operation_lines(&self.operations));
        lines.push(format!("connections: at most {}", self.connections));
        lines.push(transport_line(self.timeout_ms, self.http, 1));
        lines.push(thresholds_line(&self.thresholds, self.abort_on_fail));
        lines
    }
}

/// Prepared as a run prepares it (see [`crate::kinds::load::dry_run::describe`]).
pub fn dry_run(plan: &LoadPlan, speed: f64, ctx: &RunContext) -> Result<Option<Described>, String> {
    load::prepare(plan, &ctx.run_id, &ctx.target, &ctx.options, &ctx.env_fn())?;
    DryRun::new(RunKind::Replay, &ctx.target, ReplayDry::new(plan, speed))
        .described()
        .map(Some)
}
