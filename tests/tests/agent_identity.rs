//! Who may hold an agent stream: a certificate from another CA, an expired one, and one
//! of a removed agent are refused before any message is read; a second process with an
//! agent's identity is refused while the first is alive; a removed agent's live stream is
//! closed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, on_both_stores};

const LIMIT: Duration = Duration::from_secs(30);

fn connections_in(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches("agent connected")
        .count()
}

async fn only_known_live_certificates_hold_a_stream(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 200, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());

    // Another controller's CA: the handshake fails.
    let elsewhere = Installation::new(Backend::Sqlite).await;
    let foreign = elsewhere.agent_identity("default", "intruder");
    // It trusts our server (our CA), but its own certificate is signed by the other CA.
    std::fs::copy(install.data_dir.join("pki/ca.pem"), foreign.join("ca.pem"))
        .expect("trust our CA");
    let intruder = Agent::start(
        &install,
        "intruder",
        &foreign,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    intruder.refused("link failed", LIMIT).await;

    // Our CA, but expired.
    let expired = install.path("expired");
    let expired_text = expired.display().to_string();
    install.ctl(&[
        "agent-cert",
        "--account",
        "default",
        "--agent",
        "stale",
        "--out",
        &expired_text,
        "--valid-days",
        "-1",
    ]);
    let stale = Agent::start(
        &install,
        "stale",
        &expired,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    stale.refused("link failed", LIMIT).await;
    assert_eq!(
        connections_in(&controller.log),
        0,
        "neither got as far as a hello"
    );

    // Our CA and valid.
    let identity = install.agent_identity("default", "edge-1");
    let agent = Agent::start(
        &install,
        "edge-1",
        &identity,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    api.wait_online("edge-1", LIMIT).await;

    // A second process with the same identity is refused while the first is alive.
    let twin = Agent::start(
        &install,
        "edge-1-twin",
        &identity,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    twin.refused("already connected from another process", LIMIT)
        .await;
    twin.kill().await;
    api.wait_online("edge-1", LIMIT).await;

    // Removed while connected: its live stream is closed and every new one refused.
    install.ctl2(
        "agent",
        &["remove", "--account", "default", "--agent", "edge-1"],
    );
    agent.refused("belongs to no agent", LIMIT).await;

    let (_, agents) = api.get("/v1/reliability/agents").await;
    let names: Vec<&str> = agents["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .filter_map(|a| a["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["stale"],
        "only the registered, unremoved agents are listed"
    );
    assert_eq!(
        agents["agents"][0]["online"], false,
        "the expired one never came online"
    );
    assert_eq!(
        connections_in(&controller.log),
        1,
        "only edge-1, before its removal, held a stream"
    );
}

on_both_stores!(only_known_live_certificates_hold_a_stream);
