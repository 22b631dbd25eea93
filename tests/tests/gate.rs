//! `iohr reliability gate` as a CI job runs it (issue 33's gate for any CI), on real runs:
//! a check that turns from pass to fail exits 1 and writes a JUnit report that a maintained
//! JUnit reader (PyPI `junitparser`) reads with the failing check and the worse measures,
//! the markdown file, and, with GitHub Actions' variables set, the job summary and one
//! `::error` annotation per worse difference; the same pair the other way round exits 0;
//! a refused comparison, a run that does not exist and a run still going at the timeout
//! exit 3 with an `error` case; a bad flag exits 2.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::python::run_script;
use iohr_tests::setup::{CliOutput, OneAgent, iohr_with_env};
use iohr_tests::{Backend, Target};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

async fn finished(stack: &OneAgent, body: &Value) -> String {
    let run = stack
        .api
        .run_until(body, &["passed", "failed"], LIMIT)
        .await;
    run["id"].as_str().expect("id").to_string()
}

fn gate(stack: &OneAgent, args: &[&str], env: &[(&str, &str)]) -> CliOutput {
    let mut all = vec!["reliability", "gate"];
    all.extend_from_slice(args);
    iohr_with_env(&stack.controller, &stack.install.full_token(), &all, env)
}

/// The report as junitparser reads it: `{"suites": [{"name", "tests", "failures",
/// "errors", "cases": [{"name", "classname", "result", "message"}]}]}`.
async fn junit(path: &std::path::Path) -> Value {
    run_script(
        "gate/junit_read.py",
        &json!({ "path": path }),
        Duration::from_secs(30),
    )
    .await
}

fn case<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["suites"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["cases"].as_array().unwrap())
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no case {name} in {report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regression_fails_the_gate_in_every_form_ci_reads() {
    let stack = OneAgent::start(Backend::Sqlite, AgentOptions::default()).await;
    let target = Target::start().await;
    let addr = target.addr.to_string();
    let checks = json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "spec": {"checks": [{"name": "home", "path": "/"}], "invariants": [{"rule": "no_5xx"}]}});
    let good = finished(&stack, &checks).await;
    target.stop().await;
    let broken = Target::start_at(&addr, &["--error-percent", "100"]).await;
    let bad = finished(&stack, &checks).await;

    let dir = stack.install.path("gate");
    std::fs::create_dir_all(&dir).unwrap();
    let (report, markdown, summary) = (
        dir.join("junit.xml"),
        dir.join("compare.md"),
        dir.join("summary.md"),
    );
    let out = gate(
        &stack,
        &[
            "--before",
            &good,
            "--after",
            &bad,
            "--junit",
            report.to_str().unwrap(),
            "--markdown",
            markdown.to_str().unwrap(),
        ],
        &[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_STEP_SUMMARY", summary.to_str().unwrap()),
        ],
    );
    assert_eq!(out.code, 1, "regressed exits 1: {out:?}");
    assert!(out.stdout.starts_with("regressed\n"), "{out:?}");
    assert!(
        out.stdout.lines().any(|l| l
            == "::error title=check home::check home: passed -> failed (status 500, expected 200)"),
        "an annotation per worse difference: {out:?}"
    );
    let written = std::fs::read_to_string(&markdown).unwrap();
    assert!(written.starts_with("**regressed**"), "{written}");
    assert_eq!(std::fs::read_to_string(&summary).unwrap(), written);

    let read = junit(&report).await;
    let suites = read["suites"].as_array().unwrap();
    assert_eq!(suites.len(), 2, "{read}");
    assert_eq!(suites[0]["name"], "compare");
    assert!(suites[0]["failures"].as_u64() >= Some(1), "{read}");
    assert_eq!(suites[1]["name"], format!("after run {bad}"));
    let check = case(&read, "check home");
    assert_eq!(check["result"], "failure", "{read}");
    assert_eq!(check["message"], "status 500, expected 200", "{read}");
    assert_eq!(
        case(&read, "invariant no 5xx")["result"],
        "failure",
        "{read}"
    );
    let compared = case(&read, "compare: check home");
    assert_eq!(compared["result"], "failure", "{read}");
    assert_eq!(
        compared["message"], "check home: passed -> failed (status 500, expected 200)",
        "the difference's line is the failure's message: {read}"
    );

    // The other way round it improved: exit 0, and the after run's checks pass.
    let out = gate(
        &stack,
        &[
            "--before",
            &bad,
            "--after",
            &good,
            "--junit",
            report.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.code, 0, "improved exits 0: {out:?}");
    assert!(out.stdout.starts_with("improved\n"), "{out:?}");
    assert_eq!(
        case(&junit(&report).await, "check home")["result"],
        "passed"
    );

    // No verdict: a comparison refused (another spec), a run that does not exist, and a
    // run still going at the timeout each exit 3, with the reason in an error case.
    broken.stop().await;
    let _healthy = Target::start_at(&addr, &[]).await;
    let other = json!({"kind": "checks", "environment": "staging", "target": format!("http://{addr}"),
        "spec": {"checks": [{"name": "other", "path": "/other"}]}});
    let different = finished(&stack, &other).await;
    let out = gate(
        &stack,
        &[
            "--before",
            &good,
            "--after",
            &different,
            "--junit",
            report.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.code, 3, "a refused comparison is no verdict: {out:?}");
    assert!(out.stderr.contains("not_comparable"), "{out:?}");
    let read = junit(&report).await;
    assert_eq!(read["suites"][0]["errors"], 1, "{read}");
    assert_eq!(read["suites"][0]["cases"][0]["result"], "error", "{read}");

    let out = gate(&stack, &["--before", &good, "--after", "no-such-run"], &[]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("not_found"), "{out:?}");

    // A run no agent takes (the one agent serves staging only) is still queued at the
    // timeout.
    let queued = stack
        .api
        .create_run(&json!({"kind": "checks", "environment": "production",
            "target": format!("http://{addr}"),
            "spec": {"checks": [{"name": "home", "path": "/"}]}}))
        .await;
    let queued = queued["id"].as_str().unwrap();
    let out = gate(
        &stack,
        &["--before", &good, "--after", queued, "--timeout", "2s"],
        &[],
    );
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("is still queued after 2s"), "{out:?}");

    let out = gate(&stack, &["--before", &good], &[]);
    assert_eq!(out.code, 2, "a usage error exits 2: {out:?}");
}
