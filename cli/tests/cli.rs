//! Black-box tests of the `iohr` binary against a small real HTTP/1.1 server on
//! 127.0.0.1, written by hand on a tokio `TcpListener`: it answers one request per
//! connection, and can serve a chunked event stream that breaks off mid-chunk.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::net::SocketAddr;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Every test finishes well within this, or fails instead of hanging.
const BOUND: Duration = Duration::from_secs(60);
const TOKEN: &str = "test-token";

#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

enum Reply {
    Json(u16, Value),
    /// An event stream: each string is written as one HTTP chunk, then the stream ends
    /// as told.
    Events(Vec<String>, End),
}

enum End {
    /// The terminating chunk: a clean end.
    Finish,
    /// Announce a chunk longer than what follows, send part of it, and close: the
    /// connection drops in the middle of an event.
    DropMidway(String),
    /// Keep the connection open until the client goes away.
    Hold,
}

type Routes = dyn Fn(&Seen, &[Seen]) -> Reply + Send + Sync;

struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    /// `routes` gets the request and the ones before it.
    async fn start(routes: impl Fn(&Seen, &[Seen]) -> Reply + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let routes: Arc<Routes> = Arc::new(routes);
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let routes = Arc::clone(&routes);
                let log = Arc::clone(&log);
                tokio::spawn(async move {
                    let _ = serve(socket, routes, log).await;
                });
            }
        });
        Server { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }
}

async fn serve(
    mut socket: TcpStream,
    routes: Arc<Routes>,
    log: Arc<Mutex<Vec<Seen>>>,
) -> std::io::Result<()> {
    let request = read_request(&mut socket).await?;
    let reply = {
        let mut log = log.lock().expect("lock");
        let reply = routes(&request, &log);
        log.push(request);
        reply
    };
    match reply {
        Reply::Json(status, body) => {
            let body = body.to_string();
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(body.as_bytes()).await?;
            socket.shutdown().await
        }
        Reply::Events(chunks, end) => {
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
                .await?;
            for chunk in chunks {
                let framed = format!("{:x}\r\n{chunk}\r\n", chunk.len());
                socket.write_all(framed.as_bytes()).await?;
                socket.flush().await?;
            }
            match end {
                End::Finish => {
                    socket.write_all(b"0\r\n\r\n").await?;
                    socket.shutdown().await
                }
                End::DropMidway(part) => {
                    let framed = format!("{:x}\r\n{part}", part.len() + 100);
                    socket.write_all(framed.as_bytes()).await?;
                    socket.shutdown().await
                }
                End::Hold => {
                    let mut sink = [0u8; 1024];
                    while socket.read(&mut sink).await? > 0 {}
                    Ok(())
                }
            }
        }
    }
}

async fn read_request(socket: &mut TcpStream) -> std::io::Result<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = socket.read(&mut chunk).await?;
        if n == 0 || buf.len() > 64 * 1024 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut start = lines.next().unwrap_or_default().split(' ');
    let method = start.next().unwrap_or_default().to_string();
    let path = start.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(Seen {
        method,
        path,
        headers,
        body,
    })
}

fn record(status: &str, result: Value) -> Value {
    json!({
        "id": "r1", "kind": "checks",
        "scenario": {"id": "s1", "version": "sha256:ab"},
        "environment": "staging", "target": "http://127.0.0.1:9", "executor": "any",
        "agent": if status == "queued" { Value::Null } else { json!("edge-1") },
        "started_by": {"type": "token", "id": "tok1", "change": "core#212"},
        "status": status, "reason": null, "result": result, "findings": [],
        "units": {"reserved": 1, "spent": 1},
        "created_at": "2026-10-07T10:00:00Z", "started_at": null, "ended_at": null
    })
}

fn checks_result(passed: bool) -> Value {
    json!({
        "passed": passed, "total": 1, "failed": if passed { 0 } else { 1 },
        "checks": [{"name": "GET /", "method": "GET", "path": "/", "passed": passed,
                    "status": if passed { 200 } else { 500 }, "latency_ms": 3.1,
                    "failures": if passed { json!([]) } else { json!(["status 500, expected 200"]) }}],
        "invariants": []
    })
}

/// One SSE event carrying frame `number` of run r1.
fn event(number: u64, kind: &str, data: Value) -> String {
    let frame = json!({"run_id": "r1", "number": number, "kind": kind,
                       "at": "2026-10-07T10:00:01Z", "data": data});
    format!("id: {number}\nevent: {kind}\ndata: {frame}\n\n")
}

fn check_frame(number: u64, passed: bool) -> String {
    event(
        number,
        "check",
        json!({"name": "GET /", "method": "GET", "path": "/", "passed": passed,
               "status": 200, "latency_ms": 3.1, "failures": []}),
    )
}

