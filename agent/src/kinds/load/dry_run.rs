//! The dry run of a `load` plan.

use iohr_domain::RunKind;
use iohr_domain::capacity::rate_text;
use iohr_domain::load::{HttpVersion, LoadPlan, Model, Share, WarmupPlan};
use serde::Serialize;

use crate::dry_run::{
    Described, DryRun, OperationDry, PlanLines, millis, ms_text, operation_lines, share_field,
    share_line, thresholds_line, transport_line,
};
use crate::kinds::RunContext;
use crate::load;

#[derive(Debug, Clone, Serialize)]
pub struct StageDry {
    pub duration_ms: u64,
    /// The rate (per second) reached at the end of the stage.
    pub target: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LoadDry {
    pub operations: Vec<OperationDry>,
    pub model: Model,
    /// Open model at a constant rate: requests per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Open model with stages: the rate it ramps from, then each stage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_rate: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageDry>,
    /// Closed model: the connections; open model: the most it may use.
    pub connections: u32,
    /// A share of a run split over agents (`exec --share`): `"INDEX/COUNT"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<Share>,
    /// The measure, warm-up aside.
    pub duration_ms: u64,
    pub warmup: WarmupPlan,
    pub timeout_ms: u64,
    pub http: HttpVersion,
    pub streams: u32,
    pub thresholds: Vec<String>,
    pub abort_on_fail: bool,
    /// Open model: the requests its schedule starts in the measure (warm-up aside). The
    /// closed model sends as fast as the target answers: `null`.
    pub requests: Option<u64>,
}

impl LoadDry {
    pub fn new(plan: &LoadPlan) -> LoadDry {
        // The plan keeps a constant rate as one flat stage.
        let constant = matches!(plan.stages.as_slice(), [(_, rate)] if *rate == plan.start_rate);
        let open = plan.model == Model::Open;
        LoadDry {
            operations: plan.operations.iter().map(OperationDry::new).collect(),
            model: plan.model,
            rate: (open && constant).then_some(plan.start_rate),
            start_rate: (open && !constant).then_some(plan.start_rate),
            stages: if open && !constant {
                plan.stages
                    .iter()
                    .map(|(d, target)| StageDry {
                        duration_ms: millis(*d),
                        target: *target,
                    })
                    .collect()
            } else {
                Vec::new()
            },
            connections: plan.connections,
            share: share_field(plan.share),
            duration_ms: millis(plan.duration),
            warmup: plan.warmup,
            timeout_ms: millis(plan.timeout),
            http: plan.http,
            streams: plan.streams,
            thresholds: plan.thresholds.iter().map(|t| t.to_string()).collect(),
            abort_on_fail: plan.abort_on_fail,
            requests: plan.expected_requests(),
        }
    }
}

impl PlanLines for LoadDry {
    fn lines(&self) -> Vec<String> {
        let mut lines = operation_lines(&self.operations);
        let duration = ms_text(self.duration_ms);
        lines.push(match (self.model, self.rate) {
            (Model::Closed, _) => format!(
                "model: closed, {} connections for {duration}",
                self.connections
            ),
            (Model::Open, Some(rate)) => format!(
                "model: open, {} for {duration}, at most {} connections",
                rate_text(rate),
                self.connections
            ),
            (Model::Open, None) => {
                let stages: Vec<String> = self
                    .stages
                    .iter()
                    .map(|s| format!("{} to {}", ms_text(s.duration_ms), rate_text(s.target)))
                    .collect();
                format!(
                    "model: open, from {}: {} ({duration} in all), at most {} connections",
                    rate_text(self.start_rate.unwrap_or(0.0)),
                    stages.join(", "),
                    self.connections
                )
            }
        });
        lines.extend(self.share.map(share_line));
        lines.push(match self.warmup {
            WarmupPlan::None => "warm-up: none".to_string(),
            WarmupPlan::Requests(n) => format!("warm-up: {n} requests, run first and discarded"),
            WarmupPlan::Duration(d) => {
                format!("warm-up: {}, run first and discarded", ms_text(millis(d)))
            }
        });
        lines.push(transport_line(self.timeout_ms, self.http, self.streams));
        lines.push(thresholds_line(&self.thresholds, self.abort_on_fail));
        lines.push(match self.requests {
            Some(n) => format!("requests: {n} scheduled in the measure (warm-up aside)"),
            None => format!(
                "requests: as many as {} connections get answered",
                self.connections
            ),
        });
        lines
    }
}

/// A load plan is also prepared as a run prepares it before it connects (the
/// `--target-ca` roots, credential headers from the environment): a dry run passes only
/// what a run takes.
pub fn describe(plan: &LoadPlan, ctx: &RunContext) -> Result<DryRun<LoadDry>, String> {
    load::prepare(plan, &ctx.run_id, &ctx.target, &ctx.options, &ctx.env_fn())?;
    Ok(DryRun::new(RunKind::Load, &ctx.target, LoadDry::new(plan)))
}

pub fn dry_run(plan: &LoadPlan, ctx: &RunContext) -> Result<Option<Described>, String> {
    describe(plan, ctx)?.described().map(Some)
}
