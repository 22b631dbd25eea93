//! Many runs on many agents at once: every frame of every run is stored once and in
//! order, every run ends, and the store never refuses a write (on SQLite a read-then-write
//! transaction that is not taken as a writer from its start fails under this load).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use futures_util::future::join_all;
use iohr_tests::process::AgentOptions;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target, on_both_stores};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(120);
const RUNS: usize = 16;
const CHECKS: usize = 60;

async fn many_runs_on_many_agents_store_every_frame_once(backend: Backend) {
    let install = Installation::new(backend).await;
    install.ctl2(
        "account",
        &["set-plan", "--name", "default", "--max-running", "16"],
    );
    let controller = Controller::start(&install, 300, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let target = Target::start().await;
    let mut agents = Vec::new();
    for i in 0..4 {
        let name = format!("edge-{i}");
        agents.push(
            Agent::enrol(
                &install,
                &api,
                &name,
                &controller.link_url(),
                AgentOptions::default(),
            )
            .await,
        );
    }
    let checks: Vec<Value> = (0..CHECKS)
        .map(|i| json!({"name": format!("c{i}"), "path": "/"}))
        .collect();
    let body = json!({"kind": "checks", "environment": "staging", "target": target.url(), "spec": {"checks": checks}});
    let created = join_all((0..RUNS).map(|_| api.create_run(&body))).await;
    for record in &created {
        let id = record["id"].as_str().expect("id");
        let done = api.wait_ended(id, LIMIT).await;
        assert_eq!(done["status"], "passed", "{done}");
        let events = iohr_tests::history::assert_gapless(&api, id, LIMIT).await;
        assert_eq!(events.iter().filter(|e| e.event == "check").count(), CHECKS);
    }
    let log = std::fs::read_to_string(&controller.log).expect("controller log");
    for failure in [
        "storing frames failed",
        "ending a run failed",
        "storing a completion failed",
    ] {
        assert!(
            !log.contains(failure),
            "the store refused a write ({failure})"
        );
    }
    for agent in &agents {
        let log = std::fs::read_to_string(&agent.log).expect("agent log");
        assert!(
            !log.contains("completion not accepted"),
            "{}: every completion was taken the first time",
            agent.name
        );
    }
}

on_both_stores!(many_runs_on_many_agents_store_every_frame_once);
