//! The `replay` kind: the requests of an earlier run (a scenario run's request log) or of
//! an uploaded log in the same format, sent again with their original spacing,
//! optionally sped up, through the load engine. Two replays of the same recorded traffic
//! are two measures of the same thing, so they can be compared.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::load::{
    DEFAULT_OPEN_CONNECTIONS, HttpVersion, LoadPlan, MAX_CONNECTIONS, MAX_DURATION, MAX_OPERATIONS,
    Model, Operation, WarmupPlan, read_thresholds, read_timeout,
};
use crate::request::{SpecError, parse_spec, spec_error, validate_request};
use crate::scenario_kind::ScenarioSpec;

/// The most requests one replay sends.
pub const MAX_REQUESTS: usize = 100_000;
/// The longest a log may span, recorded or replayed (in ms): a load run's 24 h.
pub const MAX_SPAN_MS: f64 = MAX_DURATION.as_millis() as f64;

/// `ms` milliseconds, refused at `field` when no `Duration` holds them (never on a
/// range-checked value; `Duration::from_secs_f64` would panic instead).
fn millis(field: &str, ms: f64) -> Result<Duration, SpecError> {
    Duration::try_from_secs_f64(ms / 1000.0)
        .map_err(|e| spec_error(field, format!("{ms} ms is not a time span: {e}")))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplaySpec {
    /// An earlier scenario run of the same account: the controller fills `operations`
    /// and `requests` from its spec and record when the run is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_run: Option<String>,
    /// What each logged request's `op` index sends. When left out, each distinct
    /// `METHOD PATH` of the log becomes an operation (with no body).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operations: Vec<Operation>,
    /// The log: a scenario record's `requests` as they are (extra fields are ignored).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<LoggedRequest>,
    /// Warm-up requests of the log are left out unless this is set.
    #[serde(default)]
    pub include_warmup: bool,
    /// 2 sends twice as fast: every gap is halved.
    #[serde(default = "default_speed")]
    pub speed: f64,
    #[serde(default)]
    pub connections: Option<u32>,
    #[serde(default)]
    pub timeout: Option<String>,
    #[serde(default)]
    pub http: HttpVersion,
    #[serde(default)]
    pub thresholds: Vec<String>,
    #[serde(default)]
    pub abort_on_fail: bool,
    /// In a run split over agents: what losing a share's agent does to the run.
    #[serde(default)]
    pub on_agent_lost: crate::load::AgentLoss,
    /// The share of requests sent with the W3C traceparent's sampled flag set (0 to 1,
    /// default 0.01); every request carries trace context ([`crate::trace`]).
    #[serde(
        default = "crate::trace::default_sample",
        skip_serializing_if = "crate::trace::is_default_sample"
    )]
    pub trace_sample: f64,
}

fn default_speed() -> f64 {
    1.0
}

/// One request of a log, as a scenario record writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggedRequest {
    /// When it started, since the first request of the log.
    pub offset_ms: f64,
    /// The index of its operation in `operations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default)]
    pub warmup: bool,
}

