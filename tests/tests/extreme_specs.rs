//! Issue 12: extreme numbers in a spec are refused by `POST /v1/reliability/runs` with the
//! field named (400 `invalid_spec`), never a panic in the handler; the controller keeps
//! answering and stores nothing of them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use iohr_tests::{Api, Backend, Controller, Installation, on_both_stores};
use serde_json::{Value, json};

async fn extreme_numbers_are_refused_naming_the_field(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 200, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let run = |kind: &str, spec: Value| json!({"kind": kind, "environment": "staging", "target": "http://127.0.0.1:9", "spec": spec});
    let cases = [
        (
            run(
                "replay",
                json!({"requests": [{"offset_ms": 0, "method": "GET", "path": "/"},
                    {"offset_ms": 1e300, "method": "GET", "path": "/"}]}),
            ),
            "spec.requests[1].offset_ms",
        ),
        (
            run(
                "load",
                json!({"operations": [{"method": "GET", "path": "/"}], "model": "open",
                    "rate": 0.5, "duration": "2s", "warmup": 18446744073709551615u64}),
            ),
            "spec.warmup",
        ),
        (
            run(
                "load",
                json!({"operations": [{"path": "/"}], "model": "open", "stages": [
                    {"duration": "500000000000years", "target": 1},
                    {"duration": "500000000000years", "target": 1}]}),
            ),
            "spec.stages[0].duration",
        ),
        (
            run(
                "checks",
                json!({"checks": [{"path": "/", "max_latency_ms": u64::MAX}]}),
            ),
            "spec.checks[0].max_latency_ms",
        ),
    ];
    for (body, field) in cases {
        let (status, answer) = api.post("/v1/reliability/runs", &body).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_spec", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!("{field}: ")),
            "{field}: {answer}"
        );
    }
    // Still serving, and nothing of the refused runs was stored.
    let (status, listed) = api.get("/v1/reliability/runs").await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["runs"], json!([]), "{listed}");
}

on_both_stores!(extreme_numbers_are_refused_naming_the_field);
