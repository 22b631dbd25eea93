//! What `iohr-agent exec --dry-run` says of a `load`, `replay`, `checks` or `capacity`
//! plan: the plan a run would execute ([`execute::plan`](crate::execute::plan) reads the
//! spec into it exactly as for a run), in words and as one JSON object, with nothing sent.
//! Scenario and faults runs have dry runs of their own (`scenario_kind::DryRun`, the
//! faults lifecycle).

use std::time::Duration;

use iohr_domain::RunKind;
use iohr_domain::capacity::{CapacityPlan, Slo, rate_text};
use iohr_domain::checks::ChecksSpec;
use iohr_domain::load::{HttpVersion, LoadPlan, Model, Operation, WarmupPlan};
use iohr_domain::text::decimal;
use serde::Serialize;

use crate::execute::Plan;
use crate::kinds::headers::resolve_headers;
use crate::load::{self, TargetOptions};

/// A plan described, not run.
#[derive(Debug, Clone, Serialize)]
pub struct DryRun {
    /// Always true: tells this object from a run's outcome.
    pub dry_run: bool,
    pub kind: RunKind,
    pub target: String,
    pub plan: Planned,
}

/// The plan of each kind, in the terms of its spec.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Planned {
    Load(LoadDry),
    Replay(ReplayDry),
    Checks(ChecksDry),
    Capacity(CapacityDry),
}

#[derive(Debug, Clone, Serialize)]
pub struct OperationDry {
    pub name: String,
    pub method: String,
    pub path: String,
    /// Load and capacity: its share of the requests, relative to the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Replay: how many requests of the log it sends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
}

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

#[derive(Debug, Clone, Serialize)]
pub struct ReplayDry {
    pub requests: u64,
    /// From the first request's start to the last one's, after the speed-up.
    pub span_ms: f64,
    pub speed: f64,
    pub operations: Vec<OperationDry>,
    /// The most connections it may use.
    pub connections: u32,
    pub timeout_ms: u64,
    pub http: HttpVersion,
    pub thresholds: Vec<String>,
    pub abort_on_fail: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckDry {
    pub name: String,
    pub method: String,
    pub path: String,
    pub expect_status: u16,
    pub max_latency_ms: Option<u64>,
    pub expect_text: Option<String>,
    /// Why the run would not send this check (an unset `${env:NAME}` header): the check
    /// would fail unsent, as the run records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_sent: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChecksDry {
    pub checks: Vec<CheckDry>,
    pub invariants: Vec<String>,
    pub timeout_ms: u64,
}

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
    /// The most connections each step may use.
    pub connections: u32,
    pub timeout_ms: u64,
    pub http: HttpVersion,
    /// The most requests the sweep may send: every step, and every bisection round at the
    /// top rate.
    pub max_requests: u64,
}

impl DryRun {
    /// The dry run of a plan; `None` for the kinds whose dry run is their own (scenario,
    /// faults). A load plan is also prepared as a run prepares it before it connects (the
    /// `--target-ca` roots, credential headers from the environment): a dry run passes
    /// only what a run takes.
    pub fn of(
        plan: &Plan,
        target: &str,
        options: &TargetOptions,
    ) -> Result<Option<DryRun>, String> {
        let env = |name: &str| std::env::var(name).ok();
        let prepare = |load: &LoadPlan| load::prepare(load, target, options, &env).map(|_| ());
        let (kind, planned) = match plan {
            Plan::Load(load) => {
                prepare(load)?;
                (RunKind::Load, Planned::Load(LoadDry::new(load)))
            }
            Plan::Replay { plan, speed } => {
                prepare(plan)?;
                (
                    RunKind::Replay,
                    Planned::Replay(ReplayDry::new(plan, *speed)),
                )
            }
            Plan::Checks(spec) => (RunKind::Checks, Planned::Checks(ChecksDry::new(spec, &env))),
            Plan::Capacity(capacity) => {
                // Every step runs the same load plan at its own rate.
                let step = capacity.step_plan(capacity.grid.first().copied().unwrap_or(0.0));
                prepare(&step)?;
                (
                    RunKind::Capacity,
                    Planned::Capacity(CapacityDry::new(capacity, &step)),
                )
            }
            Plan::Scenario(_) | Plan::Faults(_) => return Ok(None),
        };
        Ok(Some(DryRun {
            dry_run: true,
            kind,
            target: target.to_string(),
            plan: planned,
        }))
    }

