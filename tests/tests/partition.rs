//! The service's promises under a broken network (issue 34), scenarios 1 and 2: an agent
//! in its own network namespace (tests/src/partition.rs) is cut from its controller's
//! agent link (its port only: the target stays reachable) in the middle of an exclusive
//! load run, then healed.
//!
//! The bounds are the link's (docs/architecture.md, "A lost agent"): with heartbeat H, an
//! agent that has not heard from its controller for one lease TTL (3 H) stops its
//! exclusive runs; the controller ends such a run `error` ("agent lost") once the agent
//! has been silent for 3 H and then one TTL plus a grace (3 H each) more. Here H = 1 s.
//!
//! 1. Cut for longer than that: the run ends `error` ("agent lost") with gapless frames;
//!    the target, by its own count, gets no request of it later than TTL plus 2 s of slack
//!    after the cut began; after the heal the agent is back and its slot serves a new run.
//! 2. Cut for less than the TTL: the run goes on and passes with every request sent, its
//!    frames gapless with none repeated.
//!
//! Both on SQLite and PostgreSQL. Everything on addresses the harness made.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::partition::{Cut, Netns};
use iohr_tests::process::AgentOptions;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target, on_both_stores};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);
const HEARTBEAT: Duration = Duration::from_secs(1);
/// The agent's lease TTL: 3 heartbeats.
const TTL: Duration = Duration::from_secs(3);

/// A controller listening for agents on the namespace's host address, one agent inside
/// the namespace, and a target on the host address (reached through the veth pair).
struct Cluster {
    netns: Netns,
    controller: Controller,
    api: Api,
    target: Target,
    _agent: Agent,
    agent_port: u16,
}

async fn cluster(backend: Backend) -> Cluster {
    let netns = Netns::create();
    let host = netns.host_ip.to_string();
    let install = Installation::with_server_names(backend, &[&host]).await;
    let controller = Controller::start_with(
        &install,
        HEARTBEAT.as_millis() as u64,
        None,
        &["--agent-addr", &format!("{host}:0")],
    )
    .await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let identity = install.agent_identity("default", "edge-1");
    let allowed = ["10.232.0.0/14"];
    let agent = Agent::start(
        &install,
        "edge-1",
        &identity,
        &controller.link_url(),
        AgentOptions {
            allow_targets: &allowed,
            netns: Some(&netns),
            ..AgentOptions::default()
        },
    )
    .await;
    api.wait_online("edge-1", LIMIT).await;
    let target = Target::start_at(&format!("{host}:0"), &[]).await;
    let agent_port = controller.agent_link.port();
    Cluster {
        netns,
        controller,
        api,
        target,
        _agent: agent,
        agent_port,
    }
}

fn load(target: &Target, rate: u32, seconds: u32) -> Value {
    json!({"kind": "load", "environment": "staging", "target": target.url(),
           "spec": {"operations": [{"path": "/"}], "model": "open",
                    "rate": rate, "duration": format!("{seconds}s")}})
}

/// Every frame once, in order, ending with `finished`.
async fn assert_gapless(api: &Api, id: &str) {
    let events = api.events(id, None).await.collect(LIMIT).await;
    let numbers: Vec<u64> = events.iter().filter_map(|e| e.id).collect();
    assert_eq!(
        numbers,
        (1..=numbers.len() as u64).collect::<Vec<_>>(),
        "every frame once, in order"
    );
    assert_eq!(events.last().map(|e| e.event.as_str()), Some("finished"));
}

async fn requests(target: &Target) -> u64 {
    target.stats().await["requests"].as_u64().unwrap()
}

async fn cut_longer_than_the_ttl_ends_the_run_and_stops_its_load(backend: Backend) {
    let c = cluster(backend).await;
    let run = c.api.create_run(&load(&c.target, 20, 60)).await;
    let id = run["id"].as_str().unwrap().to_string();
    c.api.wait_status(&id, &["running"], LIMIT).await;
    iohr_tests::wait_for("load reaching the target", LIMIT, || async {
        (requests(&c.target).await > 10).then_some(())
    })
    .await;

    let cut = c.netns.cut(Cut::Port(c.agent_port));
    let cut_at = tokio::time::Instant::now();
    // The agent stops within one TTL of its last message from the controller, which came
    // at most one heartbeat before the cut; then its requests in flight end.
    let bound = TTL + HEARTBEAT + Duration::from_secs(2);
    tokio::time::sleep_until(cut_at + bound).await;
    let stopped = requests(&c.target).await;
    // Still cut, three seconds on: not one more request.
    tokio::time::sleep_until(cut_at + bound + Duration::from_secs(3)).await;
    let later = requests(&c.target).await;
    assert_eq!(
        later, stopped,
        "the cut agent's run sent requests {bound:?} after the cut began"
    );
    // The controller ends the run only after 3 H of silence plus a TTL and a grace.
    let ended = c.api.wait_status(&id, &["error"], LIMIT).await;
    assert_eq!(ended["reason"], "agent lost", "{ended}");
    drop(cut);

    // Healed: the agent comes back and its exclusive slot serves a new run.
    c.api.wait_online("edge-1", LIMIT).await;
    let next = c.api.create_run(&load(&c.target, 20, 2)).await;
    let done = c
        .api
        .wait_status(next["id"].as_str().unwrap(), &["passed"], LIMIT)
        .await;
    assert_eq!(done["result"]["requests"], 40, "{done}");
    assert_gapless(&c.api, &id).await;
    c.controller.stop().await;
}

async fn cut_shorter_than_the_ttl_loses_nothing(backend: Backend) {
    let c = cluster(backend).await;
    let run = c.api.create_run(&load(&c.target, 50, 6)).await;
    let id = run["id"].as_str().unwrap().to_string();
    c.api.wait_status(&id, &["running"], LIMIT).await;
    iohr_tests::wait_for("load reaching the target", LIMIT, || async {
        (requests(&c.target).await > 10).then_some(())
    })
    .await;

    let cut = c.netns.cut(Cut::Port(c.agent_port));
    // Half the TTL: neither side may give the run up.
    tokio::time::sleep(TTL / 2).await;
    drop(cut);

    let done = c
        .api
        .wait_status(&id, &["passed", "failed", "error"], LIMIT)
        .await;
    assert_eq!(done["status"], "passed", "{done}");
    assert_eq!(
        done["result"]["requests"], 300,
        "every request sent: {done}"
    );
    assert_gapless(&c.api, &id).await;
    c.controller.stop().await;
}

on_both_stores!(
    cut_longer_than_the_ttl_ends_the_run_and_stops_its_load,
    cut_shorter_than_the_ttl_loses_nothing,
);
