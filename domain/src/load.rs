//! The `load` kind: its spec (operations, model, rate or connections, duration, warm-up,
//! thresholds), the per-second `load` frame and the result. The agent's engine produces
//! them; the controller validates specs and (for compare) reads results.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use hdrhistogram::Histogram;

use crate::histogram::{HistogramError, encode};
use crate::quantile::{Percentile, percentile};
use crate::request::{SpecError, parse_spec, spec_error, validate_request};

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
    /// Open model: the most connections the engine may use (default 64); when all are
    /// busy, a due request waits (late) or, with every connection's backlog full, is
    /// dropped and counted.
    #[serde(default)]
    pub connections: Option<u32>,
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
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl LoadSpec {
    /// Parses and validates a spec; the error says what to fix.
    pub fn from_json(value: &serde_json::Value) -> Result<LoadSpec, SpecError> {
        parse_spec("spec", value)
    }

    /// Validates the spec and reads it into the plan the engine runs.
    pub fn plan(&self) -> Result<LoadPlan, SpecError> {
        if self.operations.is_empty() {
            return Err(spec_error(
                "spec.operations",
                "at least one operation is needed",
            ));
        }
        if self.operations.len() > MAX_OPERATIONS {
            return Err(spec_error(
                "spec.operations",
                format!("at most {MAX_OPERATIONS} operations"),
            ));
        }
        for (i, op) in self.operations.iter().enumerate() {
            let field = format!("spec.operations[{i}]");
            validate_request(&field, &op.method, &op.path, &op.headers)?;
            if op.weight == 0 {
                return Err(spec_error(format!("{field}.weight"), "must be at least 1"));
            }
        }
        unique_names(&self.operations)?;
        let connections = self.connections.unwrap_or(match self.model {
            Model::Open => DEFAULT_OPEN_CONNECTIONS,
            Model::Closed => 0,
        });
        if connections == 0 || connections > MAX_CONNECTIONS {
            return Err(spec_error(
                "spec.connections",
                format!("must be between 1 and {MAX_CONNECTIONS} (the closed model needs it)"),
            ));
        }
        let rate_ok = |r: f64| r.is_finite() && (0.0..=MAX_RATE).contains(&r);
        let (start_rate, stages, duration) = match self.model {
            Model::Closed => {
                if self.rate.is_some() || !self.stages.is_empty() {
                    return Err(spec_error(
                        "spec.rate",
                        "the closed model sends as fast as the target answers; rate and stages belong to the open model",
                    ));
                }
                (0.0, Vec::new(), self.required_duration()?)
            }
            Model::Open if self.stages.is_empty() => {
                let rate = self.rate.ok_or_else(|| {
                    spec_error("spec.rate", "the open model needs a rate or stages")
                })?;
                if !rate_ok(rate) || rate == 0.0 {
                    return Err(spec_error(
                        "spec.rate",
                        format!("must be above 0 and at most {MAX_RATE}"),
                    ));
                }
                let duration = self.required_duration()?;
                (rate, vec![(duration, rate)], duration)
            }
            Model::Open => {
                if self.duration.is_some() {
                    return Err(spec_error(
                        "spec.duration",
                        "with stages the duration is their sum; leave it out",
                    ));
                }
                let start = self.rate.unwrap_or(0.0);
                if !rate_ok(start) {
                    return Err(spec_error(
                        "spec.rate",
                        format!("must be between 0 and {MAX_RATE}"),
                    ));
                }
                if self.stages.len() > MAX_STAGES {
                    return Err(spec_error(
                        "spec.stages",
                        format!("at most {MAX_STAGES} stages"),
                    ));
                }
                let mut stages = Vec::with_capacity(self.stages.len());
                // Summed as it goes and checked against the cap at each stage, so that the
                // sum of many long stages never overflows.
                let mut total = Duration::ZERO;
                for (i, stage) in self.stages.iter().enumerate() {
                    let field = format!("spec.stages[{i}]");
                    let d = parse_duration(&format!("{field}.duration"), &stage.duration)?;
                    if d.is_zero() {
                        return Err(spec_error(format!("{field}.duration"), "must not be zero"));
                    }
                    total = total.saturating_add(d);
                    if total > MAX_DURATION {
                        return Err(spec_error(
                            format!("{field}.duration"),
                            "the stages must sum to at most 24h",
                        ));
                    }
                    if !rate_ok(stage.target) {
                        return Err(spec_error(
                            format!("{field}.target"),
                            format!("must be between 0 and {MAX_RATE}"),
                        ));
                    }
                    stages.push((d, stage.target));
                }
                (start, stages, total)
            }
        };
        if duration > MAX_DURATION {
            return Err(spec_error("spec.duration", "at most 24h"));
        }
        let warmup = match &self.warmup {
            None => WarmupPlan::None,
            Some(Warmup::Requests(0)) => WarmupPlan::None,
            Some(Warmup::Requests(n)) => {
                let most = self.most_warmup_requests(start_rate, &stages);
                if *n > most {
                    return Err(spec_error(
                        "spec.warmup",
                        format!(
                            "{n} requests is more than the {most} the warm-up's rate sends in 24h"
                        ),
                    ));
                }
                WarmupPlan::Requests(*n)
            }
            Some(Warmup::Duration(text)) => {
                let d = parse_duration("spec.warmup", text)?;
                if d > MAX_DURATION {
                    return Err(spec_error("spec.warmup", "at most 24h"));
                }
                if d.is_zero() {
                    WarmupPlan::None
                } else {
                    WarmupPlan::Duration(d)
                }
            }
        };
        let timeout = read_timeout(self.timeout.as_deref())?;
        let streams = self.streams.unwrap_or(1);
        if streams == 0 || streams > 1000 {
            return Err(spec_error("spec.streams", "must be between 1 and 1000"));
        }
        if streams > 1 && self.http != HttpVersion::Http2 {
            return Err(spec_error(
                "spec.streams",
                "streams per connection need \"http\": \"2\"",
            ));
        }
        let thresholds = read_thresholds(&self.thresholds)?;
        Ok(LoadPlan {
            operations: self.operations.clone(),
            model: self.model,
            start_rate,
            stages,
            connections,
            duration,
            warmup,
            timeout,
            http: self.http,
            streams,
            thresholds,
            abort_on_fail: self.abort_on_fail,
            recorded: None,
        })
    }

    /// The most warm-up requests a spec may ask for: what its warm-up rate sends in the
    /// 24 h cap (the open model warms up at its start rate, or its first stage's target
    /// from zero, as the engine does); the closed model, the most rate in the cap.
    fn most_warmup_requests(&self, start_rate: f64, stages: &[(Duration, f64)]) -> u64 {
        let rate = match self.model {
            Model::Closed => MAX_RATE,
            Model::Open if start_rate > 0.0 => start_rate,
            Model::Open => stages.first().map_or(0.0, |(_, r)| *r),
        };
        // At most 1e6/s for 86,400 s: far inside a u64 (a float-to-int cast saturates).
        (rate * MAX_DURATION.as_secs_f64()).floor() as u64
    }

    fn required_duration(&self) -> Result<Duration, SpecError> {
        let text = self
            .duration
            .as_deref()
            .ok_or_else(|| spec_error("spec.duration", "is required, such as \"10s\""))?;
        let d = parse_duration("spec.duration", text)?;
        if d.is_zero() {
            return Err(spec_error("spec.duration", "must not be zero"));
        }
        Ok(d)
    }
}

