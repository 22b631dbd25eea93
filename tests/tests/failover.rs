//! A standby controller on PostgreSQL: `serve --standby` waits without listening while
//! another controller serves the store; when that one is SIGKILLed mid-run it takes over,
//! the agent (given both addresses) reconnects to it, and the run finishes with every
//! frame, not `agent lost`. A standby stopped while waiting exits cleanly, and SQLite
//! refuses `--standby`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::history::assert_gapless;
use iohr_tests::process::{AgentOptions, bin};
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_mid_run_and_the_run_finishes() {
    let install = Installation::new(Backend::Postgres).await;
    // A lease TTL of 3 s (three heartbeats): a load run is exclusive, so an agent that hears
    // nothing for a TTL stops it. The takeover (the standby tries every 500 ms) and the
    // agent's redial must fit in it; 300 ms heartbeats (0.9 s) sometimes did not.
    let active = Controller::start(&install, 1000, None).await;
    let standby_port = free_port();
    let standby = Controller::standby(&install, 1000, standby_port);
    let token = install.full_token();
    let api = Api::new(&active.api_url(), &token);
    let both = format!("{},https://127.0.0.1:{standby_port}", active.link_url());
    let _agent = Agent::start(
        &install,
        "edge-1",
        &install.agent_identity("default", "edge-1"),
        &both,
        AgentOptions::default(),
    )
    .await;
    api.wait_online("edge-1", LIMIT).await;
    standby.waiting(LIMIT).await;
    assert!(!listening(standby_port), "a standby does not listen");

    let target = Target::start().await;
    let run = api
        .create_run(
            &json!({"kind": "load", "environment": "staging", "target": target.url(),
            "spec": {"operations": [{"path": "/"}], "model": "open", "rate": 50,
                     "duration": "8s", "warmup": "0s"}}),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_string();
    // Two seconds of load, live, then the serving controller dies.
    let mut live = api.events(&id, None).await;
    let mut seconds = 0;
    while seconds < 2 {
        let event = live.next(LIMIT).await.expect("the run goes on");
        if event.event == "load" {
            seconds += 1;
        }
    }
    active.kill().await;

    let serving = tokio::time::timeout(LIMIT, standby.serving())
        .await
        .expect("the standby takes over");
    assert_eq!(serving.agent_link.port(), standby_port);
    let api = Api::new(&serving.api_url(), &token);
    let done = api
        .wait_status(&id, &["passed", "failed", "error"], LIMIT)
        .await;
    assert_eq!(done["status"], "passed", "{done}\n{}", serving.log_tail());
    assert_eq!(done["result"]["requests"], 400, "{done}");
    // Every frame once, in order, the last `finished`.
    assert_gapless(&api, &id, LIMIT).await;
    assert!(
        std::fs::read_to_string(&serving.log)
            .unwrap()
            .contains("took over the store's claim"),
        "{}",
        serving.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_standby_stops_on_sigterm_and_sqlite_refuses_one() {
    let install = Installation::new(Backend::Postgres).await;
    let _active = Controller::start(&install, 300, None).await;
    let standby = Controller::standby(&install, 300, free_port());
    standby.waiting(LIMIT).await;
    let status = standby.stop().await.expect("exits within 10 s");
    assert!(status.success(), "{status}");

    let sqlite = Installation::new(Backend::Sqlite).await;
    let output = tokio::process::Command::new(bin("iohr-controller"))
        .arg("serve")
        .arg("--data-dir")
        .arg(&sqlite.data_dir)
        .args([
            "--api-addr",
            "127.0.0.1:0",
            "--agent-addr",
            "127.0.0.1:0",
            "--standby",
        ])
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--standby needs PostgreSQL"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
