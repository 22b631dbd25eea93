//! Certificate renewal with real processes: an agent whose certificate lives 9 s renews it
//! two thirds of the way (6 s) over its live mTLS link, while a load run streams; the run
//! loses no frame, the stream is never dropped (the old certificate expires under it), the
//! store and the audit record the new certificate, and the agent restarted later connects
//! with the renewed certificate alone.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::{Duration, SystemTime};

use iohr_certs::enrolling::CertLifetime;
use iohr_tests::history::assert_gapless;
use iohr_tests::metrics::{sample, scrape};
use iohr_tests::process::AgentOptions;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target, on_both_stores, wait_for};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);
/// Short enough to renew during one run, long enough for the agent to connect first.
const LIFETIME: &str = "9s";

/// The value of the series `name` (no labels) of `family` at `url`.
async fn metric(url: &str, family: &str, name: &str) -> f64 {
    let seen = scrape(&[url.to_string()]).await;
    let families = &seen[url]["families"];
    sample(&families[family], name, &json!({})).unwrap_or_else(|| panic!("{name} in {families}"))
}

/// The value of the counter family `family` (its one series, `FAMILY_total`) at `url`.
async fn counter(url: &str, family: &str) -> f64 {
    metric(url, family, &format!("{family}_total")).await
}

fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

async fn an_agent_renews_under_a_running_load_run(backend: Backend) {
    let install = Installation::new(backend).await;
    // A lease TTL of 3 s: a machine busy with builds must not fence the run for lateness
    // that is not the renewal's (it takes milliseconds).
    let controller = Controller::start(&install, 1000, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let target = Target::start().await;

    let identity = install.path("short-lived");
    let identity_text = identity.display().to_string();
    install.ctl(&[
        "agent-cert",
        "--account",
        "default",
        "--agent",
        "edge-1",
        "--out",
        &identity_text,
        "--valid-for",
        LIFETIME,
    ]);
    let cert = identity.join("agent.pem");
    let first = CertLifetime::of_pem_file(&cert).unwrap();
    let first_fingerprint = iohr_certs::fingerprint_pem_file(&cert).unwrap();
    let metrics_addr = free_addr();
    let metrics = format!("http://{metrics_addr}/metrics");
    let agent = Agent::start(
        &install,
        "edge-1",
        &identity,
        &controller.link_url(),
        AgentOptions {
            extra: &["--metrics-addr", &metrics_addr],
            ..AgentOptions::default()
        },
    )
    .await;
    api.wait_online("edge-1", LIMIT).await;
    assert_eq!(
        counter(&metrics, "iohr_agent_certificate_renewals").await,
        0.0,
        "connected before its renewal is due"
    );

    // 12 s of load: the renewal (at 6 s of the certificate) and its expiry (at 9 s) both
    // fall inside it.
    let run = api
        .create_run(
            &json!({"kind": "load", "environment": "staging", "target": target.url(),
            "spec": {"operations": [{"path": "/"}], "model": "open", "rate": 50,
                     "duration": "12s", "warmup": "0s"}}),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_string();
    let live = assert_gapless(&api, &id, LIMIT).await;
    let done = api.wait_status(&id, &["passed"], LIMIT).await;
    assert_eq!(done["result"]["requests"], 600, "{done}");
    let per_second = live.iter().filter(|e| e.event == "load").count();
    assert!(per_second >= 12, "a load frame per second: {per_second}");

    // Renewed once, on the same stream: no reconnect, though its certificate expired.
    assert!(
        SystemTime::now() > first.not_after,
        "the first certificate has expired"
    );
    assert_eq!(
        counter(&metrics, "iohr_agent_certificate_renewals").await,
        1.0
    );
    assert_eq!(
        counter(&metrics, "iohr_agent_link_reconnects").await,
        0.0,
        "the stream was never dropped"
    );
    let renewed = CertLifetime::of_pem_file(&cert).unwrap();
    let renewed_fingerprint = iohr_certs::fingerprint_pem_file(&cert).unwrap();
    assert_ne!(renewed_fingerprint, first_fingerprint);
    let agent_log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(
        !agent_log.contains("exclusive runs stopped"),
        "never fenced: {agent_log}"
    );
    let days = renewed
        .not_after
        .duration_since(renewed.not_before)
        .unwrap()
        .as_secs()
        / 86_400;
    assert_eq!(
        days, 7,
        "the controller's lifetime for agents, not the first one's"
    );
    let expiry = metric(
        &metrics,
        "iohr_agent_certificate_expiry_timestamp_seconds",
        "iohr_agent_certificate_expiry_timestamp_seconds",
    )
    .await;
    let not_after = renewed
        .not_after
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(
        expiry, not_after as f64,
        "the gauge follows the new certificate"
    );
    assert!(
        !identity.join("agent.key.enrolling").exists(),
        "no key left waiting"
    );

    let auditor = api.with_token(Some(&install.token(
        "default",
        &["reliability:audit"],
        Some("auditor"),
    )));
    let (status, audit) = auditor.get("/v1/reliability/audit").await;
    assert_eq!(status, 200, "{audit}");
    let renewals: Vec<&Value> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["action"] == "agent.renew")
        .collect();
    assert_eq!(renewals.len(), 1, "{audit}");
    // Timestamps in one format (RFC 3339 UTC, milliseconds): they order as strings.
    let at = renewals[0]["at"].as_str().unwrap();
    let (started, ended) = (
        done["started_at"].as_str().unwrap(),
        done["ended_at"].as_str().unwrap(),
    );
    assert!(
        started < at && at < ended,
        "renewed while the run ran: {started} < {at} < {ended}"
    );
    assert_eq!(renewals[0]["actor"], "agent:edge-1");
    let outcome = renewals[0]["outcome"].as_str().unwrap();
    assert!(
        outcome.contains(&first_fingerprint) && outcome.contains(&renewed_fingerprint),
        "{outcome}"
    );

    // A new process dials with the renewed certificate (the first one could not connect
    // any more) and takes work.
    agent.kill().await;
    let _again = Agent::start(
        &install,
        "edge-1-again",
        &identity,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    let checks = api
        .create_run(&json!({"kind": "checks", "environment": "staging",
            "target": target.url(), "spec": {"checks": [{"path": "/health"}]}}))
        .await;
    let checked = api
        .wait_status(checks["id"].as_str().unwrap(), &["passed"], LIMIT)
        .await;
    assert_eq!(checked["status"], "passed", "{checked}");
    wait_for("the restarted agent online", LIMIT, || async {
        let (_, agents) = api.get("/v1/reliability/agents").await;
        (agents["agents"][0]["online"] == true).then_some(())
    })
    .await;
}

on_both_stores!(an_agent_renews_under_a_running_load_run);