/// Operations are told apart by name in frames and results: two with one name would merge.
pub fn unique_names(operations: &[Operation]) -> Result<(), SpecError> {
    let mut seen = std::collections::BTreeSet::new();
    for (i, op) in operations.iter().enumerate() {
        let name = op.display_name();
        if !seen.insert(name.clone()) {
            return Err(spec_error(
                format!("spec.operations[{i}].name"),
                format!("{name:?} names another operation too; give each its own name"),
            ));
        }
    }
    Ok(())
}

/// The per-request timeout of a spec (`spec.timeout`), default 10 s, at most 60 s.
pub fn read_timeout(text: Option<&str>) -> Result<Duration, SpecError> {
    let timeout = match text {
        None => DEFAULT_TIMEOUT,
        Some(text) => parse_duration("spec.timeout", text)?,
    };
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(spec_error("spec.timeout", "must be between 1ms and 60s"));
    }
    Ok(timeout)
}

/// A spec's `thresholds`, each parsed or refused with its index.
pub fn read_thresholds(texts: &[String]) -> Result<Vec<Threshold>, SpecError> {
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            text.parse::<Threshold>()
                .map_err(|e| spec_error(format!("spec.thresholds[{i}]"), e))
        })
        .collect()
}

impl LoadPlan {
    /// The most requests the run may send (for the units it reserves): the schedule's
    /// total for the open model, none known for the closed one.
    pub fn expected_requests(&self) -> Option<u64> {
        if let Some(recorded) = &self.recorded {
            return Some(recorded.len() as u64);
        }
        match self.model {
            Model::Closed => None,
            Model::Open => {
                let mut from = self.start_rate;
                let mut total = 0.0;
                for (d, to) in &self.stages {
                    total += (from + to) / 2.0 * d.as_secs_f64();
                    from = *to;
                }
                Some(total.ceil() as u64)
            }
        }
    }
}