    /// The plan for people, a few lines.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![
            "Dry run: nothing sent".to_string(),
            format!("{} against {}", self.kind.as_str(), self.target),
        ];
        lines.extend(match &self.plan {
            Planned::Load(load) => load.lines(),
            Planned::Replay(replay) => replay.lines(),
            Planned::Checks(checks) => checks.lines(),
            Planned::Capacity(capacity) => capacity.lines(),
        });
        lines
    }
}

impl OperationDry {
    fn new(op: &Operation) -> OperationDry {
        OperationDry {
            name: op.display_name(),
            method: op.method.clone(),
            path: op.path.clone(),
            weight: Some(op.weight),
            requests: None,
        }
    }

    /// `GET / (weight 3)`, `home: GET / (2 requests)`.
    fn line(&self) -> String {
        let route = format!("{} {}", self.method, self.path);
        let what = match (self.weight, self.requests) {
            (_, Some(1)) => "1 request".to_string(),
            (_, Some(n)) => format!("{n} requests"),
            (Some(w), None) => format!("weight {w}"),
            (None, None) => String::new(),
        };
        let named = if self.name == route {
            route
        } else {
            format!("{}: {route}", self.name)
        };
        if what.is_empty() {
            format!("  {named}")
        } else {
            format!("  {named} ({what})")
        }
    }
}

fn operation_lines(operations: &[OperationDry]) -> Vec<String> {
    std::iter::once("operations:".to_string())
        .chain(operations.iter().map(OperationDry::line))
        .collect()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `500ms`, `10s`, `1.5s`.
fn duration_text(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{}ms", decimal(ms, 3))
    } else {
        format!("{}s", decimal(ms / 1000.0, 3))
    }
}

fn ms_text(ms: u64) -> String {
    duration_text(ms as f64)
}

/// `timeout 10s per request; HTTP/1.1`, `...; HTTP/2, 4 streams per connection`.
fn transport_line(timeout_ms: u64, http: HttpVersion, streams: u32) -> String {
    let http = match (http, streams) {
        (HttpVersion::Http1, _) => "HTTP/1.1".to_string(),
        (HttpVersion::Http2, 1) => "HTTP/2".to_string(),
        (HttpVersion::Http2, n) => format!("HTTP/2, {n} streams per connection"),
    };
    format!("timeout {} per request; {http}", ms_text(timeout_ms))
}

fn thresholds_line(thresholds: &[String], abort_on_fail: bool) -> String {
    if thresholds.is_empty() {
        return "thresholds: none".to_string();
    }
    let abort = if abort_on_fail {
        " (the run stops at the first one crossed)"
    } else {
        ""
    };
    format!("thresholds: {}{abort}", thresholds.join(", "))
}

impl LoadDry {
    fn new(plan: &LoadPlan) -> LoadDry {
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

impl ReplayDry {
    fn new(plan: &LoadPlan, speed: f64) -> ReplayDry {
        let recorded = plan.recorded.as_deref().unwrap_or_default();
        let mut operations: Vec<OperationDry> =
            plan.operations.iter().map(OperationDry::new).collect();
        for op in &mut operations {
            op.weight = None;
            op.requests = Some(0);
        }
        for (_, i) in recorded {
            if let Some(n) = operations.get_mut(*i).and_then(|op| op.requests.as_mut()) {
                *n += 1;
            }
        }
        ReplayDry {
            requests: recorded.len() as u64,
            span_ms: recorded
                .last()
                .map_or(0.0, |(offset, _)| offset.as_secs_f64() * 1000.0),
            speed,
            operations,
            connections: plan.connections,
            timeout_ms: millis(plan.timeout),
            http: plan.http,
            thresholds: plan.thresholds.iter().map(|t| t.to_string()).collect(),
            abort_on_fail: plan.abort_on_fail,
        }
    }

    fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "requests: {} over {}, the log's spacing at speed {}x",
            self.requests,
            duration_text(self.span_ms),
            decimal(self.speed, 3)
        )];
        lines.extend(operation_lines(&self.operations));
        lines.push(format!("connections: at most {}", self.connections));
        lines.push(transport_line(self.timeout_ms, self.http, 1));
        lines.push(thresholds_line(&self.thresholds, self.abort_on_fail));
        lines
    }
}

