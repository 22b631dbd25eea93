//! The open model against a target that holds its answers for half a second: with room
//! to open connections it keeps its schedule, and at its bound the sends that waited are
//! counted as held by the target, not as the generator's.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use iohr_domain::RunStatus;
use iohr_domain::load::{LoadSecond, LoadSpec};
use tokio::net::TcpListener;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::load::run;
use crate::run_context::RunContext;
use crate::stress::Meter;

const HOLD: Duration = Duration::from_millis(500);

/// A keep-alive HTTP/1.1 server on loopback answering `ok`, except that from its
/// `after`-th request on, for [`HOLD`], it holds every answer until the hold ends.
async fn serve_holding(after: u64) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(AtomicU64::new(0));
    let hold: Arc<OnceCell<Instant>> = Arc::new(OnceCell::new());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (seen, hold) = (seen.clone(), hold.clone());
            tokio::spawn(async move {
                let answer = service_fn(move |_| {
                    let (seen, hold) = (seen.clone(), hold.clone());
                    async move {
                        if seen.fetch_add(1, Ordering::Relaxed) + 1 >= after {
                            let _ = hold.set(Instant::now() + HOLD);
                        }
                        if let Some(end) = hold.get().filter(|end| **end > Instant::now()) {
                            tokio::time::sleep_until(*end).await;
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
    format!("http://{addr}")
}

/// 200/s for 2 s, the target holding from its 100th request: what the frames counted
/// late and held, and what the meter was told of the connections.
async fn held_run(connections: u32, max_connections: u32) -> (u64, u64, u64, Meter) {
    let target = serve_holding(100).await;
    let spec = serde_json::json!({"operations": [{"path": "/"}], "model": "open",
        "rate": 200, "duration": "2s", "connections": connections,
        "max_connections": max_connections});
    let (seconds, meter) = metered_seconds(target, spec).await;
    let (mut sent, mut late, mut held) = (0, 0, 0);
    for second in &seconds {
        sent += second.sent;
        late += second.late;
        held += second.late_held;
    }
    assert_eq!(sent, 400, "every request sent");
    (late, held, sent, meter)
}

/// Runs `spec` against `target` with a stress meter, to its end (bounded at 20 s): the
/// run must pass. Its load seconds, each with no more sends late for a held connection
/// than late in all, and the meter.
pub(super) async fn metered_seconds(
    target: String,
    spec: serde_json::Value,
) -> (Vec<LoadSecond>, Meter) {
    let plan = LoadSpec::from_json(&spec)
        .and_then(|s| s.plan())
        .expect("plan");
    let (tx, mut rx) = crate::frames::FrameSender::channel();
    let meter = Meter::new();
    let ctx = RunContext::<()>::new(target, tx).with_stress(Some(meter.clone()));
    let outcome = tokio::time::timeout(Duration::from_secs(20), run(plan, &ctx))
        .await
        .expect("the run ends");
    assert_eq!(outcome.status, RunStatus::Passed, "{:?}", outcome.reason);
    drop(ctx);
    let mut seconds = Vec::new();
    while let Some(frame) = rx.recv().await {
        let Ok(second) = serde_json::from_value::<LoadSecond>(frame.data) else {
            continue;
        };
        assert!(second.late_held <= second.late, "{second:?}");
        seconds.push(second);
    }
    (seconds, meter)
}

/// With room to grow, a held connection is replaced by a new one: nothing waits for the
/// target, and the pool opened more than it started with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_target_gets_new_connections_up_to_the_bound() {
    let (_, held, _, meter) = held_run(2, 1000).await;
    assert_eq!(held, 0, "the bound was never reached");
    let sends = meter.sent();
    assert_eq!(sends.max_connections, Some(1000));
    let opened = sends.connections_opened.expect("opened");
    // Half a second held at 200/s is about 100 requests in flight at once.
    assert!((20..1000).contains(&opened), "{opened} connections opened");
    assert_eq!(meter.target_held(), None);
}

/// At the bound, the sends due while the target held all four connections waited: held,
/// the target's; listed apart, and not the generator's verdict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_bound_sends_wait_and_count_as_held_by_the_target() {
    let (late, held, _, meter) = held_run(2, 4).await;
    // About 100 requests fell due in the half second the four connections were held.
    assert!(held >= 50, "{held} held of {late} late");
    assert!(held <= late);
    let sends = meter.sent();
    assert_eq!(
        (sends.max_connections, sends.connections_opened),
        (Some(4), Some(4))
    );
    assert_eq!(sends.late_held, Some(held));
    let verdict = meter.target_held().expect("held seconds");
    assert_eq!(verdict.late, held);
    assert_eq!(verdict.max_connections, Some(4));
    assert!(
        verdict
            .text
            .starts_with("the target held all 4 connections (its max_connections) in"),
        "{}",
        verdict.text
    );
}