/// A k6-style pass/fail rule on the measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    pub expression: String,
    pub metric: Metric,
    pub op: Comparison,
    /// Microseconds for latencies, a fraction (0..1) for the error rate, per second for
    /// the rate.
    pub limit: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// The q-quantile of the corrected latency.
    Percentile(f64),
    Mean,
    Max,
    /// Failed requests (no response, or a status of 400 or more) over all requests.
    ErrorRate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Comparison {
    #[serde(rename = "<")]
    Less,
    #[serde(rename = "<=")]
    LessOrEqual,
    #[serde(rename = ">")]
    Greater,
    #[serde(rename = ">=")]
    GreaterOrEqual,
}

impl Comparison {
    pub fn holds(self, observed: f64, limit: f64) -> bool {
        match self {
            Comparison::Less => observed < limit,
            Comparison::LessOrEqual => observed <= limit,
            Comparison::Greater => observed > limit,
            Comparison::GreaterOrEqual => observed >= limit,
        }
    }
}

impl std::str::FromStr for Threshold {
    type Err = String;

    fn from_str(text: &str) -> Result<Threshold, String> {
        let usage = "expected METRIC OP VALUE, such as \"p99 < 300ms\" or \"error_rate < 1%\" (metrics: pNN, p(NN), mean, max, error_rate)";
        let ops = [
            ("<=", Comparison::LessOrEqual),
            (">=", Comparison::GreaterOrEqual),
            ("<", Comparison::Less),
            (">", Comparison::Greater),
        ];
        let (at, op_text, op) = ops
            .iter()
            .filter_map(|(t, op)| text.find(t).map(|at| (at, *t, *op)))
            .min_by_key(|(at, t, _)| (*at, usize::MAX - t.len()))
            .ok_or_else(|| format!("{text:?}: {usage}"))?;
        let name = text[..at].trim().to_ascii_lowercase();
        let value = text[at + op_text.len()..].trim();
        let metric = match name.as_str() {
            "mean" | "avg" => Metric::Mean,
            "max" => Metric::Max,
            "error_rate" | "errors" => Metric::ErrorRate,
            other => {
                let digits = other
                    .strip_prefix("p(")
                    .and_then(|r| r.strip_suffix(')'))
                    .or_else(|| other.strip_prefix('p'))
                    .ok_or_else(|| format!("{text:?}: unknown metric {other:?}; {usage}"))?;
                let q: f64 = digits
                    .parse()
                    .map_err(|_| format!("{text:?}: unknown metric {other:?}; {usage}"))?;
                if !(q > 0.0 && q < 100.0) {
                    return Err(format!("{text:?}: a percentile is between 0 and 100"));
                }
                Metric::Percentile(q / 100.0)
            }
        };
        let limit = match metric {
            Metric::ErrorRate => {
                let (number, scale) = match value.strip_suffix('%') {
                    Some(n) => (n.trim(), 0.01),
                    None => (value, 1.0),
                };
                let n: f64 = number
                    .parse()
                    .map_err(|_| format!("{text:?}: {value:?} is not a rate such as 1% or 0.01"))?;
                n * scale
            }
            _ => {
                // A bare number is milliseconds, as in k6.
                match value.parse::<f64>() {
                    Ok(ms) => ms * 1000.0,
                    Err(_) => {
                        humantime::parse_duration(value)
                            .map_err(|_| {
                                format!("{text:?}: {value:?} is not a latency such as 300ms")
                            })?
                            .as_secs_f64()
                            * 1e6
                    }
                }
            }
        };
        if !limit.is_finite() || limit < 0.0 {
            return Err(format!("{text:?}: the limit must be a positive number"));
        }
        Ok(Threshold {
            expression: text.trim().to_string(),
            metric,
            op,
            limit,
        })
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.expression)
    }
}

