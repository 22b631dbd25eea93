//! The operator's per-account egress exceptions (issue 38), through real processes: on a
//! controller with no process-wide exception (the default policy), `iohr-controller
//! account allow-target ACCOUNT 127.0.0.1` lets that account, and no other, subscribe a
//! webhook on loopback and have it delivered, and start a cloud run to loopback that a
//! platform agent with no `--allow-target` of its own reaches (the offer carries the
//! account's entries). Another account is refused at creation (422 target_not_allowed) and
//! by the platform agent; an operator's own agent keeps its operator's policy; removing
//! the entry closes it again at once; every change leaves an audit line. Nothing is sent
//! outside 127.0.0.0/8.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::recorder::Recorder;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, wait_for};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

/// Test-sized deliveries: one attempt, a fast poll.
const FAST: &[&str] = &["--webhook-retry-schedule", "0s", "--events-poll-ms", "50"];

fn checks(target: &str, executor: &str) -> Value {
    json!({"kind": "checks", "environment": "staging", "target": target, "executor": executor,
        "spec": {"checks": [{"path": "/probe"}]}})
}

fn refused(status: u16, body: &Value) -> bool {
    status == 422 && body["error"]["code"] == "target_not_allowed"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_opens_loopback_for_one_account_only() {
    let install = Installation::new(Backend::Sqlite).await;
    install.create_account("other", 10, false);
    install.create_account("platform", 10, true);
    let added = install.ctl2("account", &["allow-target", "default", "127.0.0.1/32"]);
    assert!(
        added.contains("egress exceptions added: 127.0.0.1"),
        "{added}"
    );
    let listed = install.ctl2("account", &["allow-target", "default"]);
    assert_eq!(
        listed.trim(),
        "127.0.0.1",
        "stored in one spelling: {listed}"
    );
    let none = install.ctl2("account", &["allow-target", "other"]);
    assert!(none.contains("no egress exceptions"), "{none}");

    let controller = Controller::start_default_policy(&install, FAST).await;
    let a = Api::new(&controller.api_url(), &install.full_token());
    let b = Api::new(
        &controller.api_url(),
        &install.token("other", &["reliability:run", "reliability:read"], None),
    );

    // Webhooks: A subscribes a loopback receiver and it is delivered to; B is refused.
    let receiver = Recorder::start().await;
    let hook =
        json!({"url": format!("{}/hook", receiver.url()), "events": ["reliability.run.finished"]});
    let (status, body) = b.post("/v1/reliability/webhooks", &hook).await;
    assert!(refused(status, &body), "{status} {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("account allow-target"),
        "{body}"
    );
    let (status, body) = a.post("/v1/reliability/webhooks", &hook).await;
    assert_eq!(status, 201, "{body}");
    // One run.finished of A: queued for an agent of its own it does not have, cancelled.
    let run = a
        .create_run(&json!({"kind": "checks", "environment": "staging",
            "target": "http://127.0.0.1:9", "spec": {"checks": [{"path": "/"}]}}))
        .await;
    let id = run["id"].as_str().unwrap();
    let (status, body) = a
        .post(&format!("/v1/reliability/runs/{id}/cancel"), &json!({}))
        .await;
    assert!(status < 300, "{status} {body}");
    wait_for("A's webhook delivered", LIMIT, || async {
        receiver
            .heads()
            .iter()
            .any(|head| head.starts_with("POST /hook"))
            .then_some(())
    })
    .await;

    // Cloud runs: a platform agent with the deny-list and no exception of its own, and an
    // operator's own agent of A with the deny-list on and none either.
    let platform = Agent::start(
        &install,
        "cloud-1",
        &install.agent_identity("platform", "cloud-1"),
        &controller.link_url(),
        AgentOptions {
            allow_targets: &[],
            ..AgentOptions::default()
        },
    )
    .await;
    let strict = Agent::start(
        &install,
        "strict",
        &install.agent_identity("default", "strict"),
        &controller.link_url(),
        AgentOptions {
            extra: &["--deny-private"],
            allow_targets: &[],
            ..AgentOptions::default()
        },
    )
    .await;
    a.wait_online("strict", LIMIT).await;
    Api::new(
        &controller.api_url(),
        &install.token("platform", &["reliability:read"], None),
    )
    .wait_online("cloud-1", LIMIT)
    .await;
    let target = Recorder::start().await;
    let (status, body) = b
        .post("/v1/reliability/runs", &checks(&target.url(), "cloud"))
        .await;
    assert!(
        refused(status, &body),
        "B is refused at POST: {status} {body}"
    );
    let passed = a
        .run_until(
            &checks(&target.url(), "cloud"),
            &["passed", "failed", "error"],
            LIMIT,
        )
        .await;
    assert_eq!(passed["status"], "passed", "{passed}");
    assert_eq!(passed["agent"], "cloud-1", "{passed}");
    assert_eq!(target.heads().len(), 1);
    // A name the controller leaves to the agent: B's run reaches the platform agent, which
    // refuses loopback for B (A's entries came with A's offer only).
    let by_name = format!("http://127.1:{}", target.port);
    let b_run = b
        .run_until(
            &checks(&by_name, "cloud"),
            &["passed", "failed", "error"],
            LIMIT,
        )
        .await;
    assert_eq!(b_run["status"], "error", "{b_run}");
    assert_eq!(target.heads().len(), 1, "nothing sent for B");
    // An operator's own agent keeps its operator's policy, whatever the account's entries.
    let own = a
        .run_until(
            &checks(&target.url(), "agent:strict"),
            &["passed", "failed", "error"],
            LIMIT,
        )
        .await;
    assert_eq!(own["status"], "error", "{own}");
    assert_eq!(target.heads().len(), 1, "nothing sent by the strict agent");

    // Removed: A is refused at once, by the running controller.
    let removed = install.ctl2(
        "account",
        &[
            "allow-target",
            "default",
            "--remove",
            "127.0.0.1",
            "--by",
            "ops",
        ],
    );
    assert!(removed.contains("removed: 127.0.0.1"), "{removed}");
    let (status, body) = a
        .post("/v1/reliability/runs", &checks(&target.url(), "cloud"))
        .await;
    assert!(refused(status, &body), "{status} {body}");
    let (status, body) = a.post("/v1/reliability/webhooks", &hook).await;
    assert!(refused(status, &body), "{status} {body}");

    // Both changes are in A's audit trail, by the operator.
    let auditor = Api::new(
        &controller.api_url(),
        &install.token("default", &["reliability:audit"], None),
    );
    let (status, audit) = auditor.get("/v1/reliability/audit").await;
    assert_eq!(status, 200, "{audit}");
    let text = audit.to_string();
    assert!(
        text.contains("egress.allow")
            && text.contains("egress.disallow")
            && text.contains("operator:ops"),
        "{audit}"
    );

    platform.kill().await;
    strict.kill().await;
}
