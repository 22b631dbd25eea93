//! Schedules with the real stack: a controller and an agent; a schedule made through REST
//! fires real checks runs against the sample target, started by the schedule; bad input
//! is refused precisely with nothing stored (floors, cron, unknown fields, scopes); the
//! CLI lists, shows, pauses, resumes and deletes it, with next fire times.
//!
//! A short cadence in a real controller: the operator lowers this account's checks floor
//! to one second (`iohr-controller account set-plan --schedule-floor checks=1s`) and the
//! schedule uses a six-field expression with seconds (`*/2 * * * * *`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use hyper::Method;
use hyper::body::Bytes;
use iohr_tests::process::{AgentOptions, bin};
use iohr_tests::setup::{Installation, OneAgent};
use iohr_tests::{Api, Backend, Target, on_both_stores, wait_for};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

fn cli(stack: &OneAgent, args: &[&str]) -> (i32, String, String) {
    let output = std::process::Command::new(bin("iohr"))
        .args(["--server", &stack.controller.api_url()])
        .args(["--token", &stack.install.full_token()])
        .args(args)
        .output()
        .expect("run iohr");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).to_string(),
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

async fn patch(api: &Api, path: &str, body: &Value) -> (u16, Value) {
    let bytes = Bytes::from(serde_json::to_vec(body).unwrap());
    api.call(Method::PATCH, path, Some((bytes, "application/json")))
        .await
}

fn code(answer: &(u16, Value)) -> (u16, Value) {
    (answer.0, answer.1["error"]["code"].clone())
}

