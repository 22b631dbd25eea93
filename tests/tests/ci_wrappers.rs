//! The CI wrappers of issue 33 as their CI systems read and run them, on real runs:
//!
//! - `action.yml` and the example workflow pass action-validator (SchemaStore's schemas
//!   of GitHub Actions, npm `@action-validator/cli`).
//! - The action's steps, run as GitHub's runner runs composite `bash` steps
//!   (tests/gate/run_action.py), start the after-run for the pull request's change,
//!   compare it with its baseline (the base branch's run, found through the pull
//!   request's base), fail on a regression and set the outputs, the job
//!   summary and the JUnit report; an improvement passes; neither an after-run nor a spec
//!   is a usage error (exit 2).
//! - The GitLab template, included by a project's `.gitlab-ci.yml` and run by
//!   gitlab-ci-local (npm; shell executor; it checks the file against GitLab's own CI
//!   schema first), fails its job on the same regression, passes on the improvement, and
//!   exports the JUnit report as the job's artifact.
//!
//! The tools come from tests/forge (installed by tests/run; `IOHR_FORGE_NODE_MODULES`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use iohr_tests::process::{AgentOptions, bin};
use iohr_tests::python::run_script;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Target};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The npm tools' `node_modules`, or a loud failure saying how to get them.
fn node_modules() -> PathBuf {
    iohr_tests::forge::node_modules_with(&[".bin/gitlab-ci-local", ".bin/action-validator"])
}

