//! The MCP tools through a client nobody here wrote: the official MCP Python SDK (PyPI
//! `mcp` 2.x, `tests/mcp/client.py`) against a real controller and agent, over streamable
//! HTTP to the controller's `/mcp` and over stdio to `iohr mcp`: the tools and their
//! schemas, checks runs started, waited for and compared, a load run waited for with
//! progress and past a timeout, a scope refusal, bad inputs refused with the API's codes.
//!
//! The SDK lives in a virtual environment that tests/run makes (`target/py-venv`, or
//! `IOHR_PYTHON`); without it the test fails, it never skips.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::{AgentOptions, bin};
use iohr_tests::python::run_script;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Target};
use serde_json::{Value, json};

async fn client(config: Value) -> Value {
    run_script("mcp/client.py", &config, Duration::from_secs(240)).await
}

/// What both transports must show.
fn assert_the_tools(seen: &Value) {
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "reliability_compare_runs",
            "reliability_get_run",
            "reliability_list_agents",
            "reliability_list_audit",
            "reliability_list_findings",
            "reliability_list_runs",
            "reliability_list_scenarios",
            "reliability_list_schedules",
            "reliability_start_run",
            "reliability_wait_run",
        ],
        "{seen}"
    );
    assert_eq!(
        seen["start_input_required"],
        json!(["environment", "kind", "target"])
    );
    assert_eq!(
        seen["with_output_schema"].as_array().unwrap().len(),
        tools.len(),
        "every tool has an output schema"
    );

    assert_eq!(seen["start"]["is_error"], false, "{seen}");
    assert_eq!(seen["start"]["structured"]["status"], "queued");
    assert_eq!(
        seen["start"]["structured"]["started_by"]["change"],
        "mcp-test"
    );
    for wait in seen["wait"].as_array().unwrap() {
        assert_eq!(
            wait,
            &json!({"is_error": false, "timed_out": false, "status": "passed"})
        );
    }
    assert_eq!(seen["get_status"], "passed");
    assert_eq!(
        seen["compare"],
        json!({"is_error": false, "verdict": "unchanged", "exit_code": 0, "differences": []})
    );

    // The load run lasts 3 s: a 1 s wait times out with it still going, with progress.
    assert_eq!(seen["short_wait"]["timed_out"], true, "{seen}");
    let still = seen["short_wait"]["status"].as_str().unwrap();
    assert!(["queued", "running"].contains(&still), "{seen}");
    assert_eq!(seen["full_wait"]["timed_out"], false);
    assert_eq!(seen["full_wait"]["status"], "passed", "{seen}");
    let progress = seen["progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "no progress notification: {seen}");
    assert!(
        progress.iter().any(|p| p["message"]
            .as_str()
            .unwrap()
            .starts_with("running on agent")),
        "{seen}"
    );
    // A load run's progress gives its last second's rate and p99, from its live frames.
    assert!(
        progress.iter().any(|p| {
            let message = p["message"].as_str().unwrap();
            message.contains(", phase measure, last second ") && message.contains(" req/s, p99 ")
        }),
        "{seen}"
    );
    // A checks run and a load run are not comparable: the CLI would exit 2.
    assert_eq!(seen["compare_refused"]["is_error"], true);
    assert_eq!(
        seen["compare_refused"]["structured"]["error"]["code"],
        "not_comparable"
    );

    assert_eq!(seen["list_runs"], 3);
    assert_eq!(seen["agents"], json!(["edge-1"]));
    assert_eq!(seen["findings_is_error"], false);
    assert_eq!(seen["scenarios"], json!(["inline-checks", "inline-load"]));

    // An input the schema refuses is a tool error naming the field, for the model to fix.
    let text = |what: &str| seen[what]["text"].as_str().unwrap_or_default().to_string();
    assert_eq!(seen["missing_field"]["is_error"], true, "{seen}");
    assert!(
        text("missing_field").contains("missing field `environment`"),
        "{seen}"
    );
    assert_eq!(seen["unknown_field"]["is_error"], true);
    assert!(
        text("unknown_field").contains("unknown field `x`"),
        "{seen}"
    );
    let code = |what: &str| seen[what]["structured"]["error"]["code"].clone();
    assert_eq!(seen["long_wait"]["is_error"], true);
    assert_eq!(code("long_wait"), "invalid_input");
    assert_eq!(code("unknown_kind"), "unknown_kind");
    assert_eq!(code("unknown_run"), "not_found");
    // Scopes as REST: a read-only token reads but cannot start a run.
    assert_eq!(seen["read_only_start"]["is_error"], true);
    assert_eq!(code("read_only_start"), "insufficient_scope");
    assert_eq!(seen["read_only_list"], false);
    assert_eq!(seen["audit_refused"]["is_error"], true);
    assert_eq!(code("audit_refused"), "insufficient_scope");
}

#[tokio::test]
async fn the_python_sdk_drives_both_transports() {
    let stack = OneAgent::start(Backend::Sqlite, AgentOptions::default()).await;
    let target = Target::start().await;
    let read_token = stack.install.token("default", &["reliability:read"], None);
    let base = json!({
        "token": stack.install.full_token(),
        "read_token": read_token,
        "target": target.url(),
    });
    let mut http = base.clone();
    http["transport"] = json!("http");
    http["url"] = json!(format!("{}/mcp", stack.controller.api_url()));
    let seen = client(http).await;
    assert_the_tools(&seen);
    // Without a token /mcp answers 401 as REST does, before any MCP message is read.
    assert!(seen["no_token"]["refused"].is_string(), "{seen}");
    let (status, body) = stack
        .api
        .with_token(None)
        .post(
            "/mcp",
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized", "{body}");

    // A second installation, so the counts start again from nothing.
    let stack = OneAgent::start(Backend::Sqlite, AgentOptions::default()).await;
    let mut stdio = base;
    stdio["transport"] = json!("stdio");
    stdio["token"] = json!(stack.install.full_token());
    stdio["read_token"] = json!(stack.install.token("default", &["reliability:read"], None));
    stdio["iohr"] = json!(bin("iohr").display().to_string());
    stdio["server"] = json!(stack.controller.api_url());
    let seen = client(stdio).await;
    assert_the_tools(&seen);
}
