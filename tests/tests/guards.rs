//! Guards against runs that cannot be what was meant (issue 12): an `agent:NAME` executor
//! naming no agent of the account is refused; targets are stored in one spelling, so two
//! spellings of one target compare and share findings; a run that waits for an agent says
//! so in its reason, which follows the agents as they connect, leave or are removed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target, on_both_stores, wait_for};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

fn checks(target: &str, environment: &str, executor: Option<&str>) -> Value {
    let mut body = json!({"kind": "checks", "environment": environment, "target": target,
        "scenario_name": "smoke",
        "spec": {"checks": [{"name": "home", "path": "/"}, {"name": "broken", "path": "/status/500"}]}});
    if let Some(executor) = executor {
        body["executor"] = json!(executor);
    }
    body
}

async fn run_ids(api: &Api) -> Vec<String> {
    let (status, page) = api.get("/v1/reliability/runs").await;
    assert_eq!(status, 200, "{page}");
    page["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_string())
        .collect()
}

/// Polls the run until its reason satisfies `wanted`.
async fn wait_reason(api: &Api, id: &str, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    wait_for(&format!("run {id}: {what}"), LIMIT, || async {
        let record = api.run(id).await;
        wanted(&record["reason"]).then_some(record)
    })
    .await
}

async fn an_unknown_agent_is_refused_and_nothing_is_stored(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 200, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let target = "http://127.0.0.1:9";

    let (status, body) = api
        .post(
            "/v1/reliability/runs",
            &checks(target, "staging", Some("agent:nobody")),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("unknown_agent")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("nobody"),
        "{body}"
    );
    assert!(run_ids(&api).await.is_empty(), "nothing stored");

    // Registered and never connected: known, and the run says what it waits for.
    install.agent_identity("default", "edge-1");
    let run = api
        .create_run(&checks(target, "staging", Some("agent:edge-1")))
        .await;
    assert_eq!(run["status"], "queued");
    assert_eq!(run["reason"], "agent edge-1 is not connected", "{run}");

    // Removed: unknown again.
    install.ctl2(
        "agent",
        &["remove", "--account", "default", "--agent", "edge-1"],
    );
    let (status, body) = api
        .post(
            "/v1/reliability/runs",
            &checks(target, "staging", Some("agent:edge-1")),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("unknown_agent")),
        "{body}"
    );
    assert_eq!(run_ids(&api).await.len(), 1, "only the first run is stored");

    // Our cloud with no platform agent: queued, saying so, as before.
    let run = api
        .create_run(&checks(target, "staging", Some("cloud")))
        .await;
    assert_eq!(run["status"], "queued");
    assert_eq!(
        run["reason"], "no connected cloud agent runs kind checks",
        "{run}"
    );
}

async fn two_spellings_of_a_target_are_one_target(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;
    let plain = format!("http://127.0.0.1:{}", target.addr.port());
    let mut records = Vec::new();
    for spelling in [
        format!("{plain}/"),
        format!("HTTP://127.0.0.1:{}", target.addr.port()),
    ] {
        let run = api.create_run(&checks(&spelling, "staging", None)).await;
        assert_eq!(run["target"], plain.as_str(), "stored normalised: {run}");
        let id = run["id"].as_str().expect("id").to_string();
        let done = api.wait_status(&id, &["failed"], LIMIT).await;
        assert_eq!(done["target"], plain.as_str(), "{done}");
        records.push(done);
    }
    let (before, after) = (
        records[0]["id"].as_str().expect("id"),
        records[1]["id"].as_str().expect("id"),
    );
    let (status, body) = api
        .get(&format!(
            "/v1/reliability/compare?before={before}&after={after}"
        ))
        .await;
    assert_eq!(status, 200, "the pair compares: {body}");
    // The failing check is one finding, seen again by the second spelling.
    let finding = |record: &Value| -> (String, String) {
        let f = &record["findings"][0];
        (
            f["id"].as_str().expect("finding id").to_string(),
            f["seen"].as_str().expect("seen").to_string(),
        )
    };
    let (first, seen) = finding(&records[0]);
    assert_eq!(seen, "new", "{}", records[0]);
    assert_eq!(
        finding(&records[1]),
        (first, "seen_again".to_string()),
        "{}",
        records[1]
    );
    let (status, page) = api.get("/v1/reliability/findings").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        page["findings"].as_array().map(Vec::len),
        Some(1),
        "findings do not split: {page}"
    );
    target.stop().await;
}

