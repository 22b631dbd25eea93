//! `faults` runs end to end: `iohr-agent exec` with the example experiment, the policy's
//! refusal, a dry run; through the controller a run that deviates, a production run a
//! person confirmed (the journal names them), and a cancel and a halt in the middle of a
//! fault, after which the fault is undone and the journal says so.

use std::time::Duration;

use iohr_tests::process::{AgentOptions, agent_exec};
use iohr_tests::setup::OneAgent;
use iohr_tests::{Api, Backend, Target, wait_for};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);

fn example() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/faults.json"
    ))
    .expect("examples/faults.json");
    serde_json::from_str(&text).expect("the example is JSON")
}

/// The probe outputs of one steady state (`before` or `after`), by probe name.
fn probe_output(journal: &Value, when: &str, name: &str) -> Value {
    journal["steady_states"][when]["probes"]
        .as_array()
        .and_then(|probes| probes.iter().find(|p| p["activity"]["name"] == name))
        .map(|p| p["output"].clone())
        .unwrap_or_else(|| panic!("probe {name} {when}: {journal}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_adds_latency_deviates_and_undoes_it() {
    let target = Target::start().await;
    let (code, out) = agent_exec("faults", &target.url(), &example(), &[]).await;
    assert_eq!(code, 1, "a deviation is a failed run: {out}");
    assert_eq!(out["status"], "failed", "{out}");
    let journal = &out["result"];
    assert_eq!(journal["deviated"], true, "{journal}");
    let before = probe_output(journal, "before", "home-fast")["latency_ms"]
        .as_f64()
        .expect("latency");
    let after = probe_output(journal, "after", "home-fast")["latency_ms"]
        .as_f64()
        .expect("latency");
    assert!(before < 50.0, "before the fault: {before} ms");
    assert!(
        after >= 100.0,
        "the 100 ms are seen by the probe: {after} ms"
    );
    let ledger = journal["ledger"].as_array().expect("ledger");
    assert_eq!(ledger.len(), 1, "{journal}");
    assert!(ledger[0]["undone_at"].is_u64(), "undone: {journal}");
    assert_eq!(journal["rollbacks"][0]["status"], "succeeded", "{journal}");
    target.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_refuses_what_its_policy_does_not_allow_and_a_dry_run_applies_nothing() {
    let target = Target::start().await;
    let hog = json!({
        "title": "hog", "description": "a CPU hog",
        "method": [{"type": "action", "name": "burn", "provider":
            {"type": "iohr", "fault": "cpu_hog", "workers": 1, "duration": "5s"}}],
    });
    let (code, out) = agent_exec("faults", &target.url(), &hog, &[]).await;
    assert_eq!(
        (code, out["status"].clone()),
        (3, json!("refused")),
        "{out}"
    );
    assert!(
        out["reason"].as_str().unwrap_or_default().contains("cpu"),
        "the reason names what was refused: {out}"
    );
    assert_eq!(out["result"]["ledger"], json!([]), "nothing applied: {out}");

    let (code, out) = agent_exec("faults", &target.url(), &example(), &["--dry-run"]).await;
    assert_eq!(code, 0, "{out}");
    let journal = &out["result"];
    assert_eq!(journal["dry_run"], true, "{journal}");
    assert_eq!(journal["ledger"], json!([]), "nothing applied: {journal}");
    let plan = journal["plan"].as_array().expect("plan");
    assert_eq!(plan.len(), 1, "{journal}");
    assert_eq!(
        plan[0]["undo"]["undo"], "proxy_fault",
        "how it would be undone: {journal}"
    );
    target.stop().await;
}

/// A policy file allowing the target's port, and the agent options that use it.
fn policy_for(target: &Target, dir: &std::path::Path) -> String {
    let port = target
        .url()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse::<u16>().ok())
        .expect("target port");
    let path = dir.join("policy.json");
    std::fs::write(&path, json!({"target_ports": [port]}).to_string()).expect("policy");
    path.display().to_string()
}

/// An experiment whose latency fault holds for a minute while the method waits.
fn long_fault() -> Value {
    json!({
        "title": "long", "description": "latency held while the method waits",
        "method": [{"type": "action", "name": "slow", "pauses": {"after": 60},
            "provider": {"type": "iohr", "fault": "network", "duration": "90s",
                "toxic": {"type": "latency", "latency_ms": 100}}}],
    })
}

async fn wait_applied(api: &Api, id: &str) {
    let mut events = api.events(id, None).await;
    loop {
        let event = events
            .next(LIMIT)
            .await
            .expect("frames until the fault is applied");
        if event.event == "timeline" && event.data["data"]["status"] == "applied" {
            return;
        }
        assert_ne!(
            event.event, "finished",
            "ended before the fault was applied: {event:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_runs_through_the_controller_deviate_confirm_cancel_and_halt() {
    let target = Target::start().await;
    let dir = std::env::temp_dir().join(format!("iohr-faults-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let policy = policy_for(&target, &dir);
    let extra = ["--policy", policy.as_str()];
    let stack = OneAgent::start(
        Backend::Sqlite,
        AgentOptions {
            environments: &["staging", "production"],
            extra: &extra,
            ..AgentOptions::default()
        },
    )
    .await;
    let api = &stack.api;

    // Staging: runs at once, deviates, with a timeline.
    let run = api
        .create_run(&json!({"kind": "faults", "environment": "staging",
            "target": target.url(), "spec": example()}))
        .await;
    let id = run["id"].as_str().expect("id");
    let done = api
        .wait_status(id, &["passed", "failed", "error", "refused"], LIMIT)
        .await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["result"]["deviated"], true, "{done}");
    let frames = api.events(id, None).await.collect(LIMIT).await;
    let timeline: Vec<String> = frames
        .iter()
        .filter(|f| f.event == "timeline")
        .map(|f| {
            format!(
                "{} {}",
                f.data["data"]["phase"].as_str().unwrap_or("?"),
                f.data["data"]["status"].as_str().unwrap_or("?")
            )
        })
        .collect();
    for step in [
        "hypothesis_before started",
        "method applied",
        "rollback undone",
        "end failed",
    ] {
        assert!(timeline.iter().any(|t| t == step), "{step} in {timeline:?}");
    }

    // Production: waits for a person, who is named in the journal.
    let ada = stack.install.token(
        "default",
        &["reliability:run", "reliability:read"],
        Some("ada"),
    );
    let person = Api::new(&stack.controller.api_url(), &ada);
    let run = api
        .create_run(&json!({"kind": "faults", "environment": "production",
            "target": target.url(), "spec": example()}))
        .await;
    let id = run["id"].as_str().expect("id");
    let hash = run["confirmation"]["hash"].as_str().expect("hash");
    let (status, body) = person
        .post(
            &format!("/v1/reliability/runs/{id}/confirm"),
            &json!({"hash": hash}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let done = api
        .wait_status(id, &["passed", "failed", "error"], LIMIT)
        .await;
    assert_eq!(done["result"]["confirmed_by"], "ada", "{done}");

    // A cancel in the middle of a fault: the fault is undone, the journal says so.
    for stop in ["cancel", "halt"] {
        let run = api
            .create_run(&json!({"kind": "faults", "environment": "staging",
                "target": target.url(), "spec": long_fault()}))
            .await;
        let id = run["id"].as_str().expect("id").to_string();
        wait_applied(api, &id).await;
        let stopped_at = std::time::Instant::now();
        let (status, body) = match stop {
            "cancel" => {
                api.post(&format!("/v1/reliability/runs/{id}/cancel"), &json!({}))
                    .await
            }
            _ => api.post("/v1/reliability/halt", &json!({})).await,
        };
        assert!(status == 200 || status == 202, "{stop}: {body}");
        let done = api.wait_status(&id, &["cancelled", "error"], LIMIT).await;
        assert_eq!(done["status"], "cancelled", "{stop}: {done}");
        let journal = &done["result"];
        assert_eq!(journal["status"], "interrupted", "{stop}: {journal}");
        let undone = journal["ledger"][0]["undone_at"].as_u64().expect("undone");
        let applied = journal["ledger"][0]["applied_at"]
            .as_u64()
            .expect("applied");
        assert!(
            undone - applied < 30_000,
            "undone long before its deadline: {journal}"
        );
        assert!(
            stopped_at.elapsed() < Duration::from_secs(10),
            "{stop} ended the run in {:?}",
            stopped_at.elapsed()
        );
    }
    // The agent's ledger holds nothing open.
    ledger_all_closed(&stack.install.root, "edge-1", LIMIT).await;
    target.stop().await;
}

/// Polls the agent's ledger file until every entry it opened is closed.
async fn ledger_all_closed(install_root: &std::path::Path, agent: &str, limit: Duration) {
    let ledger = install_root.join(format!("agent-state-{agent}/ledger/ledger.jsonl"));
    wait_for("a ledger with every entry closed", limit, || async {
        let text = std::fs::read_to_string(&ledger).ok()?;
        let opened = text
            .lines()
            .filter(|l| l.contains("\"op\":\"open\""))
            .count();
        let closed = text
            .lines()
            .filter(|l| l.contains("\"op\":\"close\""))
            .count();
        (opened > 0 && opened == closed).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_is_undone_when_the_controller_is_gone_for_a_lease_ttl() {
    let target = Target::start().await;
    let dir = std::env::temp_dir().join(format!("iohr-faults-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let policy = policy_for(&target, &dir);
    let extra = ["--policy", policy.as_str()];
    let stack = OneAgent::start(
        Backend::Sqlite,
        AgentOptions {
            extra: &extra,
            ..AgentOptions::default()
        },
    )
    .await;
    let run = stack
        .api
        .create_run(&json!({"kind": "faults", "environment": "staging",
            "target": target.url(), "spec": long_fault()}))
        .await;
    let id = run["id"].as_str().expect("id").to_string();
    wait_applied(&stack.api, &id).await;
    let root = stack.install.root.clone();
    let gone = std::time::Instant::now();
    stack.controller.kill().await;
    // The lease TTL here is 600 ms (3 heartbeats of 200 ms): the agent fences the run by
    // itself and its rollbacks undo the fault; 5 s bounds the wait generously.
    ledger_all_closed(&root, "edge-1", Duration::from_secs(5)).await;
    eprintln!(
        "fault undone {:?} after the controller went away",
        gone.elapsed()
    );
    target.stop().await;
}
