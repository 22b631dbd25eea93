//! The contract as a third-party integrator meets it: a client generated from
//! `docs/openapi.json` by a maintained generator nobody here wrote (PyPI
//! `openapi-python-client`, pinned in tests/requirements.txt), generated at test time, starts
//! a checks run, waits for it by polling, does it again and compares the two, with no
//! hand-written request (`tests/generated_client/drive.py`). A kind, status or error code
//! the document spells otherwise than the server, or an answer it does not describe, fails
//! the generated client.
//!
//! The generator lives in the virtual environment tests/run makes (`target/py-venv`, or
//! `IOHR_PYTHON`); without it the test fails, it never skips.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::path::PathBuf;
use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::python::{python, run_script};
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Target};
use serde_json::json;

/// `openapi-python-client generate` from `docs/openapi.json` into `output`: no network.
async fn generate(output: &PathBuf) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let run = tokio::process::Command::new(python())
        .args(["-m", "openapi_python_client", "generate"])
        .arg("--path")
        .arg(root.join("../docs/openapi.json"))
        .arg("--output-path")
        .arg(output)
        .arg("--config")
        .arg(root.join("generated_client/config.yaml"))
        .env("NO_COLOR", "1")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("openapi-python-client ended within 120 s")
        .expect("run openapi-python-client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "openapi-python-client failed (is it in the venv? tests/run installs \
         tests/requirements.txt):\n{stdout}\n{stderr}"
    );
    // The generator says so when it dropped an operation or a model it could not read.
    assert!(
        !stdout.contains("Warning") && !stderr.contains("Warning"),
        "openapi-python-client could not read all of docs/openapi.json:\n{stdout}\n{stderr}"
    );
    assert!(
        output
            .join("iohr_reliability_api_client/api/runs/create_run.py")
            .exists(),
        "no generated package in {}:\n{stdout}",
        output.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_client_starts_waits_for_and_compares_runs() {
    let stack = OneAgent::start(Backend::Sqlite, AgentOptions::default()).await;
    let target = Target::start().await;
    let package = stack.install.path("generated-client");
    generate(&package).await;

    let config = json!({
        "package": package,
        "url": stack.controller.api_url(),
        "token": stack.install.full_token(),
        "target": target.url(),
    });
    let seen = run_script(
        "generated_client/drive.py",
        &config,
        Duration::from_secs(180),
    )
    .await;

    let runs = seen["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{seen}");
    for run in runs {
        assert_eq!(run["kind"], "checks", "{seen}");
        assert_eq!(run["status"], "passed", "{seen}");
    }
    let comparison = &seen["comparison"];
    assert_eq!(comparison["before"], runs[0]["id"], "{seen}");
    assert_eq!(comparison["after"], runs[1]["id"], "{seen}");
    // Two passing runs of one spec against one unchanged target.
    assert_eq!(comparison["verdict"], "unchanged", "{seen}");
    assert!(comparison["differences"].is_array(), "{seen}");
    assert!(comparison["unchanged"].is_array(), "{seen}");
    assert!(comparison["notes"].is_array(), "{seen}");
    assert!(comparison["level"].is_f64(), "{seen}");
    assert!(comparison["noise_floor"].is_f64(), "{seen}");
    // The generated list_runs parses a page holding both runs.
    let listed = seen["listed"].as_array().expect("listed");
    for run in runs {
        assert!(listed.contains(&run["id"]), "{seen}");
    }
}
