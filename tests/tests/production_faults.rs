//! Production fault runs wait for a person: an API token cannot confirm one, a person
//! confirms the exact hash, an unconfirmed run lapses to `refused`, a restart keeps it
//! waiting; and a halt cancels every faults run of the account, idempotently.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::bin;
use iohr_tests::{Api, Backend, Controller, Installation, on_both_stores};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(20);

fn experiment() -> Value {
    json!({
        "title": "latency",
        "description": "100 ms more",
        "method": [{"type": "action", "name": "slow", "provider":
            {"type": "iohr", "fault": "network", "toxic": {"type": "latency", "latency_ms": 100}}}],
    })
}

fn faults_run(environment: &str) -> Value {
    json!({
        "kind": "faults", "environment": environment, "target": "http://127.0.0.1:9",
        "spec": experiment(),
    })
}

async fn a_production_faults_run_waits_for_a_person(backend: Backend) {
    let install = Installation::new(backend).await;
    let mut controller = Controller::start(&install, 300, None).await;
    let token = install.full_token();
    let api = Api::new(&controller.api_url(), &token);
    let ada = install.token(
        "default",
        &["reliability:run", "reliability:read"],
        Some("ada"),
    );

    let run = api.create_run(&faults_run("production")).await;
    let id = run["id"].as_str().expect("id").to_string();
    assert_eq!(run["status"], "queued", "{run}");
    let hash = run["confirmation"]["hash"]
        .as_str()
        .expect("hash")
        .to_string();
    assert!(hash.starts_with("sha256:"), "{run}");
    assert!(run["confirmation"]["confirmed_by"].is_null(), "{run}");
    assert!(
        run["reason"].as_str().unwrap_or_default().contains(&hash),
        "the reason says what waits for whom: {run}"
    );

    // A restarted controller keeps it waiting, unqueued.
    controller.stop().await;
    controller = Controller::start(&install, 300, None).await;
    let api = Api::new(&controller.api_url(), &token);
    let person = Api::new(&controller.api_url(), &ada);
    assert!(api.run(&id).await["confirmation"]["confirmed_by"].is_null());

    let confirm = format!("/v1/reliability/runs/{id}/confirm");
    let (status, body) = api.post(&confirm, &json!({"hash": hash})).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (403, json!("person_required")),
        "{body}"
    );
    let (status, body) = person.post(&confirm, &json!({"hash": "sha256:00"})).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("hash_mismatch")),
        "{body}"
    );
    let (status, body) = person
        .post(&confirm, &json!({"hash": hash, "extra": 1}))
        .await;
    assert_eq!(status, 400, "unknown fields are refused: {body}");
    assert!(
        api.run(&id).await["confirmation"]["confirmed_by"].is_null(),
        "nothing changed"
    );

    // The person confirms with the CLI.
    let (code, out) = iohr(
        &controller.api_url(),
        &ada,
        &["runs", "confirm", &id, "--hash", &hash],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("confirmed by ada"), "{out}");
    let body = api.run(&id).await;
    assert_eq!(body["confirmation"]["confirmed_by"], "ada", "{body}");
    assert_eq!(body["status"], "queued");
    let (status, body) = person.post(&confirm, &json!({"hash": hash})).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("not_awaiting_confirmation")),
        "{body}"
    );
    let (status, _) = person
        .post("/v1/reliability/runs/nope/confirm", &json!({"hash": hash}))
        .await;
    assert_eq!(status, 404);

    // Only production faults runs take a confirmation window.
    let mut staging = faults_run("staging");
    staging["confirm_within"] = json!("5m");
    let (status, body) = api.post("/v1/reliability/runs", &staging).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!("invalid_confirm_within"))
    );
    controller.stop().await;
}

async fn an_unconfirmed_production_run_lapses(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 300, None).await;
    let token = install.full_token();
    let api = Api::new(&controller.api_url(), &token);
    // Started with the CLI, whose --confirm-within sets the window.
    let spec = std::env::temp_dir().join(format!("iohr-experiment-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&spec, experiment().to_string()).expect("write spec");
    let (code, out) = iohr(
        &controller.api_url(),
        &token,
        &[
            "run",
            "--kind",
            "faults",
            "--environment",
            "production",
            "--target",
            "http://127.0.0.1:9",
            "--spec",
            spec.to_str().expect("a UTF-8 temp path"),
            "--confirm-within",
            "1s",
            "--json",
        ],
    );
    let _ = std::fs::remove_file(&spec);
    assert_eq!(code, 0, "{out}");
    let run: Value = serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("the created record: {out}"));
    assert_eq!(run["status"], "queued", "{run}");
    let id = run["id"].as_str().expect("id");
    let ended = api.wait_status(id, &["refused"], LIMIT).await;
    assert_eq!(ended["reason"], "confirmation lapsed", "{ended}");
    controller.stop().await;
}

async fn a_halt_cancels_every_faults_run_once(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 300, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let staging = api.create_run(&faults_run("staging")).await;
    let production = api.create_run(&faults_run("production")).await;
    let checks = api
        .create_run(&json!({
            "kind": "checks", "environment": "staging", "target": "http://127.0.0.1:9",
            "spec": {"checks": [{"path": "/"}]},
        }))
        .await;
    let (status, halted) = api
        .post("/v1/reliability/halt", &json!({"reason": "pager"}))
        .await;
    assert_eq!(status, 200, "{halted}");
    let mut ids: Vec<&str> = halted["halted"]
        .as_array()
        .expect("halted")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    ids.sort_unstable();
    let mut expected = vec![
        staging["id"].as_str().expect("id"),
        production["id"].as_str().expect("id"),
    ];
    expected.sort_unstable();
    assert_eq!(ids, expected);
    for id in expected {
        let run = api.wait_status(id, &["cancelled"], LIMIT).await;
        assert!(
            run["reason"]
                .as_str()
                .unwrap_or_default()
                .starts_with("halted by token:"),
            "{run}"
        );
    }
    let other = api.run(checks["id"].as_str().expect("id")).await;
    assert_eq!(
        other["status"], "queued",
        "a halt stops faults runs only: {other}"
    );
    let (status, again) = api.post("/v1/reliability/halt", &json!({})).await;
    assert_eq!(
        (status, again["halted"].clone()),
        (200, json!([])),
        "idempotent"
    );
    let (code, out) = iohr(&controller.api_url(), &install.full_token(), &["halt"]);
    assert_eq!(
        (code, out.trim()),
        (0, "no faults run was queued or running")
    );
    let reader = Api::new(
        &controller.api_url(),
        &install.token("default", &["reliability:read"], None),
    );
    let (status, body) = reader.post("/v1/reliability/halt", &json!({})).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (403, json!("insufficient_scope"))
    );
    controller.stop().await;
}

/// `iohr reliability ARGS...`: exit code and stdout (stderr appended).
fn iohr(server: &str, token: &str, args: &[&str]) -> (i32, String) {
    let output = std::process::Command::new(bin("iohr"))
        .args(["--server", server, "--token", token, "reliability"])
        .args(args)
        .output()
        .expect("run iohr");
    (
        output.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

on_both_stores!(
    a_production_faults_run_waits_for_a_person,
    an_unconfirmed_production_run_lapses,
    a_halt_cancels_every_faults_run_once,
);