/// Responses by status class and failures by kind: what every `load` frame and result
/// counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Requests that completed (answered or failed) in the window.
    pub requests: u64,
    /// Responses by class: `1xx` .. `5xx`.
    pub responses: BTreeMap<String, u64>,
    /// Requests with no response, by kind: `timeout`, `connect`, `reset`, `tls`,
    /// `protocol`.
    pub errors: BTreeMap<String, u64>,
}

impl Counts {
    /// Requests with no response or with a status of 400 or more (k6's
    /// `http_req_failed`).
    pub fn failed(&self) -> u64 {
        let bad_status: u64 = ["4xx", "5xx"]
            .iter()
            .filter_map(|c| self.responses.get(*c))
            .sum();
        bad_status + self.errors.values().sum::<u64>()
    }

    pub fn error_rate(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.failed() as f64 / self.requests as f64
        }
    }

    pub fn add(&mut self, other: &Counts) {
        self.requests += other.requests;
        for (k, v) in &other.responses {
            *self.responses.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
    }
}

/// The status class of an HTTP status, such as `2xx`.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// One second of a load run, as its `load` frame carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSecond {
    /// Seconds since the measure started (warm-up seconds count from the warm-up's start).
    pub second: u64,
    /// `warmup` (discarded) or `measure`.
    pub phase: String,
    #[serde(flatten)]
    pub counts: Counts,
    /// Requests the schedule meant to start in this second (open model).
    pub intended: u64,
    /// Requests that started in this second.
    pub sent: u64,
    /// Started later than their intended time by more than the late tolerance.
    pub late: u64,
    /// Due while every connection and its backlog was busy: never sent.
    pub dropped: u64,
    /// Corrected latency (from the intended send time), HdrHistogram V2 + deflate,
    /// base64; none in warm-up seconds, whose latencies are discarded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram: Option<String>,
    /// Latency from the actual send time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncorrected_histogram: Option<String>,
    /// Per operation: counts and the corrected histogram.
    pub operations: BTreeMap<String, OperationSecond>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationSecond {
    #[serde(flatten)]
    pub counts: Counts,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram: Option<String>,
}

/// Latency summary: percentiles with their intervals (microseconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub samples: u64,
    pub mean_us: f64,
    pub max_us: u64,
    pub percentiles: BTreeMap<String, Percentile>,
    /// The whole histogram (V2 + deflate, base64), for exact merges and compare.
    pub histogram: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationResult {
    pub name: String,
    pub method: String,
    pub path: String,
    #[serde(flatten)]
    pub counts: Counts,
    pub error_rate: f64,
    pub latency: LatencySummary,
    /// This operation's corrected latency in consecutive blocks of the result's
    /// `operation_block_seconds` (a whole number of the total's blocks), at
    /// [`OPERATION_BLOCK_DIGITS`] significant digits: compare resamples them as it does
    /// the total's. Absent from results written before they were recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThresholdResult {
    pub threshold: String,
    pub passed: bool,
    /// The observed value, in the threshold's unit (`ms` or a rate), or why none.
    pub observed: String,
}

/// What a warm-up did: it ran, and it is not in any figure of the result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmupResult {
    pub plan: WarmupPlan,
    pub requests: u64,
    pub discarded: bool,
}

/// The result of a load (or replay) run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadResult {
    pub model: Model,
    pub http: HttpVersion,
    pub connections: u32,
    /// Open model: requests per second the schedule asked for, on average.
    pub intended_rate: Option<f64>,
    /// Completed requests per second over the measure.
    pub achieved_rate: f64,
    /// Seconds the measure lasted.
    pub measured_seconds: f64,
    pub warmup: WarmupResult,
    #[serde(flatten)]
    pub counts: Counts,
    pub error_rate: f64,
    pub intended: u64,
    pub sent: u64,
    pub late: u64,
    pub dropped: u64,
    /// How late a request may start and not count as late, in milliseconds.
    pub late_tolerance_ms: u64,
    /// From the intended send time (coordinated omission corrected).
    pub latency: LatencySummary,
    /// From the actual send time, kept beside it.
    pub uncorrected_latency: LatencySummary,
    pub operations: Vec<OperationResult>,
    pub thresholds: Vec<ThresholdResult>,
    /// Why the run stopped before its end, when it did.
    pub aborted: Option<String>,
    /// Plain words about the schedule: kept, or how it was not.
    pub notes: Vec<String>,
    /// The total corrected latency in consecutive blocks of `block_seconds` (at most 60
    /// blocks, V2 + deflate, base64): compare resamples them (a block bootstrap), since
    /// the seconds of a run are correlated.
    #[serde(default)]
    pub blocks: Vec<String>,
    #[serde(default)]
    pub block_seconds: u64,
    /// The span of each operation's blocks: `block_seconds` times
    /// [`operation_block_group`]. Absent from results without operation blocks.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub operation_block_seconds: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Operation blocks kept per result, over all its operations: up to 20 operations keep
