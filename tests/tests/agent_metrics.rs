//! `GET /metrics` of a real agent (`iohr-agent run --metrics-addr`) beside a real
//! controller, scraped and parsed by the Prometheus project's own OpenMetrics parser
//! (tests/metrics/scrape.py): after a load run whose executor fails, a load run of a few
//! hundred requests and a checks run, it counts the leases taken by kind, the run ended
//! `error`, every request sent, holds no lease and no unacknowledged frame, names no run
//! in any label, and shows the link up; then, the controller gone, the link down and the
//! agent dialling again. And an agent whose metrics address is taken does not start.
//!
//! One store (SQLite): the agent never touches the store, and the controller's own metrics
//! test covers both.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::metrics::{sample, scrape};
use iohr_tests::process::AgentOptions;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Target, wait_for};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

/// The families of one scrape of `url`, which must answer 200 in OpenMetrics.
async fn families(url: &str) -> Value {
    let seen = scrape(&[url.to_string()]).await;
    let answer = &seen[url];
    assert_eq!(answer["status"], 200, "{seen}");
    assert!(
        answer["content_type"]
            .as_str()
            .is_some_and(|t| t.starts_with("application/openmetrics-text")),
        "{seen}"
    );
    answer["families"].clone()
}

/// The value of the series `name{labels}` of family `family`, which must be there.
fn value(families: &Value, family: &str, name: &str, labels: Value) -> f64 {
    let f = &families[family];
    assert!(f.is_object(), "{family} in {families}");
    sample(f, name, &labels).unwrap_or_else(|| panic!("{name}{labels} in {families}"))
}

