//! The command line reads like a report: `iohr reliability run --wait` on a load run prints
//! one line per second (elapsed/total, requests/s, p50, p99, errors, late) instead of the
//! frames' JSON and histograms; `runs events` prints the same lines and `--raw` the frames
//! as they are; `runs show` of a scenario run prints its report, not its request log,
//! and `--json` keeps everything.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Target};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

/// `iohr ARGS`: exit status, stdout and stderr.
fn cli(stack: &OneAgent, args: &[&str]) -> (i32, String, String) {
    let out = stack.iohr(None, args);
    (out.code, out.stdout, out.stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_and_scenario_runs_read_as_reports() {
    let target = Target::start().await;
    // The agent's fault policy allows faults on the target's port only.
    let policy =
        std::env::temp_dir().join(format!("iohr-report-policy-{}.json", std::process::id()));
    std::fs::write(
        &policy,
        json!({"target_ports": [target.addr.port()]}).to_string(),
    )
    .expect("write the policy");
    let extra = ["--policy", policy.to_str().unwrap()];
    let options = AgentOptions {
        extra: &extra,
        ..AgentOptions::default()
    };
    let stack = OneAgent::start(Backend::Sqlite, options).await;
    let spec = stack.install.path("load.json");
    std::fs::write(
        &spec,
        json!({"operations": [{"path": "/"}], "model": "open", "rate": 20, "duration": "3s"})
            .to_string(),
    )
    .expect("write the spec");
    let (code, stdout, stderr) = cli(
        &stack,
        &[
            "reliability",
            "run",
            "--kind",
            "load",
            "--environment",
            "staging",
            "--target",
            &target.url(),
            "--spec",
            spec.to_str().unwrap(),
            "--wait",
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let seconds: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("measure  "))
        .collect();
    assert_eq!(seconds.len(), 3, "a line per measured second: {stderr}");
    for (n, line) in seconds.iter().enumerate() {
        assert!(
            line.starts_with(&format!("measure  {}/3 s  ", n + 1)),
            "{line}"
        );
        for part in [" req/s  p50 ", " ms  p99 ", "  errors 0  late "] {
            assert!(line.contains(part), "{part:?} in {line}");
        }
    }
    for text in [&stdout, &stderr] {
        assert!(!text.contains("HISTF"), "no histogram is printed: {text}");
    }
    let id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("id"))
        .map(str::trim)
        .expect("the record's id")
        .to_string();

    // The same lines from the stream afterwards; --raw keeps the frames.
    let (code, events, _) = cli(&stack, &["reliability", "runs", "events", &id]);
    assert_eq!(code, 0, "{events}");
    assert_eq!(
        events
            .lines()
            .filter(|l| l.starts_with("measure  "))
            .count(),
        3,
        "{events}"
    );
    assert!(!events.contains("HISTF"), "{events}");
    let (code, raw, _) = cli(&stack, &["reliability", "runs", "events", &id, "--raw"]);
    assert_eq!(code, 0, "{raw}");
    let frames: Vec<Value> = raw
        .lines()
        .map(|l| serde_json::from_str(l).expect("a frame per line"))
        .collect();
    assert!(
        frames
            .iter()
            .any(|f| f["kind"] == "load" && f["data"]["histogram"].is_string()),
        "{raw}"
    );

    // A faults run's timeline reads as one line per step, not as JSON.
    let experiment = stack.install.path("faults.json");
    std::fs::write(
        &experiment,
        json!({"title": "home stays up", "description": "5 ms of latency; home still answers",
            "steady-state-hypothesis": {"title": "home answers", "probes": [
                {"type": "probe", "name": "home-ok", "tolerance": 200,
                 "provider": {"type": "http", "path": "/"}}]},
            "method": [{"type": "action", "name": "add-latency",
                "provider": {"type": "iohr", "fault": "network", "duration": "5s",
                             "toxic": {"type": "latency", "latency_ms": 5}}}],
            "rollbacks": []})
        .to_string(),
    )
    .expect("write the experiment");
    let (code, stdout, stderr) = cli(
        &stack,
        &[
            "reliability",
            "run",
            "--kind",
            "faults",
            "--environment",
            "staging",
            "--target",
            &target.url(),
            "--spec",
            experiment.to_str().unwrap(),
            "--wait",
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let steps: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("timeline  "))
        .collect();
    assert!(
        steps.contains(&"timeline  hypothesis before  home-ok  met"),
        "{stderr}"
    );
    assert!(
        steps
            .iter()
            .any(|l| l.starts_with("timeline  method  add-latency  applied")),
        "{stderr}"
    );
    assert!(!stderr.contains("{\"phase\""), "no timeline JSON: {stderr}");

    // A scenario run shows its report, not its request log.
    let run = stack
        .api
        .create_run(&json!({"kind": "scenario", "environment": "staging",
            "target": target.url(),
            "spec": {"slug": "report", "name": "report", "ops": ["GET /", "GET /health"],
                     "count": 40, "warmup": 2}}))
        .await;
    let scenario_id = run["id"].as_str().expect("id").to_string();
    stack
        .api
        .wait_status(&scenario_id, &["passed"], LIMIT)
        .await;
    let (code, shown, _) = cli(&stack, &["reliability", "runs", "show", &scenario_id]);
    assert_eq!(code, 0, "{shown}");
    for part in ["Requests:", "Commands:", "Latency (load requests"] {
        assert!(shown.contains(part), "{part} in {shown}");
    }
    assert!(!shown.contains("offset_ms"), "no request log: {shown}");
    assert!(shown.lines().count() < 60, "{shown}");
    let (code, json, _) = cli(
        &stack,
        &["--json", "reliability", "runs", "show", &scenario_id],
    );
    assert_eq!(code, 0, "{json}");
    let record: Value = serde_json::from_str(&json).expect("json");
    assert_eq!(
        record["result"]["requests"].as_array().map(Vec::len),
        Some(84),
        "--json keeps every request"
    );
}
