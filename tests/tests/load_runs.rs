//! Load runs through the controller and a real agent: per-second `load` frames whose
//! histograms merge exactly into the run's totals, and load runs that never overlap on
//! one agent however many are posted at once (checks runs do not wait for them).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use futures_util::future::join_all;
use iohr_domain::histogram::{decode, latency_histogram};
use iohr_tests::process::AgentOptions;
use iohr_tests::records::max_overlap;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Installation, Target, on_both_stores};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(90);

async fn per_second_frames_merge_into_the_run_totals(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;
    let record = api
        .create_run(&json!({
            "kind": "load", "environment": "staging", "target": target.url(),
            "spec": {"operations": [{"path": "/"}, {"path": "/health"}], "model": "open",
                     "rate": 200, "duration": "3s", "warmup": "1s"}
        }))
        .await;
    let id = record["id"].as_str().expect("id");
    let done = api.wait_status(id, &["passed"], LIMIT).await;
    let result = &done["result"];
    assert_eq!(result["requests"], 600, "{done}");

    let events = api.events(id, None).await.collect(LIMIT).await;
    let seconds: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "load")
        .map(|e| &e.data["data"])
        .collect();
    let (warmup, measure): (Vec<&Value>, Vec<&Value>) =
        seconds.iter().partition(|s| s["phase"] == "warmup");
    assert!(
        !warmup.is_empty(),
        "warm-up seconds are streamed too: {seconds:?}"
    );
    assert!(
        warmup.iter().all(|s| s.get("histogram").is_none()),
        "warm-up latencies are discarded"
    );
    assert!(measure.len() >= 3, "one frame a second: {}", measure.len());

    let mut merged = latency_histogram().expect("histogram");
    let mut uncorrected = latency_histogram().expect("histogram");
    let mut per_op = [
        latency_histogram().expect("histogram"),
        latency_histogram().expect("histogram"),
    ];
    let mut requests = 0;
    for second in &measure {
        requests += second["requests"].as_u64().expect("requests");
        merged
            .add(decode(second["histogram"].as_str().expect("histogram")).expect("decode"))
            .expect("merge");
        uncorrected
            .add(decode(second["uncorrected_histogram"].as_str().expect("h")).expect("decode"))
            .expect("merge");
        for (i, name) in ["GET /", "GET /health"].iter().enumerate() {
            let h = second["operations"][name]["histogram"]
                .as_str()
                .expect("operation histogram");
            per_op[i].add(decode(h).expect("decode")).expect("merge");
        }
    }
    assert_eq!(requests, 600);
    let total = decode(result["latency"]["histogram"].as_str().expect("total")).expect("decode");
    assert_eq!(merged, total, "the seconds merge exactly into the total");
    assert_eq!(
        merged.value_at_quantile(0.99),
        result["latency"]["percentiles"]["p99"]["value"]
            .as_u64()
            .expect("p99")
    );
    let total_uncorrected = decode(
        result["uncorrected_latency"]["histogram"]
            .as_str()
            .expect("h"),
    )
    .expect("decode");
    assert_eq!(uncorrected, total_uncorrected);
    for (i, op) in result["operations"]
        .as_array()
        .expect("operations")
        .iter()
        .enumerate()
    {
        let h = decode(op["latency"]["histogram"].as_str().expect("h")).expect("decode");
        assert_eq!(per_op[i], h, "operation {i} merges exactly");
    }
}

async fn load_runs_never_overlap_on_one_agent(backend: Backend) {
    let options = AgentOptions {
        max_jobs: 4,
        ..AgentOptions::default()
    };
    let install = Installation::new(backend).await;
    // The default plan (4 at once) must not be what keeps load runs apart.
    install.ctl2(
        "account",
        &["set-plan", "--name", "default", "--max-running", "8"],
    );
    let stack = OneAgent::start_in(install, options).await;
    let api = &stack.api;
    let target = Target::start().await;
    let load = json!({"kind": "load", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "model": "open", "rate": 50, "duration": "1s"}});
    let replay = json!({"kind": "replay", "environment": "staging", "target": target.url(),
        "spec": {"requests": [{"offset_ms": 0, "method": "GET", "path": "/"},
                              {"offset_ms": 500, "method": "GET", "path": "/"}]}});
    let checks = json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "spec": {"checks": [{"path": "/slow?ms=300"}]}});
    let mut bodies = vec![load.clone(); 4];
    bodies.extend([replay.clone(), replay, checks.clone(), checks]);
    let created = join_all(bodies.iter().map(|b| api.create_run(b))).await;
    let mut done = Vec::new();
    for record in &created {
        let id = record["id"].as_str().expect("id");
        done.push(api.wait_status(id, &["passed"], LIMIT).await);
    }
    let exclusive: Vec<&Value> = done
        .iter()
        .filter(|r| r["kind"] == "load" || r["kind"] == "replay")
        .collect();
    assert_eq!(exclusive.len(), 6);
    assert_eq!(
        max_overlap(&exclusive),
        1,
        "load and replay runs one at a time on the agent"
    );
}

