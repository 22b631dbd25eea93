//! The load engine measured against a target with a known behaviour (its service time,
//! a stall switch, an error switch), through `iohr-agent exec` as a user runs it.
//!
//! Tolerances are stated per test; every run is bounded by its duration and timeout.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use http_body_util::Full;
use hyper::Response;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use iohr_tests::Target;
use iohr_tests::process::agent_exec;
use serde_json::{Value, json};

/// The tests here measure time and run one at a time: on two cores, one test's closed
/// model beside another's open model makes that one's sends late (a fresh-clone CI run
/// saw 80 of 2,000 late at 400/s so), which is the machine, not the engine.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn field(result: &Value, name: &str) -> f64 {
    result[name]
        .as_f64()
        .unwrap_or_else(|| panic!("{name} in {result}"))
}

/// A percentile's value in milliseconds from a latency summary.
fn percentile_ms(latency: &Value, name: &str) -> f64 {
    latency["percentiles"][name]["value"]
        .as_f64()
        .unwrap_or_else(|| panic!("{name} has a value in {latency}"))
        / 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_corrected_p99_shows_a_stall_that_the_uncorrected_hides() {
    let _alone = ALONE.lock().await;
    // No answer for 200 ms every 2 s; 1 ms of service otherwise. One connection at
    // 100 requests/s: during a stall the arrivals wait in the engine, not on the wire.
    let target = Target::start_with(&[
        "--service-ms",
        "1",
        "--stall-every-ms",
        "2000",
        "--stall-ms",
        "200",
    ])
    .await;
    let spec = json!({
        "operations": [{"path": "/"}], "model": "open", "rate": 100, "connections": 1,
        // One connection throughout: the engine does not open more for the stalls.
        "max_connections": 1,
        // The warm-up (one whole period) puts the measure past the target's first stall-free
        // period, so its 10 s cover exactly five stalls.
        "duration": "10s", "warmup": "2s", "timeout": "5s"
    });
    let (code, out) = agent_exec("load", &target.url(), &spec, &[]).await;
    assert_eq!(code, 0, "{out}");
    let result = &out["result"];
    // An arrival t ms into a stall of S waits S - t, plus t·R·service behind the ones
    // before it: L = S - 0.9 t. P(L > x) = (S - x) / (0.9 P), so the p99 is
    // S - 0.009 P = 182 ms (plus the service time).
    let expected = 182.0;
    let corrected = percentile_ms(&result["latency"], "p99");
    assert!(
        (expected * 0.75..=expected * 1.25).contains(&corrected),
        "corrected p99 {corrected} ms, expected {expected} ms ± 25%: {result}"
    );
    // From the actual send, only the one request caught on the wire by each stall is
    // slow: 5 of 1,000, under the p99, which is then the service time and whatever the
    // machine adds (32 ms once beside builds and a busy loop): a small part of the stall.
    let uncorrected = percentile_ms(&result["uncorrected_latency"], "p99");
    assert!(
        uncorrected < corrected / 4.0,
        "uncorrected p99 {uncorrected} ms hides the stall (corrected {corrected} ms): {result}"
    );
    assert_eq!(field(result, "dropped"), 0.0, "{result}");
    assert!(field(result, "late") > 0.0, "the stalls made requests late");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_model_holds_its_rate_while_the_target_keeps_up() {
    let _alone = ALONE.lock().await;
    let target = Target::start_with(&["--service-ms", "2"]).await;
    let spec = json!({
        "operations": [{"path": "/"}, {"path": "/health", "weight": 3}],
        "model": "open", "rate": 400, "connections": 32, "duration": "5s", "warmup": 200
    });
    let (code, out) = agent_exec("load", &target.url(), &spec, &[]).await;
    assert_eq!(code, 0, "{out}");
    let result = &out["result"];
    assert_eq!(field(result, "intended"), 2000.0, "{result}");
    assert_eq!(field(result, "sent"), 2000.0);
    assert_eq!(field(result, "dropped"), 0.0);
    let achieved = field(result, "achieved_rate");
    assert!(
        (achieved - 400.0).abs() <= 4.0,
        "achieved {achieved}/s, within 1% of 400/s"
    );
    // Late is a start more than 10 ms after its time. A stall of the machine makes the
    // arrivals due in it late, however good the engine: with a busy loop and builds
    // beside the agent, one stall of about 440 ms made 176 of 2,000 late here. An engine
    // that cannot keep the schedule is behind for good: once it is 10 ms behind, every
    // later arrival is late, most of the 2,000. So the bound is a proportion far from
    // both: under a quarter late.
    let late = field(result, "late");
    eprintln!("open model at 400/s: {late} of 2000 started late");
    assert!(late < 500.0, "under a quarter started late: {result}");
    // Weights 1:3 in a fixed interleaving.
    let ops = result["operations"].as_array().expect("operations");
    assert_eq!(ops[0]["requests"], 500);
    assert_eq!(ops[1]["requests"], 1500);
    assert_eq!(
        result["warmup"]["requests"], 200,
        "warm-up run and discarded"
    );
    assert_eq!(result["warmup"]["discarded"], true);
    assert_eq!(result["responses"]["2xx"], 2000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_model_reports_late_and_dropped_work_when_it_cannot_keep_up() {
    let _alone = ALONE.lock().await;
    // 2 connections of 50 ms each serve 40/s; 200/s are asked for, and the engine may
    // open no more (`max_connections`).
    let target = Target::start_with(&["--service-ms", "50"]).await;
    let spec = json!({
        "operations": [{"path": "/"}], "model": "open", "rate": 200, "connections": 2,
        "max_connections": 2,
        "duration": "3s", "timeout": "500ms"
    });
    let (code, out) = agent_exec("load", &target.url(), &spec, &[]).await;
    assert_eq!(code, 0, "{out}");
    let result = &out["result"];
    assert_eq!(field(result, "intended"), 600.0, "{result}");
    let (sent, late, dropped) = (
        field(result, "sent"),
        field(result, "late"),
        field(result, "dropped"),
    );
    assert!(sent < 200.0, "only what 2 connections could send: {sent}");
    assert!(late > 0.0 && dropped > 0.0, "{result}");
    assert_eq!(
        sent + dropped,
        600.0,
        "every request sent or counted as dropped"
    );
    let notes = result["notes"].to_string();
    assert!(notes.contains("not kept"), "{notes}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_counted_and_thresholds_decide_and_abort() {
    let _alone = ALONE.lock().await;
    let target = Target::start_with(&["--error-percent", "10"]).await;
    let spec = json!({
        "operations": [{"path": "/"}], "model": "open", "rate": 200, "duration": "2s",
        "thresholds": ["error_rate < 5%", "p99 < 10s"]
    });
    let (code, out) = agent_exec("load", &target.url(), &spec, &[]).await;
    assert_eq!(code, 1, "a failed threshold fails the run: {out}");
    assert_eq!(out["status"], "failed");
    let result = &out["result"];
    assert_eq!(result["responses"]["5xx"], 40, "10% of 400: {result}");
    assert_eq!(result["thresholds"][0]["passed"], false);
    assert_eq!(result["thresholds"][1]["passed"], true);
    assert!(
        out["reason"]
            .as_str()
            .is_some_and(|r| r.contains("error_rate < 5%")),
        "{out}"
    );

    // With abort_on_fail the run stops at the first second that crosses it.
    let mut aborting = spec.clone();
    aborting["duration"] = json!("30s");
    aborting["abort_on_fail"] = json!(true);
    let (code, out) = agent_exec("load", &target.url(), &aborting, &[]).await;
    assert_eq!(code, 1, "{out}");
    let result = &out["result"];
    assert!(
        result["aborted"]
            .as_str()
            .is_some_and(|a| a.contains("error_rate < 5%")),
        "{result}"
    );
    assert!(
        field(result, "measured_seconds") < 10.0,
        "stopped early: {result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_model_sends_as_fast_as_the_target_answers_over_http1_and_h2c() {
    let _alone = ALONE.lock().await;
    let target = Target::start_with(&["--http2"]).await;
    // HTTP/2 with one stream per connection and with eight sharing each connection.
    for (http, streams) in [("1.1", 1), ("2", 1), ("2", 8)] {
        let spec = json!({
            "operations": [{"path": "/"}], "model": "closed", "connections": 4,
            "duration": "1s", "warmup": 50, "http": http, "streams": streams
        });
        let (code, out) = agent_exec("load", &target.url(), &spec, &[]).await;
        assert_eq!(code, 0, "http {http}, {streams} streams: {out}");
        let result = &out["result"];
        let requests = field(result, "requests");
        assert!(requests > 100.0, "http {http}: {result}");
        assert_eq!(result["responses"]["2xx"].as_f64(), Some(requests));
        assert_eq!(result["warmup"]["requests"], 50);
        assert_eq!(result["latency"]["samples"].as_f64(), Some(requests));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_target_is_an_error_with_its_kind() {
    let _alone = ALONE.lock().await;
    // Bind and drop a listener: nothing answers on that port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let spec =
        json!({"operations": [{"path": "/"}], "model": "open", "rate": 20, "duration": "1s"});
    let (code, out) = agent_exec("load", &format!("http://127.0.0.1:{port}"), &spec, &[]).await;
    assert_ne!(code, 0);
    assert_eq!(out["status"], "error", "{out}");
    assert!(
        out["reason"].as_str().is_some_and(
            |r| r.contains("target unreachable: no request got an answer (connect 20)")
        ),
        "{out}"
    );
}

/// A target that notes when each request arrived, to see the spacing from outside.
async fn arrival_clock() -> (String, Arc<Mutex<Vec<Instant>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let noted = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let noted = noted.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_request| {
                    noted.lock().expect("arrivals").push(Instant::now());
                    async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("ok")))) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_timeout_is_counted_as_a_timeout() {
    let _alone = ALONE.lock().await;
    // Every answer takes 400 ms; the timeout is 100 ms.
    let target = Target::start_with(&["--service-ms", "400"]).await;
    let spec = json!({"operations": [{"path": "/"}], "model": "open", "rate": 20,
        "connections": 8, "duration": "1s", "timeout": "100ms"});
    let (_, out) = agent_exec("load", &target.url(), &spec, &[]).await;
    assert_eq!(out["status"], "error", "{out}");
    let result = &out["result"];
    assert_eq!(result["errors"]["timeout"], 20, "{result}");
    assert!(
        out["reason"]
            .as_str()
            .is_some_and(|r| r.contains("timeout 20")),
        "{out}"
    );
    // As in k6, a failed request's time is in the latency too: here the timeout, so a
    // target slower than the timeout cannot make the tail look better.
    assert_eq!(result["latency"]["samples"], 20, "{result}");
    assert!(
        percentile_ms(&result["latency"], "p50") >= 100.0,
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_keeps_the_recorded_spacing() {
    let _alone = ALONE.lock().await;
    let (url, arrivals) = arrival_clock().await;
    // Gaps of 2000, 800 and 4000 ms; replayed twice as fast: 1000, 400 and 2000 ms.
    let log = json!([
        {"seq": 1, "method": "GET", "path": "/", "offset_ms": 0.0, "warmup": false},
        {"seq": 2, "method": "GET", "path": "/health", "offset_ms": 2000.0, "warmup": false},
        {"seq": 3, "method": "GET", "path": "/", "offset_ms": 2800.0, "warmup": false},
        {"seq": 4, "method": "GET", "path": "/", "offset_ms": 6800.0, "warmup": false}
    ]);
    let spec = json!({"requests": log, "speed": 2});
    let (code, out) = agent_exec("replay", &url, &spec, &[]).await;
    assert_eq!(code, 0, "{out}");
    let result = &out["result"];
    assert_eq!(result["requests"], 4);
    // Every request on its recorded time: answered (the target answers at once) within a
    // quarter of the shortest replayed gap (400 ms) of it, the latency being taken from
    // that time. Not the `late` count: that counts starts over 10 ms behind, and a busy
    // machine delays a wake-up so far (all 4 late, by at most 41 ms, once beside builds
    // and a busy loop), while a replay off its clock is behind by a gap's part or more.
    let behind = result["latency"]["max_us"].as_f64().expect("max_us") / 1000.0;
    assert!(
        behind < 100.0,
        "every request at its recorded time: the last answered {behind} ms after: {result}"
    );
    let seen = arrivals.lock().expect("arrivals").clone();
    assert_eq!(seen.len(), 4);
    let gaps: Vec<f64> = seen
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1000.0)
        .collect();
    // Each gap in proportion to the recorded one, within a quarter: a machine's stall
    // moves an arrival by tens of milliseconds, while a replay that ignored the speed
    // would double every gap and one that sent at once would leave none.
    for (gap, want) in gaps.iter().zip([1000.0, 400.0, 2000.0]) {
        assert!(
            (0.75..=1.25).contains(&(gap / want)),
            "gaps seen by the target {gaps:?}, wanted 1000, 400, 2000 ms (± 25%)"
        );
    }
    let ops: Vec<(String, u64)> = result["operations"]
        .as_array()
        .expect("operations")
        .iter()
        .map(|o| {
            (
                o["name"].as_str().unwrap_or("").to_string(),
                o["requests"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        ops,
        vec![("GET /".to_string(), 3), ("GET /health".to_string(), 1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_targets_are_verified_against_the_given_ca_over_http1_and_h2() {
    let _alone = ALONE.lock().await;
    let dir = std::env::temp_dir().join(format!("iohr-tls-{}", uuid::Uuid::new_v4()));
    let dir_arg = dir.to_str().expect("UTF-8 temp dir");
    let target = Target::start_with(&["--make-tls-dir", dir_arg, "--http2"]).await;
    assert!(target.url().starts_with("https://"), "{}", target.url());
    let ca = dir.join("ca.pem");
    let ca_arg = ca.to_str().expect("UTF-8 path");
    for http in ["1.1", "2"] {
        let spec = json!({"operations": [{"path": "/"}], "model": "open", "rate": 50,
            "duration": "1s", "http": http});
        let (code, out) = agent_exec("load", &target.url(), &spec, &["--target-ca", ca_arg]).await;
        assert_eq!(code, 0, "http {http}: {out}");
        assert_eq!(out["result"]["responses"]["2xx"], 50, "http {http}: {out}");
    }
    // Without the CA the certificate is not trusted: every request fails as `tls`.
    let spec =
        json!({"operations": [{"path": "/"}], "model": "open", "rate": 10, "duration": "1s"});
    let (_, out) = agent_exec("load", &target.url(), &spec, &[]).await;
    assert_eq!(out["status"], "error", "{out}");
    assert_eq!(out["result"]["errors"]["tls"], 10, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
