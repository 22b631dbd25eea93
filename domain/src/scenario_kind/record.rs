//! The record of a scenario run (the run's result) and its dry-run form (the same lines
//! with no results), as JSON and as the text lines a report quotes.
//!
//! The record never holds a response body or a header value; request bodies appear only
//! in the op lines, as the spec states them, because a replay must send them unchanged.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use hdrhistogram::Histogram;

use crate::histogram::{HistogramError, latency_histogram};
use crate::load::{Counts, status_class};
use crate::quantile::{Percentile, percentile};

use super::base_url::op_url;
use super::command::replay_command;
use super::identity::{Identity, IdentityRecord};
use super::plan::{SeqRange, layout, load_range, warmup_range};
use super::spec::ScenarioSpec;

/// The confidence level of every quoted interval.
pub const LEVEL: f64 = 0.95;

/// RFC 3339 in UTC, to the second: `2026-08-17T10:04:12Z`.
pub fn utc_seconds(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmupRecord {
    pub per_op: u32,
    pub requests: u64,
    /// Always true: the warm-up is left out of every quoted number.
    pub discarded: bool,
    pub seq: Option<SeqRange>,
}

impl WarmupRecord {
    fn new(spec: &ScenarioSpec) -> WarmupRecord {
        WarmupRecord {
            per_op: spec.warmup,
            requests: spec.warmup_requests(),
            discarded: true,
            seq: warmup_range(spec),
        }
    }

    pub fn line(&self) -> String {
        match self.seq {
            None => "Warmup: none".to_string(),
            Some(seq) => format!(
                "Warmup: {} requests per operation (discarded; seq {seq})",
                self.per_op
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadRecord {
    /// Load requests of each op, in op order.
    pub per_op: Vec<u32>,
    pub requests: u64,
    pub concurrency: u32,
    /// `sequential` or `concurrency N`: the level changes every latency number.
    pub mode: String,
    pub seq: SeqRange,
}

impl LoadRecord {
    fn new(spec: &ScenarioSpec) -> LoadRecord {
        LoadRecord {
            per_op: (0..spec.ops.len()).map(|i| spec.op_count(i)).collect(),
            requests: spec.load_requests(),
            concurrency: spec.concurrency,
            mode: if spec.concurrency == 1 {
                "sequential".to_string()
            } else {
                format!("concurrency {}", spec.concurrency)
            },
            seq: load_range(spec),
        }
    }

    pub fn line(&self) -> String {
        let counts = match self.per_op.split_first() {
            Some((first, rest)) if rest.iter().all(|c| c == first) => first.to_string(),
            _ => self
                .per_op
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        };
        format!(
            "Load: {counts} requests per operation, {} (seq {})",
            self.mode, self.seq
        )
    }
}

/// One op as planned: what the dry run lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedOp {
    pub op: usize,
    pub method: String,
    pub path: String,
    pub url: String,
    pub body: Option<String>,
    pub count: u32,
    pub seq: SeqRange,
    pub warmup_seq: Option<SeqRange>,
    /// `METHOD URL [BODY] xN (seq a-b)`.
    pub line: String,
}

fn planned_ops(spec: &ScenarioSpec, base_url: &str) -> Vec<PlannedOp> {
    layout(spec)
        .into_iter()
        .map(|seqs| {
            let op = &spec.ops[seqs.op];
            let url = op_url(base_url, &op.path);
            let count = spec.op_count(seqs.op);
            let body = op
                .body
                .as_deref()
                .map(|b| format!(" {b}"))
                .unwrap_or_default();
            PlannedOp {
                op: seqs.op,
                method: op.method.clone(),
                path: op.path.clone(),
                line: format!("{} {url}{body} x{count} (seq {})", op.method, seqs.load),
                url,
                body: op.body.clone(),
                count,
                seq: seqs.load,
                warmup_seq: seqs.warmup,
            }
        })
        .collect()
}

/// The lines a record and its dry run share.
fn head_lines(
    scenario: &str,
    slug: &str,
    base_url: &str,
    identity: &IdentityRecord,
    warmup: &WarmupRecord,
    load: &LoadRecord,
) -> Vec<String> {
    vec![
        format!("Scenario: {scenario}"),
        format!("Base URL: {base_url}"),
        identity.line(slug),
        warmup.line(),
        load.line(),
    ]
}

/// The plan of a run and the command that runs it, with nothing sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DryRun {
    pub dry_run: bool,
    pub scenario: String,
    pub slug: String,
    pub base_url: String,
    pub identity: IdentityRecord,
    pub warmup: WarmupRecord,
    pub load: LoadRecord,
    /// Warm-up included.
    pub total_requests: u64,
    pub command: String,
    pub ops: Vec<PlannedOp>,
}

impl DryRun {
    pub fn new(spec: &ScenarioSpec, base_url: &str) -> DryRun {
        DryRun {
            dry_run: true,
            scenario: spec.name.clone(),
            slug: spec.slug.clone(),
            base_url: base_url.to_string(),
            identity: Identity::new(spec).record(),
            warmup: WarmupRecord::new(spec),
            load: LoadRecord::new(spec),
            total_requests: spec.total_requests(),
            command: replay_command(base_url, spec),
            ops: planned_ops(spec, base_url),
        }
    }

    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec!["Dry run: nothing sent".to_string()];
        lines.extend(head_lines(
            &self.scenario,
            &self.slug,
            &self.base_url,
            &self.identity,
            &self.warmup,
            &self.load,
        ));
        lines.push(format!(
            "Total: {} requests (warm-up included)",
            self.total_requests
        ));
        lines.push("Commands:".to_string());
        lines.push(self.command.clone());
        lines.push("Requests:".to_string());
        lines.extend(self.ops.iter().map(|op| op.line.clone()));
        lines
    }
}

/// One request as it went: no body, no header value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub seq: u64,
    pub op: usize,
    pub method: String,
    pub path: String,
    pub warmup: bool,
    /// Its start, in ms since the first request's start.
    pub offset_ms: f64,
    /// The response's status; also set when the body then broke off (see `error`).
    pub status: Option<u16>,
    /// Why there is no complete response: `timeout`, `connect`, `reset`, `protocol`,
    /// `cancelled`.
    pub error: Option<String>,
    pub duration_ms: f64,
}

impl RequestRecord {
    /// A complete response, whatever its status.
    pub fn answered(&self) -> bool {
        self.status.is_some() && self.error.is_none()
    }
}

/// Percentiles of an op's load latency in microseconds, each with its interval or
/// "insufficient samples (need N)".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub p50: Percentile,
    pub p95: Percentile,
    pub p99: Percentile,
}

