//! Scenario names and versions with the real stack: names label versions, so a name
//! given for a spec already stored under another name is kept (and said so), a run by
//! reference runs under the name it gives, and `GET /scenarios[/{id}[/versions/{v}]]`
//! and `iohr reliability scenarios list|show` show the names, their versions and runs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Target, on_both_stores};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

async fn names_label_versions_and_are_never_dropped(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;
    let spec = json!({"checks": [{"name": "home", "path": "/"}]});

    // An inline run stores the spec as inline-checks.
    let inline = api
        .create_run(&json!({"kind": "checks", "environment": "staging",
            "target": target.url(), "spec": spec}))
        .await;
    assert_eq!(inline["scenario"]["id"], "inline-checks", "{inline}");
    let version = inline["scenario"]["version"].as_str().unwrap().to_string();

    // The same spec under the user's name: kept, and the answer says what happened.
    let body = json!({"name": "smoke", "kind": "checks", "spec": spec});
    let (status, named) = api.post("/v1/reliability/scenarios", &body).await;
    assert_eq!(status, 201, "{named}");
    assert_eq!(
        (&named["id"], &named["version"], &named["stored"]),
        (&json!("smoke"), &json!(version), &json!("named"))
    );
    let (status, again) = api.post("/v1/reliability/scenarios", &body).await;
    assert_eq!(
        (status, &again["stored"]),
        (200, &json!("exists")),
        "{again}"
    );

    // A run by reference runs under the name it gives.
    let by_name = api
        .create_run(&json!({"kind": "checks", "environment": "staging",
            "target": target.url(), "scenario": {"id": "smoke", "version": version}}))
        .await;
    assert_eq!(by_name["scenario"]["id"], "smoke", "{by_name}");
    let run_id = by_name["id"].as_str().unwrap();
    api.wait_status(run_id, &["passed"], LIMIT).await;
    let (status, unknown) = api
        .post(
            "/v1/reliability/runs",
            &json!({"kind": "checks", "environment": "staging", "target": target.url(),
                "scenario": {"id": "nightly", "version": version}}),
        )
        .await;
    assert_eq!(
        (status, unknown["error"]["code"].as_str()),
        (400, Some("unknown_scenario")),
        "a name that does not label the version: {unknown}"
    );

    // Listing and showing.
    let (status, list) = api.get("/v1/reliability/scenarios").await;
    assert_eq!(status, 200, "{list}");
    let ids: Vec<&str> = list["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["inline-checks", "smoke"], "{list}");
    let (status, smoke) = api.get("/v1/reliability/scenarios/smoke").await;
    assert_eq!(status, 200, "{smoke}");
    assert_eq!(smoke["kind"], "checks");
    assert_eq!(smoke["versions"][0]["version"], version.as_str());
    assert_eq!(smoke["versions"][0]["runs"], 1, "{smoke}");
    assert_eq!(smoke["versions"][0]["last_run"], run_id);
    let (status, one) = api
        .get(&format!(
            "/v1/reliability/scenarios/smoke/versions/{version}"
        ))
        .await;
    assert_eq!((status, &one["spec"]), (200, &spec), "{one}");
    for path in [
        "/v1/reliability/scenarios/nightly",
        "/v1/reliability/scenarios/nightly/versions/sha256:00",
    ] {
        let (status, body) = api.get(path).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (404, Some("not_found")),
            "{path}: {body}"
        );
    }
    let (status, body) = api.get("/v1/reliability/scenarios?limit=0").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_query"))
    );

    // The CLI.
    let cli = |args: &[&str]| {
        let out = stack.iohr(None, args);
        assert_eq!(out.code, 0, "{args:?}: {}", out.stdout);
        out.stdout
    };
    let spec_file = stack.install.path("nightly.json");
    std::fs::write(&spec_file, spec.to_string()).unwrap();
    let created = cli(&[
        "reliability",
        "scenarios",
        "create",
        "--name",
        "nightly",
        "--kind",
        "checks",
        "--spec",
        spec_file.to_str().unwrap(),
    ]);
    assert!(
        created.contains("nightly now names that version too"),
        "{created}"
    );
    let listed = cli(&["reliability", "scenarios", "list"]);
    for name in ["inline-checks", "nightly", "smoke"] {
        assert!(listed.contains(name), "{name} in {listed}");
    }
    let shown = cli(&["reliability", "scenarios", "show", "smoke"]);
    assert!(shown.starts_with("smoke (checks), 1 version\n"), "{shown}");
    assert!(shown.contains(run_id), "{shown}");
    let spec_shown = cli(&[
        "reliability",
        "scenarios",
        "show",
        "smoke",
        "--version",
        &version,
    ]);
    let parsed: serde_json::Value = serde_json::from_str(&spec_shown).expect("the spec");
    assert_eq!(parsed, spec);
}

on_both_stores!(names_label_versions_and_are_never_dropped);