/// a block for each of the total's; more share this many (100 operations of one-hour
/// runs keep 12 five-minute blocks each), so that a result stays near a megabyte.
pub const MAX_OPERATION_BLOCKS: u64 = 1200;
/// Operation blocks are kept at 2 significant digits (buckets under 1% wide): compare's
/// bootstrap reads latencies on bins 0.5% wide against a 2% noise floor, and 3 digits
/// would double their size.
pub const OPERATION_BLOCK_DIGITS: u8 = 2;

/// How many of the total's consecutive blocks make one block of each operation, for a
/// run of `blocks` total blocks and `operations` operations.
pub fn operation_block_group(blocks: u64, operations: usize) -> u64 {
    (blocks * operations as u64)
        .div_ceil(MAX_OPERATION_BLOCKS)
        .max(1)
}

/// An empty histogram for an operation's block.
pub fn operation_block_histogram() -> Result<Histogram<u64>, HistogramError> {
    Ok(Histogram::new_with_bounds(
        1,
        crate::histogram::MAX_MICROS,
        OPERATION_BLOCK_DIGITS,
    )?)
}

impl LatencySummary {
    /// `p50 1.21 ms [1.18, 1.25]  p99 insufficient samples (need 368)`.
    pub fn line(&self) -> String {
        let ms = |us: u64| us as f64 / 1000.0;
        QUOTED
            .iter()
            .filter_map(|(name, _)| {
                let shown = match self.percentiles.get(*name)? {
                    Percentile::Estimate {
                        value, low, high, ..
                    } => format!("{:.2} ms [{:.2}, {:.2}]", ms(*value), ms(*low), ms(*high)),
                    Percentile::Insufficient { insufficient, .. } => insufficient.clone(),
                };
                Some(format!("{name} {shown}"))
            })
            .collect::<Vec<_>>()
            .join("  ")
    }
}

impl LoadResult {
    /// The result in a few lines for people: what was asked and done, the latencies with
    /// their 95% intervals, each operation, the thresholds and the notes.
    pub fn summary(&self) -> Vec<String> {
        let describe = |c: &Counts| {
            let mut parts: Vec<String> = c
                .responses
                .iter()
                .chain(c.errors.iter())
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            if parts.is_empty() {
                parts.push("none".to_string());
            }
            parts.join(", ")
        };
        let model = match (self.model, self.intended_rate) {
            (Model::Open, Some(rate)) => format!("open model, {rate:.1}/s intended"),
            (Model::Open, None) => "open model".to_string(),
            (Model::Closed, _) => format!("closed model, {} connections", self.connections),
        };
        let mut lines = vec![
            format!(
                "{model}, {:.1}/s achieved over {:.1} s",
                self.achieved_rate, self.measured_seconds
            ),
            format!(
                "requests {}: {}; error rate {:.2}%",
                self.counts.requests,
                describe(&self.counts),
                self.error_rate * 100.0
            ),
            format!(
                "schedule: intended {}, sent {}, late {} (> {} ms), dropped {}",
                self.intended, self.sent, self.late, self.late_tolerance_ms, self.dropped
            ),
            format!("latency from the intended send: {}", self.latency.line()),
            format!(
                "latency from the actual send:   {}",
                self.uncorrected_latency.line()
            ),
        ];
        for op in &self.operations {
            lines.push(format!(
                "{}: {} requests ({}), {}",
                op.name,
                op.counts.requests,
                describe(&op.counts),
                op.latency.line()
            ));
        }
        for t in &self.thresholds {
            let verdict = if t.passed { "passed" } else { "FAILED" };
            lines.push(format!(
                "threshold {}: {verdict} ({})",
                t.threshold, t.observed
            ));
        }
        if let Some(aborted) = &self.aborted {
            lines.push(format!("aborted: {aborted}"));
        }
        lines.extend(self.notes.iter().cloned());
        lines
    }
}

