//! Retention with a real controller: with `--retain-frames 1s` and a fast
//! `--retention-interval`, a finished run's frames expire, its live stream (SSE and the
//! WebSocket's subscribe alike go through the same check) answers 410 `frames_expired`,
//! and its record keeps its result; a fresh run still streams. Both stores.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target, on_both_stores, wait_for};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

async fn a_runs_frames_expire_and_its_record_stays(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start_with(
        &install,
        200,
        None,
        &["--retain-frames", "1s", "--retention-interval", "100ms"],
    )
    .await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let _agent = Agent::enrol(
        &install,
        &api,
        "edge-1",
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    let target = Target::start().await;
    let run = api
        .create_run(
            &json!({"kind": "checks", "environment": "staging", "target": target.url(),
            "spec": {"checks": [{"name": "home", "path": "/"}]}}),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_string();
    api.wait_status(&id, &["passed"], LIMIT).await;

    let expired = wait_for("the run's frames to expire", LIMIT, || async {
        let (status, body) = api.get(&format!("/v1/reliability/runs/{id}/events")).await;
        (status == 410).then_some(body)
    })
    .await;
    assert_eq!(expired["error"]["code"], "frames_expired", "{expired}");
    assert!(
        expired["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("GET /v1/reliability/runs/{id}")),
        "{expired}"
    );
    let record = api.run(&id).await;
    assert_eq!(record["status"], "passed");
    assert_eq!(
        record["result"]["passed"], true,
        "the record keeps its result: {record}"
    );
}

on_both_stores!(a_runs_frames_expire_and_its_record_stays);
