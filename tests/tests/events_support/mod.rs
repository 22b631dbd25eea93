//! What the events tests share: the stack, the runs they make, reading the feed.

// Two test files include this module and each uses part of it.
#![allow(dead_code)]

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target};
use serde_json::{Value, json};

pub const LIMIT: Duration = Duration::from_secs(60);

/// A controller (with `flags`) and one agent on a fresh installation.
pub async fn stack(backend: Backend, flags: &[&str]) -> (Installation, Controller, Api, Agent) {
    let install = Installation::new(backend).await;
    let controller = Controller::start_with(&install, 200, None, flags).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let agent = Agent::enrol(
        &install,
        &api,
        "edge-1",
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    (install, controller, api, agent)
}

pub fn failing_checks(target: &Target) -> Value {
    json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "scenario_name": "smoke",
        "spec": {"checks": [{"name": "home", "path": "/"}, {"name": "broken", "path": "/status/500"}],
                 "invariants": [{"rule": "no_5xx"}]}})
}

pub fn passing_checks(target: &Target) -> Value {
    json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "spec": {"checks": [{"name": "home", "path": "/"}]}})
}

pub async fn finished(api: &Api, body: &Value, status: &str) -> Value {
    let run = api.create_run(body).await;
    let id = run["id"].as_str().expect("id").to_string();
    let done = api
        .wait_status(&id, &["passed", "failed", "error"], LIMIT)
        .await;
    assert_eq!(done["status"], status, "{done}");
    done
}

/// Reads `n` events from a feed.
pub async fn read(feed: &mut iohr_tests::Sse, n: usize) -> Vec<iohr_tests::api::Event> {
    let mut events = Vec::new();
    for _ in 0..n {
        events.push(feed.next(LIMIT).await.expect("an event"));
    }
    events
}

/// The event ids of the installation (from its feed), in order.
pub async fn feed_ids(api: &Api, n: usize) -> Vec<(String, String)> {
    let mut feed = api.feed(None).await;
    read(&mut feed, n)
        .await
        .into_iter()
        .map(|e| {
            (
                e.data["id"].as_str().unwrap().to_string(),
                e.data["type"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}
