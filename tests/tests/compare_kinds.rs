//! Two scenario runs and two faults runs compared with a verdict on every surface but the
//! console's (console.rs drives that one): REST, the CLI (`iohr reliability compare`) and
//! MCP through the official Python SDK (`tests/mcp/compare_kinds.py`, over HTTP and
//! stdio). The target breaks between each kind's two runs (every answer a 500), so both
//! pairs regress, by the lines that say why. A run of another scenario version, on
//! another target or of another kind is refused with the code every kind's refusal has,
//! `not_comparable`, naming what differs, on each surface alike.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::{AgentOptions, bin};
use iohr_tests::python::run_script;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Installation, Target};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

fn faults_example() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/faults.json"
    ))
    .expect("examples/faults.json");
    serde_json::from_str(&text).expect("the example is JSON")
}

async fn finished(stack: &OneAgent, body: &Value) -> String {
    let run = stack.api.create_run(body).await;
    let id = run["id"].as_str().expect("id").to_string();
    stack
        .api
        .wait_status(&id, &["passed", "failed", "error"], LIMIT)
        .await;
    id
}

/// `iohr reliability compare BEFORE AFTER`: exit status, stdout and stderr.
fn cli(stack: &OneAgent, before: &str, after: &str) -> (i32, String, String) {
    let output = std::process::Command::new(bin("iohr"))
        .args(["--server", &stack.controller.api_url()])
        .args(["--token", &stack.install.full_token()])
        .args(["reliability", "compare", before, after])
        .output()
        .expect("run iohr");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).to_string(),
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_and_faults_runs_compare_on_every_surface() {
    let install = Installation::new(Backend::Sqlite).await;
    let target = Target::start().await;
    let elsewhere = Target::start().await;
    let addr = target.addr.to_string();
    // The agent may put faults in front of both targets (its policy file).
    let policy = install.path("faults-policy.json");
    std::fs::write(
        &policy,
        json!({"target_ports": [target.addr.port(), elsewhere.addr.port()]}).to_string(),
    )
    .expect("policy");
    let policy = policy.display().to_string();
    let options = AgentOptions {
        extra: &["--policy", &policy],
        ..AgentOptions::default()
    };
    let stack = OneAgent::start_in(install, options).await;

    let scenario = |url: String, ops: Value| {
        json!({"kind": "scenario", "environment": "staging", "target": url,
            "spec": {"slug": "compare-kinds", "warmup": 1, "ops": ops}})
    };
    let ops = json!(["GET / 12", "GET /health 12"]);
    let faults = |url: String, spec: Value| json!({"kind": "faults", "environment": "staging", "target": url, "spec": spec});
    let mut other_experiment = faults_example();
    other_experiment["title"] = json!("another version of the experiment");

    // Before: the target answers. Refused pairs: the same specs on another target, and
    // other versions of them on this one.
    let scenario_before = finished(&stack, &scenario(target.url(), ops.clone())).await;
    let faults_before = finished(&stack, &faults(target.url(), faults_example())).await;
    let scenario_elsewhere = finished(&stack, &scenario(elsewhere.url(), ops.clone())).await;
    let faults_elsewhere = finished(&stack, &faults(elsewhere.url(), faults_example())).await;
    let scenario_other = finished(
        &stack,
        &scenario(target.url(), json!(["GET / 12", "GET /health 13"])),
    )
    .await;
    let faults_other = finished(&stack, &faults(target.url(), other_experiment)).await;
    // After: every answer a 500, on the same address.
    target.stop().await;
    let broken = Target::start_at(&addr, &["--error-percent", "100"]).await;
    let scenario_after = finished(&stack, &scenario(broken.url(), ops)).await;
    let faults_after = finished(&stack, &faults(broken.url(), faults_example())).await;

    let verdicts = [
        (
            "scenario",
            &scenario_before,
            &scenario_after,
            "error rate GET /",
        ),
        (
            "faults",
            &faults_before,
            &faults_after,
            "probe home-ok before the method",
        ),
    ];
    let refusals = [
        (
            "scenario_target",
            &scenario_before,
            &scenario_elsewhere,
            "target",
        ),
        (
            "scenario_version",
            &scenario_before,
            &scenario_other,
            "scenario version",
        ),
        ("faults_target", &faults_before, &faults_elsewhere, "target"),
        (
            "faults_version",
            &faults_before,
            &faults_other,
            "scenario version",
        ),
        ("kinds", &scenario_before, &faults_before, "kind"),
    ];

    // REST and the CLI.
    for (name, before, after, line) in verdicts {
        let (status, answer) = stack
            .api
            .get(&format!(
                "/v1/reliability/compare?before={before}&after={after}"
            ))
            .await;
        assert_eq!(status, 200, "{name}: {answer}");
        assert_eq!(answer["verdict"], "regressed", "{name}: {answer}");
        let worse: Vec<&str> = answer["differences"]
            .as_array()
            .expect("differences")
            .iter()
            .filter(|d| d["worse"] == true)
            .filter_map(|d| d["line"].as_str())
            .collect();
        assert!(
            worse.iter().any(|l| l.starts_with(line)),
            "{name}: {line} in {worse:?}"
        );
        let (code, out, err) = cli(&stack, before, after);
        assert_eq!(code, 1, "{name}: regressed exits 1: {out}{err}");
        assert!(out.starts_with("regressed\n"), "{name}: {out}");
        assert!(
            out.lines().any(|l| l.starts_with(line)),
            "{name}: {line} in {out}"
        );
    }
    for (name, before, after, what) in refusals {
        let (status, answer) = stack
            .api
            .get(&format!(
                "/v1/reliability/compare?before={before}&after={after}"
            ))
            .await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (409, Some("not_comparable")),
            "{name}: {answer}"
        );
        let message = answer["error"]["message"].as_str().expect("message");
        assert!(
            message.contains(&format!("differ in {what}")),
            "{name}: {message}"
        );
        let (code, out, err) = cli(&stack, before, after);
        assert_eq!(code, 2, "{name}: refused exits 2: {out}{err}");
        assert!(err.contains(&format!("differ in {what}")), "{name}: {err}");
    }

    // MCP, over both transports: the same verdicts and refusals.
    let pairs: serde_json::Map<String, Value> = verdicts
        .iter()
        .map(|(name, b, a, _)| (name.to_string(), json!([b, a])))
        .chain(
            refusals
                .iter()
                .map(|(name, b, a, _)| (name.to_string(), json!([b, a]))),
        )
        .collect();
    let seen = run_script(
        "mcp/compare_kinds.py",
        &json!({
            "url": format!("{}/mcp", stack.controller.api_url()),
            "iohr": bin("iohr").display().to_string(),
            "server": stack.controller.api_url(),
            "token": stack.install.full_token(),
            "pairs": pairs,
        }),
        Duration::from_secs(120),
    )
    .await;
    for transport in ["http", "stdio"] {
        let answers = &seen[transport];
        for (name, _, _, line) in verdicts {
            let answer = &answers[name];
            assert_eq!(
                (
                    &answer["is_error"],
                    &answer["verdict"],
                    &answer["exit_code"]
                ),
                (&json!(false), &json!("regressed"), &json!(1)),
                "{transport} {name}: {seen}"
            );
            assert!(
                answer["lines"]
                    .as_array()
                    .expect("lines")
                    .iter()
                    .any(|l| l.as_str().unwrap().starts_with(line)),
                "{transport} {name}: {line} in {answer}"
            );
        }
        for (name, _, _, what) in refusals {
            let answer = &answers[name];
            assert_eq!(
                (&answer["is_error"], &answer["code"]),
                (&json!(true), &json!("not_comparable")),
                "{transport} {name}: {seen}"
            );
            assert!(
                answer["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(&format!("differ in {what}"))),
                "{transport} {name}: {answer}"
            );
        }
    }
    broken.stop().await;
    elsewhere.stop().await;
}
