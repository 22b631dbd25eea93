//! Compare judges what a closed model measures. Two closed-model load runs of one spec
//! against one loopback target, the second while the target holds its answers for half of
//! every second (a stall, as a stopped worker or a lock would make it): fewer requests
//! are sent, and compare says `regressed`, naming throughput and p99.9 first.
//!
//! Why the stall repeats in every second: compare's intervals come from a block bootstrap
//! over a run's seconds, to which seconds are exchangeable, so one stalled second among
//! six is within what resampling the seconds gives (a third of the resamples miss it); a
//! stall of one second in every two is seen, but by a margin that depends on how the
//! stalls fall on the seconds; half of every second, whatever its phase, is in every
//! second alike, so the answer is certain on any machine. The service time (100 ms) sets
//! the pace, not the CPU: 128 connections ask about 1,280 requests a second of a loaded or
//! idle machine alike, and about half of them are lost to the stalls.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::{AgentOptions, bin};
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Target};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

async fn finished(stack: &OneAgent, body: &Value) -> String {
    let done = stack
        .api
        .run_until(body, &["passed", "failed", "error"], LIMIT)
        .await;
    assert_eq!(done["status"], "passed", "{done}");
    done["id"].as_str().expect("id").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_stalls_regresses_on_throughput_and_the_tail() {
    let stack = OneAgent::start(Backend::Sqlite, AgentOptions::default()).await;
    let target = Target::start_with(&["--service-ms", "100"]).await;
    let addr = target.addr.to_string();
    let load = json!({"kind": "load", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "model": "closed", "connections": 128,
                 "duration": "6s", "warmup": "1s"}});
    let steady = finished(&stack, &load).await;

    // The same target, now holding its answers during [k, k+0.5) s of its life.
    target.stop().await;
    let stalling = Target::start_at(
        &addr,
        &[
            "--service-ms",
            "100",
            "--stall-every-ms",
            "1000",
            "--stall-ms",
            "500",
        ],
    )
    .await;
    let stalled = finished(&stack, &load).await;
    assert!(
        stalling.stats().await["stalled"].as_u64().unwrap_or(0) > 0,
        "the target held answers"
    );

    let (status, answer) = stack
        .api
        .get(&format!(
            "/v1/reliability/compare?before={steady}&after={stalled}"
        ))
        .await;
    assert_eq!(status, 200, "{answer}");
    eprintln!("{answer:#}");
    assert_eq!(answer["verdict"], "regressed", "{answer}");
    let differences = answer["differences"].as_array().expect("differences");
    let measures: Vec<&str> = differences
        .iter()
        .filter_map(|d| d["measure"].as_str())
        .collect();
    // Decisive lines first: throughput, then the tail.
    assert_eq!(measures.first(), Some(&"throughput"), "{measures:?}");
    assert!(measures.contains(&"p99.9 total"), "{measures:?}");
    for d in differences
        .iter()
        .filter(|d| d["measure"] == "throughput" || d["measure"] == "p99.9 total")
    {
        assert_eq!(d["worse"], true, "{d}");
    }
    let throughput = differences[0]["line"].as_str().expect("line");
    assert!(
        throughput.starts_with("throughput: ") && throughput.contains("/s ["),
        "{throughput}"
    );

    // The markdown for a pull request says the same, throughput first.
    let output = std::process::Command::new(bin("iohr"))
        .args(["--server", &stack.controller.api_url()])
        .args(["--token", &stack.install.full_token()])
        .args(["reliability", "compare", &steady, &stalled])
        .args(["--format", "markdown"])
        .output()
        .expect("run iohr");
    let text = String::from_utf8_lossy(&output.stdout);
    eprintln!("{text}");
    assert_eq!(output.status.code(), Some(1), "regressed exits 1: {text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("**regressed**"), "{text}");
    assert!(lines[2].starts_with("- throughput: "), "{text}");
    stalling.stop().await;
}
