//! What a load run measured: the per-second frames, the counts, the latency summaries and
//! the result with its thresholds judged.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use hdrhistogram::Histogram;

use crate::RunStatus;
use crate::histogram::{HistogramError, encode};
use crate::quantile::{Percentile, percentile};

use super::*;

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

    /// Adds another window's counts (saturating: merged frames are another process's
    /// numbers).
    pub fn add(&mut self, other: &Counts) {
        self.requests = self.requests.saturating_add(other.requests);
        for (k, v) in &other.responses {
            let n = self.responses.entry(k.clone()).or_default();
            *n = n.saturating_add(*v);
        }
        for (k, v) in &other.errors {
            let n = self.errors.entry(k.clone()).or_default();
            *n = n.saturating_add(*v);
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
    /// Of `late`, those that waited because the target held every connection the run
    /// may open (`max_connections`): the target's latency. The rest were late while a
    /// connection was free: the generator's. 0 in frames written before the split.
    #[serde(default)]
    pub late_held: u64,
    /// Of `late`, those that started more than 100 ms late while a connection was free:
    /// the generator's ([`crate::stress::BEHIND_BOUND_MS`]). The rest of `late` is
    /// scheduling jitter under that bound. 0 in frames written before the split.
    #[serde(default)]
    pub late_behind: u64,
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
    /// The trace ids of the second's slowest and first failed requests (measured
    /// seconds only, and only requests sent with the run's own trace context).
    #[serde(default, skip_serializing_if = "Exemplars::is_empty")]
    pub exemplars: Exemplars,
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

impl LatencySummary {
    /// The named percentile, or one marked insufficient when no response was measured.
    pub fn percentile(&self, name: &str) -> Percentile {
        self.percentiles
            .get(name)
            .cloned()
            .unwrap_or(Percentile::Insufficient {
                insufficient: "no responses".to_string(),
                samples: 0,
            })
    }
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
    /// The measure's slowest seconds by their p99 (at most [`SLOW_SECONDS`], slowest
    /// first), with their exemplars: the trace ids behind the tail.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded_slow_seconds"
    )]
    pub slow_seconds: Vec<SlowSecond>,
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
        // Under a second (a short replay at speed), a rate per second is an extrapolation:
        // say how many requests took how long instead.
        let brief = self.measured_seconds < 1.0;
        let model = match (self.model, self.intended_rate) {
            (Model::Open, Some(rate)) if !brief => format!("open model, {rate:.1}/s intended"),
            (Model::Open, _) => "open model".to_string(),
            (Model::Closed, _) => format!("closed model, {} connections", self.connections),
        };
        let achieved = if brief {
            format!(
                "{} requests over {:.0} ms (under a second: no rate per second)",
                self.counts.requests,
                self.measured_seconds * 1000.0
            )
        } else {
            format!(
                "{:.1}/s achieved over {:.1} s",
                self.achieved_rate, self.measured_seconds
            )
        };
        let mut lines = vec![
            format!("{model}, {achieved}"),
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

impl LoadResult {
    /// The notes every load result carries, from its own figures: whether the open
    /// model's schedule was kept, and the warm-up that ran.
    pub fn standard_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.model == Model::Open {
            if self.dropped > 0 || self.late > 0 {
                notes.push(format!(
                    "the schedule was not kept: {} of {} requests started more than {} ms late and {} were dropped (due a whole timeout before a connection was free); more connections, a target that keeps up or a less busy engine would keep it",
                    self.late, self.intended, self.late_tolerance_ms, self.dropped,
                ));
            } else {
                notes.push(format!(
                    "the schedule was kept: {} of {} requests sent, none late by more than {} ms",
                    self.sent, self.intended, self.late_tolerance_ms
                ));
            }
        }
        if self.warmup.requests > 0 {
            notes.push(format!(
                "warm-up of {} requests run and discarded",
                self.warmup.requests
            ));
        }
        notes
    }

    /// The run's status and its reason from the result: cancelled, unreachable (nothing
    /// sent got an answer), aborted, a threshold failed, or passed.
    pub fn verdict(&self, cancelled: bool) -> (RunStatus, Option<String>) {
        let answered: u64 = self.counts.responses.values().sum();
        if cancelled {
            return (RunStatus::Cancelled, Some("cancelled".to_string()));
        }
        if self.counts.requests > 0 && answered == 0 {
            let kinds: Vec<String> = self
                .counts
                .errors
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            return (
                RunStatus::Error,
                Some(format!(
                    "target unreachable: no request got an answer ({})",
                    kinds.join(", ")
                )),
            );
        }
        if let Some(aborted) = &self.aborted {
            return (RunStatus::Failed, Some(aborted.clone()));
        }
        match self.thresholds.iter().find(|t| !t.passed) {
            Some(t) => (
                RunStatus::Failed,
                Some(format!("threshold {} failed: {}", t.threshold, t.observed)),
            ),
            None => (RunStatus::Passed, None),
        }
    }
}

/// Every threshold judged on the measure; one the measure cannot judge (too few
/// samples) does not pass.
pub fn judge_all(
    thresholds: &[Threshold],
    latency: &Histogram<u64>,
    counts: &Counts,
) -> Vec<ThresholdResult> {
    thresholds
        .iter()
        .map(|t| {
            let (verdict, observed) = judge(t, latency, counts);
            ThresholdResult {
                threshold: t.expression.clone(),
                passed: verdict.unwrap_or(false),
                observed,
            }
        })
        .collect()
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

/// The first of `thresholds` the measure crosses (judged `false`; one it cannot judge yet
/// is not crossed), with what was observed: what `abort_on_fail` stops a run at.
pub fn first_crossed<'a>(
    thresholds: &'a [Threshold],
    latency: &Histogram<u64>,
    counts: &Counts,
) -> Option<(&'a Threshold, String)> {
    thresholds
        .iter()
        .find_map(|t| match judge(t, latency, counts) {
            (Some(false), observed) => Some((t, observed)),
            _ => None,
        })
}

/// The result's `aborted`: `threshold p99 < 5ms crossed after 3 s (7.100 ms): aborted`.
pub fn abort_reason(threshold: &Threshold, after_s: u64, observed: &str) -> String {
    format!("threshold {threshold} crossed after {after_s} s ({observed}): aborted")
}
