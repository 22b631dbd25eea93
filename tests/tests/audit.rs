//! The audit lines readable: a real controller and agent record a start, a finding close
//! and a halt, and `GET /v1/reliability/audit` shows them newest first to a token with
//! `reliability:audit` only: filtered by action, actor, run and time, paged by cursor,
//! bad queries refused, other accounts' lines never shown; `iohr reliability audit`
//! prints them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Api, Backend, Target, on_both_stores};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

/// The (action, actor, run_id) of each line of a page, and its next cursor.
async fn page(api: &Api, query: &str) -> (Vec<(String, String, Value)>, Option<String>) {
    let (status, body) = api.get(&format!("/v1/reliability/audit{query}")).await;
    assert_eq!(status, 200, "{query}: {body}");
    let lines = body["audit"]
        .as_array()
        .expect("audit")
        .iter()
        .map(|l| {
            (
                l["action"].as_str().expect("action").to_string(),
                l["actor"].as_str().expect("actor").to_string(),
                l["run_id"].clone(),
            )
        })
        .collect();
    (lines, body["next_cursor"].as_str().map(str::to_string))
}

async fn the_audit_is_readable_filtered_and_paged(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    stack.install.create_account("other", 4, false);
    let api = &stack.api;
    let target = Target::start().await;
    let auditor = api.with_token(Some(&stack.install.token(
        "default",
        &["reliability:audit"],
        Some("auditor"),
    )));
    let ada = api.with_token(Some(&stack.install.token(
        "default",
        &["reliability:run", "reliability:read"],
        Some("ada"),
    )));

    let checks = json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "spec": {"checks": [{"name": "broken", "path": "/status/500"}]}});
    let run = api.create_run(&checks).await;
    let run_id = run["id"].as_str().expect("id").to_string();
    let done = api.wait_status(&run_id, &["failed"], LIMIT).await;
    let finding = done["findings"][0]["id"].as_str().expect("a finding");
    let (status, closed) = ada
        .post(
            &format!("/v1/reliability/findings/{finding}/close"),
            &json!({}),
        )
        .await;
    assert_eq!(status, 200, "{closed}");
    let (status, halted) = ada.post("/v1/reliability/halt", &json!({})).await;
    assert_eq!(status, 200, "{halted}");

    // Newest first, each change one line, with its subjects.
    let (status, body) = auditor.get("/v1/reliability/audit").await;
    assert_eq!(status, 200, "{body}");
    let lines = body["audit"].as_array().expect("audit");
    let actions: Vec<&str> = lines
        .iter()
        .map(|l| l["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["halt", "finding.close", "run.start"], "{body}");
    let start = &lines[2];
    assert_eq!(start["run_id"], run_id.as_str(), "{start}");
    assert_eq!(start["targets"], target.url().as_str(), "{start}");
    assert!(
        start["actor"].as_str().unwrap().starts_with("token:"),
        "{start}"
    );
    assert_eq!(lines[1]["actor"], "person:ada");
    assert_eq!(lines[0]["outcome"], "0 faults runs cancelled");
    assert!(lines[0]["at"].as_str().unwrap().ends_with('Z'), "{body}");
    assert_eq!(body["next_cursor"], Value::Null);

    // Filters.
    let (only, _) = page(&auditor, "?action=run.start").await;
    assert_eq!(only.len(), 1, "{only:?}");
    assert_eq!(only[0].2, run_id.as_str());
    let (by_ada, _) = page(&auditor, "?actor=person:ada").await;
    let by_ada: Vec<&str> = by_ada.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(by_ada, ["halt", "finding.close"]);
    let (of_run, _) = page(&auditor, &format!("?run={run_id}")).await;
    assert_eq!(of_run.len(), 1, "{of_run:?}");
    let (later, _) = page(&auditor, "?since=2999-01-01T00:00:00Z").await;
    assert!(later.is_empty(), "{later:?}");
    let (earlier, _) = page(&auditor, "?until=2000-01-01T00:00:00Z").await;
    assert!(earlier.is_empty(), "{earlier:?}");
    let (window, _) = page(
        &auditor,
        "?since=2000-01-01T00:00:00Z&until=2999-01-01T00:00:00Z",
    )
    .await;
    assert_eq!(window.len(), 3);

    // Paged one line at a time, the cursors walk the same lines.
    let mut walked = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let query = match &cursor {
            Some(c) => format!("?limit=1&cursor={c}"),
            None => "?limit=1".to_string(),
        };
        let (lines, next) = page(&auditor, &query).await;
        walked.extend(lines.into_iter().map(|l| l.0));
        cursor = next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(walked, ["halt", "finding.close", "run.start"]);

    // Refusals: bad queries name the field; the audit is a scope of its own.
    for query in [
        "?since=yesterday",
        "?until=12",
        "?actor=",
        "?limit=0",
        "?colour=blue",
    ] {
        let (status, body) = auditor.get(&format!("/v1/reliability/audit{query}")).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_query")),
            "{query}: {body}"
        );
    }
    let (status, body) = api.get("/v1/reliability/audit").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("insufficient_scope")),
        "a run+read token: {body}"
    );
    let other = api.with_token(Some(&stack.install.token(
        "other",
        &["reliability:audit"],
        None,
    )));
    let (theirs, _) = page(&other, "").await;
    assert!(theirs.is_empty(), "another account's lines: {theirs:?}");

    // A faults run's start names its faults.
    let faults = api
        .create_run(
            &json!({"kind": "faults", "environment": "staging", "target": target.url(),
            "spec": {"title": "t", "description": "d",
                "steady-state-hypothesis": {"title": "up", "probes": [{"type": "probe",
                    "name": "home", "tolerance": 200, "provider": {"type": "http", "path": "/"}}]},
                "method": [{"type": "action", "name": "slow", "provider": {"type": "iohr",
                    "fault": "network", "duration": "1s",
                    "toxic": {"type": "latency", "latency_ms": 5}}}],
                "rollbacks": []}}),
        )
        .await;
    let (status, body) = auditor
        .get(&format!(
            "/v1/reliability/audit?run={}",
            faults["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["audit"][0]["faults"], "network", "{body}");
    assert_eq!(lines[2]["faults"], Value::Null, "a checks run names none");

    // The CLI.
    let cli = |args: &[&str]| {
        let out = stack.iohr(auditor.token.as_deref(), args);
        (out.code, out.stdout)
    };
    let (code, text) = cli(&["reliability", "audit", "--action", "run.start"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&format!("run {run_id}")), "{text}");
    let (code, text) = cli(&["reliability", "audit", "--limit", "1"]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("next: iohr reliability audit --cursor"),
        "{text}"
    );
    let (code, text) = cli(&["--json", "reliability", "audit", "--actor", "person:ada"]);
    assert_eq!(code, 0, "{text}");
    let json: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(json["audit"].as_array().map(Vec::len), Some(2), "{json}");
}

on_both_stores!(the_audit_is_readable_filtered_and_paged);
