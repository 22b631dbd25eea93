//! Every route with another account's id and bad input (tokens and scopes:
//! authorization.rs):
//! a precise 4xx with `{"error": {"code", "message"}}`, and nothing stored.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use hyper::Method;
use hyper::body::Bytes;
use iohr_tests::{Api, Backend, Controller, Installation, on_both_stores};
use serde_json::{Value, json};

/// A request body and its content type.
type Body = Option<(Bytes, &'static str)>;

fn code(body: &Value) -> &str {
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "a message in {body}"
    );
    body["error"]["code"].as_str().unwrap_or_default()
}

async fn every_route_guards_its_tokens_scopes_accounts_and_input(backend: Backend) {
    let install = Installation::new(backend).await;
    install.create_account("other", 4, false);
    let controller = Controller::start(&install, 200, None).await;
    let full = Api::new(&controller.api_url(), &install.full_token());
    let foreign = full.with_token(Some(&install.token(
        "other",
        &["reliability:run", "reliability:read"],
        None,
    )));

    let good = json!({"kind": "checks", "environment": "staging", "target": "http://127.0.0.1:9",
        "spec": {"checks": [{"path": "/"}]}});
    let run = full.create_run(&good).await;
    let id = run["id"].as_str().expect("id").to_string();

    let json_body = |v: &Value| Some((Bytes::from(v.to_string()), "application/json"));
    let routes: Vec<(Method, String, Body, &str)> = vec![
        (
            Method::POST,
            "/v1/reliability/runs".into(),
            json_body(&good),
            "run",
        ),
        (
            Method::GET,
            format!("/v1/reliability/runs/{id}"),
            None,
            "read",
        ),
        (Method::GET, "/v1/reliability/runs".into(), None, "read"),
        (
            Method::POST,
            format!("/v1/reliability/runs/{id}/cancel"),
            json_body(&json!({})),
            "run",
        ),
        (
            Method::GET,
            format!("/v1/reliability/runs/{id}/events"),
            None,
            "read",
        ),
        (Method::GET, "/v1/reliability/agents".into(), None, "read"),
        (
            Method::POST,
            "/v1/reliability/scenarios".into(),
            json_body(
                &json!({"name": "home", "kind": "checks", "spec": {"checks": [{"path": "/"}]}}),
            ),
            "run",
        ),
    ];
    // Tokens and scopes are tests/tests/authorization.rs; here, another account's ids.
    for (method, path, body, _) in &routes {
        if path.contains(&id) {
            let (status, answer) = foreign.call(method.clone(), path, body.clone()).await;
            assert_eq!(
                (status, code(&answer)),
                (404, "not_found"),
                "{method} {path}: no hint it exists"
            );
        }
    }
    let (_, theirs) = foreign.get("/v1/reliability/runs").await;
    assert_eq!(
        theirs["runs"],
        json!([]),
        "another account's runs are not listed"
    );

    let raw = |text: &str| Some((Bytes::from(text.to_string()), "application/json"));
    let with = |key: &str, value: Value| {
        let mut body = good.clone();
        body[key] = value;
        json_body(&body)
    };
    let oversized = json!({"kind": "checks", "environment": "staging", "target": "http://127.0.0.1:9",
        "spec": {"checks": [{"path": format!("/{}", "x".repeat(300 * 1024))}]}});
    let bad_inputs: Vec<(Body, u16, &str)> = vec![
        (raw("{\"kind\": "), 400, "malformed_json"),
        (raw("[]"), 400, "invalid_body"),
        (with("kind", json!(5)), 400, "invalid_body"),
        (with("colour", json!("blue")), 400, "invalid_body"),
        (json_body(&oversized), 413, "body_too_large"),
        (
            Some((Bytes::from(good.to_string()), "text/plain")),
            415,
            "unsupported_media_type",
        ),
        (with("kind", json!("soak")), 400, "unknown_kind"),
        // A checks spec is not an experiment.
        (with("kind", json!("faults")), 400, "invalid_spec"),
        // A checks spec is not a load spec.
        (with("kind", json!("load")), 400, "invalid_spec"),
        (
            with("target", json!("http://localhost:8080")),
            400,
            "invalid_target",
        ),
        (
            with("target", json!("127.0.0.1:8080")),
            400,
            "invalid_target",
        ),
        (
            with("target", json!("https://127.0.0.1:8443")),
            400,
            "invalid_target",
        ),
        (with("environment", json!("qa")), 400, "unknown_environment"),
        (
            with("executor", json!("somewhere")),
            400,
            "invalid_executor",
        ),
        (with("spec", json!({"checks": []})), 400, "invalid_spec"),
        (
            with(
                "spec",
                json!({"checks": [{"path": "/", "headers": {"Authorization": "Bearer s3cret"}}]}),
            ),
            400,
            "invalid_spec",
        ),
        (
            with("scenario", json!({"id": "x", "version": "sha256:00"})),
            400,
            "spec_or_scenario",
        ),
    ];
    for (body, status, expected) in bad_inputs {
        let (got, answer) = full.call(Method::POST, "/v1/reliability/runs", body).await;
        assert_eq!((got, code(&answer)), (status, expected), "{answer}");
        assert!(
            !answer.to_string().contains("s3cret"),
            "a refused secret is not echoed"
        );
    }
    for (path, expected) in [
        ("/v1/reliability/runs?status=sleeping", "invalid_query"),
        ("/v1/reliability/runs?limit=0", "invalid_query"),
        ("/v1/reliability/runs?colour=blue", "invalid_query"),
    ] {
        let (status, answer) = full.get(path).await;
        assert_eq!((status, code(&answer)), (400, expected), "{path}");
    }
    let (status, answer) = full.get("/v1/reliability/runs/01234567-no-such-run").await;
    assert_eq!((status, code(&answer)), (404, "not_found"));
    let (status, answer) = full.get("/v1/reliability/nothing-here").await;
    assert_eq!((status, code(&answer)), (404, "not_found"));
    let (status, answer) = full
        .call(Method::DELETE, "/v1/reliability/runs", None)
        .await;
    assert_eq!((status, code(&answer)), (405, "method_not_allowed"));

    // Nothing of the refused requests was stored: the one good run (still queued, no
    // agent runs here) is the only one.
    let (_, listed) = full.get("/v1/reliability/runs").await;
    let ids: Vec<&str> = listed["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(ids, [id.as_str()]);

    // A scenario version is the hash of its canonical JSON: key order does not matter,
    // and a run can name it instead of giving a spec.
    let (status, a) = full
        .post("/v1/reliability/scenarios", &json!({"name": "home", "kind": "checks", "spec": {"timeout_ms": 900, "checks": [{"path": "/"}]}}))
        .await;
    assert_eq!(status, 201, "{a}");
    let (_, b) = full
        .post("/v1/reliability/scenarios", &json!({"name": "home", "kind": "checks", "spec": {"checks": [{"path": "/"}], "timeout_ms": 900}}))
        .await;
    assert_eq!(a["version"], b["version"]);
    let by_ref = full
        .create_run(
            &json!({"kind": "checks", "environment": "staging", "target": "http://127.0.0.1:9",
            "scenario": {"id": "home", "version": a["version"]}}),
        )
        .await;
    assert_eq!(by_ref["scenario"]["version"], a["version"]);
}

on_both_stores!(every_route_guards_its_tokens_scopes_accounts_and_input);