impl ChecksDry {
    /// `env` reads `${env:NAME}` header values as the run will.
    fn new(spec: &ChecksSpec, env: &impl Fn(&str) -> Option<String>) -> ChecksDry {
        ChecksDry {
            checks: spec
                .checks
                .iter()
                .map(|check| CheckDry {
                    name: check.display_name(),
                    method: check.method.clone(),
                    path: check.path.clone(),
                    expect_status: check.expect_status,
                    max_latency_ms: check.max_latency_ms,
                    expect_text: check.expect_text.clone(),
                    not_sent: resolve_headers(&check.headers, env)
                        .err()
                        .map(|e| e.to_string()),
                })
                .collect(),
            invariants: spec.invariants.iter().map(|i| i.name()).collect(),
            timeout_ms: spec.timeout_ms,
        }
    }

    fn lines(&self) -> Vec<String> {
        let mut lines = vec!["checks:".to_string()];
        for check in &self.checks {
            let route = format!("{} {}", check.method, check.path);
            let mut line = if check.name == route {
                format!("  {route}: expect {}", check.expect_status)
            } else {
                format!("  {}: {route}: expect {}", check.name, check.expect_status)
            };
            if let Some(ms) = check.max_latency_ms {
                line.push_str(&format!(" within {ms} ms"));
            }
            if let Some(text) = &check.expect_text {
                line.push_str(&format!(", the body containing {text:?}"));
            }
            if let Some(reason) = &check.not_sent {
                line.push_str(&format!("; would fail unsent: {reason}"));
            }
            lines.push(line);
        }
        lines.push(if self.invariants.is_empty() {
            "invariants: none".to_string()
        } else {
            format!("invariants: {}", self.invariants.join(", "))
        });
        lines.push(format!("timeout {} per request", ms_text(self.timeout_ms)));
        lines
    }
}

impl CapacityDry {
    fn new(plan: &CapacityPlan, step: &LoadPlan) -> CapacityDry {
        CapacityDry {
            operations: step.operations.iter().map(OperationDry::new).collect(),
            rates: plan.grid.clone(),
            bisect: plan.bisect,
            step_ms: millis(plan.step),
            discard_ms: millis(plan.discard),
            cooldown_ms: millis(plan.cooldown),
            slo: plan.slo,
            floor: plan.floor,
            connections: plan.connections(),
            timeout_ms: millis(step.timeout),
            http: step.http,
            max_requests: plan.expected_requests(),
        }
    }

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
        lines.push(format!("connections: at most {}", self.connections));
        lines.push(transport_line(self.timeout_ms, self.http, 1));
        lines.push(format!("requests: at most {}", self.max_requests));
        lines
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::execute;

    fn dry(kind: RunKind, spec: serde_json::Value) -> DryRun {
        let plan = execute::plan(kind, &spec.to_string()).expect("a valid spec");
        DryRun::of(&plan, "http://127.0.0.1:9", &TargetOptions::default())
            .expect("prepared")
            .expect("a dry run of its own")
    }

    #[test]
    fn an_open_load_says_its_rate_duration_and_the_requests_it_schedules() {
        let run = dry(
            RunKind::Load,
            json!({
                "operations": [{"path": "/"}, {"name": "health", "path": "/health", "weight": 3}],
                "model": "open", "rate": 100, "duration": "10s", "warmup": "2s",
                "thresholds": ["p99 < 300ms"]
            }),
        );
        let value = serde_json::to_value(&run).expect("JSON");
        assert_eq!(value["dry_run"], true);
        assert_eq!(value["kind"], "load");
        assert_eq!(value["plan"]["rate"], 100.0);
        assert_eq!(value["plan"]["requests"], 1000);
        assert_eq!(value["plan"]["duration_ms"], 10_000);
        assert_eq!(value["plan"]["warmup"], json!({"duration": 2000}));
        assert_eq!(value["plan"]["operations"][1]["weight"], 3);
        let text = run.lines().join("\n");
        for part in [
            "Dry run: nothing sent",
            "load against http://127.0.0.1:9",
            "  GET / (weight 1)",
            "  health: GET /health (weight 3)",
            "model: open, 100/s for 10s, at most 64 connections",
            "warm-up: 2s, run first and discarded",
            "timeout 10s per request; HTTP/1.1",
            "thresholds: p99 < 300ms",
            "requests: 1000 scheduled in the measure",
        ] {
            assert!(text.contains(part), "{part:?} in:\n{text}");
        }
    }

