//! `iohr-agent exec` as CI runs it: `--quiet`, `--output FILE` and `--dry-run`, through the
//! real binary against the sample target, whose `/_stats` counts the requests that reached
//! it. Every run is at most a second of load.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Output, Stdio};

use iohr_tests::Target;
use iohr_tests::process::agent_exec_output;
use serde_json::{Value, json};

/// A second of load at 50 requests/s: 50 requests, well within what the target serves.
fn load_spec() -> Value {
    json!({"operations": [{"path": "/"}], "model": "open", "rate": 50, "duration": "1s"})
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn shown(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr)
    )
}

async fn requests_served(target: &Target) -> u64 {
    let stats = target.stats().await;
    stats["requests"]
        .as_u64()
        .unwrap_or_else(|| panic!("requests in {stats}"))
}

/// `exec` with its stderr on a terminal (a pty), as a person at a shell sees it: the exit
/// output and everything written to that terminal.
async fn exec_on_a_terminal(
    kind: &str,
    target: &str,
    spec: &Value,
    extra: &[&str],
    env: &[(&str, Option<&str>)],
) -> (Output, String) {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let mut master = std::fs::File::from(pty.master);
    // The terminal's buffer is small: read it while the agent writes.
    let reader = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // EIO once the agent, the last holder of the terminal's other end, is gone.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        seen
    });
    let terminal: OwnedFd = pty.slave;
    let output =
        agent_exec_output(kind, target, spec, extra, env, Some(Stdio::from(terminal))).await;
    let seen = tokio::time::timeout(std::time::Duration::from_secs(10), reader)
        .await
        .expect("the terminal closes with the agent")
        .expect("reader");
    (output, text(&seen))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_shows_no_progress_and_no_info_lines() {
    let target = Target::start().await;
    // The default log: the agent's own, whatever the test's environment says.
    let no_rust_log = [("RUST_LOG", None)];
    let (loud, terminal) =
        exec_on_a_terminal("load", &target.url(), &load_spec(), &[], &no_rust_log).await;
    assert_eq!(loud.status.code(), Some(0), "{}\n{terminal}", shown(&loud));
    assert!(
        terminal.contains("req/s"),
        "without --quiet a terminal shows the progress line: {terminal}"
    );
    assert!(terminal.contains("INFO"), "and INFO lines: {terminal}");

    let (quiet, terminal) = exec_on_a_terminal(
        "load",
        &target.url(),
        &load_spec(),
        &["--quiet"],
        &no_rust_log,
    )
    .await;
    assert_eq!(
        quiet.status.code(),
        Some(0),
        "{}\n{terminal}",
        shown(&quiet)
    );
    assert!(
        !terminal.contains("req/s") && !terminal.contains("INFO"),
        "--quiet: no progress and no INFO line: {terminal:?}"
    );
    let stdout = text(&quiet.stdout);
    assert!(
        stdout.starts_with("passed") && stdout.contains("requests 50"),
        "the summary is still printed: {stdout}"
    );

    // An explicit RUST_LOG still decides the log (a checks run: a few requests).
    let checks = json!({"checks": [{"path": "/health"}]});
    let output = agent_exec_output(
        "checks",
        &target.url(),
        &checks,
        &["-q"],
        &[("RUST_LOG", Some("info"))],
        None,
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    assert!(text(&output.stderr).contains("INFO"), "{}", shown(&output));
    // A checks run prints a report as every kind does, not its JSON.
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[..2], ["passed", "  0 of 1 checks failed"], "{stdout}");
    assert!(
        lines[2].starts_with("  check  GET /health  pass  200  "),
        "{stdout}"
    );
    assert!(!stdout.contains('{'), "no JSON: {stdout}");
}