/// One op's results: its load requests by status and error kind, and their latency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpRecord {
    pub op: usize,
    pub method: String,
    pub path: String,
    pub url: String,
    pub body: Option<String>,
    pub count: u32,
    pub seq: SeqRange,
    pub warmup_seq: Option<SeqRange>,
    /// Complete responses of the load, by status.
    pub by_status: BTreeMap<u16, u64>,
    /// Load requests with no complete response, by kind.
    pub errors: BTreeMap<String, u64>,
    /// The same for the (discarded) warm-up: failures are data.
    pub warmup_by_status: BTreeMap<u16, u64>,
    pub warmup_errors: BTreeMap<String, u64>,
    /// Of the load requests with a complete response.
    pub latency_us: Latency,
    /// `METHOD URL [BODY] xN (seq a-b) -> 200:28, 503:1, error:1`.
    pub line: String,
}

/// The result of a scenario run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioRecord {
    pub scenario: String,
    pub slug: String,
    pub base_url: String,
    pub identity: IdentityRecord,
    pub warmup: WarmupRecord,
    pub load: LoadRecord,
    /// UTC, RFC 3339 to the second: the observation window.
    pub started: String,
    pub ended: String,
    /// Replays this scenario unchanged.
    pub command: String,
    pub ops: Vec<OpRecord>,
    /// Every request sent, by sequence number.
    pub requests: Vec<RequestRecord>,
}