/// The latency summary of a histogram: p50/p90/p99/p99.9 with their intervals.
pub fn summarise_latency(histogram: &Histogram<u64>) -> Result<LatencySummary, HistogramError> {
    let percentiles = QUOTED
        .iter()
        .map(|(name, q)| (name.to_string(), percentile(histogram, *q, LEVEL)))
        .collect();
    Ok(LatencySummary {
        samples: histogram.len(),
        mean_us: if histogram.is_empty() {
            0.0
        } else {
            histogram.mean()
        },
        max_us: histogram.max(),
        percentiles,
        histogram: encode(histogram)?,
    })
}

/// A threshold judged on the measure: `Some(passed)` with the observed value, or `None`
/// (with why) when the measure cannot judge it yet, such as a p99 from too few samples.
pub fn judge(
    threshold: &Threshold,
    latency: &Histogram<u64>,
    counts: &Counts,
) -> (Option<bool>, String) {
    let ms = |micros: f64| format!("{:.3} ms", micros / 1000.0);
    let (observed, shown) = match threshold.metric {
        Metric::ErrorRate => {
            if counts.requests == 0 {
                return (None, "no requests".to_string());
            }
            let rate = counts.error_rate();
            (
                rate,
                format!(
                    "{:.4}% ({} of {})",
                    rate * 100.0,
                    counts.failed(),
                    counts.requests
                ),
            )
        }
        _ if latency.is_empty() => return (None, "no responses".to_string()),
        Metric::Mean => (latency.mean(), ms(latency.mean())),
        Metric::Max => (latency.max() as f64, ms(latency.max() as f64)),
        Metric::Percentile(q) => match percentile(latency, q, LEVEL) {
            Percentile::Estimate { value, .. } => (value as f64, ms(value as f64)),
            Percentile::Insufficient { insufficient, .. } => return (None, insufficient),
        },
    };
    (Some(threshold.op.holds(observed, threshold.limit)), shown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> Result<LoadPlan, SpecError> {
        LoadSpec::from_json(&value)?.plan()
    }

    #[test]
    fn an_open_spec_reads_into_a_plan() {
        let plan = spec(json!({
            "operations": [{"path": "/"}, {"method": "POST", "path": "/orders", "body": {"sku": "A1"}, "weight": 3}],
            "model": "open", "rate": 200, "duration": "10s", "warmup": "2s",
            "thresholds": ["p99 < 300ms", "error_rate < 1%"]
        }))
        .expect("valid");
        assert_eq!(plan.stages, vec![(Duration::from_secs(10), 200.0)]);
        assert_eq!(plan.connections, DEFAULT_OPEN_CONNECTIONS);
        assert_eq!(plan.warmup, WarmupPlan::Duration(Duration::from_secs(2)));
        assert_eq!(plan.expected_requests(), Some(2000));
        assert_eq!(plan.thresholds[0].metric, Metric::Percentile(0.99));
        assert_eq!(plan.thresholds[0].limit, 300_000.0);
        assert_eq!(plan.thresholds[1].metric, Metric::ErrorRate);
        assert!((plan.thresholds[1].limit - 0.01).abs() < 1e-12);
    }

    #[test]
    fn stages_sum_to_the_duration() {
        let plan = spec(json!({
            "operations": [{"path": "/"}], "model": "open",
            "stages": [{"duration": "5s", "target": 100}, {"duration": "5s", "target": 100}]
        }))
        .expect("valid");
        assert_eq!(plan.duration, Duration::from_secs(10));
        assert_eq!(plan.expected_requests(), Some(750));
    }

    #[test]
    fn bad_specs_say_what_to_fix() {
        let cases = [
            (
                json!({"operations": [], "model": "closed", "connections": 4, "duration": "1s"}),
                "spec.operations",
            ),
            (
                json!({"operations": [{"path": "/"}], "model": "closed", "duration": "1s"}),
                "spec.connections",
            ),
            (
                json!({"operations": [{"path": "/"}], "model": "open", "duration": "1s"}),
                "spec.rate",
            ),
            (
                json!({"operations": [{"path": "/"}], "model": "open", "rate": 10}),
                "spec.duration",
            ),
            (
                json!({"operations": [{"path": "/"}], "model": "open", "rate": 10, "duration": "soon"}),
                "spec.duration",
            ),
            (
                json!({"operations": [{"path": "x"}], "model": "open", "rate": 10, "duration": "1s"}),
                "spec.operations[0].path",
            ),
            (
                json!({"operations": [{"path": "/", "headers": {"Authorization": "Bearer x"}}], "model": "open", "rate": 10, "duration": "1s"}),
                "spec.operations[0].headers.Authorization",
            ),
            (
                json!({"operations": [{"path": "/"}], "model": "closed", "connections": 2, "duration": "1s", "rate": 5}),
                "spec.rate",
            ),
            (
                json!({"operations": [{"path": "/"}], "model": "open", "rate": 10, "duration": "1s", "thresholds": ["p99 is small"]}),
                "spec.thresholds[0]",
            ),
            (
                json!({"operations": [{"path": "/"}], "model": "open", "rate": 10, "duration": "1s", "streams": 4}),
                "spec.streams",
            ),
            (
                json!({"operations": [{"path": "/"}], "model": "sideways", "duration": "1s"}),
                "spec.model",
            ),
            (
                json!({"operations": [{"path": "/"}], "model": "open", "rate": 10, "duration": "1s", "colour": "red"}),
                "spec.colour",
            ),
            (
                json!({"operations": [{"path": "/", "weight": "x"}], "model": "closed", "connections": 2, "duration": "1s"}),
                "spec.operations[0].weight",
            ),
        ];
        for (value, field) in cases {
            let err = spec(value.clone()).expect_err(&value.to_string());
            assert_eq!(err.field, field, "{value}: {err}");
        }
    }

    #[test]
    fn thresholds_read_like_k6() {
        let t: Threshold = "p(95) <= 1.5s".parse().expect("valid");
        assert_eq!(t.metric, Metric::Percentile(0.95));
        assert_eq!(t.op, Comparison::LessOrEqual);
        assert_eq!(t.limit, 1_500_000.0);
        let t: Threshold = "p99.9<250".parse().expect("valid");
        assert!(matches!(t.metric, Metric::Percentile(q) if (q - 0.999).abs() < 1e-12));
        assert_eq!(t.limit, 250_000.0);
        let t: Threshold = "error_rate < 0.05".parse().expect("valid");
        assert!((t.limit - 0.05).abs() < 1e-12);
        assert!(t.op.holds(0.04, t.limit) && !t.op.holds(0.05, t.limit));
        assert!("p100 < 1ms".parse::<Threshold>().is_err());
        assert!("latency < 1ms".parse::<Threshold>().is_err());
    }

    #[test]
    fn counts_merge_and_give_the_error_rate() {
        let mut a = Counts {
            requests: 10,
            ..Counts::default()
        };
        a.responses.insert("2xx".into(), 8);
        a.responses.insert("5xx".into(), 1);
        a.errors.insert("timeout".into(), 1);
        let mut b = a.clone();
        b.add(&a);
        assert_eq!(b.requests, 20);
        assert_eq!(b.failed(), 4);
        assert!((b.error_rate() - 0.2).abs() < 1e-12);
        assert_eq!(status_class(204), "2xx");
        assert_eq!(status_class(503), "5xx");
    }

    /// The most a result holds: 100 operations of a one-hour run at 1,000 requests per
    /// second, each block a spread of latencies as wide as a busy service's (log-normal,
    /// about 20 ms, from 0.5 ms to 2 s).
    #[test]
    fn operation_blocks_of_a_full_result_stay_near_a_megabyte() {
        let group = operation_block_group(60, MAX_OPERATIONS);
        assert_eq!((group, 60u64.div_ceil(group)), (5, 12));
        assert_eq!(operation_block_group(60, 20), 1);
        assert_eq!(operation_block_group(10, MAX_OPERATIONS), 1);
        let mut x = 7u64;
        let mut uniform = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let per_block = 3600 * 1000 / MAX_OPERATIONS as u64 / 12;
        let mut encoded = 0usize;
        for _ in 0..MAX_OPERATIONS * 12 {
            let mut h = operation_block_histogram().expect("histogram");
            for _ in 0..per_block {
                let (u1, u2) = (uniform().max(1e-12), uniform());
                let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                h.record((20_000.0 * (0.8 * z).exp()).clamp(500.0, 2e6) as u64)
                    .expect("record");
            }
            encoded += encode(&h).expect("encode").len();
        }
        assert!(encoded < 1 << 20, "{encoded} bytes of operation blocks");
    }
}