async fn a_cancelled_load_run_stops_at_once_with_what_it_measured(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;
    let record = api
        .create_run(&json!({
            "kind": "load", "environment": "staging", "target": target.url(),
            "spec": {"operations": [{"path": "/"}], "model": "closed", "connections": 2,
                     "duration": "10m"}
        }))
        .await;
    let id = record["id"].as_str().expect("id");
    // Cancel once the first second has been measured.
    let mut events = api.events(id, None).await;
    loop {
        let event = events.next(LIMIT).await.expect("a load frame");
        if event.event == "load" {
            break;
        }
    }
    let started = std::time::Instant::now();
    let (status, done) = api
        .post(
            &format!("/v1/reliability/runs/{id}/cancel"),
            &json!({"reason": "enough"}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped promptly"
    );
    assert_eq!(done["status"], "cancelled");
    assert_eq!(done["reason"], "enough");
    let result = &done["result"];
    assert!(
        result["requests"].as_u64().is_some_and(|n| n > 0),
        "the result keeps what was measured: {done}"
    );
    assert!(
        result["measured_seconds"]
            .as_f64()
            .is_some_and(|s| s > 0.5 && s < 60.0),
        "{done}"
    );
}

async fn a_scenario_run_is_replayed_from_its_record(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;
    let scenario_body = json!({
        "kind": "scenario", "environment": "staging", "target": target.url(),
        "spec": {"slug": "before-fix", "warmup": 2,
                 "ops": ["GET / 20", "GET /health 10", "POST /slow 5 {\"sku\": \"A1-secret\"}"]}
    });
    let scenario = api.create_run(&scenario_body).await;
    let scenario_id = scenario["id"].as_str().expect("id");
    assert_eq!(
        scenario["scenario"]["id"], "before-fix",
        "an inline scenario is stored under its own slug: {scenario}"
    );
    let recorded = api.wait_status(scenario_id, &["passed"], LIMIT).await;
    let log = recorded["result"]["requests"].as_array().expect("log");
    assert_eq!(log.len(), 41, "2 + 2 + 2 warm-up, 20 + 10 + 5 measured");
    assert_eq!(recorded["units"]["spent"], 41);
    // Request bodies are never stored in a run: the record says one was sent, and its
    // command replays the stored scenario version, which holds it.
    let text = recorded.to_string();
    assert!(!text.contains("A1-secret"), "{text}");
    let command = recorded["result"]["command"].as_str().expect("command");
    assert!(
        command.contains("--scenario") && command.contains("--version sha256:"),
        "{command}"
    );

    // A second run of the same scenario version compares with the first, op by op.
    let second = api.create_run(&scenario_body).await;
    let second_id = second["id"].as_str().expect("id");
    api.wait_status(second_id, &["passed"], LIMIT).await;
    let (status, compared) = api
        .get(&format!(
            "/v1/reliability/compare?before={scenario_id}&after={second_id}"
        ))
        .await;
    assert_eq!(status, 200, "{compared}");
    assert!(compared["verdict"].is_string(), "{compared}");
    assert_eq!(compared["samples"], json!([35, 35]), "{compared}");
    let judged = compared.to_string();
    for measure in ["p50 GET /health", "p99 POST /slow", "error rate GET /"] {
        assert!(judged.contains(measure), "{measure} judged: {compared}");
    }

    let replay_body = json!({"kind": "replay", "environment": "staging", "target": target.url(),
        "spec": {"from_run": scenario_id, "speed": 4}});
    let replay = api.create_run(&replay_body).await;
    let replay_id = replay["id"].as_str().expect("id");
    let done = api.wait_status(replay_id, &["passed"], LIMIT).await;
    let result = &done["result"];
    assert_eq!(
        result["requests"], 35,
        "the warm-up is not replayed: {done}"
    );
    assert_eq!(
        result["responses"]["2xx"], 35,
        "every replayed request answered: {done}"
    );
    let names: Vec<&str> = result["operations"]
        .as_array()
        .expect("operations")
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    assert_eq!(names, vec!["GET /", "GET /health", "POST /slow"]);
    // The replay stored the resolved traffic: a second replay of the same run is the same
    // scenario version, so the two can be compared.
    let again = api.create_run(&replay_body).await;
    assert_eq!(again["scenario"]["version"], replay["scenario"]["version"]);

    for (from, why) in [
        (json!("no-such-run"), "does not exist"),
        (json!(replay_id), "a replay takes a finished scenario run"),
    ] {
        let body = json!({"kind": "replay", "environment": "staging", "target": target.url(),
            "spec": {"from_run": from}});
        let (status, answer) = api.post("/v1/reliability/runs", &body).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["code"], "invalid_spec");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(why)),
            "{answer}"
        );
    }
}

on_both_stores!(
    a_scenario_run_is_replayed_from_its_record,
    per_second_frames_merge_into_the_run_totals,
    load_runs_never_overlap_on_one_agent,
    a_cancelled_load_run_stops_at_once_with_what_it_measured
);