impl ScenarioRecord {
    /// The record of what was sent; `requests` may stop short of the plan (cancelled).
    pub fn build(
        spec: &ScenarioSpec,
        base_url: &str,
        started: SystemTime,
        ended: SystemTime,
        mut requests: Vec<RequestRecord>,
    ) -> Result<ScenarioRecord, HistogramError> {
        requests.sort_by_key(|r| r.seq);
        let ops = planned_ops(spec, base_url)
            .into_iter()
            .map(|planned| op_record(planned, &requests))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ScenarioRecord {
            scenario: spec.name.clone(),
            slug: spec.slug.clone(),
            base_url: base_url.to_string(),
            identity: Identity::new(spec).record(),
            warmup: WarmupRecord::new(spec),
            load: LoadRecord::new(spec),
            started: utc_seconds(started),
            ended: utc_seconds(ended),
            command: replay_command(base_url, spec),
            ops,
            requests,
        })
    }

    /// The record as a controller stores it: request bodies are never stored in a run, so
    /// the op lines say a body was sent without quoting it, and the command replays the
    /// stored scenario version (which holds the bodies) instead of inlining them.
    pub fn without_bodies(mut self, command: String) -> ScenarioRecord {
        for op in &mut self.ops {
            if let Some(body) = op.body.take() {
                op.line =
                    op.line
                        .replacen(&format!(" {body} x"), " [body sent, not recorded] x", 1);
            }
        }
        self.command = command;
        self
    }

    pub fn lines(&self) -> Vec<String> {
        let mut lines = head_lines(
            &self.scenario,
            &self.slug,
            &self.base_url,
            &self.identity,
            &self.warmup,
            &self.load,
        );
        lines.push(format!("Started (UTC): {}", self.started));
        lines.push(format!("Ended (UTC): {}", self.ended));
        lines.push("Commands:".to_string());
        lines.push(self.command.clone());
        lines.push("Requests:".to_string());
        lines.extend(self.ops.iter().map(|op| op.line.clone()));
        lines.push(format!(
            "Latency (load requests with a complete response, {:.0}% intervals):",
            LEVEL * 100.0
        ));
        lines.extend(self.ops.iter().map(latency_line));
        lines
    }
}

/// The latencies of op `op`'s load requests that had a whole response, in microseconds:
/// what the op's percentiles are of, and what compare judges.
pub fn op_latency_histogram(
    requests: &[RequestRecord],
    op: usize,
) -> Result<Histogram<u64>, HistogramError> {
    let mut histogram = latency_histogram()?;
    for r in requests {
        if r.op == op && !r.warmup && r.error.is_none() && r.status.is_some() {
            // Whole microseconds, at least 1: the histogram's range starts there.
            let micros = (r.duration_ms * 1000.0).round().max(1.0) as u64;
            histogram.saturating_record(micros);
        }
    }
    Ok(histogram)
}

/// An op's load requests counted as a load result counts them (status classes, and the
/// kinds of requests with no response), so its error rate reads alike.
pub fn op_counts(by_status: &BTreeMap<u16, u64>, errors: &BTreeMap<String, u64>) -> Counts {
    let mut counts = Counts::default();
    for (status, n) in by_status {
        *counts
            .responses
            .entry(status_class(*status).to_string())
            .or_default() += n;
        counts.requests += n;
    }
    for (kind, n) in errors {
        *counts.errors.entry(kind.clone()).or_default() += n;
        counts.requests += n;
    }
    counts
}

fn op_record(planned: PlannedOp, requests: &[RequestRecord]) -> Result<OpRecord, HistogramError> {
    let mut by_status = BTreeMap::new();
    let mut errors = BTreeMap::new();
    let mut warmup_by_status = BTreeMap::new();
    let mut warmup_errors = BTreeMap::new();
    let histogram = op_latency_histogram(requests, planned.op)?;
    let mut load_seen = 0u64;
    for r in requests.iter().filter(|r| r.op == planned.op) {
        let (statuses, failures) = if r.warmup {
            (&mut warmup_by_status, &mut warmup_errors)
        } else {
            load_seen += 1;
            (&mut by_status, &mut errors)
        };
        match (&r.error, r.status) {
            (None, Some(status)) => {
                *statuses.entry(status).or_insert(0) += 1;
            }
            (error, _) => {
                let kind = error.clone().unwrap_or_else(|| "unknown".to_string());
                *failures.entry(kind).or_insert(0) += 1;
            }
        }
    }
    let mut results: Vec<String> = by_status.iter().map(|(s, n)| format!("{s}:{n}")).collect();
    let failed: u64 = errors.values().sum();
    if failed > 0 {
        results.push(format!("error:{failed}"));
    }
    let not_sent = u64::from(planned.count).saturating_sub(load_seen);
    if not_sent > 0 {
        results.push(format!("not sent:{not_sent}"));
    }
    let line = format!("{} -> {}", planned.line, results.join(", "));
    Ok(OpRecord {
        latency_us: Latency {
            p50: percentile(&histogram, 0.5, LEVEL),
            p95: percentile(&histogram, 0.95, LEVEL),
            p99: percentile(&histogram, 0.99, LEVEL),
        },
        op: planned.op,
        method: planned.method,
        path: planned.path,
        url: planned.url,
        body: planned.body,
        count: planned.count,
        seq: planned.seq,
        warmup_seq: planned.warmup_seq,
        by_status,
        errors,
        warmup_by_status,
        warmup_errors,
        line,
    })
}

