//! The scenario kind through `iohr-agent exec`, as a person runs it: the record's sequence
//! numbers, identities and counts; its `command` replayed with `sh -c` gives the same
//! record; a dry run sends nothing; a `localhost` base URL is refused with the reason; a
//! credential's value never reaches the output.
//!
//! The target is a small hyper server inside the test that keeps the headers of every
//! request it gets, so the test sees what the scenario sent. Every child process runs
//! under a time limit.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use iohr_tests::Target;
use iohr_tests::process::bin;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::process::Command;

const LIMIT: Duration = Duration::from_secs(60);
const SECRET: &str = "Bearer e2e-s3cret-token-9f81";
const TOKEN_VAR: &str = "IOHR_E2E_SCENARIO_TOKEN";

/// What the in-test target saw of one request.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    method: String,
    path: String,
    user_agent: Option<String>,
    traceparent: Option<String>,
    authorization: Option<String>,
}

/// `GET /` answers 200, `POST /api/orders` 201 (echoing the credential in its body, which
/// must not be recorded), anything else 404.
struct Recorder {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Recorder {
    async fn start() -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| answer(req, log.clone()));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Recorder { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen lock").clone()
    }
}

async fn answer(
    req: Request<Incoming>,
    log: Arc<Mutex<Vec<Seen>>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let seen = Seen {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
        user_agent: header("user-agent"),
        traceparent: header("traceparent"),
        authorization: header("authorization"),
    };
    let (status, body) = match (req.method(), seen.path.as_str()) {
        (&Method::GET, "/") => (StatusCode::OK, "ok".to_string()),
        (&Method::POST, "/api/orders") => (
            StatusCode::CREATED,
            format!(
                "created for {}",
                seen.authorization.clone().unwrap_or_default()
            ),
        ),
        _ => (StatusCode::NOT_FOUND, "not found".to_string()),
    };
    log.lock().expect("seen lock").push(seen);
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    Ok(response)
}

/// Runs a command to its end within [`LIMIT`], killing it otherwise.
async fn finish(mut command: Command, what: &str) -> Output {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().expect("spawn");
    tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not end within {LIMIT:?}"))
        .expect("wait for the child")
}

/// `iohr-agent ARGS`, with the credential in its environment.
async fn agent(args: &[&str]) -> Output {
    let mut command = Command::new(bin("iohr-agent"));
    command
        .args(args)
        .env(TOKEN_VAR, SECRET)
        .env("RUST_LOG", "info");
    finish(command, "iohr-agent").await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The output's JSON object, after checking that no output holds the credential.
fn json_of(output: &Output) -> Value {
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        !stdout.contains("s3cret"),
        "the credential leaked: {stdout}"
    );
    assert!(
        !stderr.contains("s3cret"),
        "the credential leaked: {stderr}"
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is one JSON object ({e}): {stdout}\nstderr: {stderr}"))
}

/// A scratch dir of this test's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "iohr-scenario-{name}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    fn write(&self, name: &str, contents: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, contents).expect("write");
        path.to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn two_ops_spec() -> Value {
    json!({
        "slug": "e2e-replay",
        "ops": ["GET /", "POST /api/orders 10 {\"sku\": \"A1\"}"],
        "count": 40,
        "warmup": 2,
        "headers": {"Authorization": format!("${{env:{TOKEN_VAR}}}")},
    })
}

/// sha256("e2e-replay")[:8].
const RUN8: &str = "c341582d";

fn traceparent(seq: u64) -> String {
    format!("00-0ddc0ffe{RUN8}{seq:016x}-{seq:016x}-01")
}

/// (seq, op, warmup, status) of every request of a record.
fn log_of(record: &Value) -> Vec<(u64, u64, bool, Option<u64>)> {
    record["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .map(|r| {
            (
                r["seq"].as_u64().expect("seq"),
                r["op"].as_u64().expect("op"),
                r["warmup"].as_bool().expect("warmup"),
                r["status"].as_u64(),
            )
        })
        .collect()
}