fn kind(k: &str) -> Value {
    json!({ "kind": k })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_exposes_its_metrics() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let target = Target::start().await;
    let stack = OneAgent::start(
        Backend::Sqlite,
        AgentOptions {
            extra: &["--metrics-addr", &addr],
            // The first executor this agent starts panics: one run ended `error`.
            env: &[("IOHR_AGENT_TEST_PANIC", "start")],
            ..AgentOptions::default()
        },
    )
    .await;
    let url = format!("http://{addr}/metrics");

    // Online and idle: the link is up, nothing held, nothing sent yet.
    let idle = families(&url).await;
    for (family, kind_type) in [
        ("iohr_agent_leases", "gauge"),
        ("iohr_agent_leases_taken", "counter"),
        ("iohr_agent_executor_errors", "counter"),
        ("iohr_agent_unacknowledged_frames", "gauge"),
        ("iohr_agent_unacknowledged_frame_bytes", "gauge"),
        ("iohr_agent_frame_buffer_limit_bytes", "gauge"),
        ("iohr_agent_requests_sent", "counter"),
        ("iohr_agent_link_connected", "gauge"),
        ("iohr_agent_link_reconnects", "counter"),
    ] {
        assert_eq!(idle[family]["type"], kind_type, "{family} in {idle}");
    }
    let connected = |f: &Value| {
        value(
            f,
            "iohr_agent_link_connected",
            "iohr_agent_link_connected",
            json!({}),
        )
    };
    assert_eq!(connected(&idle), 1.0, "{idle}");
    assert_eq!(
        value(
            &idle,
            "iohr_agent_requests_sent",
            "iohr_agent_requests_sent_total",
            json!({})
        ),
        0.0
    );
    assert_eq!(
        value(
            &idle,
            "iohr_agent_frame_buffer_limit_bytes",
            "iohr_agent_frame_buffer_limit_bytes",
            json!({})
        ),
        64.0 * 1024.0 * 1024.0,
        "the default --frame-buffer-mib"
    );

    let load = |rate: u32, duration: &str| {
        json!({"kind": "load", "environment": "staging", "target": target.url(),
            "spec": {"operations": [{"path": "/"}], "model": "open", "rate": rate,
                     "duration": duration, "warmup": "1s"}})
    };
    let failed = stack.api.create_run(&load(20, "1s")).await;
    let failed_id = failed["id"].as_str().unwrap().to_string();
    let failed = stack
        .api
        .wait_status(&failed_id, &["error", "passed", "failed"], LIMIT)
        .await;
    assert_eq!(failed["status"], "error", "{failed}");

    let run = stack.api.create_run(&load(100, "3s")).await;
    let load_id = run["id"].as_str().unwrap().to_string();
    let loaded = stack.api.wait_status(&load_id, &["passed"], LIMIT).await;
    assert_eq!(loaded["result"]["requests"], 300, "{loaded}");
    let checks = stack
        .api
        .create_run(&json!({"kind": "checks", "environment": "staging",
            "target": target.url(),
            "spec": {"checks": [{"path": "/"}, {"path": "/health"}]}}))
        .await;
    let checks_id = checks["id"].as_str().unwrap().to_string();
    let checked = stack.api.wait_status(&checks_id, &["passed"], LIMIT).await;

    // A run is ended once the controller stored its completion; the agent lets go of its
    // lease when it reads the acknowledgement, a moment later.
    let done = wait_for("the agent to hold nothing", LIMIT, || async {
        let f = families(&url).await;
        let held: f64 = ["load", "checks"]
            .iter()
            .map(|k| value(&f, "iohr_agent_leases", "iohr_agent_leases", kind(k)))
            .sum();
        (held == 0.0).then_some(f)
    })
    .await;
    let counted = |family: &str, k: &str| value(&done, family, &format!("{family}_total"), kind(k));
    assert_eq!(counted("iohr_agent_leases_taken", "load"), 2.0, "{done}");
    assert_eq!(counted("iohr_agent_leases_taken", "checks"), 1.0, "{done}");
    assert_eq!(counted("iohr_agent_leases_taken", "faults"), 0.0, "{done}");
    assert_eq!(counted("iohr_agent_executor_errors", "load"), 1.0, "{done}");
    assert_eq!(
        counted("iohr_agent_executor_errors", "checks"),
        0.0,
        "{done}"
    );
    let sent = value(
        &done,
        "iohr_agent_requests_sent",
        "iohr_agent_requests_sent_total",
        json!({}),
    );
    // The measure's 300, the warm-up's and the checks': what the runs were charged.
    let spent =
        loaded["units"]["spent"].as_u64().unwrap() + checked["units"]["spent"].as_u64().unwrap();
    assert!(sent >= 300.0 + 2.0, "{sent} sent: {done}");
    assert_eq!(sent, spent as f64, "every request sent and charged: {done}");
    assert_eq!(
        value(
            &done,
            "iohr_agent_unacknowledged_frames",
            "iohr_agent_unacknowledged_frames",
            json!({})
        ),
        0.0,
        "{done}"
    );
    assert_eq!(
        value(
            &done,
            "iohr_agent_unacknowledged_frame_bytes",
            "iohr_agent_unacknowledged_frame_bytes",
            json!({})
        ),
        0.0,
        "{done}"
    );
    assert_eq!(connected(&done), 1.0, "{done}");
    // Bounded labels only: no series names a run.
    let text = done.to_string();
    for id in [&failed_id, &load_id, &checks_id] {
        assert!(!text.contains(id.as_str()), "a run id in a label: {text}");
    }
    let other = format!("http://{addr}/other");
    let seen = scrape(std::slice::from_ref(&other)).await;
    assert_eq!(seen[&other]["status"], 404, "{seen}");

    // The controller gone: the link is down and the agent dials again.
    let OneAgent {
        controller, agent, ..
    } = stack;
    controller.kill().await;
    let down = wait_for("the link to count as down", LIMIT, || async {
        let f = families(&url).await;
        let redials = value(
            &f,
            "iohr_agent_link_reconnects",
            "iohr_agent_link_reconnects_total",
            json!({}),
        );
        (connected(&f) == 0.0 && redials >= 1.0).then_some(f)
    })
    .await;
    assert_eq!(
        value(
            &down,
            "iohr_agent_requests_sent",
            "iohr_agent_requests_sent_total",
            json!({})
        ),
        sent,
        "{down}"
    );
    agent.kill().await;
}

#[tokio::test]
async fn a_taken_metrics_address_fails_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let state = std::env::temp_dir().join(format!("iohr-metrics-state-{}", uuid::Uuid::new_v4()));
    let run = tokio::process::Command::new(iohr_tests::process::bin("iohr-agent"))
        .args(["run", "--controller", "https://127.0.0.1:9"])
        .args(["--identity", "/nonexistent", "--environment", "staging"])
        .args(["--metrics-addr", &addr])
        .arg("--state-dir")
        .arg(&state)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(LIMIT, run).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("binding the metrics address {addr}")),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&state);
}