/// The run's routes: the first stream drops after frame 2 (with frame 3 half sent and
/// an event split across two chunks); a resume must say `Last-Event-ID: 2` and gets
/// frames 2 (again, as an inclusive server would) to 4.
fn run_routes(final_status: &'static str) -> impl Fn(&Seen, &[Seen]) -> Reply {
    move |req, _before| match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/v1/reliability/runs") => Reply::Json(201, record("queued", Value::Null)),
        ("GET", "/v1/reliability/runs/r1/events") => match req.header("last-event-id") {
            None => {
                let second = check_frame(2, true);
                let (a, b) = second.split_at(second.len() / 2);
                Reply::Events(
                    vec![
                        ": keep-alive\n\n".to_string(),
                        event(1, "started", json!({"agent": "edge-1"})),
                        a.to_string(),
                        b.to_string(),
                    ],
                    End::DropMidway("id: 3\nevent: check\ndata: {\"run_id\":".to_string()),
                )
            }
            Some("2") => Reply::Events(
                vec![
                    check_frame(2, true),
                    check_frame(3, true),
                    event(4, "finished", json!({"status": final_status})),
                ],
                End::Finish,
            ),
            Some(other) => Reply::Json(
                400,
                json!({"error": {"code": "bad_resume", "message": format!("resumed from {other}")}}),
            ),
        },
        ("GET", "/v1/reliability/runs/r1") => Reply::Json(
            200,
            record(final_status, checks_result(final_status == "passed")),
        ),
        _ => Reply::Json(
            404,
            json!({"error": {"code": "not_found", "message": format!("no route {}", req.path)}}),
        ),
    }
}

fn spec_file(name: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.json"));
    std::fs::write(&path, r#"{"checks":[{"path":"/"}]}"#).expect("write spec");
    path
}

async fn iohr(server: &str, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_iohr"));
    command
        .env_remove("IOHR_SERVER")
        .env_remove("IOHR_TOKEN")
        .arg("--server")
        .arg(server)
        .arg("--token")
        .arg(TOKEN)
        .args(args)
        .kill_on_drop(true);
    tokio::time::timeout(BOUND, command.output())
        .await
        .expect("iohr finished in time")
        .expect("iohr ran")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Exactly one JSON value on stdout.
fn one_json_value(output: &Output) -> Value {
    let stdout = text(&output.stdout);
    let values: Vec<Value> = serde_json::Deserializer::from_str(&stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}"));
    assert_eq!(values.len(), 1, "stdout: {stdout}");
    values.into_iter().next().expect("one value")
}

fn run_args<'a>(spec: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "reliability",
        "run",
        "--kind",
        "checks",
        "--environment",
        "staging",
        "--target",
        "http://127.0.0.1:9",
        "--spec",
        spec,
    ];
    args.extend_from_slice(extra);
    args
}

#[tokio::test]
async fn run_wait_json_resumes_a_dropped_stream_and_prints_the_passed_record() {
    let server = Server::start(run_routes("passed")).await;
    let spec = spec_file("wait_json");
    let spec = spec.to_str().expect("utf-8 path");
    let output = iohr(
        &server.url(),
        &run_args(spec, &["--change", "core#212", "--wait", "--json"]),
    )
    .await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        text(&output.stderr)
    );
    let answer = one_json_value(&output);
    for field in ["id", "kind", "status", "result"] {
        assert!(answer.get(field).is_some(), "no {field}: {answer}");
    }
    assert_eq!(answer["id"], "r1");
    assert_eq!(answer["status"], "passed");
    assert_eq!(answer["result"]["passed"], true);

    let seen = server.seen();
    let routes: Vec<(&str, &str)> = seen
        .iter()
        .map(|s| (s.method.as_str(), s.path.as_str()))
        .collect();
    assert_eq!(
        routes,
        [
            ("POST", "/v1/reliability/runs"),
            ("GET", "/v1/reliability/runs/r1/events"),
            ("GET", "/v1/reliability/runs/r1/events"),
            ("GET", "/v1/reliability/runs/r1"),
        ]
    );
    assert_eq!(seen[1].header("last-event-id"), None);
    assert_eq!(
        seen[2].header("last-event-id"),
        Some("2"),
        "the resume names the last whole frame"
    );
    for request in &seen {
        assert_eq!(request.header("authorization"), Some("Bearer test-token"));
        assert_eq!(request.header("content-type"), Some("application/json"));
    }
    let body: Value = serde_json::from_slice(&seen[0].body).expect("JSON body");
    assert_eq!(
        body,
        json!({"kind": "checks", "environment": "staging", "target": "http://127.0.0.1:9",
               "spec": {"checks": [{"path": "/"}]}, "change": "core#212"})
    );
}