impl ReplaySpec {
    /// Fills `operations` and `requests` from an earlier scenario run: its spec's ops (with
    /// their bodies, byte for byte, and its `${env:NAME}` headers) and its record's request
    /// log. What the caller set (speed, connections, thresholds...) is kept.
    pub fn resolve_from_scenario(
        mut self,
        scenario: &ScenarioSpec,
        log: Vec<LoggedRequest>,
    ) -> ReplaySpec {
        let shared_name = |i: usize| {
            let op = &scenario.ops[i];
            scenario
                .ops
                .iter()
                .filter(|o| o.method == op.method && o.path == op.path)
                .count()
                > 1
        };
        self.operations = scenario
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| {
                let mut headers = scenario.headers.clone();
                if op.body.is_some() {
                    headers.insert("Content-Type".into(), "application/json".into());
                }
                Operation {
                    // Names never carry a body; two ops on one route get their number.
                    name: shared_name(i).then(|| format!("{} {} #{}", op.method, op.path, i + 1)),
                    method: op.method.clone(),
                    path: op.path.clone(),
                    headers,
                    // A string goes out as it is: the same bytes the scenario sent.
                    body: op.body.clone().map(serde_json::Value::String),
                    weight: 1,
                }
            })
            .collect();
        self.requests = log;
        self
    }

    pub fn from_json(value: &serde_json::Value) -> Result<ReplaySpec, SpecError> {
        parse_spec("spec", value)
    }

    /// Validates the spec and reads it into a load plan whose arrivals are the log's.
    pub fn plan(&self) -> Result<LoadPlan, SpecError> {
        if self.from_run.is_some() && self.requests.is_empty() {
            return Err(spec_error(
                "spec.from_run",
                "is resolved by the controller when the run is created; to run a log locally, give its requests",
            ));
        }
        if !(self.speed.is_finite() && self.speed > 0.0 && self.speed <= 1000.0) {
            return Err(spec_error("spec.speed", "must be above 0 and at most 1000"));
        }
        let mut operations = self.operations.clone();
        // Distinct `METHOD PATH` pairs become operations when none are given.
        let mut derived: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut arrivals = Vec::new();
        let kept = self
            .requests
            .iter()
            .enumerate()
            .filter(|(_, r)| self.include_warmup || !r.warmup);
        let mut first: Option<f64> = None;
        for (i, logged) in kept {
            let field = format!("spec.requests[{i}]");
            if !(logged.offset_ms.is_finite() && logged.offset_ms >= 0.0) {
                return Err(spec_error(
                    format!("{field}.offset_ms"),
                    "must be a time in ms, not negative",
                ));
            }
            // A log spans at most what a load run may last, as recorded and as replayed.
            if logged.offset_ms > MAX_SPAN_MS {
                return Err(spec_error(
                    format!("{field}.offset_ms"),
                    format!("must be at most {MAX_SPAN_MS} (24h after the log's start)"),
                ));
            }
            let op = match (logged.op, &logged.method, &logged.path) {
                (Some(op), _, _) if !self.operations.is_empty() => {
                    if op >= self.operations.len() {
                        return Err(spec_error(
                            format!("{field}.op"),
                            format!("there are {} operations", self.operations.len()),
                        ));
                    }
                    op
                }
                (_, Some(method), Some(path)) if self.operations.is_empty() => {
                    let key = (method.clone(), path.clone());
                    match derived.get(&key) {
                        Some(op) => *op,
                        None => {
                            let op = operations.len();
                            operations.push(Operation {
                                name: None,
                                method: method.clone(),
                                path: path.clone(),
                                headers: BTreeMap::new(),
                                body: None,
                                weight: 1,
                            });
                            derived.insert(key, op);
                            op
                        }
                    }
                }
                _ => {
                    return Err(spec_error(
                        field,
                        "needs `op` (with operations) or `method` and `path` (without)",
                    ));
                }
            };
            let base = *first.get_or_insert(logged.offset_ms);
            let offset = (logged.offset_ms - base).max(0.0) / self.speed;
            if offset > MAX_SPAN_MS {
                return Err(spec_error(
                    "spec.speed",
                    format!(
                        "replayed at this speed, {field} would start more than 24h after the first"
                    ),
                ));
            }
            arrivals.push((millis(&format!("{field}.offset_ms"), offset)?, op));
        }
        if arrivals.is_empty() {
            return Err(spec_error(
                "spec.requests",
                "the log has no request to replay",
            ));
        }
        if arrivals.len() > MAX_REQUESTS {
            return Err(spec_error(
                "spec.requests",
                format!("at most {MAX_REQUESTS} requests"),
            ));
        }
        if operations.len() > MAX_OPERATIONS {
            return Err(spec_error(
                "spec.operations",
                format!("at most {MAX_OPERATIONS} distinct operations"),
            ));
        }
        crate::load::unique_names(&operations)?;
        for (i, op) in operations.iter().enumerate() {
            validate_request(
                &format!("spec.operations[{i}]"),
                &op.method,
                &op.path,
                &op.headers,
            )?;
        }
        // The log's order is its time order; a log out of order is replayed sorted.
        arrivals.sort_by_key(|(offset, _)| *offset);
        let connections = self.connections.unwrap_or(DEFAULT_OPEN_CONNECTIONS);
        if connections == 0 || connections > MAX_CONNECTIONS {
            return Err(spec_error(
                "spec.connections",
                format!("must be between 1 and {MAX_CONNECTIONS}"),
            ));
        }
        let timeout = read_timeout(self.timeout.as_deref())?;
        let thresholds = read_thresholds(&self.thresholds)?;
        crate::trace::validate_sample("spec.trace_sample", self.trace_sample)?;
        // n requests span n gaps, so n / duration is the log's own mean rate.
        let n = arrivals.len() as f64;
        let last = arrivals.last().map_or(0.0, |(d, _)| d.as_secs_f64());
        let duration = if arrivals.len() > 1 {
            millis("spec.requests", last * 1000.0 * n / (n - 1.0))?.max(Duration::from_millis(1))
        } else {
            Duration::from_secs(1)
        };
        Ok(LoadPlan {
            operations,
            model: Model::Open,
            start_rate: 0.0,
            stages: Vec::new(),
            connections,
            max_connections: crate::load::default_max_connections(connections),
            duration,
            warmup: WarmupPlan::None,
            timeout,
            http: self.http,
            streams: 1,
            thresholds,
            abort_on_fail: self.abort_on_fail,
            recorded: Some(arrivals),
            share: crate::load::Share::WHOLE,
            trace_sample: self.trace_sample,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_scenario_log_replays_with_its_spacing_sped_up() {
        let spec = ReplaySpec::from_json(&json!({
            "requests": [
                {"seq": 1, "op": 0, "method": "GET", "path": "/", "warmup": true, "offset_ms": 0.0, "status": 200, "duration_ms": 1.0},
                {"seq": 2, "op": 0, "method": "GET", "path": "/", "warmup": false, "offset_ms": 100.0, "status": 200, "duration_ms": 1.0},
                {"seq": 3, "op": 1, "method": "POST", "path": "/orders", "warmup": false, "offset_ms": 300.0, "status": 201, "duration_ms": 1.0},
                {"seq": 4, "op": 0, "method": "GET", "path": "/", "warmup": false, "offset_ms": 700.0, "status": 200, "duration_ms": 1.0}
            ],
            "speed": 2
        }))
        .expect("a scenario log is accepted as it is");
        let plan = spec.plan().expect("valid");
        let recorded = plan.recorded.clone().expect("recorded");
        let ms: Vec<(u128, usize)> = recorded
            .iter()
            .map(|(d, op)| (d.as_millis(), *op))
            .collect();
        assert_eq!(
            ms,
            vec![(0, 0), (100, 1), (300, 0)],
            "warm-up left out, gaps halved"
        );
        assert_eq!(plan.operations.len(), 2);
        assert_eq!(plan.operations[1].method, "POST");
        assert_eq!(plan.expected_requests(), Some(3));
    }

    #[test]
    fn bad_logs_say_what_to_fix() {
        let cases = [
            (json!({"requests": []}), "spec.requests"),
            (json!({"requests": [{"offset_ms": 0}]}), "spec.requests[0]"),
            (
                json!({"requests": [{"offset_ms": -1, "method": "GET", "path": "/"}]}),
                "spec.requests[0].offset_ms",
            ),
            (
                json!({"requests": [{"offset_ms": 0, "method": "GET", "path": "/"}], "speed": 0}),
                "spec.speed",
            ),
            (
                json!({"operations": [{"path": "/"}], "requests": [{"offset_ms": 0, "op": 3}]}),
                "spec.requests[0].op",
            ),
            (json!({"from_run": "r1"}), "spec.from_run"),
            (
                json!({"requests": [{"offset_ms": 0, "method": "get", "path": "/"}]}),
                "spec.operations[0].method",
            ),
        ];
        for (value, field) in cases {
            let err = ReplaySpec::from_json(&value)
                .and_then(|s| s.plan())
                .expect_err(&value.to_string());
            assert_eq!(err.field, field, "{value}: {err}");
        }
    }
}
