//! A checks run from POST to finished through real processes: the record, its frames over
//! SSE (from the start, after a Last-Event-ID, live, and of a finished run), the same
//! frames over gRPC, and the CLI's `run --wait --json`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::history::assert_gapless;
use iohr_tests::process::{AgentOptions, bin};
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target, on_both_stores};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(30);

struct Stack {
    install: Installation,
    controller: Controller,
    _agent: Agent,
    target: Target,
    api: Api,
    token: String,
}

async fn stack(backend: Backend) -> Stack {
    let install = Installation::new(backend).await;
    let token = install.full_token();
    let controller = Controller::start(&install, 200, None).await;
    let api = Api::new(&controller.api_url(), &token);
    let agent = Agent::enrol(
        &install,
        &api,
        "edge-1",
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    let target = Target::start().await;
    Stack {
        install,
        controller,
        _agent: agent,
        target,
        api,
        token,
    }
}

fn frame_numbers(events: &[iohr_tests::api::Event]) -> Vec<u64> {
    events.iter().filter_map(|e| e.id).collect()
}

async fn a_run_goes_from_post_to_passed_and_replays(backend: Backend) {
    let s = stack(backend).await;
    let record = s
        .api
        .create_run(&json!({
            "kind": "checks",
            "environment": "staging",
            "target": s.target.url(),
            "change": "core#212",
            "spec": {"checks": [
                {"path": "/"},
                {"path": "/health", "expect_text": "ok", "max_latency_ms": 2000},
                {"name": "slow", "path": "/slow?ms=200"}
            ], "invariants": [{"rule": "no_5xx"}]}
        }))
        .await;
    let id = record["id"].as_str().expect("id").to_string();
    assert_eq!(record["status"], "queued");
    assert_eq!(record["kind"], "checks");
    assert!(
        record["scenario"]["version"]
            .as_str()
            .expect("version")
            .starts_with("sha256:")
    );

    // A viewer that joins while the run is live sees every frame, in order, to the end.
    let live = assert_gapless(&s.api, &id, LIMIT).await;
    let numbers = frame_numbers(&live);
    let kinds: Vec<&str> = live.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"started"));
    assert_eq!(kinds.last(), Some(&"finished"));
    assert_eq!(
        kinds.iter().filter(|k| **k == "check").count(),
        4,
        "three checks and one invariant"
    );
    assert_eq!(
        live.last().expect("finished").data["data"]["status"],
        "passed"
    );

    let done = s.api.run(&id).await;
    assert_eq!(done["status"], "passed", "{done}");
    assert_eq!(done["agent"], "edge-1");
    assert_eq!(done["result"]["passed"], true);
    assert_eq!(done["units"], json!({"reserved": 3, "spent": 3}));
    assert_eq!(done["started_by"]["type"], "token");
    assert_eq!(done["started_by"]["change"], "core#212");
    for field in ["created_at", "started_at", "ended_at"] {
        assert!(done[field].is_string(), "{field} set: {done}");
    }

    // A finished run replays from the start, or after a Last-Event-ID, and closes.
    let again = s.api.events(&id, None).await.collect(LIMIT).await;
    assert_eq!(again, live, "a replay is the same frames");
    let past_the_end = s
        .api
        .events(&id, numbers.last().copied())
        .await
        .collect(LIMIT)
        .await;
    assert!(
        past_the_end.is_empty(),
        "a viewer already past `finished` gets nothing and the stream closes"
    );
    let after = s.api.events(&id, Some(2)).await.collect(LIMIT).await;
    assert_eq!(frame_numbers(&after), numbers[2..].to_vec());
    let (status, body) = s
        .api
        .get(&format!("/v1/reliability/runs/{id}/events?after=x"))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_query"))
    );

    // The same frames over gRPC.
    let channel = tonic::transport::Endpoint::from_shared(s.controller.api_url())
        .expect("endpoint")
        .connect()
        .await
        .expect("h2c to the API port");
    let mut client = iohr_proto::runs::runs_client::RunsClient::new(channel);
    let mut request = tonic::Request::new(iohr_proto::runs::WatchRunRequest {
        run_id: id.clone(),
        after_frame: 0,
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", s.token).parse().expect("metadata"),
    );
    let mut stream = client.watch_run(request).await.expect("watch").into_inner();
    let mut grpc = Vec::new();
    while let Some(frame) = stream.message().await.expect("frame") {
        grpc.push(frame.number);
    }
    assert_eq!(grpc, numbers);
    drop(s.install);
}

async fn the_cli_runs_and_waits_with_json(backend: Backend) {
    let s = stack(backend).await;
    let spec = s.install.path("checks.json");
    std::fs::write(&spec, r#"{"checks": [{"path": "/"}]}"#).expect("spec");
    let output = tokio::process::Command::new(bin("iohr"))
        .args(["--server", &s.controller.api_url(), "--token", &s.token])
        .args([
            "reliability",
            "run",
            "--kind",
            "checks",
            "--environment",
            "staging",
        ])
        .args(["--target", &s.target.url(), "--spec"])
        .arg(&spec)
        .args(["--wait", "--json"])
        .output()
        .await
        .expect("run iohr");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "iohr failed: {stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let record: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    for field in ["id", "kind", "status", "result"] {
        assert!(!record[field].is_null(), "{field} in {record}");
    }
    assert_eq!(record["status"], "passed");
}

on_both_stores!(
    a_run_goes_from_post_to_passed_and_replays,
    the_cli_runs_and_waits_with_json
);
