//! The service's promises on a bad network (issue 34, scenario 5): 10% of packets lost on
//! every link, and 200 ms ± 100 ms of delay each way on the agent's link to its
//! controller, for the length of a load run and then a faults run.
//!
//! The agent runs in one network namespace, the controller in another (tests/src/
//! partition.rs), each with `Cut::Loss(10)`: so the agent's link, the agent's requests to
//! the target, the controller's link to PostgreSQL (a private cluster on the controller's
//! host address, tests/src/pg_cluster.rs) and the test's own API calls all lose packets.
//! The agent dials a delaying relay (tests/src/relay.rs, delays drawn from a seeded
//! generator) on the host, which dials the controller. TCP resends what is lost, so both
//! runs must end as on a good network: the load run `passed` with every request sent, the
//! faults run `passed` with its fault undone before its deadline and nothing left in the
//! agent's ledger. The test writes a history (tests/src/history.rs: the target's own
//! request log, the runs' statuses and streams, the controller's leases, the fault) that
//! the checker (tests/src/checker.rs) holds to every promise: each run ends once with
//! nothing of it after, every frame once, in order, never two agents on an exclusive run
//! nor two exclusive runs on the agent, the fault undone within its bound.
//!
//! H = 1 s here (TTL 3 s): the delays and resends stay well under one TTL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

mod partition_support;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use iohr_tests::history::{Fault, Recorder, tagged_path};
use iohr_tests::partition::{Cut, Netns, ledger_all_closed};
use iohr_tests::pg_cluster::PgCluster;
use iohr_tests::process::AgentOptions;
use iohr_tests::relay::DelayRelay;
use iohr_tests::setup::Installation;
use iohr_tests::{Agent, Api, Backend, Controller, Target, on_both_stores};
use partition_support::{BOUNDS, load};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(90);
const HEARTBEAT_MS: u64 = 1000;
const LOSS: u8 = 10;
/// The relay's delay each way: 200 ms ± 100 ms.
const DELAY: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_millis(300);
const ENDED: &[&str] = &["passed", "failed", "error", "cancelled"];

fn policy_for(target: &Target, dir: &std::path::Path) -> String {
    let path = dir.join("policy.json");
    std::fs::write(
        &path,
        json!({"target_ports": [target.addr.port()]}).to_string(),
    )
    .expect("policy");
    path.display().to_string()
}

/// 50 ms of latency through the agent's fault proxy for 3 s; the steady state (GET / is
/// answered 200) holds before and after. The probe waits up to 30 s, not the default 5 s:
/// with one packet in ten lost, a connection's SYN may be resent twice (1 s, then 2 s
/// more) and its data more, and the probe's timeout is the experiment's to choose.
fn short_fault(tag: &str) -> Value {
    json!({
        "title": "latency under loss", "description": "a short latency fault on a lossy network",
        "steady-state-hypothesis": {"title": "home answers",
            "probes": [{"type": "probe", "name": "home-ok", "tolerance": 200,
                        "provider": {"type": "http", "path": tagged_path(tag), "timeout": 30}}]},
        "method": [{"type": "action", "name": "slow", "pauses": {"after": 3},
            "provider": {"type": "iohr", "fault": "network", "duration": "20s",
                "toxic": {"type": "latency", "latency_ms": 50}}}],
        "rollbacks": []
    })
}

