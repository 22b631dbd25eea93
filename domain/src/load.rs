//! The `load` kind: its spec (operations, model, rate or connections, duration, warm-up,
//! thresholds), the per-second `load` frame and the result. The agent's engine produces
//! them; the controller validates specs and (for compare) reads results.

mod exemplar;
mod merge;
mod plan;
mod result;
mod second;
mod share;
mod threshold;

pub use exemplar::{
    Exemplar, Exemplars, FAILED_PER_SECOND, SLOW_SECONDS, SLOWEST_PER_SECOND, SlowSecond, Slowest,
    bound_frame_exemplars, bounded_slow_seconds, is_trace_id, merge_slow_seconds, slowest_traces,
    trace_id,
};
pub use merge::{MergeError, MergedMeasure, merge_histograms, merge_results};
pub(crate) use merge::{counts_of, same, total, whole_histogram, with_saturation};
pub use plan::{default_max_connections, read_thresholds, read_timeout, unique_names};
pub use result::{
    Counts, LatencySummary, LoadResult, LoadSecond, MAX_OPERATION_BLOCKS, OPERATION_BLOCK_DIGITS,
    OperationResult, OperationSecond, ThresholdResult, WarmupResult, abort_reason, first_crossed,
    judge, judge_all, operation_block_group, operation_block_histogram, status_class,
    summarise_latency,
};
pub use second::SecondSummary;
pub use share::{MAX_SHARES, Share, ShareError, check_split};
pub use threshold::{Comparison, Metric, Threshold};

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::request::{SpecError, spec_error};

pub const MAX_OPERATIONS: usize = 100;
pub const MAX_CONNECTIONS: u32 = 10_000;
pub const MAX_RATE: f64 = 1_000_000.0;
/// A run longer than a day is a mistake, not a test.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// More stages than this is a generated mistake; 100 ramps already draw any curve.
pub const MAX_STAGES: usize = 100;
/// The confidence level of every interval a result quotes.
pub const LEVEL: f64 = 0.95;
/// The percentiles a result quotes, as (name, quantile).
pub const QUOTED: [(&str, f64); 4] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    pub operations: Vec<Operation>,
    pub model: Model,
    /// Open model: arrivals per second (the start rate when `stages` are given).
    #[serde(default)]
    pub rate: Option<f64>,
    /// Open model: ramps from `rate` (default 0) through each stage, as k6's
    /// `ramping-arrival-rate`.
    #[serde(default)]
    pub stages: Vec<StageSpec>,
    /// Closed model: the connections, each sending as fast as the target answers.
    /// Open model: the connections opened at the start (default 64).
    #[serde(default)]
    pub connections: Option<u32>,
    /// Open model: the most connections the engine may open (k6's `maxVUs`). When a
    /// request is due and every open connection is busy, the engine opens another, up to
    /// this bound (default [`DEFAULT_MAX_CONNECTIONS`], or `connections` when that is
    /// more); at the bound a due request waits for one (late, counted as held by the
    /// target) or, a whole timeout late, is dropped and counted.
    #[serde(default)]
    pub max_connections: Option<u32>,
    /// How long the measured part lasts (`10s`, `1m`); with `stages`, their sum.
    #[serde(default)]
    pub duration: Option<String>,
    /// Run before the measure and discarded: a duration (`2s`) or a request count.
    #[serde(default)]
    pub warmup: Option<Warmup>,
    /// Per request, from the send to the last byte of the body (default `10s`).
    #[serde(default)]
    pub timeout: Option<String>,
    /// `1.1` (default) or `2` (ALPN h2 over TLS, prior-knowledge h2c over plain TCP).
    #[serde(default)]
    pub http: HttpVersion,
    /// HTTP/2 only: concurrent streams per connection (default 1).
    #[serde(default)]
    pub streams: Option<u32>,
    /// k6-style: `p99 < 300ms`, `p(95) <= 1s`, `error_rate < 1%`, `mean < 50ms`.
    #[serde(default)]
    pub thresholds: Vec<String>,
    /// Stop as soon as a threshold is crossed (judged once a second on the measure so
    /// far, once it has the samples a threshold needs).
    #[serde(default)]
    pub abort_on_fail: bool,
    /// In a run split over agents: what losing a share's agent does to the run.
    #[serde(default)]
    pub on_agent_lost: AgentLoss,
    /// The share of requests sent with the W3C traceparent's sampled flag set (0 to 1,
    /// default 0.01); every request carries trace context ([`crate::trace`]).
    #[serde(
        default = "crate::trace::default_sample",
        skip_serializing_if = "crate::trace::is_default_sample"
    )]
    pub trace_sample: f64,
}

/// What a split run does when one of its shares' agents is lost (`on_agent_lost`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentLoss {
    /// The run ends `error`, with what every share measured merged.
    #[default]
    Error,
    /// The other shares run on, and the run is judged on what they measured.
    Continue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    Open,
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum HttpVersion {
    #[default]
    #[serde(rename = "1.1")]
    Http1,
    #[serde(rename = "2")]
    Http2,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    pub duration: String,
    /// The rate (per second) reached at the end of the stage.
    pub target: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Warmup {
    Requests(u64),
    Duration(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operation {
    /// Defaults to `METHOD PATH`.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default = "default_method")]
    pub method: String,
    pub path: String,
    /// Credential-named values must be `${env:NAME}` (see `request`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Sent as the body (a string as it is, anything else as JSON); never recorded.
    #[serde(default)]
    pub body: Option<serde_json::Value>,
    /// The share of requests this operation gets, relative to the others.
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_method() -> String {
    "GET".to_string()
}

fn default_weight() -> u32 {
    1
}

impl Operation {
    pub fn display_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{} {}", self.method, self.path))
    }
}

/// Reads `10s`, `1m30s`, `500ms`.
pub fn parse_duration(field: &str, text: &str) -> Result<Duration, SpecError> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        spec_error(
            field,
            format!("{text:?} is not a duration such as 10s: {e}"),
        )
    })
}

/// A spec with its durations read and its defaults applied: what the engine runs.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadPlan {
    pub operations: Vec<Operation>,
    pub model: Model,
    /// Open model: the start rate and the stages (a constant rate is one flat stage).
    pub start_rate: f64,
    pub stages: Vec<(Duration, f64)>,
    pub connections: u32,
    /// Open model: the most connections the engine may open (at least `connections`);
    /// the closed model's is `connections`.
    pub max_connections: u32,
    pub duration: Duration,
    pub warmup: WarmupPlan,
    pub timeout: Duration,
    pub http: HttpVersion,
    pub streams: u32,
    pub thresholds: Vec<Threshold>,
    pub abort_on_fail: bool,
    /// Replay: the recorded arrivals (offset from the start, operation index), in time
    /// order, in place of the stages.
    pub recorded: Option<Vec<(Duration, usize)>>,
    /// The part of the run this agent sends when it is split over several
    /// ([`LoadPlan::share`]); the whole run otherwise.
    pub share: Share,
    /// The share of requests sent sampled ([`crate::trace`]).
    pub trace_sample: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WarmupPlan {
    None,
    Requests(u64),
    #[serde(with = "millis")]
    Duration(Duration),
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

pub const DEFAULT_OPEN_CONNECTIONS: u32 = 64;
/// The open model's default bound on connections: enough to keep a schedule of 1,000/s
/// through a one-second stall of the target, and a thousand sockets (with their buffers,
/// a few tens of MiB) is little for any agent. A larger `connections` raises it.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 1000;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests;
