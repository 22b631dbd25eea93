//! The fault warden end to end: an agent daemon (`iohr-agent run`, leased a faults run by
//! the real controller) SIGKILLed in the middle of a pause and never restarted; the victim
//! runs again within 2 s all the same, and the agent's ledger is closed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::{Duration, Instant};

use iohr_tests::process::AgentOptions;
use iohr_tests::setup::OneAgent;
use iohr_tests::victim::{named_sleeper, process_state};
use iohr_tests::{Backend, Target, wait_for};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_daemon_killed_for_good_leaves_no_paused_process() {
    let target = Target::start().await;
    let dir = std::env::temp_dir().join(format!("iohr-warden-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    // sleep under a name of its own, for the policy to name.
    let mut victim = named_sleeper(&dir, "victimrun").await;
    let victim_pid = victim.id().expect("victim pid");
    let policy = dir.join("policy.json");
    std::fs::write(
        &policy,
        json!({"target_ports": [target.addr.port()], "processes": [{"name": "victimrun"}]})
            .to_string(),
    )
    .expect("policy");
    let policy = policy.display().to_string();
    let extra = ["--policy", policy.as_str()];
    let stack = OneAgent::start(
        Backend::Sqlite,
        AgentOptions {
            extra: &extra,
            ..AgentOptions::default()
        },
    )
    .await;
    let experiment = json!({
        "title": "pause", "description": "a pause held while the method waits",
        "method": [{"type": "action", "name": "pause", "pauses": {"after": 30},
            "provider": {"type": "iohr", "fault": "process", "action": "pause",
                "name": "victimrun", "pid": victim_pid, "duration": "60s"}}],
    });
    let run = stack
        .api
        .create_run(&json!({"kind": "faults", "environment": "staging",
            "target": target.url(), "spec": experiment}))
        .await;
    let id = run["id"].as_str().expect("id").to_string();
    wait_for("the victim paused", LIMIT, || async {
        (process_state(victim_pid) == Some('T')).then_some(())
    })
    .await;
    let ledger = stack.install.root.join("agent-state-edge-1/ledger");
    // The warden is armed before the fault is applied.
    let wardens = std::fs::read_dir(ledger.join("wardens"))
        .expect("the wardens' directory")
        .filter_map(Result::ok)
        .filter(|f| f.path().extension().is_some_and(|x| x == "warden"))
        .count();
    assert_eq!(wardens, 1, "one warden armed");

    let OneAgent {
        agent,
        install,
        api,
        controller,
    } = stack;
    // SIGKILL sent here, timed from here; then reaped.
    let agent_pid = agent.pid().expect("the agent runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL the agent");
    let killed = Instant::now();
    agent.kill().await;
    // Polled every millisecond (the figure's resolution), for at most 2 s.
    while process_state(victim_pid) == Some('T') {
        assert!(
            killed.elapsed() < Duration::from_secs(2),
            "the victim still paused 2 s after the kill"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    eprintln!(
        "warden: victim running again {:?} after the SIGKILL of the agent daemon",
        killed.elapsed()
    );
    // The warden closed the entry it undid; nothing restarted the agent.
    wait_for("the ledger entry closed", LIMIT, || async {
        let text = std::fs::read_to_string(ledger.join("ledger.jsonl")).ok()?;
        let opened = text
            .lines()
            .filter(|l| l.contains("\"op\":\"open\""))
            .count();
        let closed = text
            .lines()
            .filter(|l| l.contains("\"op\":\"close\""))
            .count();
        (opened == 1 && closed == 1).then_some(())
    })
    .await;
    // The controller sees the agent lost and ends the run.
    let record = api.wait_status(&id, &["error"], LIMIT).await;
    assert!(
        record["reason"]
            .as_str()
            .unwrap_or_default()
            .starts_with("agent lost"),
        "{record}"
    );
    drop((install, controller));
    let _ = victim.kill().await;
    target.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
