//! What happens when the link fails: cancel over the stream, an agent killed mid-run, the
//! stream cut a hundred times during a run, and a controller restarted mid-run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::{
    Agent, Api, Backend, Controller, CutProxy, Installation, Target, on_both_stores, wait_for,
};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

fn slow_checks(target: &Target, count: usize, ms: u64) -> Value {
    let checks: Vec<Value> = (0..count)
        .map(|i| json!({"name": format!("slow-{i}"), "path": format!("/slow?ms={ms}")}))
        .collect();
    json!({"kind": "checks", "environment": "staging", "target": target.url(), "spec": {"checks": checks, "timeout_ms": 30000}})
}

/// Frames of a finished run over SSE, asserted gapless from 1 and ending with `finished`.
async fn gapless_frames(api: &Api, id: &str) -> Vec<iohr_tests::api::Event> {
    iohr_tests::history::assert_gapless(api, id, LIMIT).await
}

async fn cancel_reaches_the_agent_and_the_run_ends_cancelled(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 200, None).await;
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

    let run = api.create_run(&slow_checks(&target, 3, 20_000)).await;
    let id = run["id"].as_str().expect("id");
    api.wait_status(id, &["running"], LIMIT).await;
    // The first check is in flight for 20 s: only a cancel that reaches the agent ends it.
    let started = std::time::Instant::now();
    let (status, record) = api
        .post(
            &format!("/v1/reliability/runs/{id}/cancel"),
            &json!({"reason": "test"}),
        )
        .await;
    assert_eq!(status, 200, "{record}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the agent answered a cancel promptly"
    );
    assert_eq!(record["status"], "cancelled");
    assert_eq!(record["reason"], "test", "the canceller's reason is kept");
    let events = gapless_frames(&api, id).await;
    assert_eq!(
        events.last().expect("finished").data["data"]["status"],
        "cancelled"
    );
    let (status, body) = api
        .post(&format!("/v1/reliability/runs/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("already_finished"))
    );

    // A queued run no agent serves says why it waits, and cancels at once.
    let mut waiting = slow_checks(&target, 1, 1);
    waiting["environment"] = json!("production");
    let run = api.create_run(&waiting).await;
    let reason = run["reason"].as_str().expect("a reason while it waits");
    assert!(reason.contains("environment production"), "{reason}");
    let id = run["id"].as_str().expect("id");
    let (status, record) = api
        .post(&format!("/v1/reliability/runs/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(
        (status, record["status"].as_str()),
        (200, Some("cancelled"))
    );
}

async fn an_agent_killed_mid_run_loses_it_and_a_queued_run_goes_to_another(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 200, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let first = install.agent_identity("default", "edge-1");
    let second = install.agent_identity("default", "edge-2");
    let one_job = AgentOptions {
        max_jobs: 1,
        ..AgentOptions::default()
    };
    let doomed = Agent::start(&install, "edge-1", &first, &controller.link_url(), one_job).await;
    let target = Target::start().await;
    api.wait_online("edge-1", LIMIT).await;

    let lost = api.create_run(&slow_checks(&target, 2, 20_000)).await;
    let lost_id = lost["id"].as_str().expect("id");
    api.wait_status(lost_id, &["running"], LIMIT).await;
    let queued = api.create_run(&slow_checks(&target, 1, 1)).await;
    let queued_id = queued["id"].as_str().expect("id");
    assert_eq!(
        api.run(queued_id).await["status"],
        "queued",
        "edge-1 is full"
    );

    doomed.kill().await;
    let _survivor = Agent::start(
        &install,
        "edge-2",
        &second,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    let ended = api.wait_status(lost_id, &["error"], LIMIT).await;
    assert_eq!(ended["reason"], "agent lost", "{ended}");
    let moved = api.wait_status(queued_id, &["passed"], LIMIT).await;
    assert_eq!(moved["agent"], "edge-2");
    gapless_frames(&api, lost_id).await;
}

async fn a_stream_cut_a_hundred_times_loses_and_repeats_no_frame(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 500, None).await;
    let proxy = CutProxy::start(controller.agent_link).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let identity = install.agent_identity("default", "edge-1");
    let _agent = Agent::start(
        &install,
        "edge-1",
        &identity,
        &proxy.url(),
        AgentOptions::default(),
    )
    .await;
    let target = Target::start().await;
    api.wait_online("edge-1", LIMIT).await;

    const CHECKS: usize = 600;
    let run = api.create_run(&slow_checks(&target, CHECKS, 15)).await;
    let id = run["id"].as_str().expect("id");
    api.wait_status(id, &["running"], LIMIT).await;
    let mut cuts = 0;
    while cuts < 100 {
        // Cut only once the agent is back, so every cut breaks a live stream.
        let before = proxy.connections();
        proxy.cut();
        cuts += 1;
        wait_for("the agent to reconnect", LIMIT, || async {
            (proxy.connections() > before).then_some(())
        })
        .await;
        if api.run(id).await["status"] != "running" {
            break;
        }
    }
    assert_eq!(cuts, 100, "the run outlived a hundred cuts");
    let done = api.wait_status(id, &["passed"], LIMIT).await;
    assert_eq!(done["result"]["total"], CHECKS);
    let events = gapless_frames(&api, id).await;
    let checks = events.iter().filter(|e| e.event == "check").count();
    assert_eq!(checks, CHECKS, "one check frame per check");
}

async fn a_controller_restarted_mid_run_still_finishes_the_run(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 300, None).await;
    let link_port = controller.agent_link.port();
    let token = install.full_token();
    let api = Api::new(&controller.api_url(), &token);
    let _agent = Agent::enrol(
        &install,
        &api,
        "edge-1",
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    let target = Target::start().await;

    let run = api.create_run(&slow_checks(&target, 12, 250)).await;
    let id = run["id"].as_str().expect("id").to_string();
    wait_for("a few frames", LIMIT, || async {
        (api.run(&id).await["status"] == "running").then_some(())
    })
    .await;
    controller.kill().await;
    let restarted = Controller::start(&install, 300, Some(link_port)).await;
    let api = Api::new(&restarted.api_url(), &token);
    let done = api
        .wait_status(&id, &["passed", "failed", "error"], LIMIT)
        .await;
    assert_eq!(done["status"], "passed", "{done}\n{}", restarted.log_tail());
    assert_eq!(done["result"]["total"], 12);
    let events = gapless_frames(&api, &id).await;
    assert_eq!(events.iter().filter(|e| e.event == "check").count(), 12);
}

on_both_stores!(
    cancel_reaches_the_agent_and_the_run_ends_cancelled,
    an_agent_killed_mid_run_loses_it_and_a_queued_run_goes_to_another,
    a_stream_cut_a_hundred_times_loses_and_repeats_no_frame,
    a_controller_restarted_mid_run_still_finishes_the_run,
);
