//! An executor that fails still ends its run: through a real controller and agent, a load
//! run whose executor panics ends `error` at once, a cancel of a run whose executor
//! panics as it stops ends it, and in both cases the agent's exclusive slot is free for
//! the next load run.
//!
//! The panics come from the agent's test hook `IOHR_AGENT_TEST_PANIC` (read only by debug
//! builds, which these tests run): `start` makes the first executor the agent starts
//! panic at once, `cancel` makes it panic when its run is cancelled.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::records::millis;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Target};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);

fn load_run(target: &Target, duration: &str) -> Value {
    json!({"kind": "load", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "model": "open", "rate": 20,
                 "duration": duration}})
}

fn reason(record: &Value) -> &str {
    record["reason"].as_str().unwrap_or_default()
}

/// The next load run on the agent is offered, runs and passes: the slot is free.
async fn next_load_run_passes(stack: &OneAgent, target: &Target) {
    let next = stack.api.create_run(&load_run(target, "1s")).await;
    let id = next["id"].as_str().expect("id");
    let done = stack.api.wait_status(id, &["passed"], LIMIT).await;
    assert_eq!(done["agent"], "edge-1", "{done}");
    assert_eq!(done["result"]["requests"], 20, "{done}");
}

#[tokio::test]
async fn a_panicking_executor_ends_its_run_in_error_and_frees_the_exclusive_slot() {
    let target = Target::start().await;
    let stack = OneAgent::start(
        Backend::Sqlite,
        AgentOptions {
            env: &[("IOHR_AGENT_TEST_PANIC", "start")],
            ..AgentOptions::default()
        },
    )
    .await;
    let record = stack.api.create_run(&load_run(&target, "2s")).await;
    let id = record["id"].as_str().expect("id");
    let failed = stack
        .api
        .wait_status(id, &["error", "passed", "failed", "cancelled"], LIMIT)
        .await;
    assert_eq!(failed["status"], "error", "{failed}");
    assert!(
        reason(&failed).starts_with("executor failed: ")
            && reason(&failed).contains("test hook: the executor panicked as it started"),
        "the panic's message is the reason: {failed}\n{}",
        stack.agent.log_tail()
    );
    let took = millis(&failed, "ended_at") - millis(&failed, "started_at");
    assert!(took < 1000, "ended {took} ms after it started: {failed}");
    next_load_run_passes(&stack, &target).await;
}

#[tokio::test]
async fn a_cancel_of_a_run_whose_executor_panics_as_it_stops_ends_it() {
    let target = Target::start().await;
    let stack = OneAgent::start(
        Backend::Sqlite,
        AgentOptions {
            env: &[("IOHR_AGENT_TEST_PANIC", "cancel")],
            ..AgentOptions::default()
        },
    )
    .await;
    let record = stack.api.create_run(&load_run(&target, "60s")).await;
    let id = record["id"].as_str().expect("id");
    stack.api.wait_status(id, &["running"], LIMIT).await;
    let (status, answer) = stack
        .api
        .post(
            &format!("/v1/reliability/runs/{id}/cancel"),
            &json!({"reason": "enough"}),
        )
        .await;
    assert_eq!(status, 200, "the cancel saw the run end: {answer}");
    assert_eq!(answer["status"], "error", "{answer}");
    assert!(
        reason(&answer).starts_with("executor failed: ")
            && reason(&answer).contains("test hook: the executor panicked while stopping"),
        "{answer}\n{}",
        stack.agent.log_tail()
    );
    next_load_run_passes(&stack, &target).await;
}