/// What a replay must reproduce: everything but the times.
fn replayed_parts(record: &Value) -> Value {
    let ops: Vec<Value> = record["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .map(|op| {
            json!([
                op["line"],
                op["seq"],
                op["warmup_seq"],
                op["by_status"],
                op["errors"]
            ])
        })
        .collect();
    json!({
        "scenario": record["scenario"],
        "identity": record["identity"],
        "warmup": record["warmup"],
        "load": record["load"],
        "command": record["command"],
        "ops": ops,
        "log": log_of(record),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_scenario_replays_unchanged() {
    let target = Recorder::start().await;
    let scratch = Scratch::new("replay");
    let spec = scratch.write("spec.json", &two_ops_spec().to_string());
    let output = agent(&[
        "exec",
        "--kind",
        "scenario",
        "--target",
        &target.url,
        &spec,
        "--json",
    ])
    .await;
    let run = json_of(&output);
    assert!(output.status.success(), "{run:#}");
    assert_eq!(run["status"], "passed", "{run:#}");
    assert_eq!(run["units_spent"], 2 * 2 + 40 + 10);
    let record = &run["result"];

    // Sequence numbers: the warm-up of op 0 then op 1, then op 0's load, then op 1's.
    assert_eq!(record["warmup"]["seq"], json!({"first": 1, "last": 4}));
    assert_eq!(record["warmup"]["discarded"], true);
    assert_eq!(record["load"]["seq"], json!({"first": 5, "last": 54}));
    assert_eq!(record["load"]["mode"], "sequential");
    let ops = &record["ops"];
    assert_eq!(ops[0]["warmup_seq"], json!({"first": 1, "last": 2}));
    assert_eq!(ops[1]["warmup_seq"], json!({"first": 3, "last": 4}));
    assert_eq!(ops[0]["seq"], json!({"first": 5, "last": 44}));
    assert_eq!(ops[1]["seq"], json!({"first": 45, "last": 54}));
    let log = log_of(record);
    let expected: Vec<(u64, u64, bool)> = (1..=54)
        .map(|seq| match seq {
            1..=2 => (seq, 0, true),
            3..=4 => (seq, 1, true),
            5..=44 => (seq, 0, false),
            _ => (seq, 1, false),
        })
        .collect();
    assert_eq!(
        log.iter()
            .map(|(s, o, w, _)| (*s, *o, *w))
            .collect::<Vec<_>>(),
        expected
    );

    // Identities, as the record states them and as the target received them.
    assert_eq!(record["identity"]["user_agent"], "iohr-scenario/e2e-replay");
    assert_eq!(
        record["identity"]["warmup_user_agent"],
        "iohr-scenario/e2e-replay-warmup"
    );
    assert_eq!(record["identity"]["run8"], RUN8);
    assert_eq!(
        record["identity"]["trace_id_prefix"],
        format!("0ddc0ffe{RUN8}")
    );
    let seen = target.seen();
    assert_eq!(seen.len(), 54, "one request per seq");
    for ((seq, op, warmup), request) in expected.iter().zip(&seen) {
        let (method, path) = if *op == 0 {
            ("GET", "/")
        } else {
            ("POST", "/api/orders")
        };
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            (method, path)
        );
        let agent = if *warmup {
            "iohr-scenario/e2e-replay-warmup"
        } else {
            "iohr-scenario/e2e-replay"
        };
        assert_eq!(request.user_agent.as_deref(), Some(agent), "seq {seq}");
        assert_eq!(request.traceparent, Some(traceparent(*seq)), "seq {seq}");
        assert_eq!(request.authorization.as_deref(), Some(SECRET), "seq {seq}");
    }

    // Counts by status, and percentiles only where the samples allow one.
    assert_eq!(ops[0]["by_status"], json!({"200": 40}));
    assert_eq!(ops[1]["by_status"], json!({"201": 10}));
    assert_eq!(ops[1]["errors"], json!({}));
    assert_eq!(
        ops[0]["line"],
        format!("GET {}/ x40 (seq 5-44) -> 200:40", target.url)
    );
    assert_eq!(
        ops[1]["line"],
        format!(
            "POST {}/api/orders {{\"sku\": \"A1\"}} x10 (seq 45-54) -> 201:10",
            target.url
        )
    );
    let p50 = &ops[0]["latency_us"]["p50"];
    assert!(
        p50["value"].as_u64().is_some(),
        "40 samples quote a p50: {p50}"
    );
    assert!(p50["low"].as_u64() <= p50["value"].as_u64());
    assert_eq!(
        ops[1]["latency_us"]["p99"]["insufficient"],
        "insufficient samples (need 368)"
    );
    assert_eq!(ops[1]["latency_us"]["p99"]["samples"], 10);

    // The command replays it unchanged.
    let command = record["command"].as_str().expect("command");
    assert!(
        command.starts_with(&format!(
            "iohr-agent exec --kind scenario --target {} --spec-json '",
            target.url
        )),
        "{command}"
    );
    let bin_dir = bin("iohr-agent").parent().expect("bin dir").to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut replay = Command::new("sh");
    replay
        .args(["-c", command])
        .env("PATH", path)
        .env(TOKEN_VAR, SECRET);
    let output = finish(replay, "the replay command").await;
    let again = json_of(&output);
    assert!(output.status.success(), "{again:#}");
    assert_eq!(again["status"], "passed");
    assert_eq!(replayed_parts(&again["result"]), replayed_parts(record));
    let seen_again = &target.seen()[54..];
    assert_eq!(seen_again, &seen[..], "the replay sent the same requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_sends_nothing() {
    let target = Recorder::start().await;
    let scratch = Scratch::new("dry");
    let mut spec = two_ops_spec();
    let ops = spec
        .as_object_mut()
        .and_then(|s| s.remove("ops"))
        .expect("ops");
    let mut ops_file = String::from("# the ops of the e2e scenario\n\n");
    for op in ops.as_array().expect("ops") {
        ops_file.push_str(op.as_str().expect("op"));
        ops_file.push('\n');
    }
    let ops_path = scratch.write("ops.txt", &ops_file);
    let spec_json = spec.to_string();
    let base = [
        "exec",
        "--kind",
        "scenario",
        "--target",
        &target.url,
        "--spec-json",
        &spec_json,
        "--ops-file",
        &ops_path,
        "--dry-run",
    ];

    let output = agent(&base).await;
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "Dry run: nothing sent");
    assert_eq!(lines[1], "Scenario: e2e-replay");
    assert_eq!(lines[2], format!("Base URL: {}", target.url));
    assert!(lines[3].contains(&format!("= {RUN8}")), "{}", lines[3]);
    assert_eq!(
        lines[4],
        "Warmup: 2 requests per operation (discarded; seq 1-4)"
    );
    assert_eq!(
        lines[5],
        "Load: 40, 10 requests per operation, sequential (seq 5-54)"
    );
    assert_eq!(lines[6], "Total: 54 requests (warm-up included)");
    assert!(
        lines[8].starts_with("iohr-agent exec --kind scenario"),
        "{stdout}"
    );
    assert_eq!(lines[10], format!("GET {}/ x40 (seq 5-44)", target.url));

    let mut with_json = base.to_vec();
    with_json.push("--json");
    let plan = json_of(&agent(&with_json).await);
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["total_requests"], 54);
    assert_eq!(plan["ops"][1]["seq"], json!({"first": 45, "last": 54}));
    assert!(
        plan["command"]
            .as_str()
            .expect("command")
            .contains("\"ops\":[\"GET /\",\"POST /api/orders 10 {\\\"sku\\\": \\\"A1\\\"}\"]"),
        "the ops file's ops are inlined: {}",
        plan["command"]
    );

    assert!(
        target.seen().is_empty(),
        "a dry run sent {:?}",
        target.seen()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_localhost_base_url_is_refused_with_the_reason() {
    let target = Recorder::start().await;
    let port = target.url.rsplit(':').next().expect("port");
    let spec = two_ops_spec().to_string();
    for host in ["localhost", "LocalHost"] {
        let url = format!("http://{host}:{port}");
        let output = agent(&[
            "exec",
            "--kind",
            "scenario",
            "--target",
            &url,
            "--spec-json",
            &spec,
            "--json",
        ])
        .await;
        assert!(!output.status.success(), "{host} was accepted");
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains(
                "names localhost: a dual-stack host may resolve it to another listener; use 127.0.0.1"
            ),
            "{stderr}"
        );
    }
    assert!(target.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_value_never_appears_in_the_output() {
    let target = Recorder::start().await;
    // The target echoes the credential in its bodies, and the /missing op answers 404.
    let spec = json!({
        "slug": "cred",
        "ops": ["POST /api/orders {}", "GET /missing"],
        "count": 3,
        "warmup": 1,
        "headers": {"Authorization": format!("${{env:{TOKEN_VAR}}}"), "X-Note": "plain"},
    })
    .to_string();
    for json_flag in [true, false] {
        let mut args = vec![
            "exec",
            "--kind",
            "scenario",
            "--target",
            &target.url,
            "--spec-json",
            &spec,
        ];
        if json_flag {
            args.push("--json");
        }
        let output = agent(&args).await;
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert!(output.status.success(), "{stdout}\n{stderr}");
        for out in [&stdout, &stderr] {
            assert!(!out.contains("s3cret"), "the credential leaked: {out}");
        }
        assert!(stdout.contains("-> 404:3"), "{stdout}");
    }
    let seen = target.seen();
    assert_eq!(seen.len(), 2 * (2 + 6));
    assert!(
        seen.iter()
            .all(|s| s.authorization.as_deref() == Some(SECRET))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_runs_against_the_sample_target() {
    let target = Target::start().await;
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/scenario.json")
        .to_string_lossy()
        .into_owned();
    let output = agent(&[
        "exec",
        "--kind",
        "scenario",
        "--target",
        &target.url(),
        &example,
        "--json",
    ])
    .await;
    let run = json_of(&output);
    assert_eq!(run["status"], "passed", "{run:#}");
    let lines: Vec<&str> = run["result"]["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .map(|op| op["line"].as_str().expect("line"))
        .collect();
    let url = target.url();
    assert_eq!(
        lines,
        [
            format!("GET {url}/ x30 (seq 11-40) -> 200:30"),
            format!("GET {url}/health x30 (seq 41-70) -> 200:30"),
        ]
    );
    let by_op: BTreeMap<String, Value> = run["result"]["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .map(|op| (op["path"].to_string(), op["latency_us"]["p95"].clone()))
        .collect();
    assert!(
        by_op
            .values()
            .all(|p95| p95["insufficient"] == "insufficient samples (need 72)"),
        "30 samples do not bound a p95 at 95%: {by_op:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_takes_exactly_one_spec_source() {
    let scratch = Scratch::new("sources");
    let spec = two_ops_spec().to_string();
    let file = scratch.write("spec.json", &spec);
    let both = agent(&[
        "exec",
        "--kind",
        "scenario",
        "--target",
        "http://127.0.0.1:9",
        &file,
        "--spec-json",
        &spec,
        "--dry-run",
    ])
    .await;
    assert!(!both.status.success());
    assert!(
        text(&both.stderr).contains("cannot be used with"),
        "{}",
        text(&both.stderr)
    );
    let neither = agent(&[
        "exec",
        "--kind",
        "scenario",
        "--target",
        "http://127.0.0.1:9",
    ])
    .await;
    assert!(!neither.status.success());
    let checks_dry_run = agent(&[
        "exec",
        "--kind",
        "checks",
        "--target",
        "http://127.0.0.1:9",
        "--spec-json",
        "{}",
        "--dry-run",
    ])
    .await;
    // Every kind has a dry run now: it reads the spec as a run would, and refuses this one.
    assert_eq!(checks_dry_run.status.code(), Some(2));
    assert!(
        text(&checks_dry_run.stderr).contains("missing field `checks`"),
        "{}",
        text(&checks_dry_run.stderr)
    );
}
