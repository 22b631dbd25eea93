//! An account's plan through the real controller: queued runs past the plan's bound are
//! answered 429 with `Retry-After` and not stored, a run longer than the plan allows is
//! refused naming the limit, a run over the month's unit budget is stored `refused` and
//! what a cancelled run did not spend comes back, and a faults run reserves and spends the
//! requests its probes send.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Api, Backend, Controller, Installation, Target, on_both_stores};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);
const RUNS: &str = "/v1/reliability/runs";

fn checks(target: &Target, count: usize) -> Value {
    let checks: Vec<Value> = (0..count).map(|_| json!({"path": "/"})).collect();
    json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "spec": {"checks": checks}})
}

async fn stored_runs(api: &Api) -> usize {
    let (status, page) = api.get(&format!("{RUNS}?limit=500")).await;
    assert_eq!(status, 200, "{page}");
    page["runs"].as_array().expect("runs").len()
}

async fn a_full_queue_answers_429_with_retry_after_and_stores_nothing(backend: Backend) {
    let install = Installation::new(backend).await;
    install.ctl2(
        "account",
        &["set-plan", "--name", "default", "--max-queued", "2"],
    );
    // No agent: every run stays queued.
    let controller = Controller::start(&install, 200, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let target = Target::start().await;
    let first = api.create_run(&checks(&target, 1)).await;
    api.create_run(&checks(&target, 1)).await;

    // Another spec: its inline scenario is not stored either.
    let (status, headers, body) = api.post_with_headers(RUNS, &checks(&target, 2)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "too_many_queued", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("2 queued runs"), "{message}");
    assert_eq!(
        headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("30"),
        "{headers:?}"
    );
    assert_eq!(stored_runs(&api).await, 2, "nothing stored");

    // A run that ends makes room.
    let id = first["id"].as_str().expect("id");
    let (status, _) = api.post(&format!("{RUNS}/{id}/cancel"), &json!({})).await;
    assert!(status == 200 || status == 202, "cancel: {status}");
    api.wait_status(id, &["cancelled"], LIMIT).await;
    api.create_run(&checks(&target, 2)).await;
}

async fn a_run_longer_than_the_plan_allows_is_refused_naming_the_limit(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 200, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let target = Target::start().await;
    let long_load = json!({"kind": "load", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "model": "open", "rate": 100,
            "duration": "10h"}});
    let (status, body) = api.post(RUNS, &long_load).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "run_too_long", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("spec.duration 10h is over this plan's limit of 1h for load runs"),
        "{message}"
    );

    let warm = json!({"kind": "load", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "model": "open", "rate": 100,
            "duration": "1h", "warmup": "1m"}});
    let (status, body) = api.post(RUNS, &warm).await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("spec.warmup + spec.duration 1h 1m is over"),
        "{message}"
    );

    let sweep = json!({"kind": "capacity", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "rates": [10, 20, 40], "step": "30m",
            "slo": {"p99": "200ms"}}});
    let (status, body) = api.post(RUNS, &sweep).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "run_too_long", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("is over this plan's limit of 1h for capacity runs"),
        "{message}"
    );
    assert_eq!(stored_runs(&api).await, 0, "nothing stored");

    // A plan that allows it, applied to the next POST of a running controller.
    install.ctl2(
        "account",
        &["set-plan", "--name", "default", "--max-run-duration", "12h"],
    );
    let record = api.create_run(&long_load).await;
    assert_eq!(record["status"], "queued", "{record}");
    assert_eq!(record["units"]["reserved"], 3_600_000, "{record}");
}

