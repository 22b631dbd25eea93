//! A/A: consecutive real runs of one build against one target are compared and found
//! "unchanged". Alone in its test binary, so no other test of this file loads the machine
//! while it measures.
//!
//! Three disjoint pairs (runs 1-2, 3-4, 5-6, as the 20-pair measurement in
//! docs/benchmarks.md compares them), at most one with a difference: on a shared 2-core
//! machine one run of a build now and then has a stray second (that measurement found 1
//! false "regressed" in 20, the limit), so one stray pair in three is tolerated; a
//! compare that flags A/A pairs as a rule fails here. Overlapping pairs (1-2, 2-3, ...)
//! would let one stray run spoil two pairs.
//!
//! Then the same of a closed model (128 connections against a 100 ms service: about
//! 7,700 answers in 6 s, enough for p99.9), whose throughput and tail compare judges
//! too: three pairs again, at most one with a difference.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Target};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consecutive_runs_of_one_build_show_no_measurable_difference() {
    let stack = OneAgent::start(Backend::Sqlite, AgentOptions::default()).await;
    let target = Target::start_with(&["--service-ms", "20"]).await;
    let load = json!({"kind": "load", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "model": "open", "rate": 125, "duration": "4s",
                 "warmup": "1s", "connections": 16}});
    three_pairs_at_most_one_differs(&stack, &load).await;
    target.stop().await;

    let target = Target::start_with(&["--service-ms", "100"]).await;
    let closed = json!({"kind": "load", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "model": "closed", "connections": 128,
                 "duration": "6s", "warmup": "1s"}});
    let judged = three_pairs_at_most_one_differs(&stack, &closed).await;
    for answer in &judged {
        let unchanged = answer["unchanged"].to_string();
        assert!(
            unchanged.contains("\"throughput\"")
                || answer["differences"].to_string().contains("throughput"),
            "a closed model's throughput is judged: {answer}"
        );
        assert!(
            !unchanged.contains("p99.9 total ("),
            "6 s of 128 connections bound a p99.9: {answer}"
        );
    }
    target.stop().await;
}

/// Six runs of `load`, compared in three disjoint pairs (at most one may differ): the
/// three answers.
async fn three_pairs_at_most_one_differs(
    stack: &OneAgent,
    load: &serde_json::Value,
) -> Vec<serde_json::Value> {
    let mut runs = Vec::new();
    for _ in 0..6 {
        let run = stack.api.create_run(load).await;
        let id = run["id"].as_str().expect("id").to_string();
        let done = stack
            .api
            .wait_status(&id, &["passed", "failed", "error"], LIMIT)
            .await;
        assert_eq!(done["status"], "passed", "{done}");
        runs.push(id);
    }
    let mut differing = Vec::new();
    let mut answers = Vec::new();
    for pair in runs.chunks_exact(2) {
        let (status, answer) = stack
            .api
            .get(&format!(
                "/v1/reliability/compare?before={}&after={}",
                pair[0], pair[1]
            ))
            .await;
        assert_eq!(status, 200, "{answer}");
        eprintln!(
            "A/A: {} {} unchanged: {}",
            answer["verdict"], answer["differences"], answer["unchanged"]
        );
        if answer["verdict"] != "unchanged" {
            differing.push(answer.clone());
        }
        answers.push(answer);
    }
    assert!(
        differing.len() <= 1,
        "A/A pairs with a difference: {differing:?}"
    );
    answers
}