fn read_json(path: &Path) -> Value {
    let body = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{} was written: {e}", path.display()));
    serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("{} is JSON ({e}): {body}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_writes_what_json_prints_and_a_bad_path_stops_before_any_request() {
    let target = Target::start().await;
    let dir = tempfile_dir();
    let file = dir.join("summary.json");
    let file_arg = file.to_str().expect("a UTF-8 path");

    // Nothing is sent when the file could not be written afterwards.
    let missing = dir.join("missing-dir/summary.json");
    let output = agent_exec_output(
        "load",
        &target.url(),
        &load_spec(),
        &["--output", missing.to_str().expect("a UTF-8 path")],
        &[],
        None,
    )
    .await;
    assert_eq!(output.status.code(), Some(2), "{}", shown(&output));
    assert!(
        text(&output.stderr).contains(&missing.display().to_string()),
        "the error names the path: {}",
        shown(&output)
    );
    assert_eq!(requests_served(&target).await, 0, "no request was sent");

    let output = agent_exec_output(
        "load",
        &target.url(),
        &load_spec(),
        &["--json", "--output", file_arg],
        &[],
        None,
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    let printed: Value = serde_json::from_slice(&output.stdout).expect("--json prints JSON");
    let written = read_json(&file);
    assert_eq!(written["status"], "passed", "{written}");
    assert_eq!(written["status"], printed["status"]);
    assert_eq!(written["result"]["requests"], 50, "{written}");
    assert_eq!(written["result"]["requests"], printed["result"]["requests"]);
    assert_eq!(written, printed, "the file holds the very object printed");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("the output directory")
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "no temporary file is left: {left:?}");

    // Text on stdout, the JSON object in the file: for every kind.
    let checks =
        json!({"checks": [{"path": "/health"}, {"path": "/status/404", "expect_status": 404}]});
    let output = agent_exec_output(
        "checks",
        &target.url(),
        &checks,
        &["--output", file_arg],
        &[],
        None,
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    assert!(
        text(&output.stdout).starts_with("passed"),
        "{}",
        shown(&output)
    );
    let written = read_json(&file);
    assert_eq!(
        (written["kind"].as_str(), written["status"].as_str()),
        (Some("checks"), Some("passed")),
        "{written}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_of_every_kind_prints_the_plan_and_sends_nothing() {
    let target = Target::start().await;
    let spec = json!({
        "operations": [{"path": "/"}, {"name": "health", "path": "/health", "weight": 3}],
        "model": "open", "rate": 200, "duration": "30s", "warmup": 100,
        "thresholds": ["p99 < 300ms"]
    });
    let output = agent_exec_output("load", &target.url(), &spec, &["--dry-run"], &[], None).await;
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    let stdout = text(&output.stdout);
    for part in [
        "Dry run: nothing sent",
        "  health: GET /health (weight 3)",
        "model: open, 200/s for 30s, at most 64 connections",
        "warm-up: 100 requests",
        "thresholds: p99 < 300ms",
        "requests: 6000 scheduled in the measure",
    ] {
        assert!(stdout.contains(part), "{part:?} in:\n{stdout}");
    }

    let output = agent_exec_output(
        "load",
        &target.url(),
        &spec,
        &["--dry-run", "--json"],
        &[],
        None,
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    let plan: Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert_eq!(plan["dry_run"], true, "{plan}");
    assert_eq!(plan["plan"]["requests"], 6000, "{plan}");
    assert_eq!(plan["plan"]["rate"], 200.0, "{plan}");

    let others = [
        (
            "checks",
            json!({"checks": [{"path": "/health"}]}),
            "  GET /health: expect 200",
        ),
        (
            "replay",
            json!({"requests": [
                {"offset_ms": 0, "method": "GET", "path": "/"},
                {"offset_ms": 500, "method": "GET", "path": "/"}
            ]}),
            "requests: 2 over 500ms",
        ),
        (
            "capacity",
            json!({"operations": [{"path": "/"}], "rates": [50, 100], "step": "2s",
                "slo": {"p99": "100ms"}}),
            "steps: 50/s, 100/s",
        ),
    ];
    for (kind, spec, part) in others {
        let output = agent_exec_output(kind, &target.url(), &spec, &["--dry-run"], &[], None).await;
        assert_eq!(output.status.code(), Some(0), "{kind}: {}", shown(&output));
        assert!(
            text(&output.stdout).contains(part),
            "{kind}: {part:?} in {}",
            shown(&output)
        );
    }
    assert_eq!(
        requests_served(&target).await,
        0,
        "no dry run sent a request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_of_an_invalid_spec_exits_2_naming_the_field() {
    let target = Target::start().await;
    // The open model with no rate and no stages.
    let spec = json!({"operations": [{"path": "/"}], "model": "open", "duration": "1s"});
    let output = agent_exec_output("load", &target.url(), &spec, &["--dry-run"], &[], None).await;
    assert_eq!(output.status.code(), Some(2), "{}", shown(&output));
    assert!(
        text(&output.stderr).contains("spec.rate"),
        "the error names the field: {}",
        shown(&output)
    );
    assert!(output.stdout.is_empty(), "no plan: {}", shown(&output));

    // A credential header whose variable is not set: the run would stop before its first
    // request, so the dry run refuses it too.
    let spec = json!({"operations": [{"path": "/", "headers": {"authorization": "${env:IOHR_EXEC_CI_UNSET}"}}],
        "model": "closed", "connections": 1, "duration": "1s"});
    let output = agent_exec_output(
        "load",
        &target.url(),
        &spec,
        &["--dry-run"],
        &[("IOHR_EXEC_CI_UNSET", None)],
        None,
    )
    .await;
    assert_eq!(output.status.code(), Some(2), "{}", shown(&output));
    assert!(
        text(&output.stderr).contains("IOHR_EXEC_CI_UNSET"),
        "the error names the variable: {}",
        shown(&output)
    );
    assert_eq!(requests_served(&target).await, 0);
}

/// A fresh directory of this test's own.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("iohr-exec-ci-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Issue 12: `exec` on a warm-up count no rate sends in a day panicked in the engine. It is
/// a spec error now: exit 2, the field named, nothing sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_refuses_an_extreme_warmup_count_naming_the_field() {
    let target = Target::start().await;
    let spec = json!({"operations": [{"method": "GET", "path": "/"}], "model": "open",
        "rate": 0.5, "duration": "2s", "warmup": 18446744073709551615u64});
    let output = agent_exec_output("load", &target.url(), &spec, &[], &[], None).await;
    assert_eq!(output.status.code(), Some(2), "{}", shown(&output));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("spec.warmup"), "{}", shown(&output));
    assert!(!stderr.contains("panicked"), "{}", shown(&output));
    assert_eq!(requests_served(&target).await, 0);
}