#[tokio::test]
async fn run_wait_human_prints_frames_to_stderr_and_exits_1_when_failed() {
    let server = Server::start(run_routes("failed")).await;
    let spec = spec_file("wait_human");
    let spec = spec.to_str().expect("utf-8 path");
    let output = iohr(&server.url(), &run_args(spec, &["--wait"])).await;
    let stderr = text(&output.stderr);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    let check_lines = stderr
        .lines()
        .filter(|l| *l == "check  GET /  pass  200  3.1 ms")
        .count();
    assert_eq!(check_lines, 2, "frames 2 and 3 once each: {stderr}");
    assert!(stderr.contains("finished  failed"), "{stderr}");
    assert!(stdout.contains("status       failed\n"), "{stdout}");
    assert!(
        stdout.contains("FAIL  500  3.1 ms  status 500, expected 200"),
        "{stdout}"
    );
}

#[tokio::test]
async fn runs_events_json_prints_each_frame_once_per_line() {
    let server = Server::start(run_routes("passed")).await;
    let output = iohr(
        &server.url(),
        &["reliability", "runs", "events", "r1", "--json"],
    )
    .await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        text(&output.stderr)
    );
    let numbers: Vec<u64> = text(&output.stdout)
        .lines()
        .map(|line| {
            let frame: Value = serde_json::from_str(line).expect("one frame per line");
            assert_eq!(frame["run_id"], "r1");
            frame["number"].as_u64().expect("number")
        })
        .collect();
    assert_eq!(numbers, [1, 2, 3, 4]);
}

#[tokio::test]
async fn run_wait_timeout_prints_the_current_record_and_exits_3() {
    let server = Server::start(|req: &Seen, _: &[Seen]| match req.path.as_str() {
        "/v1/reliability/runs" => Reply::Json(201, record("queued", Value::Null)),
        "/v1/reliability/runs/r1/events" => {
            Reply::Events(vec![event(1, "started", json!({}))], End::Hold)
        }
        _ => Reply::Json(200, record("running", Value::Null)),
    })
    .await;
    let spec = spec_file("wait_timeout");
    let spec = spec.to_str().expect("utf-8 path");
    let output = iohr(
        &server.url(),
        &run_args(spec, &["--wait", "--timeout", "1", "--json"]),
    )
    .await;
    assert_eq!(
        output.status.code(),
        Some(3),
        "stderr: {}",
        text(&output.stderr)
    );
    assert_eq!(one_json_value(&output)["status"], "running");
    assert!(text(&output.stderr).contains("timeout"));
}

#[tokio::test]
async fn an_api_error_body_gives_exit_2_and_the_error_line() {
    let server = Server::start(|req: &Seen, _: &[Seen]| match req.method.as_str() {
        "POST" => Reply::Json(
            422,
            json!({"error": {"code": "invalid_spec", "message": "spec.checks: at least one check is needed"}}),
        ),
        _ => Reply::Json(
            404,
            json!({"error": {"code": "not_found", "message": "no run r404"}}),
        ),
    })
    .await;
    let output = iohr(&server.url(), &["reliability", "runs", "show", "r404"]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert_eq!(text(&output.stderr), "error: not_found: no run r404\n");

    let spec = spec_file("api_error");
    let spec = spec.to_str().expect("utf-8 path");
    let output = iohr(&server.url(), &run_args(spec, &["--wait", "--json"])).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert_eq!(
        text(&output.stderr),
        "error: invalid_spec: spec.checks: at least one check is needed\n"
    );
}

#[tokio::test]
async fn usage_errors_exit_2_and_say_what_to_set() {
    let run = |args: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_iohr"));
        command
            .env_remove("IOHR_SERVER")
            .env_remove("IOHR_TOKEN")
            .args(args)
            .kill_on_drop(true);
        async move {
            tokio::time::timeout(BOUND, command.output())
                .await
                .expect("in time")
                .expect("ran")
        }
    };
    let output = run(&["--server", "http://127.0.0.1:1", "reliability", "agents"]).await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("error: usage: ")
            && stderr.contains("--token")
            && stderr.contains("IOHR_TOKEN"),
        "{stderr}"
    );

    let output = run(&["--token", "t", "reliability", "agents"]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains("--server") && stderr.contains("IOHR_SERVER"),
        "{stderr}"
    );

    let output = run(&[
        "--server",
        "ftp://127.0.0.1:1",
        "--token",
        "t",
        "reliability",
        "agents",
    ])
    .await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("expected an http:// or https:// URL"),
        "{}",
        text(&output.stderr)
    );

    let output = run(&["reliability", "run", "--kind", "checks"]).await;
    assert_eq!(
        output.status.code(),
        Some(2),
        "clap's usage errors exit 2 too"
    );
}