fn validate_action_file(path: &Path) {
    let out = Command::new(node_modules().join(".bin/action-validator"))
        .arg(path)
        .output()
        .expect("run action-validator");
    assert!(
        out.status.success(),
        "{} fails SchemaStore's schema: {}{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_action_and_the_example_workflow_pass_github_actions_schemas() {
    validate_action_file(&repo_root().join("action.yml"));
    validate_action_file(&repo_root().join("examples/github/reliability.yml"));
    // The validator is not a rubber stamp: a bash step without its shell is refused.
    let dir = std::env::temp_dir().join(format!("iohr-action-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broken = dir.join("action.yml");
    std::fs::write(
        &broken,
        "name: x\ndescription: y\nruns:\n  using: composite\n  steps:\n    - run: echo\n",
    )
    .unwrap();
    let out = Command::new(node_modules().join(".bin/action-validator"))
        .arg(&broken)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success(), "a step without shell is refused");
}

/// Two finished checks runs of one target: `good` passed; `bad` failed after the target
/// began answering 500. The target is left broken, for the wrappers' own after-runs.
struct Pair {
    stack: OneAgent,
    target: Target,
    good: String,
    bad: String,
    dir: PathBuf,
    spec: PathBuf,
}

async fn pair() -> Pair {
    let stack = OneAgent::start(Backend::Sqlite, AgentOptions::default()).await;
    let target = Target::start().await;
    let addr = target.addr.to_string();
    let spec =
        json!({"checks": [{"name": "home", "path": "/"}], "invariants": [{"rule": "no_5xx"}]});
    let body =
        json!({"kind": "checks", "environment": "staging", "target": target.url(), "spec": spec});
    let ended = ["passed", "failed"];
    // The good run is the base branch's: the wrappers' `baseline` finds it.
    let mut on_main = body.clone();
    on_main["change"] = json!("acme/shop@main");
    let good = stack.api.run_until(&on_main, &ended, LIMIT).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    target.stop().await;
    let target = Target::start_at(&addr, &["--error-percent", "100"]).await;
    let bad = stack.api.run_until(&body, &ended, LIMIT).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = stack.install.path("ci");
    std::fs::create_dir_all(&dir).unwrap();
    let spec_file = dir.join("checks.json");
    std::fs::write(&spec_file, spec.to_string()).unwrap();
    Pair {
        stack,
        target,
        good,
        bad,
        dir,
        spec: spec_file,
    }
}

impl Pair {
    async fn change_of(&self, run: &str) -> Value {
        let (status, record) = self
            .stack
            .api
            .get(&format!("/v1/reliability/runs/{run}"))
            .await;
        assert_eq!(status, 200, "{record}");
        record["started_by"]["change"].clone()
    }
}

async fn run_action(pair: &Pair, inputs: Value, summary: &Path) -> Value {
    let mut all = json!({
        "server": pair.stack.controller.api_url(),
        "token": pair.stack.install.full_token(),
        "iohr": bin("iohr"),
    });
    for (k, v) in inputs.as_object().unwrap() {
        all[k] = v.clone();
    }
    run_script(
        "gate/run_action.py",
        &json!({
            "action": repo_root().join("action.yml"),
            "inputs": all,
            "env": {
                "GITHUB_REPOSITORY": "acme/shop",
                "GITHUB_REF_NAME": "feature",
                "GITHUB_STEP_SUMMARY": summary,
                "RUNNER_TEMP": pair.dir,
            },
            "event": {"pull_request": {"number": 42, "base": {"ref": "main"}}},
            "workdir": pair.dir,
        }),
        Duration::from_secs(240),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_github_action_runs_compares_and_fails_a_regression() {
    let pair = pair().await;
    let summary = pair.dir.join("summary.md");

    // No after-run given: the action starts it for the pull request, against the broken
    // target; its baseline (the default `before`) is the base branch's good run, found
    // through the pull request's base; the gate fails it.
    let ran = run_action(
        &pair,
        json!({"kind": "checks", "spec": pair.spec, "environment": "staging",
               "target": pair.target.url()}),
        &summary,
    )
    .await;
    assert_eq!(
        ran["exit"], 1,
        "a regression fails the step: {}",
        ran["log"]
    );
    assert_eq!(ran["outputs"]["result"], "regressed", "{ran}");
    assert_eq!(ran["outputs"]["exit-code"], "1", "{ran}");
    let after = ran["outputs"]["after"].as_str().unwrap().to_string();
    assert!(!after.is_empty() && after != pair.good, "{ran}");
    assert_eq!(
        pair.change_of(&after).await,
        "acme/shop#42",
        "the PR's change"
    );
    let written = std::fs::read_to_string(&summary).unwrap();
    assert!(written.starts_with("**regressed**"), "{written}");
    let junit = std::fs::read_to_string(pair.dir.join("iohr-reliability.xml")).unwrap();
    assert!(junit.contains("check home"), "{junit}");
    assert!(
        std::fs::read_to_string(pair.dir.join("iohr-reliability.md"))
            .unwrap()
            .starts_with("**regressed**")
    );

    // A given after-run that improved on its before-run passes.
    let ran = run_action(
        &pair,
        json!({"before": pair.bad, "after": pair.good}),
        &summary,
    )
    .await;
    assert_eq!(ran["exit"], 0, "{}", ran["log"]);
    assert_eq!(ran["outputs"]["result"], "passed", "{ran}");
    assert_eq!(ran["outputs"]["after"], pair.good.as_str(), "{ran}");

    // Neither an after-run nor a spec: a usage error, said as an annotation.
    let ran = run_action(&pair, json!({"before": pair.good}), &summary).await;
    assert_eq!(ran["exit"], 2, "{}", ran["log"]);
    assert_eq!(ran["outputs"]["exit-code"], "2", "{ran}");
    assert!(
        ran["log"]
            .as_str()
            .unwrap()
            .contains("::error title=iohr reliability::give either after"),
        "{ran}"
    );
    pair.stack.controller.stop().await;
}

/// A project that includes the template, as docs/pull-requests.md says, in a fresh git
/// repository (gitlab-ci-local reads the project from git), and the job run in it.
fn gitlab_job(pair: &Pair, name: &str, variables: &[(&str, &str)]) -> (i32, String, PathBuf) {
    let project = pair.dir.join(name);
    std::fs::create_dir_all(&project).unwrap();
    std::fs::copy(
        repo_root().join("ci/gitlab/iohr-reliability.gitlab-ci.yml"),
        project.join("iohr-reliability.gitlab-ci.yml"),
    )
    .unwrap();
    let mut job = String::from(
        "include:\n  - local: iohr-reliability.gitlab-ci.yml\n\nreliability:\n  extends: .iohr-reliability\n  variables:\n",
    );
    for (k, v) in variables {
        job.push_str(&format!("    {k}: {}\n", serde_json::to_string(v).unwrap()));
    }
    std::fs::write(project.join(".gitlab-ci.yml"), job).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.email=ci@example.com", "-c", "user.name=ci"])
            .args(args)
            .current_dir(&project)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "ci"]);
    let out = Command::new("node")
        .arg(node_modules().join("gitlab-ci-local/dist/index.js"))
        .args(["--shell-executor-no-image", "--no-color"])
        .args([
            "--variable",
            &format!("IOHR_SERVER={}", pair.stack.controller.api_url()),
        ])
        .args([
            "--variable",
            &format!("IOHR_TOKEN={}", pair.stack.install.full_token()),
        ])
        .args(["--variable", &format!("IOHR_BIN={}", bin("iohr").display())])
        .args(["--variable", "CI_MERGE_REQUEST_IID=7"])
        .arg("reliability")
        .current_dir(&project)
        .env("HOME", &project)
        .output()
        .expect("run gitlab-ci-local (needs node)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text, project)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gitlab_template_fails_a_regression_and_exports_its_junit_report() {
    let pair = pair().await;
    let target = pair.target.url();
    let spec = pair.spec.to_str().unwrap().to_string();
    let (code, log, project) = gitlab_job(
        &pair,
        "regressed",
        &[
            ("IOHR_BEFORE", "baseline"),
            ("IOHR_BASE", "acme/shop@main"),
            ("IOHR_KIND", "checks"),
            ("IOHR_SPEC", &spec),
            ("IOHR_TARGET", &target),
        ],
    );
    assert_ne!(code, 0, "a regression fails the pipeline: {log}");
    assert!(log.contains("FAIL  reliability"), "{log}");
    assert!(log.contains("regressed"), "{log}");
    let report = project.join(".gitlab-ci-local/artifacts/reliability/iohr-reliability.xml");
    let junit = std::fs::read_to_string(&report).unwrap_or_else(|e| {
        panic!(
            "the JUnit report is the job's artifact ({}): {e}\n{log}",
            report.display()
        )
    });
    assert!(junit.contains("check home"), "{junit}");
    let after = log
        .lines()
        .find_map(|l| l.split("after run ").nth(1))
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("the job names its after-run: {log}"))
        .to_string();
    let change = pair.change_of(&after).await;
    assert!(
        change.as_str().is_some_and(|c| c.ends_with("#7")),
        "the merge request's change: {change}"
    );

    let (code, log, _) = gitlab_job(
        &pair,
        "improved",
        &[("IOHR_BEFORE", &pair.bad), ("IOHR_AFTER", &pair.good)],
    );
    assert_eq!(code, 0, "an improvement passes: {log}");
    assert!(log.contains("PASS  reliability"), "{log}");
    pair.stack.controller.stop().await;
}