    #[test]
    fn stages_and_the_closed_model_read_as_they_run() {
        let ramp = dry(
            RunKind::Load,
            json!({
                "operations": [{"path": "/"}], "model": "open",
                "stages": [{"duration": "10s", "target": 100}, {"duration": "500ms", "target": 100}]
            }),
        );
        let text = ramp.lines().join("\n");
        assert!(
            text.contains("model: open, from 0/s: 10s to 100/s, 500ms to 100/s (10.5s in all)"),
            "{text}"
        );
        // Half of 10 s at a mean of 50/s, and half a second at 100/s.
        assert!(text.contains("requests: 550 scheduled"), "{text}");
        let closed = dry(
            RunKind::Load,
            json!({"operations": [{"path": "/"}], "model": "closed", "connections": 8, "duration": "1m"}),
        );
        let value = serde_json::to_value(&closed).expect("JSON");
        assert_eq!(value["plan"]["requests"], serde_json::Value::Null);
        let text = closed.lines().join("\n");
        assert!(
            text.contains("model: closed, 8 connections for 60s"),
            "{text}"
        );
    }

    #[test]
    fn a_replay_says_its_requests_span_and_speed() {
        let run = dry(
            RunKind::Replay,
            json!({
                "requests": [
                    {"offset_ms": 0, "method": "GET", "path": "/"},
                    {"offset_ms": 200, "method": "POST", "path": "/orders"},
                    {"offset_ms": 600, "method": "GET", "path": "/"}
                ],
                "speed": 2
            }),
        );
        let value = serde_json::to_value(&run).expect("JSON");
        assert_eq!(value["plan"]["requests"], 3);
        assert_eq!(value["plan"]["span_ms"], 300.0);
        assert_eq!(value["plan"]["speed"], 2.0);
        let text = run.lines().join("\n");
        assert!(
            text.contains("requests: 3 over 300ms, the log's spacing at speed 2x"),
            "{text}"
        );
        assert!(text.contains("  GET / (2 requests)"), "{text}");
        assert!(text.contains("  POST /orders (1 request)"), "{text}");
    }

    #[test]
    fn checks_list_each_check_and_capacity_its_steps() {
        let checks = dry(
            RunKind::Checks,
            json!({
                "checks": [{"path": "/health", "max_latency_ms": 500, "expect_text": "ok"}],
                "invariants": [{"rule": "no_5xx"}]
            }),
        );
        let text = checks.lines().join("\n");
        assert!(
            text.contains("  GET /health: expect 200 within 500 ms, the body containing \"ok\""),
            "{text}"
        );
        assert!(text.contains("invariants: no 5xx"), "{text}");
        assert!(!text.contains("unsent"), "{text}");
        // A header from an unset variable: the run would fail that check unsent.
        let unset = dry(
            RunKind::Checks,
            json!({"checks": [
                {"path": "/a", "headers": {"X-Api-Key": "${env:IOHR_SURELY_UNSET_VARIABLE_1234}"}},
                {"path": "/b"}
            ]}),
        );
        let text = unset.lines().join("\n");
        assert!(
            text.contains("  GET /a: expect 200; would fail unsent: header X-Api-Key: environment variable IOHR_SURELY_UNSET_VARIABLE_1234 is not set on the agent"),
            "{text}"
        );
        let value = serde_json::to_value(&unset).expect("JSON");
        assert!(
            value["plan"]["checks"][0]["not_sent"].is_string(),
            "{value}"
        );
        assert!(
            value["plan"]["checks"][1].get("not_sent").is_none(),
            "{value}"
        );
        let capacity = dry(
            RunKind::Capacity,
            json!({
                "operations": [{"path": "/"}], "rates": [100, 200, 400],
                "step": "5s", "discard": "1s", "slo": {"p99": "200ms"}
            }),
        );
        let value = serde_json::to_value(&capacity).expect("JSON");
        assert_eq!(value["plan"]["rates"], json!([100.0, 200.0, 400.0]));
        let text = capacity.lines().join("\n");
        for part in [
            "steps: 100/s, 200/s, 400/s, stopping at the first that breaks the SLO; then up to 3 bisection rounds",
            "each step: 5s, the first 1s run and not judged; 1s cooldown",
            "SLO: p99 <= 200ms, error rate <= 1%",
        ] {
            assert!(text.contains(part), "{part:?} in:\n{text}");
        }
    }

    #[test]
    fn scenario_and_faults_keep_their_own_dry_runs() {
        let spec = json!({"slug": "s", "ops": ["GET /"]}).to_string();
        let plan = execute::plan(RunKind::Scenario, &spec).expect("a valid scenario");
        let dry = DryRun::of(&plan, "http://127.0.0.1:9", &TargetOptions::default());
        assert!(dry.expect("nothing to prepare").is_none());
    }
}