async fn a_schedule_fires_real_checks_runs(backend: Backend) {
    let install = Installation::new(backend).await;
    install.ctl2(
        "account",
        &[
            "set-plan",
            "--name",
            "default",
            "--schedule-floor",
            "checks=1s",
        ],
    );
    let stack = OneAgent::start_in(install, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;
    let body = |cron: &str, kind: &str| {
        json!({"name": "smoke", "cron": cron, "kind": kind, "environment": "staging",
               "target": target.url(), "spec": {"checks": [{"name": "home", "path": "/"}]}})
    };
    let path = "/v1/reliability/schedules";

    // Refused, precisely, with nothing stored.
    let load = json!({"name": "nightly", "cron": "*/30 * * * *", "kind": "load",
        "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"name": "home", "path": "/"}], "rate": 1, "duration": "5s"}});
    let answer = api.post(path, &load).await;
    assert_eq!(
        code(&answer),
        (422, json!("schedule_too_frequent")),
        "{}",
        answer.1
    );
    let message = answer.1["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("every 1h") && message.contains("30m"),
        "{message}"
    );
    assert!(
        message.contains("account set-plan --name ACCOUNT --schedule-floor load=DURATION"),
        "the refusal says how the floor is changed: {message}"
    );
    let answer = api.post(path, &body("61 * * * *", "checks")).await;
    let message = answer.1["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the minute field \"61\" is not valid: it takes 0-59"),
        "the refusal names the field and its range: {message}"
    );
    for cron in ["61 * * * *", "* * * *", "0 0 0 * * * 2030", "0 0 31 2 *"] {
        let answer = api.post(path, &body(cron, "checks")).await;
        assert_eq!(
            code(&answer),
            (400, json!("invalid_cron")),
            "{cron}: {}",
            answer.1
        );
    }
    let mut extra = body("0 3 * * *", "checks");
    extra["every"] = json!("day");
    assert_eq!(code(&api.post(path, &extra).await).0, 400);
    let mut unknown_env = body("0 3 * * *", "checks");
    unknown_env["environment"] = json!("nowhere");
    assert_eq!(
        code(&api.post(path, &unknown_env).await),
        (400, json!("unknown_environment"))
    );
    let reader = api.with_token(Some(&stack.install.token(
        "default",
        &["reliability:read"],
        None,
    )));
    assert_eq!(
        code(&reader.post(path, &body("0 3 * * *", "checks")).await).0,
        403
    );
    let (status, listed) = api.get(path).await;
    assert_eq!(
        (status, &listed["schedules"]),
        (200, &json!([])),
        "nothing half-stored"
    );

    // Every two seconds: it fires real runs, started by the schedule.
    let (status, schedule) = api.post(path, &body("*/2 * * * * *", "checks")).await;
    assert_eq!(status, 201, "{schedule}");
    let id = schedule["id"].as_str().unwrap().to_string();
    assert_eq!(schedule["enabled"], true);
    assert_eq!(
        schedule["next_fires"].as_array().unwrap().len(),
        3,
        "{schedule}"
    );
    assert_eq!(
        schedule["created_by"].as_str().unwrap().split(':').next(),
        Some("token")
    );
    let run = wait_for("a run the schedule started", LIMIT, || async {
        let (_, runs) = api.get("/v1/reliability/runs?limit=100").await;
        runs["runs"]
            .as_array()?
            .iter()
            .find(|r| r["started_by"] == json!({"type": "schedule", "id": id}))
            .cloned()
    })
    .await;
    let run_id = run["id"].as_str().unwrap();
    let done = api
        .wait_status(run_id, &["passed", "failed", "error"], LIMIT)
        .await;
    assert_eq!(done["status"], "passed", "{done}");
    assert_eq!(done["started_by"], json!({"type": "schedule", "id": id}));
    assert!(
        done["units"]["reserved"].as_u64().unwrap() >= 1,
        "charged: {done}"
    );
    let (_, shown) = api.get(&format!("{path}/{id}")).await;
    assert!(shown["last_run"].is_string(), "{shown}");

    // The CLI: list, show, pause, resume, delete.
    let (status, out, err) = cli(&stack, &["reliability", "schedules", "list"]);
    assert_eq!(status, 0, "{err}");
    assert!(
        out.contains(&id) && out.contains("enabled") && out.contains("NEXT FIRE"),
        "{out}"
    );
    let (status, out, err) = cli(&stack, &["reliability", "schedules", "show", &id]);
    assert_eq!(status, 0, "{err}");
    assert!(
        out.contains("*/2 * * * * * (UTC)") && out.contains("next fires"),
        "{out}"
    );
    let (status, out, err) = cli(&stack, &["reliability", "schedules", "pause", &id]);
    assert_eq!(status, 0, "{err}");
    assert!(
        out.contains("paused") && out.contains("- (paused)"),
        "{out}"
    );
    let (_, paused) = api.get(&format!("{path}/{id}")).await;
    assert_eq!(
        (&paused["enabled"], &paused["next_fires"]),
        (&json!(false), &json!([]))
    );
    let (status, out, err) = cli(&stack, &["reliability", "schedules", "resume", &id]);
    assert_eq!(status, 0, "{err}");
    assert!(out.contains("enabled"), "{out}");
    let (status, out, err) = cli(&stack, &["reliability", "schedules", "delete", &id]);
    assert_eq!(
        (status, out.trim()),
        (0, format!("deleted schedule {id}").as_str()),
        "{err}"
    );
    assert_eq!(api.get(&format!("{path}/{id}")).await.0, 404);
    assert_eq!(
        code(&patch(api, &format!("{path}/{id}"), &json!({"enabled": true})).await),
        (404, json!("not_found"))
    );

    // A schedule made with the CLI, paused, from a stored spec file.
    let spec = stack.install.path("checks.json");
    std::fs::write(&spec, json!({"checks": [{"path": "/"}]}).to_string()).unwrap();
    let (status, out, err) = cli(
        &stack,
        &[
            "reliability",
            "schedules",
            "create",
            "--name",
            "nightly",
            "--cron",
            "0 3 * * *",
            "--kind",
            "checks",
            "--environment",
            "staging",
            "--target",
            &target.url(),
            "--spec",
            spec.to_str().unwrap(),
            "--paused",
        ],
    );
    assert_eq!(status, 0, "{err}");
    assert!(
        out.contains("0 3 * * * (UTC)") && out.contains("paused"),
        "{out}"
    );
    let (status, out, err) = cli(
        &stack,
        &[
            "reliability",
            "schedules",
            "create",
            "--name",
            "x",
            "--cron",
            "* * * * *",
            "--kind",
            "load",
            "--environment",
            "staging",
            "--target",
            &target.url(),
            "--spec",
            spec.to_str().unwrap(),
        ],
    );
    assert_ne!(status, 0, "{out}");
    assert!(err.contains("schedule_too_frequent"), "{err}");
    // A PATCH holds a new expression to the floor too.
    let (_, listed) = api.get(path).await;
    let nightly = listed["schedules"][0]["id"].as_str().unwrap().to_string();
    let answer = patch(
        api,
        &format!("{path}/{nightly}"),
        &json!({"cron": "*/2 * * * * *", "x": 1}),
    )
    .await;
    assert_eq!(code(&answer).0, 400, "unknown fields: {}", answer.1);
    let answer = patch(
        api,
        &format!("{path}/{nightly}"),
        &json!({"cron": "0 4 * * *"}),
    )
    .await;
    assert_eq!(
        (answer.0, &answer.1["cron"]),
        (200, &json!("0 4 * * *")),
        "{}",
        answer.1
    );
}

on_both_stores!(a_schedule_fires_real_checks_runs);