async fn a_run_over_the_months_budget_is_refused_and_unspent_units_come_back(backend: Backend) {
    let install = Installation::new(backend).await;
    install.ctl2(
        "account",
        &["set-plan", "--name", "default", "--units-per-month", "100"],
    );
    let stack = OneAgent::start_in(install, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;

    // 10 a second for 8 s: 80 reserved while it lives.
    let load = api
        .create_run(
            &json!({"kind": "load", "environment": "staging", "target": target.url(),
            "spec": {"operations": [{"path": "/"}], "model": "open", "rate": 10,
                "duration": "8s"}}),
        )
        .await;
    assert_eq!(load["units"]["reserved"], 80, "{load}");
    let id = load["id"].as_str().expect("id");

    let refused = api.create_run(&checks(&target, 30)).await;
    assert_eq!(refused["status"], "refused", "{refused}");
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("reserves 30 units and 20 of this month's 100 are left"),
        "{reason}"
    );
    assert!(refused["ended_at"].is_string(), "{refused}");
    let refused_id = refused["id"].as_str().expect("id");
    let frames = api.events(refused_id, None).await.collect(LIMIT).await;
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0].event, "finished");
    assert_eq!(frames[0].data["data"]["status"], "refused", "{frames:?}");

    // Cancelled after its first second: what it did not send is back in the budget.
    let mut events = api.events(id, None).await;
    loop {
        let event = events.next(LIMIT).await.expect("a load frame");
        if event.event == "load" {
            break;
        }
    }
    let (status, _) = api.post(&format!("{RUNS}/{id}/cancel"), &json!({})).await;
    assert!(status == 200 || status == 202, "cancel: {status}");
    let cancelled = api.wait_status(id, &["cancelled"], LIMIT).await;
    let spent = cancelled["units"]["spent"].as_u64().expect("spent");
    assert!((1..=60).contains(&spent), "{cancelled}");

    let accepted = api.create_run(&checks(&target, 30)).await;
    assert_eq!(accepted["status"], "queued", "{accepted}");
    let done = api
        .wait_status(accepted["id"].as_str().expect("id"), &["passed"], LIMIT)
        .await;
    assert_eq!(
        done["units"],
        json!({"reserved": 30, "spent": 30}),
        "{done}"
    );
}

on_both_stores!(
    a_full_queue_answers_429_with_retry_after_and_stores_nothing,
    a_run_longer_than_the_plan_allows_is_refused_naming_the_limit,
    a_run_over_the_months_budget_is_refused_and_unspent_units_come_back,
);

/// A policy file (in a temp dir of its own) allowing the target's port; its path.
fn policy_for(target: &Target) -> String {
    let dir = std::env::temp_dir().join(format!("iohr-plan-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("policy.json");
    let policy = json!({"target_ports": [target.addr.port()]});
    std::fs::write(&path, policy.to_string()).expect("policy");
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faults_run_reserves_and_spends_the_requests_its_probes_send() {
    let target = Target::start().await;
    let policy = policy_for(&target);
    let extra = ["--policy", policy.as_str()];
    let stack = OneAgent::start(
        Backend::Sqlite,
        AgentOptions {
            extra: &extra,
            ..AgentOptions::default()
        },
    )
    .await;
    // Two HTTP probes before and after; a fault and a burst of 20 requests in the method.
    let experiment = json!({
        "title": "t", "description": "units of a faults run",
        "steady-state-hypothesis": {"title": "home answers", "probes": [
            {"type": "probe", "name": "home-ok", "tolerance": 200,
             "provider": {"type": "http", "path": "/"}},
            {"type": "probe", "name": "health-ok", "tolerance": 200,
             "provider": {"type": "http", "path": "/health"}}]},
        "method": [
            {"type": "action", "name": "slow", "provider": {"type": "iohr",
                "fault": "network", "duration": "30s",
                "toxic": {"type": "latency", "latency_ms": 5}}},
            {"type": "probe", "name": "burst", "provider": {"type": "iohr", "probe": "load",
                "rate": 20, "duration": "1s", "path": "/"}}],
        "rollbacks": []
    });
    let run = stack
        .api
        .create_run(&json!({"kind": "faults", "environment": "staging",
            "target": target.url(), "spec": experiment}))
        .await;
    assert_eq!(run["units"]["reserved"], 2 * 2 + 20, "{run}");
    let done = stack
        .api
        .wait_status(
            run["id"].as_str().expect("id"),
            &["passed", "failed", "error"],
            LIMIT,
        )
        .await;
    assert_eq!(done["status"], "passed", "{done}");
    assert_eq!(
        done["units"],
        json!({"reserved": 24, "spent": 24}),
        "every probe request and every burst request: {done}"
    );
}
