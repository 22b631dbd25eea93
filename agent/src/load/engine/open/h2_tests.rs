//! The open model over HTTP/2 (h2c) against a server that allows two streams a
//! connection (SETTINGS_MAX_CONCURRENT_STREAMS 2, below the plan's four) and holds its
//! answers for half a second: with room to grow, a send due while every connection's
//! streams are taken gets a new connection; at the bound, the sends that waited for a
//! stream count as held by the target, not as the generator's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper::body::Bytes;
use tokio::net::TcpListener;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::stress::Meter;

const HOLD: Duration = Duration::from_millis(500);
/// The server's SETTINGS_MAX_CONCURRENT_STREAMS.
const SERVER_STREAMS: u32 = 2;
/// The plan's streams per connection: more than the server allows.
const PLAN_STREAMS: u32 = 4;

/// What the server saw.
#[derive(Default)]
struct Seen {
    connections: AtomicU64,
    requests: AtomicU64,
    /// Requests that arrived while the hold was on (and so were held).
    held: AtomicU64,
}

/// An HTTP/2 server (the `h2` crate's, prior knowledge) on loopback answering 200,
/// except that from its `after`-th request on, for [`HOLD`], it holds every answer
/// until the hold ends.
async fn serve_holding(after: u64) -> (String, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Seen::default());
    let hold: Arc<OnceCell<Instant>> = Arc::new(OnceCell::new());
    let counts = seen.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counts.connections.fetch_add(1, Ordering::Relaxed);
            let (seen, hold) = (counts.clone(), hold.clone());
            tokio::spawn(async move {
                let mut builder = h2::server::Builder::new();
                builder.max_concurrent_streams(SERVER_STREAMS);
                let Ok(mut conn) = builder.handshake::<_, Bytes>(socket).await else {
                    return;
                };
                while let Some(Ok((_, mut respond))) = conn.accept().await {
                    let (seen, hold) = (seen.clone(), hold.clone());
                    tokio::spawn(async move {
                        if seen.requests.fetch_add(1, Ordering::Relaxed) + 1 >= after {
                            let _ = hold.set(Instant::now() + HOLD);
                        }
                        if let Some(end) = hold.get().filter(|end| **end > Instant::now()) {
                            seen.held.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep_until(*end).await;
                        }
                        let response = hyper::Response::builder()
                            .status(200)
                            .body(())
                            .expect("response");
                        let _ = respond.send_response(response, true);
                    });
                }
            });
        }
    });
    (format!("http://{addr}"), seen)
}

/// 200/s for 2 s over HTTP/2, the target holding from its 100th request: what the
/// frames counted late and held, what the server saw, and the meter.
async fn held_run(connections: u32, max_connections: u32) -> (u64, u64, Arc<Seen>, Meter) {
    let (target, seen) = serve_holding(100).await;
    let spec = serde_json::json!({"operations": [{"path": "/"}], "model": "open",
        "rate": 200, "duration": "2s", "connections": connections,
        "max_connections": max_connections, "http": "2", "streams": PLAN_STREAMS});
    let (seconds, meter) = super::tests::metered_seconds(target, spec).await;
    let (mut sent, mut late, mut held, mut ok) = (0, 0, 0, 0);
    for second in &seconds {
        sent += second.sent;
        late += second.late;
        held += second.late_held;
        ok += second.counts.responses.get("2xx").copied().unwrap_or(0);
    }
    assert_eq!(sent, 400, "every request sent");
    assert_eq!(ok, 400, "every request answered 200");
    (late, held, seen, meter)
}

/// With room to grow, a send due while every connection's two streams are held goes on
/// a new connection at once: the requests due in the hold reach the server in it, and
/// nothing waits for the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_http2_target_gets_new_connections_when_its_streams_are_taken() {
    let (_, held, seen, meter) = held_run(1, 1000).await;
    assert_eq!(held, 0, "the bound was never reached");
    // About 100 requests fall due in the half second held; a send that waited on its
    // connection for a stream would reach the server only after the hold.
    let in_hold = seen.held.load(Ordering::Relaxed);
    assert!(in_hold >= 70, "{in_hold} requests reached the held server");
    let sends = meter.sent();
    assert_eq!(sends.max_connections, Some(1000));
    let opened = sends.connections_opened.expect("opened");
    // Held requests at two a connection: about 50 connections.
    assert!((30..1000).contains(&opened), "{opened} connections opened");
    let connections = seen.connections.load(Ordering::Relaxed);
    assert!(
        connections >= u64::from(opened) / 2,
        "{connections} connections reached the server, {opened} opened"
    );
    assert_eq!(meter.target_held(), None);
}

/// At the bound (four connections, eight streams the server allows), the sends due
/// while the target held every stream waited: held, the target's, and not the
/// generator's verdict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_bound_http2_sends_wait_for_a_stream_and_count_as_held() {
    let (late, held, seen, meter) = held_run(2, 4).await;
    // About 100 requests fell due in the half second the eight streams were held.
    assert!(held >= 60, "{held} held of {late} late");
    let in_hold = seen.held.load(Ordering::Relaxed);
    assert!(
        in_hold <= u64::from(4 * SERVER_STREAMS),
        "{in_hold} requests held at once"
    );
    let sends = meter.sent();
    assert_eq!(
        (sends.max_connections, sends.connections_opened),
        (Some(4), Some(4))
    );
    assert_eq!(sends.late_held, Some(held));
    let verdict = meter.target_held().expect("held seconds");
    assert_eq!(verdict.late, held);
    assert!(
        verdict
            .text
            .starts_with("the target held all 4 connections (its max_connections) in"),
        "{}",
        verdict.text
    );
}
