//! Queues through real processes: `max_concurrent_jobs` and the plan's concurrency under
//! many concurrent POSTs, and accounts taking turns on our cloud's shared agents.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use futures_util::future::join_all;
use iohr_tests::process::AgentOptions;
use iohr_tests::records::{max_overlap, millis, rfc3339_ms};
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target, on_both_stores};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(90);

async fn the_plan_and_max_concurrent_jobs_hold_under_concurrent_posts(backend: Backend) {
    let install = Installation::new(backend).await;
    install.ctl2(
        "account",
        &["set-plan", "--name", "default", "--max-running", "3"],
    );
    let controller = Controller::start(&install, 200, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let target = Target::start().await;
    let mut agents = Vec::new();
    for name in ["edge-1", "edge-2"] {
        let identity = install.agent_identity("default", name);
        let options = AgentOptions {
            max_jobs: 2,
            ..AgentOptions::default()
        };
        agents.push(Agent::start(&install, name, &identity, &controller.link_url(), options).await);
        api.wait_online(name, LIMIT).await;
    }
    let body = json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "spec": {"checks": [{"path": "/slow?ms=120"}]}});
    let created = join_all((0..24).map(|_| api.create_run(&body))).await;
    let mut done = Vec::new();
    for record in &created {
        let id = record["id"].as_str().expect("id");
        done.push(api.wait_status(id, &["passed"], LIMIT).await);
    }
    let all: Vec<&Value> = done.iter().collect();
    assert_eq!(
        max_overlap(&all),
        3,
        "the plan's 3 at once, reached and never passed"
    );
    for name in ["edge-1", "edge-2"] {
        let mine: Vec<&Value> = done.iter().filter(|r| r["agent"] == name).collect();
        assert!(!mine.is_empty(), "{name} took runs");
        assert!(
            max_overlap(&mine) <= 2,
            "{name} never ran more than max_concurrent_jobs"
        );
    }
}

async fn accounts_take_turns_on_cloud_agents(backend: Backend) {
    let install = Installation::new(backend).await;
    install.create_account("platform", 100, true);
    install.create_account("other", 4, false);
    install.ctl2(
        "account",
        &["set-plan", "--name", "default", "--max-running", "100"],
    );
    let controller = Controller::start(&install, 200, None).await;
    let busy = Api::new(&controller.api_url(), &install.full_token());
    let lonely = Api::new(
        &controller.api_url(),
        &install.token("other", &["reliability:run", "reliability:read"], None),
    );
    let identity = install.agent_identity("platform", "cloud-1");
    let options = AgentOptions {
        max_jobs: 1,
        ..AgentOptions::default()
    };
    let _cloud = Agent::start(
        &install,
        "cloud-1",
        &identity,
        &controller.link_url(),
        options,
    )
    .await;
    let platform = Api::new(
        &controller.api_url(),
        &install.token("platform", &["reliability:read"], None),
    );
    platform.wait_online("cloud-1", LIMIT).await;
    let target = Target::start().await;
    let body = json!({"kind": "checks", "environment": "staging", "target": target.url(), "executor": "cloud",
        "spec": {"checks": [{"path": "/slow?ms=60"}]}});

    let mut many = Vec::new();
    for _ in 0..30 {
        many.push(busy.create_run(&body).await);
    }
    let one = lonely.create_run(&body).await;
    let one_id = one["id"].as_str().expect("id");
    let one_done = lonely.wait_status(one_id, &["passed"], LIMIT).await;
    assert_eq!(one_done["agent"], "cloud-1");
    let posted = millis(&one, "created_at");
    let started = millis(&one_done, "started_at");
    let mut overtook = 0;
    for record in &many {
        let r = busy.run(record["id"].as_str().expect("id")).await;
        if let Some(start) = r["started_at"].as_str().map(rfc3339_ms)
            && start >= posted
            && start < started
        {
            overtook += 1;
        }
    }
    assert!(
        overtook <= 1,
        "{overtook} of the busy account's runs started before the other account's one run"
    );
}

on_both_stores!(
    the_plan_and_max_concurrent_jobs_hold_under_concurrent_posts,
    accounts_take_turns_on_cloud_agents
);
