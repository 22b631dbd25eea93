//! `GET /metrics` of a real controller with a real agent, scraped and parsed by the
//! Prometheus project's own OpenMetrics parser (PyPI `prometheus_client`, tests/metrics/
//! scrape.py): runs by kind and status, queues per account, the connected agent, frames
//! stored, the dispatch latency and the store's append time, and no run id in any label;
//! then `serve --metrics-addr` moves it off the API address.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::metrics::{sample, scrape};
use iohr_tests::process::AgentOptions;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Controller, Target, on_both_stores};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

async fn the_controller_exposes_its_metrics(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let target = Target::start().await;
    let run = stack
        .api
        .create_run(
            &json!({"kind": "checks", "environment": "staging", "target": target.url(),
                            "spec": {"checks": [{"path": "/"}]}}),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_string();
    stack.api.wait_status(&id, &["passed"], LIMIT).await;

    let url = format!("{}/metrics", stack.controller.api_url());
    let seen = scrape(std::slice::from_ref(&url)).await;
    let answer = &seen[&url];
    assert_eq!(answer["status"], 200, "{seen}");
    assert!(
        answer["content_type"]
            .as_str()
            .is_some_and(|t| t.starts_with("application/openmetrics-text")),
        "{seen}"
    );
    let families = &answer["families"];
    let family = |name: &str| {
        let f = &families[name];
        assert!(f.is_object(), "{name} in {families}");
        f
    };
    assert_eq!(family("iohr_runs")["type"], "gauge");
    assert_eq!(
        sample(
            family("iohr_runs"),
            "iohr_runs",
            &json!({"kind": "checks", "status": "passed"})
        ),
        Some(1.0),
        "{families}"
    );
    assert_eq!(
        sample(
            family("iohr_agents_connected"),
            "iohr_agents_connected",
            &json!({})
        ),
        Some(1.0)
    );
    // The API address names no account (issue 38): one total.
    assert_eq!(
        sample(family("iohr_queued_runs"), "iohr_queued_runs", &json!({})),
        Some(0.0),
        "{families}"
    );
    assert!(
        !families.to_string().contains("\"account\""),
        "no account label on the API address: {families}"
    );
    assert_eq!(family("iohr_viewers")["type"], "gauge");
    assert_eq!(family("iohr_frames_stored")["type"], "counter");
    let frames = sample(
        family("iohr_frames_stored"),
        "iohr_frames_stored_total",
        &json!({}),
    );
    assert!(
        frames.is_some_and(|n| n >= 2.0),
        "started and finished at least: {families}"
    );
    let dispatch = family("iohr_dispatch_latency_seconds");
    assert_eq!(dispatch["type"], "histogram");
    assert!(
        sample(dispatch, "iohr_dispatch_latency_seconds_count", &json!({}))
            .is_some_and(|n| n >= 1.0),
        "{families}"
    );
    let append = family("iohr_store_frame_append_seconds");
    assert!(
        sample(append, "iohr_store_frame_append_seconds_count", &json!({}))
            .is_some_and(|n| n >= 1.0),
        "{families}"
    );
    // Bounded labels only: no series names a run.
    let text = families.to_string();
    assert!(!text.contains(&id), "a run id in a label: {text}");

    // Moved: on its own address, and gone from the API's (one controller per store).
    let OneAgent {
        install,
        controller,
        agent,
        ..
    } = stack;
    agent.kill().await;
    controller.stop().await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let addr = format!("127.0.0.1:{port}");
    let moved = Controller::start_with(&install, 200, None, &["--metrics-addr", &addr]).await;
    let own = format!("http://{addr}/metrics");
    let api = format!("{}/metrics", moved.api_url());
    let seen = scrape(&[own.clone(), api.clone()]).await;
    assert_eq!(seen[&own]["status"], 200, "{seen}");
    assert!(seen[&own]["families"]["iohr_runs"].is_object(), "{seen}");
    // By account on the operator's own address.
    assert_eq!(
        sample(
            &seen[&own]["families"]["iohr_queued_runs"],
            "iohr_queued_runs",
            &json!({"account": "default"})
        ),
        Some(0.0),
        "{seen}"
    );
    assert_eq!(seen[&api]["status"], 404, "{seen}");
}

on_both_stores!(the_controller_exposes_its_metrics);
