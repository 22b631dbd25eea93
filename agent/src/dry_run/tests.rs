use serde_json::json;

use super::*;
use crate::execute;
use crate::kinds::{FrameSender, RunContext};

fn context() -> RunContext {
    RunContext::new("http://127.0.0.1:9", FrameSender::channel().0)
}

fn dry(kind: RunKind, spec: serde_json::Value) -> Described {
    let plan = execute::plan(kind, &spec.to_string()).expect("a valid spec");
    plan.dry_run(&context())
        .expect("prepared")
        .expect("a dry run of its own")
}

/// The object `--json` prints, read back.
fn object(run: &Described) -> serde_json::Value {
    serde_json::from_str(run.object()).expect("JSON")
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
    let value = object(&run);
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
    let value = object(&closed);
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
    let value = object(&run);
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
    let value = object(&unset);
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
    let value = object(&capacity);
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
    // The scenario's is the domain's, as `exec` printed it before the kinds had one
    // registry.
    let dry = plan.dry_run(&context()).expect("nothing to prepare");
    let expected = match &plan {
        execute::Plan::Scenario(spec) => {
            iohr_domain::scenario_kind::DryRun::new(spec, "http://127.0.0.1:9")
        }
        other => panic!("a scenario plan, not {other:?}"),
    };
    let dry = dry.expect("a scenario dry run");
    assert_eq!(
        dry.object(),
        serde_json::to_string(&expected).expect("JSON")
    );
    assert_eq!(dry.lines(), expected.lines());
    // A faults dry run goes through its lifecycle.
    let spec = json!({"title": "t", "description": "d",
        "method": [{"type": "probe", "name": "p", "provider": {"type": "http", "path": "/"}}]});
    let plan = execute::plan(RunKind::Faults, &spec.to_string()).expect("a valid experiment");
    assert!(
        plan.dry_run(&context())
            .expect("nothing to prepare")
            .is_none()
    );
}