/// A policy file allowing the target's port; its path.
fn policy_for(target: &Target) -> String {
    let dir = std::env::temp_dir().join(format!("iohr-guards-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("policy.json");
    let policy = json!({"target_ports": [target.addr.port()]});
    std::fs::write(&path, policy.to_string()).expect("policy");
    path.display().to_string()
}

async fn a_confirmed_production_run_says_it_waits_for_an_agent_until_one_comes(backend: Backend) {
    // edge-1 serves staging only.
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;
    let ada = stack.install.token(
        "default",
        &["reliability:run", "reliability:read"],
        Some("ada"),
    );
    let person = Api::new(&stack.controller.api_url(), &ada);
    let experiment = json!({"title": "probe", "description": "the home page answers",
        "steady-state-hypothesis": {"title": "up", "probes": [
            {"type": "probe", "name": "home-ok", "tolerance": 200, "provider": {"type": "http", "path": "/"}}]},
        "method": [{"type": "probe", "name": "home", "provider": {"type": "http", "path": "/"}}]});
    let run = api
        .create_run(&json!({"kind": "faults", "environment": "production",
            "target": target.url(), "spec": experiment}))
        .await;
    let id = run["id"].as_str().expect("id").to_string();
    let hash = run["confirmation"]["hash"].as_str().expect("hash");
    let (status, confirmed) = person
        .post(
            &format!("/v1/reliability/runs/{id}/confirm"),
            &json!({"hash": hash}),
        )
        .await;
    assert_eq!(status, 200, "{confirmed}");
    let waiting =
        "no connected agent of this account serves environment production with kind faults";
    assert_eq!(
        confirmed["reason"], waiting,
        "confirmed, and says what it waits for"
    );
    assert_eq!(api.run(&id).await["reason"], waiting);

    // An agent serving production connects: the run is taken and runs.
    let policy = policy_for(&target);
    let extra = ["--policy", policy.as_str()];
    let identity = stack.install.agent_identity("default", "edge-2");
    let _edge2 = Agent::start(
        &stack.install,
        "edge-2",
        &identity,
        &stack.controller.link_url(),
        AgentOptions {
            environments: &["production"],
            max_jobs: 1,
            extra: &extra,
            ..AgentOptions::default()
        },
    )
    .await;
    let done = api.wait_status(&id, &["passed"], LIMIT).await;
    assert_eq!(done["agent"], "edge-2", "{done}");
    assert!(done["reason"].is_null(), "{done}");

    target.stop().await;
}

async fn a_queued_run_says_so_when_its_only_agent_is_removed(backend: Backend) {
    // edge-1 serves staging only; edge-2 production, one job at a time.
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;
    let identity = stack.install.agent_identity("default", "edge-2");
    let _edge2 = Agent::start(
        &stack.install,
        "edge-2",
        &identity,
        &stack.controller.link_url(),
        AgentOptions {
            environments: &["production"],
            max_jobs: 1,
            ..AgentOptions::default()
        },
    )
    .await;
    api.wait_online("edge-2", LIMIT).await;

    // edge-2 busy with a long run, another queued behind it: no reason, it only waits
    // its turn. Then edge-2 is removed: the queued run says it has no agent now.
    let slow = json!({"kind": "checks", "environment": "production", "target": target.url(),
        "spec": {"checks": [{"name": "slow", "path": "/slow?ms=30000"}], "timeout_ms": 40000}});
    let busy = api.create_run(&slow).await;
    let busy_id = busy["id"].as_str().expect("id");
    api.wait_status(busy_id, &["running"], LIMIT).await;
    let queued = api
        .create_run(&checks(&target.url(), "production", None))
        .await;
    let queued_id = queued["id"].as_str().expect("id");
    assert!(queued["reason"].is_null(), "{queued}");
    assert_eq!(api.run(queued_id).await["status"], "queued");
    stack.install.ctl2(
        "agent",
        &["remove", "--account", "default", "--agent", "edge-2"],
    );
    let record = wait_reason(api, queued_id, "a reason once edge-2 is removed", |r| {
        r.as_str()
            == Some(
                "no connected agent of this account serves environment production with kind checks",
            )
    })
    .await;
    assert_eq!(record["status"], "queued", "{record}");

    // An agent that can take it appears: the reason is cleared, and it runs.
    let identity = stack.install.agent_identity("default", "edge-3");
    let _edge3 = Agent::start(
        &stack.install,
        "edge-3",
        &identity,
        &stack.controller.link_url(),
        AgentOptions {
            environments: &["production"],
            ..AgentOptions::default()
        },
    )
    .await;
    let done = api.wait_status(queued_id, &["failed"], LIMIT).await;
    assert_eq!(done["agent"], "edge-3", "{done}");
    assert!(done["reason"].is_null(), "{done}");
    target.stop().await;
}

on_both_stores!(
    an_unknown_agent_is_refused_and_nothing_is_stored,
    two_spellings_of_a_target_are_one_target,
    a_confirmed_production_run_says_it_waits_for_an_agent_until_one_comes,
    a_queued_run_says_so_when_its_only_agent_is_removed,
);
