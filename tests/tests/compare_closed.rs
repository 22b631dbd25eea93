//! Compare judges what a closed model measures. Two closed-model load runs of one spec
//! against one loopback target, the second while the target holds its answers for half of
//! every second (a stall, as a stopped worker or a lock would make it): fewer requests
//! are sent, and compare says `regressed`, naming throughput and p99.9 first.
//!
//! Two stalls: half of every second (a lock held half the time), which the block
//! bootstrap over a run's seconds sees in every resample; and the experiment, one
//! stall of one second in a ten-second run (a GC pause), which a third of the resamples
//! miss, so compare reads it against the steady run's own range instead (a second under
//! half of its median second, a p99.9 over twice its slowest request: see
//! domain/src/compare/excursion.rs). The service time (100 ms) sets the pace, not the CPU:
//! 128 connections ask about 1,280 requests a second of a loaded or idle machine alike.

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

/// Two closed-model runs of `duration` (128 connections, 1 s warm-up) against a 100 ms
/// service: one steady, then one against the same address restarted with `stall` flags.
/// The two run ids and the stalling target, whose counts the caller reads.
async fn steady_then_stalled(
    stack: &OneAgent,
    duration: &str,
    stall: &[&str],
) -> (String, String, Target) {
    let target = Target::start_with(&["--service-ms", "100"]).await;
    let addr = target.addr.to_string();
    let load = json!({"kind": "load", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "model": "closed", "connections": 128,
                 "duration": duration, "warmup": "1s"}});
    let steady = finished(stack, &load).await;
    target.stop().await;
    let flags: Vec<&str> = ["--service-ms", "100"]
        .into_iter()
        .chain(stall.iter().copied())
        .collect();
    let stalling = Target::start_at(&addr, &flags).await;
    let stalled = finished(stack, &load).await;
    (steady, stalled, stalling)
}

/// `GET /compare` of the two runs, which must say `regressed`: the answer.
async fn regressed(stack: &OneAgent, before: &str, after: &str) -> Value {
    let (status, answer) = stack
        .api
        .get(&format!(
            "/v1/reliability/compare?before={before}&after={after}"
        ))
        .await;
    assert_eq!(status, 200, "{answer}");
    eprintln!("{answer:#}");
    assert_eq!(answer["verdict"], "regressed", "{answer}");
    answer
}

/// The tests of this file measure one at a time: one's load is not the other's noise.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_stalls_regresses_on_throughput_and_the_tail() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let stack = OneAgent::start(Backend::Sqlite, AgentOptions::default()).await;
    // The target holding its answers during [k, k+0.5) s of its life.
    let (steady, stalled, stalling) = steady_then_stalled(
        &stack,
        "6s",
        &["--stall-every-ms", "1000", "--stall-ms", "500"],
    )
    .await;
    assert!(
        stalling.stats().await["stalled"].as_u64().unwrap_or(0) > 0,
        "the target held answers"
    );

    let answer = regressed(&stack, &steady, &stalled).await;
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

/// The experiment: two closed-model runs of ten seconds, the second while the
/// target answers nothing for one second, five seconds after its first request (the
/// target's own clock, so the stall falls inside the measure however late the run is
/// leased). 128 requests of about 13,000 are held a second: the stalled second loses
/// its throughput and p99.9 reads the held requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stall_of_one_second_regresses_on_throughput_and_the_tail() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let stack = OneAgent::start(Backend::Sqlite, AgentOptions::default()).await;
    let (steady, stalled, stalling) = steady_then_stalled(
        &stack,
        "10s",
        &["--stall-once-at-ms", "5000", "--stall-ms", "1000"],
    )
    .await;
    let held = stalling.stats().await["stalled"].as_u64().unwrap_or(0);
    assert!(held >= 100, "the target held {held} answers");

    let answer = regressed(&stack, &steady, &stalled).await;
    let line = |measure: &str| {
        answer["differences"]
            .as_array()
            .expect("differences")
            .iter()
            .find(|d| d["measure"] == measure)
            .map(|d| {
                assert_eq!(d["worse"], true, "{d}");
                d["line"].as_str().expect("line").to_string()
            })
            .unwrap_or_else(|| panic!("no {measure} line: {answer}"))
    };
    assert_eq!(
        answer["differences"][0]["measure"], "throughput",
        "{answer}"
    );
    let throughput = line("throughput");
    assert!(
        throughput.contains("under half of before's median second"),
        "{throughput}"
    );
    let tail = line("p99.9 total");
    assert!(
        tail.contains("over twice before's slowest request"),
        "{tail}"
    );
    stalling.stop().await;
}