/// `GET /api/users p50 1.234 ms [1.100-1.400], p95 ..., p99 insufficient samples (need 368)`.
fn latency_line(op: &OpRecord) -> String {
    let show = |name: &str, p: &Percentile| match p {
        Percentile::Estimate {
            value, low, high, ..
        } => format!("{name} {} ms [{}-{}]", ms(*value), ms(*low), ms(*high)),
        Percentile::Insufficient { insufficient, .. } => format!("{name} {insufficient}"),
    };
    let samples = match &op.latency_us.p50 {
        Percentile::Estimate { samples, .. } | Percentile::Insufficient { samples, .. } => *samples,
    };
    format!(
        "{} {} ({samples} samples): {}, {}, {}",
        op.method,
        op.path,
        show("p50", &op.latency_us.p50),
        show("p95", &op.latency_us.p95),
        show("p99", &op.latency_us.p99)
    )
}

fn ms(micros: u64) -> String {
    format!("{:.3}", micros as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::scenario_kind::plan::plan;

    fn spec() -> ScenarioSpec {
        ScenarioSpec::from_json(&json!({
            "slug": "abc",
            "name": "orders before the fix",
            "ops": ["GET /api/users", "POST /api/orders 10 {\"sku\": \"A1\"}"],
            "count": 40,
            "warmup": 2,
        }))
        .expect("valid")
    }

    const BASE: &str = "http://127.0.0.1:8080";

    /// Every planned request answered 200 in `1 + seq % 7` ms, except the listed ones.
    fn requests(
        spec: &ScenarioSpec,
        outcome: impl Fn(u64) -> (Option<u16>, Option<&'static str>),
    ) -> Vec<RequestRecord> {
        plan(spec)
            .into_iter()
            .map(|p| {
                let (status, error) = outcome(p.seq);
                RequestRecord {
                    seq: p.seq,
                    op: p.op,
                    method: spec.ops[p.op].method.clone(),
                    path: spec.ops[p.op].path.clone(),
                    warmup: p.warmup,
                    offset_ms: p.seq as f64,
                    status,
                    error: error.map(str::to_string),
                    duration_ms: 1.0 + (p.seq % 7) as f64,
                }
            })
            .collect()
    }

    #[test]
    fn the_dry_run_states_the_plan_and_the_command() {
        let dry = DryRun::new(&spec(), BASE);
        let lines = dry.lines();
        assert_eq!(lines[0], "Dry run: nothing sent");
        assert_eq!(lines[1], "Scenario: orders before the fix");
        assert_eq!(lines[2], "Base URL: http://127.0.0.1:8080");
        assert!(lines[3].starts_with("Identity: User-Agent \"iohr-scenario/abc\""));
        assert_eq!(
            lines[4],
            "Warmup: 2 requests per operation (discarded; seq 1-4)"
        );
        assert_eq!(
            lines[5],
            "Load: 40, 10 requests per operation, sequential (seq 5-54)"
        );
        assert_eq!(lines[6], "Total: 54 requests (warm-up included)");
        assert_eq!(lines[7], "Commands:");
        assert_eq!(lines[8], dry.command);
        assert_eq!(
            &lines[9..],
            [
                "Requests:",
                "GET http://127.0.0.1:8080/api/users x40 (seq 5-44)",
                "POST http://127.0.0.1:8080/api/orders {\"sku\": \"A1\"} x10 (seq 45-54)",
            ]
        );
        let value = serde_json::to_value(&dry).expect("json");
        assert_eq!(value["dry_run"], true);
        assert_eq!(value["load"]["mode"], "sequential");
        assert_eq!(value["warmup"]["seq"], json!({"first": 1, "last": 4}));
        assert_eq!(value["identity"]["run8"], "ba7816bf");
    }

    #[test]
    fn the_record_counts_statuses_and_errors_and_quotes_only_what_it_can() {
        let spec = spec();
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_786_960_000);
        let requests = requests(&spec, |seq| match seq {
            2 => (None, Some("reset")),
            10 => (Some(503), None),
            47 => (None, Some("timeout")),
            48 => (Some(200), Some("reset")),
            _ => (Some(if seq > 44 { 201 } else { 200 }), None),
        });
        let record = ScenarioRecord::build(&spec, BASE, at, at + Duration::from_secs(3), requests)
            .expect("record");
        assert_eq!(record.started, "2026-08-17T09:46:40Z");
        assert_eq!(record.ended, "2026-08-17T09:46:43Z");
        assert_eq!(
            record.ops[0].line,
            "GET http://127.0.0.1:8080/api/users x40 (seq 5-44) -> 200:39, 503:1"
        );
        assert_eq!(
            record.ops[1].line,
            "POST http://127.0.0.1:8080/api/orders {\"sku\": \"A1\"} x10 (seq 45-54) -> 201:8, error:2"
        );
        assert_eq!(
            record.ops[1].errors,
            BTreeMap::from([("reset".into(), 1), ("timeout".into(), 1)])
        );
        assert_eq!(
            record.ops[0].warmup_errors,
            BTreeMap::from([("reset".into(), 1)])
        );
        let stored = record
            .clone()
            .without_bodies("iohr reliability run ...".into());
        assert_eq!(
            stored.ops[1].line,
            "POST http://127.0.0.1:8080/api/orders [body sent, not recorded] x10 (seq 45-54) -> 201:8, error:2"
        );
        assert_eq!(stored.ops[1].body, None);
        assert_eq!(stored.command, "iohr reliability run ...");
        let text = serde_json::to_string(&stored).expect("json");
        assert!(!text.contains("A1"), "no body anywhere: {text}");
        assert_eq!(record.ops[0].warmup_by_status, BTreeMap::from([(200, 1)]));

        match &record.ops[0].latency_us.p50 {
            Percentile::Estimate {
                value,
                low,
                high,
                samples,
                ..
            } => {
                assert_eq!(*samples, 40);
                assert!(low <= value && value <= high, "{low} {value} {high}");
            }
            other => panic!("40 samples quote a p50: {other:?}"),
        }
        match &record.ops[1].latency_us.p99 {
            Percentile::Insufficient {
                insufficient,
                samples,
            } => {
                assert_eq!(*samples, 8);
                assert_eq!(insufficient, "insufficient samples (need 368)");
            }
            other => panic!("8 samples cannot quote a p99: {other:?}"),
        }

        let lines = record.lines();
        assert_eq!(lines[5], "Started (UTC): 2026-08-17T09:46:40Z");
        assert_eq!(lines[6], "Ended (UTC): 2026-08-17T09:46:43Z");
        assert_eq!(lines[7], "Commands:");
        assert_eq!(lines[8], record.command);
        assert_eq!(lines[9], "Requests:");
        assert_eq!(
            lines[12],
            "Latency (load requests with a complete response, 95% intervals):"
        );
        assert!(
            lines[14].starts_with("POST /api/orders (8 samples): p50 "),
            "{}",
            lines[14]
        );
        assert!(
            lines[14].ends_with("p99 insufficient samples (need 368)"),
            "{}",
            lines[14]
        );

        let json = serde_json::to_value(&record).expect("json");
        assert_eq!(json["ops"][0]["by_status"], json!({"200": 39, "503": 1}));
        assert_eq!(json["requests"][1]["error"], "reset");
        assert_eq!(json["requests"][1]["status"], json!(null));
        let back: ScenarioRecord = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, record);
    }

    #[test]
    fn a_short_run_says_what_was_not_sent() {
        let spec = spec();
        let at = SystemTime::UNIX_EPOCH;
        let mut requests = requests(&spec, |_| (Some(200), None));
        requests.truncate(10);
        let record = ScenarioRecord::build(&spec, BASE, at, at, requests).expect("record");
        assert_eq!(
            record.ops[0].line,
            "GET http://127.0.0.1:8080/api/users x40 (seq 5-44) -> 200:6, not sent:34"
        );
        assert_eq!(
            record.ops[1].line,
            "POST http://127.0.0.1:8080/api/orders {\"sku\": \"A1\"} x10 (seq 45-54) -> not sent:10"
        );
    }
}
