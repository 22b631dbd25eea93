//! What the partition scenarios share (issue 34): a controller listening for agents on a
//! namespace's host address, one agent inside that namespace, a target on the host
//! address (reached through the veth pair) logging every request, and the bounds the
//! checker holds them to. Here the heartbeat H is 1 s.

// Several test files include this module and each uses part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use iohr_tests::history::{Bounds, Recorder, tagged_path};
use iohr_tests::partition::Netns;
use iohr_tests::process::AgentOptions;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target};
use serde_json::{Value, json};

pub const LIMIT: Duration = Duration::from_secs(60);
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// The agent's lease TTL: 3 heartbeats.
pub const TTL: Duration = Duration::from_secs(3);
/// The agent stops within one TTL of its last message from the controller, which came
/// at most one heartbeat before the cut (TTL + H); the controller hands nothing of it on
/// before that.
pub const STOP_BOUND: Duration = Duration::from_secs(3 + 1);
/// What the agent's side gets on top: its requests in flight, the fence's 100 ms tick, a
/// loaded machine.
pub const SLACK: Duration = Duration::from_secs(2);
/// When the cut agent's last request has come, at the latest.
pub const STOP: Duration = Duration::from_secs(3 + 1 + 2);
/// A fault is undone within a second of its deadline (docs/faults.md).
pub const FAULT: Duration = Duration::from_secs(1);
pub const BOUNDS: Bounds = Bounds {
    stop_ms: STOP_BOUND.as_millis() as u64,
    slack_ms: SLACK.as_millis() as u64,
    fault_ms: FAULT.as_millis() as u64,
};

pub struct Cluster {
    pub netns: Netns,
    pub install: Installation,
    pub controller: Controller,
    pub api: Api,
    pub target: Target,
    /// The target's `--request-log`.
    pub target_log: PathBuf,
    pub agent: Agent,
    /// The controller's agent-link port, the one the cuts name.
    pub agent_port: u16,
}

/// The cluster, the agent started with `agent_extra` (such as `--policy FILE`).
pub async fn cluster(backend: Backend, agent_extra: &[&str]) -> Cluster {
    cluster_lasting(backend, agent_extra, Duration::from_secs(600)).await
}

/// The same, its target serving for `life` (the sample target stops by itself then).
pub async fn cluster_lasting(backend: Backend, agent_extra: &[&str], life: Duration) -> Cluster {
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
            extra: agent_extra,
            ..AgentOptions::default()
        },
    )
    .await;
    api.wait_online("edge-1", LIMIT).await;
    let target_log = install.root.join("target-requests.jsonl");
    let target = Target::start_at(
        &format!("{host}:0"),
        &[
            "--request-log",
            &target_log.display().to_string(),
            "--max-seconds",
            &life.as_secs().to_string(),
        ],
    )
    .await;
    let agent_port = controller.agent_link.port();
    Cluster {
        netns,
        install,
        controller,
        api,
        target,
        target_log,
        agent,
        agent_port,
    }
}

impl Cluster {
    /// A recorder of this cluster's history, its agent known by its address.
    pub fn recorder(&self, test: &str) -> Recorder {
        let recorder = Recorder::new(test, BOUNDS);
        recorder.agent("edge-1", self.netns.ns_ip);
        recorder
    }

    pub async fn requests(&self) -> u64 {
        self.target.stats().await["requests"].as_u64().unwrap()
    }

    /// Starts an exclusive load run tagged `tag` (`rate`/s for `seconds`) through the
    /// recorder and waits until it runs and its load reaches the target.
    pub async fn running_load(
        &self,
        rec: &mut Recorder,
        tag: &str,
        rate: u32,
        seconds: u32,
    ) -> String {
        let body = load(&self.target, tag, rate, seconds);
        let id = rec
            .create_run(&self.api, "controller", tag, true, &body)
            .await;
        self.api.wait_status(&id, &["running"], LIMIT).await;
        self.load_reaching_the_target(10).await;
        id
    }

    /// After a heal: the agent is back and its exclusive slot serves a new load run in
    /// full (40 requests, `passed`); returns the new run's id.
    pub async fn serves_again(&self, rec: &mut Recorder) -> String {
        self.api.wait_online("edge-1", LIMIT).await;
        let body = load(&self.target, "again", 20, 2);
        let next = rec
            .create_run(&self.api, "controller", "again", true, &body)
            .await;
        let done = self.api.wait_status(&next, &["passed"], LIMIT).await;
        assert_eq!(done["result"]["requests"], 40, "{done}");
        next
    }

    /// Waits until the target has counted more than `n` requests.
    pub async fn load_reaching_the_target(&self, n: u64) {
        iohr_tests::wait_for("load reaching the target", LIMIT, || async {
            (self.requests().await > n).then_some(())
        })
        .await;
    }
}

/// A load run whose requests carry `tag`, for the history.
pub fn load(target: &Target, tag: &str, rate: u32, seconds: u32) -> Value {
    json!({"kind": "load", "environment": "staging", "target": target.url(),
           "spec": {"operations": [{"path": tagged_path(tag)}], "model": "open",
                    "rate": rate, "duration": format!("{seconds}s")}})
}

/// Every frame once, in order, ending with `finished`.
pub async fn assert_gapless(api: &Api, id: &str) {
    iohr_tests::history::assert_gapless(api, id, LIMIT).await;
}
