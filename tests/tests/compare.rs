//! Compare through the API and the CLI with real runs: a target whose service time grows
//! by 30% regresses with that line, one that fails one answer in twenty regresses on its
//! error rate, a check that turns from pass to fail regresses, and
//! mismatched runs or unknown ids are refused, over REST, the CLI and gRPC.
//!
//! The A/A comparison of real runs is in `compare_aa.rs`, alone in its binary; a closed
//! model's throughput and tail in `compare_closed.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::{AgentOptions, bin};
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Target, on_both_stores};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

async fn finished(stack: &OneAgent, body: &Value) -> String {
    let run = stack.api.create_run(body).await;
    let id = run["id"].as_str().expect("id").to_string();
    stack
        .api
        .wait_status(&id, &["passed", "failed"], LIMIT)
        .await;
    id
}

async fn compare(stack: &OneAgent, before: &str, after: &str) -> (u16, Value) {
    stack
        .api
        .get(&format!(
            "/v1/reliability/compare?before={before}&after={after}"
        ))
        .await
}

/// `iohr reliability compare`: exit status and stdout.
fn cli(stack: &OneAgent, args: &[&str]) -> (i32, String) {
    let output = std::process::Command::new(bin("iohr"))
        .args(["--server", &stack.controller.api_url()])
        .args(["--token", &stack.install.full_token()])
        .args(["reliability", "compare"])
        .args(args)
        .output()
        .expect("run iohr");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).to_string(),
    )
}

async fn a_30_percent_slower_target_regresses(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let target = Target::start_with(&["--service-ms", "10"]).await;
    let addr = target.addr.to_string();
    let load = json!({"kind": "load", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "model": "open", "rate": 100, "duration": "5s",
                 "warmup": "1s", "connections": 16}});
    let a1 = finished(&stack, &load).await;

    // The same target, 30% slower.
    target.stop().await;
    let _slower = Target::start_at(&addr, &["--service-ms", "13"]).await;
    let b = finished(&stack, &load).await;
    let (status, worse) = compare(&stack, &a1, &b).await;
    assert_eq!(status, 200, "{worse}");
    assert_eq!(worse["verdict"], "regressed", "{worse}");
    let lines: Vec<&str> = worse["differences"]
        .as_array()
        .expect("differences")
        .iter()
        .filter_map(|d| d["line"].as_str())
        .collect();
    assert!(
        lines.iter().any(|l| l.starts_with("p50 total:")),
        "{lines:?}"
    );

    let (code, text) = cli(&stack, &[&a1, &b]);
    assert_eq!(code, 1, "regressed exits 1: {text}");
    assert!(text.starts_with("regressed\n"), "{text}");
    let (code, text) = cli(&stack, &[&b, &a1, "--format", "markdown"]);
    assert_eq!(code, 0, "improved exits 0: {text}");
    assert!(text.starts_with("**improved**"), "{text}");

    // As fast as the first, but one answer in twenty a 500: the error rate regresses, and
    // its line comes first.
    _slower.stop().await;
    let _failing = Target::start_at(&addr, &["--service-ms", "10", "--error-percent", "5"]).await;
    let c = finished(&stack, &load).await;
    let (status, answer) = compare(&stack, &a1, &c).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["verdict"], "regressed", "{answer}");
    let first = &answer["differences"][0];
    assert_eq!(first["measure"], "error rate", "{answer}");
    assert!(
        first["line"]
            .as_str()
            .is_some_and(|l| l.starts_with("error rate: 0.00% [0.00%, ")),
        "{answer}"
    );
}

async fn a_failing_check_regresses_and_mismatches_are_refused(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let target = Target::start().await;
    let addr = target.addr.to_string();
    let checks = json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "spec": {"checks": [{"name": "home", "path": "/"}], "invariants": [{"rule": "no_5xx"}]}});
    let good = finished(&stack, &checks).await;
    target.stop().await;
    let _broken = Target::start_at(&addr, &["--error-percent", "100"]).await;
    let bad = finished(&stack, &checks).await;
    let (status, answer) = compare(&stack, &good, &bad).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["verdict"], "regressed");
    let (code, text) = cli(&stack, &[&good, &bad]);
    assert_eq!(code, 1);
    assert_eq!(
        text.lines().take(3).collect::<Vec<_>>(),
        vec![
            "regressed",
            "check home: passed -> failed (status 500, expected 200)",
            "invariant no 5xx: broke"
        ]
    );

    // Another scenario version is refused, with the reason; so is an unknown run.
    let mut other = checks.clone();
    other["spec"]["checks"][0]["name"] = json!("start");
    let third = finished(&stack, &other).await;
    let (status, answer) = compare(&stack, &good, &third).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("not_comparable"))
    );
    let (code, _) = cli(&stack, &[&good, &third]);
    assert_eq!(code, 2, "refused exits 2");
    let (status, _) = compare(&stack, &good, "no-such-run").await;
    assert_eq!(status, 404);

    // The same over gRPC, on the API's port.
    let channel = tonic::transport::Endpoint::from_shared(stack.controller.api_url())
        .expect("endpoint")
        .connect()
        .await
        .expect("h2c to the API port");
    let mut client = iohr_proto::runs::runs_client::RunsClient::new(channel);
    let ask = |before: &str, after: &str| {
        let mut request = tonic::Request::new(iohr_proto::runs::CompareRequest {
            before: before.to_string(),
            after: after.to_string(),
            noise_floor: 0.0,
        });
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {}", stack.install.full_token())
                .parse()
                .expect("metadata"),
        );
        request
    };
    let answer = client
        .compare(ask(&good, &bad))
        .await
        .expect("compare")
        .into_inner();
    assert_eq!(answer.verdict, "regressed");
    assert_eq!(
        answer.lines[1],
        "check home: passed -> failed (status 500, expected 200)"
    );
    let refused = client
        .compare(ask(&good, &third))
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("scenario version"),
        "{refused:?}"
    );
}

on_both_stores!(
    a_30_percent_slower_target_regresses,
    a_failing_check_regresses_and_mismatches_are_refused
);
