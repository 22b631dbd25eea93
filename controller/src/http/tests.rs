use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::{ApiListenerConfig, serve};

const SHORT: Duration = Duration::from_millis(300);
/// Every wait on the server is bounded by this, far above the timeouts under test.
const BOUND: Duration = Duration::from_secs(10);

struct Server {
    addr: std::net::SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

async fn start(max_connections: usize, idle_timeout: Duration) -> Server {
    let router = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        // An answer whose body takes three idle timeouts to finish: never idle meanwhile.
        .route(
            "/slow",
            get(move || async move {
                let chunks = futures_util::stream::unfold(0u32, move |n| async move {
                    if n == 3 {
                        return None;
                    }
                    tokio::time::sleep(idle_timeout).await;
                    Some((Ok::<_, std::io::Error>(format!("{n}")), n + 1))
                });
                Body::from_stream(chunks)
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = CancellationToken::new();
    let config = ApiListenerConfig {
        tls: None,
        header_timeout: SHORT,
        idle_timeout,
        max_connections,
    };
    let task = tokio::spawn(serve(listener, router, config, shutdown.clone()));
    Server {
        addr,
        shutdown,
        task,
    }
}

/// Reads until the server closes the connection; what it sent.
async fn until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    tokio::time::timeout(BOUND, stream.read_to_end(&mut all))
        .await
        .expect("the server closed the connection in time")
        .expect("read");
    all
}

async fn get_once(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    String::from_utf8_lossy(&until_closed(&mut stream).await).into_owned()
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let server = start(16, Duration::from_secs(60)).await;
    let started = Instant::now();
    let mut silent = TcpStream::connect(server.addr).await.expect("connect");
    assert!(until_closed(&mut silent).await.is_empty());
    assert!(started.elapsed() >= SHORT, "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_trickled_head_and_an_h2c_preface_alone_are_closed_too() {
    let server = start(16, Duration::from_secs(60)).await;
    let mut partial = TcpStream::connect(server.addr).await.expect("connect");
    partial
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        .await
        .expect("write");
    until_closed(&mut partial).await;
    // Half the HTTP/2 preface: hyper waits for the rest to tell h1 from h2.
    let mut sniffed = TcpStream::connect(server.addr).await.expect("connect");
    sniffed
        .write_all(b"PRI * HTTP/2.0\r\n")
        .await
        .expect("write");
    until_closed(&mut sniffed).await;
}

#[tokio::test]
async fn a_kept_alive_connection_is_closed_once_idle() {
    let server = start(16, SHORT).await;
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let answer = String::from_utf8_lossy(&until_closed(&mut stream).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("ok"), "{answer}");
}

#[tokio::test]
async fn an_answer_still_streaming_is_not_idle() {
    let server = start(16, SHORT).await;
    let answer = get_once(server.addr, "/slow").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("0") && answer.contains("1") && answer.contains("2"));
    assert!(
        answer.trim_end().ends_with("0"),
        "the chunked body ended: {answer}"
    );
}

#[tokio::test]
async fn at_the_limit_a_new_client_waits_and_is_answered_when_idle_ones_are_closed() {
    let server = start(2, Duration::from_secs(60)).await;
    let mut idle = Vec::new();
    for _ in 0..2 {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    // The third connection is in the backlog until a permit frees: its answer comes
    // after the header timeout closed an idle one, not before.
    let started = Instant::now();
    let answer = tokio::time::timeout(BOUND, get_once(server.addr, "/healthz"))
        .await
        .expect("answered in time");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(started.elapsed() >= SHORT, "{:?}", started.elapsed());
    for stream in &mut idle {
        until_closed(stream).await;
    }
}

#[tokio::test]
async fn shutdown_stops_accepting_and_returns_when_connections_are_gone() {
    let server = start(16, Duration::from_secs(60)).await;
    assert!(get_once(server.addr, "/healthz").await.ends_with("ok"));
    let mut open = TcpStream::connect(server.addr).await.expect("connect");
    open.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let mut first = [0u8; 12];
    open.read_exact(&mut first).await.expect("an answer");
    assert_eq!(&first, b"HTTP/1.1 200");
    server.shutdown.cancel();
    tokio::time::timeout(BOUND, server.task)
        .await
        .expect("serve returned in time")
        .expect("serve did not panic");
    until_closed(&mut open).await;
    assert!(
        TcpStream::connect(server.addr).await.is_err(),
        "not listening"
    );
}
