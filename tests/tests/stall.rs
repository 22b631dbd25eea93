//! A stalled target is a regression, not a saturated generator (issue 39), with real
//! processes: two open-model runs of one spec at a rate the agent sends with CPU to spare,
//! against a loopback server that, in the second run only, holds every answer for one
//! second a second into the measure. The second run's sends that fell due while the
//! target held every connection the spec allows (`max_connections`) waited for one: the
//! result counts them as held by the target (`late_held`, `target_held_connections` with
//! its seconds), is not `generator_saturated`, and compare against the clean run says
//! `regressed` on p99 with the late sends by cause in its notes.
//!
//! The server starts its hold at a count of requests, not at a time: the open model sends
//! on its schedule, so the hold falls a second into the measure on any machine. The
//! starved generator that is still refused is `stress.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use iohr_tests::Backend;
use iohr_tests::process::AgentOptions;
use iohr_tests::setup::OneAgent;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::time::Instant;

const LIMIT: Duration = Duration::from_secs(60);
const RATE: u64 = 200;
/// How long the server holds its answers.
const HOLD: Duration = Duration::from_secs(1);
const CONNECTIONS: u64 = 4;
const MAX_CONNECTIONS: u64 = 16;

#[derive(Default)]
struct Hold {
    seen: u64,
    /// The request count from which the next hold starts.
    from: Option<u64>,
    until: Option<Instant>,
}

/// A keep-alive HTTP/1.1 server on loopback answering `ok`; once armed
/// ([`arm`]), it holds every answer for [`HOLD`] from a given request on.
async fn serve() -> (String, Arc<Mutex<Hold>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let hold = Arc::new(Mutex::new(Hold::default()));
    let shared = hold.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let hold = shared.clone();
            tokio::spawn(async move {
                let answer = service_fn(move |_| {
                    let hold = hold.clone();
                    async move {
                        let until = {
                            let mut h = hold.lock().unwrap();
                            h.seen += 1;
                            if h.from.is_some_and(|from| h.seen >= from) {
                                h.from = None;
                                h.until = Some(Instant::now() + HOLD);
                            }
                            h.until
                        };
                        if let Some(until) = until {
                            tokio::time::sleep_until(until).await;
                        }
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from("ok"))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), answer)
                    .await;
            });
        }
    });
    (format!("http://{addr}"), hold)
}

/// The next run's hold starts after `after` more requests.
fn arm(hold: &Mutex<Hold>, after: u64) {
    let mut h = hold.lock().unwrap();
    h.from = Some(h.seen + after);
}

async fn finished(stack: &OneAgent, body: &Value) -> Value {
    stack
        .api
        .run_until(body, &["passed", "failed"], LIMIT)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_target_regresses_and_is_not_a_saturated_generator() {
    let stack = OneAgent::start(Backend::Sqlite, AgentOptions::default()).await;
    let (url, hold) = serve().await;
    let load = json!({"kind": "load", "environment": "staging", "target": url,
        "spec": {"operations": [{"path": "/"}], "model": "open", "rate": RATE,
                 "duration": "4s", "warmup": "1s", "connections": CONNECTIONS,
                 "max_connections": MAX_CONNECTIONS}});

    let clean = finished(&stack, &load).await;
    let clean_result = &clean["result"];
    assert!(
        clean_result["generator_saturated"].is_null(),
        "{clean_result}"
    );
    let clean_late = clean_result["late"].as_u64().expect("late");
    let clean_held = clean_result["late_held"].as_u64().expect("late_held");
    assert!(clean_held <= clean_late, "{clean_result}");
    assert_eq!(clean_result["max_connections"], MAX_CONNECTIONS);

    // The warm-up's second and the measure's first, then a second held.
    arm(&hold, 2 * RATE);
    let stalled = finished(&stack, &load).await;
    let result = &stalled["result"];
    assert_eq!(stalled["status"], "passed", "{stalled}");
    assert!(
        result["generator_saturated"].is_null(),
        "the generator kept up: {}",
        result["generator_saturated"]
    );
    assert!(hold.lock().unwrap().until.is_some(), "the server held");
    // Due in the held second: about RATE sends, all but the bound's worth waited.
    let late = result["late"].as_u64().expect("late");
    let late_held = result["late_held"].as_u64().expect("late_held");
    assert!(late_held >= RATE / 2, "{late_held} held of {late} late");
    assert!(late_held <= late);
    assert_eq!(result["connections_opened"], MAX_CONNECTIONS, "{result}");
    let held = &result["target_held_connections"];
    assert_eq!(held["late"], late_held, "{held}");
    assert_eq!(held["max_connections"], MAX_CONNECTIONS, "{held}");
    assert_eq!(held["basis"], "measure", "{held}");
    let seconds = held["seconds"].as_array().expect("seconds");
    assert!(!seconds.is_empty() && seconds.len() <= 3, "{held}");
    assert!(
        seconds
            .iter()
            .all(|s| (1..=4).contains(&s.as_u64().unwrap_or(0))),
        "{held}"
    );
    let text = held["text"].as_str().expect("text");
    assert!(
        text.starts_with(&format!(
            "the target held all {MAX_CONNECTIONS} connections (its max_connections) in"
        )),
        "{text}"
    );
    let notes = result["notes"].as_array().expect("notes");
    assert!(notes.iter().any(|n| n.as_str() == Some(text)), "{notes:?}");

    // Compare: the stall is in the corrected tail, and the late sends' causes are said.
    let (clean_id, stalled_id) = (
        clean["id"].as_str().expect("id"),
        stalled["id"].as_str().expect("id"),
    );
    let (status, answer) = stack
        .api
        .get(&format!(
            "/v1/reliability/compare?before={clean_id}&after={stalled_id}"
        ))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["verdict"], "regressed", "{answer}");
    let worse: Vec<&str> = answer["differences"]
        .as_array()
        .expect("differences")
        .iter()
        .filter(|d| d["worse"] == true)
        .filter_map(|d| d["line"].as_str())
        .collect();
    assert!(
        worse.iter().any(|l| l.starts_with("p99 total:")),
        "{worse:?}"
    );
    let (clean_behind, behind) = (
        clean_result["late_behind"].as_u64().expect("late_behind"),
        result["late_behind"].as_u64().expect("late_behind"),
    );
    let line = format!(
        "late sends by cause: {clean_late} (target held {clean_held}, generator {clean_behind}) -> {late} (target held {late_held}, generator {behind})"
    );
    let notes = answer["notes"].as_array().expect("notes");
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().is_some_and(|n| n.starts_with(&line))),
        "{line} in {notes:?}"
    );
}
