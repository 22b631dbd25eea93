//! `faults` runs end to end: `iohr-agent exec` with the example experiment, the policy's
//! refusal, a dry run; through the controller a run that deviates, a production run a
//! person confirmed (the journal names them), and a cancel and a halt in the middle of a
//! fault, after which the fault is undone and the journal says so.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::{AgentOptions, agent_exec};
use iohr_tests::setup::OneAgent;
use iohr_tests::victim::process_state;
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
    assert_eq!(
        out["dry_run"], true,
        "said at the top, as other kinds say it: {out}"
    );
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

/// A policy file (in a temp dir of its own) allowing the target's port; its path.
fn policy_for(target: &Target) -> String {
    let dir = std::env::temp_dir().join(format!("iohr-faults-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("policy.json");
    let policy = json!({"target_ports": [target.addr.port()]});
    std::fs::write(&path, policy.to_string()).expect("policy");
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
    let policy = policy_for(&target);
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

    // The same experiment again compares with the first: probe by probe, both deviated
    // alike, the rollbacks alike.
    let again = api
        .create_run(&json!({"kind": "faults", "environment": "staging",
            "target": target.url(), "spec": example()}))
        .await;
    let again = again["id"].as_str().expect("id");
    api.wait_status(again, &["passed", "failed", "error", "refused"], LIMIT)
        .await;
    let (status, compared) = api
        .get(&format!(
            "/v1/reliability/compare?before={id}&after={again}"
        ))
        .await;
    assert_eq!(status, 200, "{compared}");
    assert_eq!(compared["verdict"], "unchanged", "{compared}");
    let unchanged = compared["unchanged"].to_string();
    for measure in [
        "probe home-fast before the method",
        "probe home-fast after the method",
        "rollbacks",
    ] {
        assert!(unchanged.contains(measure), "{measure}: {compared}");
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
        let stopped_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
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
        // The promise: a cancel or a halt undoes every fault within a second (the
        // agent's clock and this test's are the same machine's).
        let within = undone.saturating_sub(stopped_at_ms);
        eprintln!("{stop}: fault undone {within} ms after the request");
        assert!(
            within < 1000,
            "{stop}: undone {within} ms after the request: {journal}"
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
    let policy = policy_for(&target);
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

/// The hog children the agent's ledger names (`stop_child` undos with a real pid).
fn hog_pids(ledger: &std::path::Path) -> Vec<u32> {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["op"] == "undo" && v["undo"]["undo"] == "stop_child")
        .filter_map(|v| v["undo"]["pid"].as_u64())
        .filter(|pid| *pid > 0)
        .map(|pid| pid as u32)
        .collect()
}

/// The crash test: the agent is killed with SIGKILL while a process is paused, a disk fill
/// holds its file and a CPU hog runs; its wardens and the hog's death signal put the host
/// back within 2 s without a restart; restarted, it closes what is left in its ledger, and
/// the run's record says the agent was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_once_restarted_leaves_the_host_as_it_was() {
    use iohr_tests::{Agent, Controller, Installation};

    let target = Target::start().await;
    let dir = std::env::temp_dir().join(format!("iohr-crash-{}", uuid::Uuid::new_v4()));
    let fill_dir = dir.join("fill");
    std::fs::create_dir_all(&fill_dir).expect("dirs");
    let mut victim = tokio::process::Command::new("sleep")
        .arg("300")
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the victim");
    let victim_pid = victim.id().expect("victim pid");
    let port = target.addr.port();
    let policy = dir.join("policy.json");
    std::fs::write(
        &policy,
        json!({
            "target_ports": [port],
            "processes": [{"name": "sleep"}],
            "directories": [fill_dir.display().to_string()],
            "max_cpu_workers": 1,
            "max_disk_mb": 8,
        })
        .to_string(),
    )
    .expect("policy");
    let policy = policy.display().to_string();
    let extra = ["--policy", policy.as_str()];

    let install = Installation::new(Backend::Sqlite).await;
    let controller = Controller::start(&install, 200, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let identity = install.agent_identity("default", "edge-1");
    let options = || AgentOptions {
        extra: &extra,
        ..AgentOptions::default()
    };
    let agent = Agent::start(
        &install,
        "edge-1",
        &identity,
        &controller.link_url(),
        options(),
    )
    .await;
    api.wait_online("edge-1", LIMIT).await;
    // The victim is a child of this test: wait until it shows its own name (exec).
    wait_for("the victim runs sleep", LIMIT, || async {
        let comm = std::fs::read_to_string(format!("/proc/{victim_pid}/comm")).ok()?;
        (comm.trim() == "sleep").then_some(())
    })
    .await;

    let fault =
        |name: &str, provider: Value| json!({"type": "action", "name": name, "provider": provider});
    let mut hog = fault(
        "hog",
        json!({"type": "iohr", "fault": "cpu_hog", "workers": 1, "duration": "120s"}),
    );
    hog["pauses"] = json!({"after": 60});
    let experiment = json!({
        "title": "crash", "description": "three host faults, then the agent dies",
        "method": [
            fault("pause", json!({"type": "iohr", "fault": "process", "action": "pause",
                "name": "sleep", "pid": victim_pid, "duration": "120s"})),
            fault("fill", json!({"type": "iohr", "fault": "disk_fill",
                "directory": fill_dir.display().to_string(), "size_mb": 4, "duration": "120s"})),
            hog,
        ],
    });
    let run = api
        .create_run(&json!({"kind": "faults", "environment": "staging",
            "target": target.url(), "spec": experiment}))
        .await;
    let id = run["id"].as_str().expect("id").to_string();
    let mut events = api.events(&id, None).await;
    let mut applied = 0;
    while applied < 3 {
        let event = events
            .next(LIMIT)
            .await
            .expect("frames until three faults are applied");
        assert_ne!(event.event, "finished", "ended early: {event:?}");
        if event.event == "timeline" && event.data["data"]["status"] == "applied" {
            applied += 1;
        }
    }
    // Every fault is in place, seen from outside.
    assert_eq!(process_state(victim_pid), Some('T'), "the victim is paused");
    let fill_files = || {
        std::fs::read_dir(&fill_dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let filled = fill_files();
    assert_eq!(filled.len(), 1, "{filled:?}");
    let ledger = install.root.join("agent-state-edge-1/ledger/ledger.jsonl");
    let hogs = hog_pids(&ledger);
    assert_eq!(hogs.len(), 1, "one hog child in the ledger");
    assert!(process_state(hogs[0]).is_some(), "the hog runs");

    agent.kill().await;
    let killed = std::time::Instant::now();
    // While the agent is dead, the wardens of the pause and the fill undo them; the hog
    // died with it.
    wait_for(
        "the host back to its baseline with the agent dead",
        Duration::from_secs(2),
        || async {
            let resumed = matches!(process_state(victim_pid), Some(s) if s != 'T');
            let no_file = fill_files().is_empty();
            // Killed by its death signal (a zombie until its new parent reaps it).
            let no_hog = hogs
                .iter()
                .all(|pid| matches!(process_state(*pid), None | Some('Z')));
            (resumed && no_file && no_hog).then_some(())
        },
    )
    .await;
    eprintln!(
        "host back to its baseline {:?} after the SIGKILL, the agent not restarted",
        killed.elapsed()
    );
    let restarted = Agent::start(
        &install,
        "edge-1",
        &identity,
        &controller.link_url(),
        options(),
    )
    .await;
    let record = api.wait_status(&id, &["error"], LIMIT).await;
    let reason = record["reason"].as_str().unwrap_or_default();
    // Lost for longer than its lease while its wardens worked: the run ended "agent lost";
    // the restart then found only the hog's entry open (its child died with the agent).
    assert!(
        reason.starts_with("agent lost") && !reason.contains("process ("),
        "the record says the agent was lost: {record}"
    );
    // Every entry the reopened ledger kept is closed by the recovery.
    ledger_all_closed(&install.root, "edge-1", LIMIT).await;
    drop(restarted);
    let _ = victim.kill().await;
    target.stop().await;
}
