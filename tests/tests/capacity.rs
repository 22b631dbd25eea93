//! Capacity runs against a sample target of known capacity (`--workers 5 --service-ms
//! 20`: 250 requests/s): the sweep finds it within one step and the knee near it; a run
//! through the controller streams every step and its seconds; two runs compare per
//! offered rate.
//!
//! The tests of this file run one at a time (`SERIAL`): each measures latency on a
//! machine of two cores, and two sweeps side by side would measure each other.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::{AgentOptions, agent_exec};
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Target, on_both_stores};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);
/// The target's capacity: 5 workers, 20 ms each.
const CAPACITY: f64 = 250.0;
const GROWTH: f64 = 1.5;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn rate(value: &Value) -> f64 {
    value.as_f64().unwrap_or_else(|| panic!("a rate: {value}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_finds_a_known_capacity_within_one_step_and_the_knee_near_it() {
    let _serial = SERIAL.lock().await;
    let target = Target::start_with(&["--service-ms", "20", "--workers", "5"]).await;
    let spec = json!({"operations": [{"path": "/"}], "start_rate": 100, "max_rate": 1000,
        "growth": GROWTH, "step": "1s", "discard": "250ms",
        "slo": {"p99": "150ms", "error_rate": "1%"}, "bisect": 3});
    let (code, out) = agent_exec("capacity", &target.url(), &spec, &[]).await;
    let result = &out["result"];
    assert_eq!((code, out["status"].as_str()), (0, Some("passed")), "{out}");

    // The grid 100, 150, 225, 337.5 ... breaks at 337.5 (the target completes 250/s at
    // most); bisection between 225 and 337.5 lands within one grid step of the capacity.
    let found = rate(&result["max_rate_meeting_slo"]);
    assert!(
        (CAPACITY / GROWTH..=CAPACITY * 1.1).contains(&found),
        "found {found}/s for a capacity of {CAPACITY}/s: {result}"
    );
    let points = result["points"].as_array().expect("points");
    assert!(points.len() >= 4, "{result}");
    assert_eq!(rate(&points[0]["offered"]), 100.0);
    let first_bad = points
        .iter()
        .find(|p| p["meets_slo"] == false)
        .expect("a step broke the SLO");
    assert_eq!(first_bad["stage"], "sweep");
    assert!(rate(&first_bad["offered"]) > CAPACITY, "{first_bad}");
    assert!(
        rate(&first_bad["achieved"]) < 0.95 * rate(&first_bad["offered"]),
        "an overloaded step completes less than it is offered: {first_bad}"
    );
    assert!(
        points.iter().any(|p| p["stage"] == "bisect"),
        "bisection ran: {result}"
    );
    for p in points {
        assert!(p["p50"].is_object() && p["p99"].is_object(), "{p}");
        assert!(p.get("histogram").and_then(Value::as_str).is_some());
    }
    assert!(
        result["stopped_because"]
            .as_str()
            .is_some_and(|s| s.contains("broke the SLO") && s.contains("bisected")),
        "{result}"
    );

    let knee = &result["knee"];
    let at = rate(&knee["rate"]);
    assert!(
        (CAPACITY / GROWTH..=CAPACITY * GROWTH).contains(&at),
        "knee {at}/s: {knee}"
    );
    assert!(
        rate(&knee["low"]) <= at && at <= rate(&knee["high"]),
        "{knee}"
    );
    assert_eq!(knee["resolved"], true, "{knee}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_spec_and_an_unreachable_target_say_so() {
    let _serial = SERIAL.lock().await;
    let spec = json!({"operations": [{"path": "/"}], "rates": [10, 20], "step": "1s",
        "discard": "2s", "slo": {"p99": "100ms"}});
    let (code, out) = agent_exec_text("capacity", "http://127.0.0.1:9", &spec).await;
    assert_ne!(code, 0);
    assert!(out.contains("spec.discard"), "{out}");

    // Nothing listens on the discard port: the run is an error, not a failed verdict.
    let spec = json!({"operations": [{"path": "/"}], "rates": [20, 40], "step": "500ms",
        "discard": "100ms", "timeout": "200ms", "slo": {"p99": "100ms"}});
    let (code, out) = agent_exec("capacity", "http://127.0.0.1:9", &spec, &[]).await;
    assert_eq!((code, out["status"].as_str()), (3, Some("error")), "{out}");
    assert!(
        out["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("target unreachable")),
        "{out}"
    );
}

/// `iohr-agent exec` for a spec it refuses: the exit status and what it printed.
async fn agent_exec_text(kind: &str, target: &str, spec: &Value) -> (i32, String) {
    let output = iohr_tests::process::agent_exec_output(kind, target, spec, &[], &[], None).await;
    (
        output.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

async fn a_capacity_run_streams_its_steps_and_two_runs_compare(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let _serial = SERIAL.lock().await;
    let api = &stack.api;
    let target = Target::start_with(&["--service-ms", "20", "--workers", "5"]).await;
    let addr = target.addr.to_string();
    let body = json!({"kind": "capacity", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "rates": [50, 100, 200], "step": "1s",
                 "discard": "250ms", "bisect": 0, "floor": 75,
                 "slo": {"p99": "150ms", "error_rate": "1%"}}});
    let created = api.create_run(&body).await;
    let before = created["id"].as_str().expect("id").to_string();
    let done = api.wait_status(&before, &["passed", "failed"], LIMIT).await;
    assert_eq!(done["status"], "passed", "{done}");
    assert_eq!(
        rate(&done["result"]["max_rate_meeting_slo"]),
        200.0,
        "{done}"
    );
    // Reserved: every step at its rate (350 requests); spent: what was sent.
    assert_eq!(done["units"]["reserved"], 350, "{done}");
    let spent = done["units"]["spent"].as_u64().expect("spent");
    assert!((300..=360).contains(&spent), "{done}");

    // Each step starts and ends with a phase frame; the engine's seconds in between carry
    // their step.
    let events = api.events(&before, None).await.collect(LIMIT).await;
    let phases: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "phase")
        .map(|e| &e.data["data"])
        .collect();
    let marks: Vec<(String, u64)> = phases
        .iter()
        .map(|p| {
            (
                p["event"].as_str().unwrap_or_default().to_string(),
                p["step"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    let expected: Vec<(String, u64)> = (1..=3)
        .flat_map(|s| [("start".to_string(), s), ("end".to_string(), s)])
        .collect();
    assert_eq!(marks, expected, "{phases:?}");
    assert!(
        phases[1]["point"]["meets_slo"] == true && phases[1]["point"].get("histogram").is_none(),
        "{}",
        phases[1]
    );
    let seconds: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "load")
        .map(|e| &e.data["data"])
        .collect();
    for step in 1..=3u64 {
        assert!(
            seconds
                .iter()
                .any(|s| s["step"] == step && s["phase"] == "measure"),
            "step {step} streamed its seconds: {seconds:?}"
        );
    }

    // The same sweep against the target at half its speed (125/s): slower at every shared
    // rate, and 200/s no longer kept up.
    target.stop().await;
    let _slower = Target::start_at(&addr, &["--service-ms", "40", "--workers", "5"]).await;
    let created = api.create_run(&body).await;
    let after = created["id"].as_str().expect("id").to_string();
    let done = api.wait_status(&after, &["passed", "failed"], LIMIT).await;
    assert_eq!(
        rate(&done["result"]["max_rate_meeting_slo"]),
        100.0,
        "{done}"
    );
    let (status, comparison) = api
        .get(&format!(
            "/v1/reliability/compare?before={before}&after={after}"
        ))
        .await;
    assert_eq!(status, 200, "{comparison}");
    assert_eq!(comparison["verdict"], "regressed", "{comparison}");
    let lines: Vec<&str> = comparison["differences"]
        .as_array()
        .expect("differences")
        .iter()
        .filter_map(|d| d["line"].as_str())
        .collect();
    assert!(
        lines.iter().any(|l| l.starts_with("p50 @ 50/s:")),
        "{lines:?}"
    );
    assert!(
        comparison["notes"]
            .as_array()
            .expect("notes")
            .iter()
            .any(|n| n == "max rate meeting the SLO: 200/s -> 100/s"),
        "{comparison}"
    );
}

on_both_stores!(a_capacity_run_streams_its_steps_and_two_runs_compare);
