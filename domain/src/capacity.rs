//! The `capacity` kind: a sweep of constant-rate load steps that finds the highest rate
//! meeting an SLO and the knee of latency against load.
//!
//! - [`CapacitySpec`] / [`CapacityPlan`]: the spec, validated like a load spec (it reuses
//!   its pieces), read into the sweep's grid and one [`LoadPlan`] per step.
//! - [`Sweep`]: the pure decision logic: next rate, stop at the first step that breaks
//!   the SLO (or whose achieved rate falls under 95% of the offered one), then bisect
//!   between the last good and the first bad rate.
//! - [`SweepPoint`]: one measured step, judged against the SLO.
//! - [`knee`]: Kneedle on log p99 against the offered rate, normalised over a given range,
//!   with a bootstrap interval over the sweep points (each point's p99 redrawn from its
//!   histogram by a binomial rank draw, seeded, so the same points give the same answer).

mod knee;
mod merge;
mod plan;
mod result;
mod sweep;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::load::{HttpVersion, LoadPlan, Operation};

pub use knee::{
    CurvePoint, Knee, Ranked, curve, knee, knee_of, kneedle, log_p99_range, ranked_points,
};
pub use merge::merge_results;
pub use result::{CANCELLED, CapacityResult, Concluded, SweepPoint};
pub use sweep::{Stage, Step, Sweep};

/// The most steps a sweep's grid may have (bisection adds its rounds).
pub const MAX_STEPS: usize = 50;
pub const MAX_BISECT: u32 = 10;
pub const DEFAULT_GROWTH: f64 = 1.5;
pub const DEFAULT_STEP: Duration = Duration::from_secs(10);
pub const DEFAULT_DISCARD: Duration = Duration::from_secs(2);
pub const DEFAULT_BISECT: u32 = 3;
pub const DEFAULT_ERROR_RATE: &str = "1%";
/// A step whose completed requests per second fall under this share of the offered rate
/// did not keep up, whatever its latency.
pub const KEEP_UP: f64 = 0.95;
/// Kneedle's sensitivity S (its paper's and kneed's default).
pub const SENSITIVITY: f64 = 1.0;
/// Bootstrap replicates of the knee.
pub const REPLICATES: usize = 1000;
/// A knee that more than this share of replicates does not find is not resolved.
pub const MAX_KNEELESS: f64 = 0.2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacitySpec {
    pub operations: Vec<Operation>,
    /// The first step's rate (requests per second), with `max_rate` and `growth`.
    #[serde(default)]
    pub start_rate: Option<f64>,
    /// The last step's rate: the grid grows by `growth` from `start_rate` and ends here.
    #[serde(default)]
    pub max_rate: Option<f64>,
    /// Each step's rate over the one before (default 1.5).
    #[serde(default)]
    pub growth: Option<f64>,
    /// The grid given explicitly, ascending, in place of start_rate/max_rate/growth.
    #[serde(default)]
    pub rates: Vec<f64>,
    /// How long each step holds its rate (default `10s`), `discard` included.
    #[serde(default)]
    pub step: Option<String>,
    /// The first part of each step, run and not judged (default `2s`).
    #[serde(default)]
    pub discard: Option<String>,
    /// A pause after a step that broke the SLO, so that what it left queued at the target
    /// drains before the next step (default: the discard).
    #[serde(default)]
    pub cooldown: Option<String>,
    /// The most connections the engine may use (default 64).
    #[serde(default)]
    pub connections: Option<u32>,
    /// Per request (default the smaller of 10 s and the step).
    #[serde(default)]
    pub timeout: Option<String>,
    #[serde(default)]
    pub http: HttpVersion,
    pub slo: SloSpec,
    /// Bisection rounds between the last good and the first bad step (default 3).
    #[serde(default)]
    pub bisect: Option<u32>,
    /// The capacity (requests per second) the scenario must reach: the run fails below.
    #[serde(default)]
    pub floor: Option<f64>,
    /// The share of requests sent with the W3C traceparent's sampled flag set (0 to 1,
    /// default 0.01); every request carries trace context ([`crate::trace`]).
    #[serde(
        default = "crate::trace::default_sample",
        skip_serializing_if = "crate::trace::is_default_sample"
    )]
    pub trace_sample: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloSpec {
    /// The highest p99 a step may have: `200ms`, `1s`, or a bare number of milliseconds.
    pub p99: String,
    /// The highest share of failed requests: `1%` (default) or `0.01`.
    #[serde(default)]
    pub error_rate: Option<String>,
}

/// The SLO a step is judged on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// Microseconds.
    pub p99_us: f64,
    /// A share, 0..1.
    pub error_rate: f64,
}

/// A spec with its defaults applied: the grid and what every step runs.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityPlan {
    /// The sweep's rates, ascending.
    pub grid: Vec<f64>,
    pub step: Duration,
    pub discard: Duration,
    pub cooldown: Duration,
    pub slo: Slo,
    pub bisect: u32,
    pub floor: Option<f64>,
    /// A constant-rate open-model plan at the grid's first rate: each step's plan is it
    /// with that step's rate ([`CapacityPlan::step_plan`]).
    template: LoadPlan,
}

/// Rates are kept to two decimals, so that they read well and match between runs.
pub fn round_rate(rate: f64) -> f64 {
    (rate * 100.0).round() / 100.0
}

/// `337.5/s`, `300/s`.
pub fn rate_text(rate: f64) -> String {
    format!("{}/s", crate::text::decimal(round_rate(rate), 2))
}

#[cfg(test)]
mod tests;