async fn loss_and_delay_change_no_outcome(backend: Backend) {
    let agent_ns = Netns::create();
    let controller_ns = Netns::create();
    // PostgreSQL (a private cluster) on the controller's host address: its link is lossy too.
    let cluster = (backend == Backend::Postgres)
        .then(|| PgCluster::start(&[IpAddr::V4(controller_ns.host_ip)]));
    // The agent dials the relay on its namespace's host address: the certificate names it.
    let names = [
        controller_ns.ns_ip.to_string(),
        agent_ns.host_ip.to_string(),
    ];
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let install = match &cluster {
        Some(cluster) => cluster.installation(&names).await,
        None => Installation::with_server_names(backend, &names).await,
    };
    let controller =
        Controller::start_in(&install, "controller", HEARTBEAT_MS, &controller_ns, &[]).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let relay = DelayRelay::start(
        SocketAddr::new(IpAddr::V4(agent_ns.host_ip), 0),
        controller.agent_link,
        DELAY,
        34,
    )
    .await;
    let target_log = install.root.join("target-requests.jsonl");
    let target = Target::start_at(
        &format!("{}:0", agent_ns.host_ip),
        &["--request-log", &target_log.display().to_string()],
    )
    .await;
    let policy = policy_for(&target, &install.root);
    let allowed = ["10.232.0.0/14"];
    let identity = install.agent_identity("default", "edge-1");
    let _agent = Agent::start(
        &install,
        "edge-1",
        &identity,
        &relay.url(),
        AgentOptions {
            allow_targets: &allowed,
            netns: Some(&agent_ns),
            extra: &["--policy", &policy],
            ..AgentOptions::default()
        },
    )
    .await;
    api.wait_online("edge-1", LIMIT).await;

    let mut rec = Recorder::new(&format!("partition-lossy-{backend:?}"), BOUNDS);
    rec.agent("edge-1", agent_ns.ns_ip);
    if cluster.is_some() {
        rec.store_lossy();
    }
    rec.leases(&api);
    let losses = [
        agent_ns.cut(Cut::Loss(LOSS)),
        controller_ns.cut(Cut::Loss(LOSS)),
    ];
    // Neither keeps the agent from hearing its controller: TCP resends what is lost.
    let spans = [
        rec.cut("edge-1", Cut::Loss(LOSS), false),
        rec.cut("controller", Cut::Loss(LOSS), false),
    ];
    let began = std::time::Instant::now();

    // A load run: 20 requests a second for 8 s.
    let body = load(&target, "load", 20, 8);
    let load_id = rec
        .create_run(&api, "controller", "load", true, &body)
        .await;
    let done = api.wait_status(&load_id, ENDED, LIMIT).await;
    eprintln!(
        "{backend:?}: load run {} after {:?}: {}",
        done["status"],
        began.elapsed(),
        done["result"]
    );
    assert_eq!(done["status"], "passed", "{done}");
    assert_eq!(
        done["result"]["requests"], 160,
        "every request sent: {done}"
    );

    // A faults run: its fault applied, held, undone before its deadline.
    let faults = json!({"kind": "faults", "environment": "staging",
        "target": target.url(), "spec": short_fault("faults")});
    let faults_id = rec
        .create_run(&api, "controller", "faults", true, &faults)
        .await;
    let done = api.wait_status(&faults_id, ENDED, LIMIT).await;
    eprintln!(
        "{backend:?}: faults run {} after {:?}",
        done["status"],
        began.elapsed()
    );
    assert_eq!(done["status"], "passed", "{done}");
    let entry = &done["result"]["ledger"][0];
    let at = |field: &str| {
        entry[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field}: {done}"))
    };
    assert!(
        (at("applied_at")..at("deadline")).contains(&at("undone_at")),
        "undone before its deadline: {done}"
    );
    rec.fault(Fault {
        run: faults_id.clone(),
        agent: "edge-1".to_string(),
        applied_ms: at("applied_at"),
        deadline_ms: at("deadline"),
        undone_ms: Some(at("undone_at")),
    });
    ledger_all_closed(&install.root, "edge-1", LIMIT).await;
    drop(losses);
    for span in spans {
        rec.healed(span);
    }
    rec.finish(&target_log, LIMIT).await.verify();
    eprintln!(
        "{backend:?}: both runs under loss and delay in {:?}; relay connections {}",
        began.elapsed(),
        relay.connections()
    );
    controller.stop().await;
}

on_both_stores!(loss_and_delay_change_no_outcome);
