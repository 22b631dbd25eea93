//! The fault proxy measured from outside: real sockets on 127.0.0.1, an echo server, a
//! byte source and a small keep-alive HTTP server written here. Timing assertions use
//! generous bounds (a 300 ms fault is seen as >= 300 ms and < 1 s).

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use iohr_domain::faults::Fault;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::{FaultProxy, Picks, ProxyError};
use crate::faults::Undo;

/// Every test ends within this, whatever happens.
const TEST_LIMIT: Duration = Duration::from_secs(8);

async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_LIMIT, test)
        .await
        .expect("the test ran past its limit")
}

fn fault(value: serde_json::Value) -> Fault {
    serde_json::from_value(value).expect("a fault")
}

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Echoes every byte back; closes after the client's end.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}

/// Sends `count` known bytes to every client, then closes.
async fn source_server(count: usize) -> SocketAddr {
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.write_all(&pattern(count)).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

fn pattern(count: usize) -> Vec<u8> {
    (0..count).map(|i| (i % 251) as u8).collect()
}

/// A keep-alive HTTP/1.1 server: answers every request `200` with "PATH N bytes" (N the
/// body's length, read by Content-Length), and sends each path it serves on the channel.
async fn http_server() -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (seen_tx, seen_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = seen_tx.clone();
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                loop {
                    let mut path = None;
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        match stream.read_line(&mut line).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if path.is_none() {
                            path = line.split_whitespace().nth(1).map(str::to_string);
                        } else if let Some(v) =
                            line.to_ascii_lowercase().strip_prefix("content-length:")
                        {
                            length = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0u8; length];
                    if stream.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let path = path.unwrap_or_default();
                    let _ = seen.send(path.clone());
                    let text = format!("{path} {length} bytes");
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{text}",
                        text.len()
                    );
                    if stream.get_mut().write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen_rx)
}

/// Sends `request` and reads one answer: its status and body, or None when the connection
/// ended before any answer.
async fn exchange(stream: &mut BufReader<TcpStream>, request: &str) -> Option<(u16, String)> {
    stream.get_mut().write_all(request.as_bytes()).await.ok()?;
    let mut status_line = String::new();
    if stream.read_line(&mut status_line).await.ok()? == 0 {
        return None;
    }
    let status = status_line.split_whitespace().nth(1)?.parse().ok()?;
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.ok()?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.ok()?;
    Some((status, String::from_utf8(body).ok()?))
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nhost: t\r\n\r\n")
}

async fn http_client(proxy: &FaultProxy) -> BufReader<TcpStream> {
    BufReader::new(TcpStream::connect(proxy.local_addr()).await.unwrap())
}

/// One echo round trip of `bytes`: how long it took.
async fn round_trip(stream: &mut TcpStream, bytes: &[u8]) -> Duration {
    let started = Instant::now();
    stream.write_all(bytes).await.unwrap();
    let mut back = vec![0u8; bytes.len()];
    stream.read_exact(&mut back).await.unwrap();
    assert_eq!(back, bytes);
    started.elapsed()
}

/// Reads to the end: the bytes, or the error that ended the reading.
async fn read_to_end(stream: &mut TcpStream) -> Result<Vec<u8>, std::io::Error> {
    let mut all = Vec::new();
    stream.read_to_end(&mut all).await.map(|_| all)
}

#[tokio::test]
async fn latency_is_seen_by_a_client_and_not_after_removal() {
    bounded(async {
        let proxy = FaultProxy::start(loopback(), echo_server().await, 1)
            .await
            .unwrap();
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        assert!(round_trip(&mut client, b"ping").await < Duration::from_millis(200));

        let id = proxy
            .add(&fault(serde_json::json!({
                "fault": "network", "toxic": {"type": "latency", "latency_ms": 300, "jitter_ms": 20}
            })))
            .unwrap();
        let delayed = round_trip(&mut client, b"ping").await;
        assert!(delayed >= Duration::from_millis(280), "{delayed:?}");
        assert!(delayed < Duration::from_secs(1), "{delayed:?}");

        assert!(proxy.remove(id));
        assert!(!proxy.remove(id), "removed once");
        let after = round_trip(&mut client, b"ping").await;
        assert!(after < Duration::from_millis(200), "{after:?}");
    })
    .await;
}

#[tokio::test]
async fn removing_a_latency_releases_a_held_chunk_at_once() {
    bounded(async {
        let proxy = FaultProxy::start(loopback(), echo_server().await, 1)
            .await
            .unwrap();
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        let id = proxy
            .add(&fault(serde_json::json!({
                "fault": "network", "direction": "both",
                "toxic": {"type": "latency", "latency_ms": 10000}
            })))
            .unwrap();
        client.write_all(b"held").await.unwrap();
        let mut back = [0u8; 4];
        let early =
            tokio::time::timeout(Duration::from_millis(300), client.read_exact(&mut back)).await;
        assert!(early.is_err(), "held by the latency");
        let removed_at = Instant::now();
        proxy.remove(id);
        client.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"held");
        assert!(removed_at.elapsed() < Duration::from_secs(1));
    })
    .await;
}

#[tokio::test]
async fn bandwidth_limits_the_transfer_time_of_a_known_byte_count() {
    bounded(async {
        let count = 100_000;
        let proxy = FaultProxy::start(loopback(), source_server(count).await, 1)
            .await
            .unwrap();
        proxy
            .add(&fault(serde_json::json!({
                "fault": "network", "toxic": {"type": "bandwidth", "rate_kbps": 200}
            })))
            .unwrap();
        let started = Instant::now();
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        let bytes = read_to_end(&mut client).await.unwrap();
        let took = started.elapsed();
        assert_eq!(bytes, pattern(count));
        // 100 000 bytes at 200 000 bytes a second: 0.5 s.
        assert!(took >= Duration::from_millis(450), "{took:?}");
        assert!(took < Duration::from_millis(1000), "{took:?}");
    })
    .await;
}

#[tokio::test]
async fn reset_peer_is_seen_by_the_client_as_a_reset() {
    bounded(async {
        let proxy = FaultProxy::start(loopback(), echo_server().await, 1)
            .await
            .unwrap();
        proxy
            .add(&fault(serde_json::json!({
                "fault": "network", "toxic": {"type": "reset_peer", "timeout_ms": 100}
            })))
            .unwrap();
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        let started = Instant::now();
        client.write_all(b"hello").await.unwrap();
        let error = read_to_end(&mut client).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset, "{error}");
        assert!(started.elapsed() >= Duration::from_millis(90));
    })
    .await;
}

#[tokio::test]
async fn limit_data_cuts_the_bytes_exactly_at_the_limit() {
    bounded(async {
        let proxy = FaultProxy::start(loopback(), echo_server().await, 1)
            .await
            .unwrap();
        proxy
            .add(&fault(serde_json::json!({
                "fault": "network", "toxic": {"type": "limit_data", "bytes": 1000}
            })))
            .unwrap();
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        let sent = pattern(5000);
        client.write_all(&sent).await.unwrap();
        let back = read_to_end(&mut client).await.unwrap();
        assert_eq!(back, sent[..1000]);
    })
    .await;
}

#[tokio::test]
async fn timeout_holds_then_closes() {
    bounded(async {
        let proxy = FaultProxy::start(loopback(), echo_server().await, 1)
            .await
            .unwrap();
        proxy
            .add(&fault(serde_json::json!({
                "fault": "network", "toxic": {"type": "timeout", "timeout_ms": 300}
            })))
            .unwrap();
        let started = Instant::now();
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        client.write_all(b"lost").await.unwrap();
        let back = read_to_end(&mut client).await.unwrap();
        let took = started.elapsed();
        assert!(back.is_empty(), "nothing passes");
        assert!(took >= Duration::from_millis(290), "{took:?}");
        assert!(took < Duration::from_secs(1), "{took:?}");
    })
    .await;
}

#[tokio::test]
async fn a_timeout_of_zero_holds_until_removed_then_closes() {
    bounded(async {
        let proxy = FaultProxy::start(loopback(), echo_server().await, 1)
            .await
            .unwrap();
        let id = proxy
            .add(&fault(serde_json::json!({
                "fault": "network", "toxic": {"type": "timeout", "timeout_ms": 0}
            })))
            .unwrap();
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        client.write_all(b"lost").await.unwrap();
        let mut one = [0u8; 1];
        let held = tokio::time::timeout(Duration::from_millis(300), client.read(&mut one)).await;
        assert!(held.is_err(), "held open, nothing passes");
        let removed_at = Instant::now();
        proxy.remove(id);
        let back = read_to_end(&mut client).await.unwrap();
        assert!(back.is_empty());
        assert!(removed_at.elapsed() < Duration::from_secs(1));
    })
    .await;
}

#[tokio::test]
async fn slicer_delivers_the_same_bytes_in_many_reads() {
    bounded(async {
        let count = 5_000;
        let proxy = FaultProxy::start(loopback(), source_server(count).await, 1).await.unwrap();
        proxy
            .add(&fault(serde_json::json!({
                "fault": "network",
                "toxic": {"type": "slicer", "average_size": 200, "size_variation": 50, "delay_us": 5000}
            })))
            .unwrap();
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        let mut bytes = Vec::new();
        let mut reads = 0;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = client.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            reads += 1;
            bytes.extend_from_slice(&buf[..n]);
        }
        assert_eq!(bytes, pattern(count));
        // About 25 slices 5 ms apart (unsliced: one or two reads); a slow reader may see a
        // few together.
        assert!(reads >= 10, "{reads} reads");
    })
    .await;
}

#[tokio::test]
async fn a_toxic_acts_only_in_its_direction() {
    bounded(async {
        let count = 1000;
        let proxy = FaultProxy::start(loopback(), source_server(count).await, 1)
            .await
            .unwrap();
        proxy
            .add(&fault(serde_json::json!({
                "fault": "network", "direction": "upstream",
                "toxic": {"type": "timeout", "timeout_ms": 0}
            })))
            .unwrap();
        // Client to target is blackholed; target to client is not.
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        let mut bytes = vec![0u8; count];
        client.read_exact(&mut bytes).await.unwrap();
        assert_eq!(bytes, pattern(count));
    })
    .await;
}

#[tokio::test]
async fn slow_close_holds_the_close() {
    bounded(async {
        let proxy = FaultProxy::start(loopback(), echo_server().await, 1)
            .await
            .unwrap();
        proxy
            .add(&fault(serde_json::json!({
                "fault": "network", "toxic": {"type": "slow_close", "delay_ms": 300}
            })))
            .unwrap();
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        assert!(round_trip(&mut client, b"data").await < Duration::from_millis(200));
        let started = Instant::now();
        client.shutdown().await.unwrap();
        assert!(read_to_end(&mut client).await.unwrap().is_empty());
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(290), "{took:?}");
        assert!(took < Duration::from_secs(1), "{took:?}");
    })
    .await;
}

#[tokio::test]
async fn down_refuses_and_closes_until_removed() {
    bounded(async {
        let proxy = FaultProxy::start(loopback(), echo_server().await, 1)
            .await
            .unwrap();
        let mut held = TcpStream::connect(proxy.local_addr()).await.unwrap();
        round_trip(&mut held, b"up").await;
        let id = proxy
            .add(&fault(
                serde_json::json!({"fault": "network", "toxic": {"type": "down"}}),
            ))
            .unwrap();
        // The connection it held is closed.
        let mut rest = Vec::new();
        let ended = held.read_to_end(&mut rest).await;
        assert!(ended.is_err() || rest.is_empty(), "{ended:?}");
        // New connections are refused once the listener is closed (a bounded poll: the
        // accept loop closes it as soon as it sees the change).
        let mut refused = false;
        for _ in 0..50 {
            match TcpStream::connect(proxy.local_addr()).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    refused = true;
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        assert!(refused, "connections are refused while down");

        proxy.remove(id);
        let mut again = None;
        for _ in 0..50 {
            if let Ok(stream) = TcpStream::connect(proxy.local_addr()).await {
                again = Some(stream);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut again = again.expect("accepting again after removal");
        round_trip(&mut again, b"back").await;
    })
    .await;
}

/// Whether the limit_data of 2 bytes hit this connection: it echoes "hello" cut to "he".
async fn hit_by_the_limit(stream: &mut TcpStream) -> bool {
    stream.write_all(b"hello").await.unwrap();
    stream.shutdown().await.unwrap();
    match read_to_end(stream).await.unwrap().as_slice() {
        b"he" => true,
        b"hello" => false,
        other => panic!("unexpected echo {other:?}"),
    }
}

#[tokio::test]
async fn toxicity_with_a_fixed_seed_hits_the_expected_connections() {
    bounded(async {
        let seed = 42;
        let proxy = FaultProxy::start(loopback(), echo_server().await, seed)
            .await
            .unwrap();
        // Four live connections are drawn for when the fault is added, in accept order...
        let mut live = Vec::new();
        for _ in 0..4 {
            let mut stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
            round_trip(&mut stream, b"up").await;
            live.push(stream);
        }
        proxy
            .add(&fault(serde_json::json!({
                "fault": "network", "toxicity": 0.5,
                "toxic": {"type": "limit_data", "bytes": 2}
            })))
            .unwrap();
        let mut seen = Vec::new();
        for stream in &mut live {
            seen.push(hit_by_the_limit(stream).await);
        }
        // ...and eight new ones when each is accepted.
        for _ in 0..8 {
            let mut stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
            seen.push(hit_by_the_limit(&mut stream).await);
        }
        let mut picks = Picks::new(seed);
        let expected: Vec<bool> = (0..12).map(|_| picks.pick(0.5)).collect();
        assert_eq!(seen, expected);
        assert!(seen.contains(&true) && seen.contains(&false), "{seen:?}");
    })
    .await;
}

#[tokio::test]
async fn http_status_answers_a_matching_path_and_leaves_others_untouched() {
    bounded(async {
        let (target, mut seen) = http_server().await;
        let proxy = FaultProxy::start(loopback(), target, 1).await.unwrap();
        let mut client = http_client(&proxy).await;
        let post = "POST /ok HTTP/1.1\r\nhost: t\r\ncontent-length: 11\r\n\r\nhello world";
        assert_eq!(
            exchange(&mut client, post).await,
            Some((200, "/ok 11 bytes".into()))
        );
        // Added while the keep-alive connection is open: its next requests are looked at.
        proxy
            .add(&fault(serde_json::json!({
                "fault": "http", "path": "/fail", "effect": {"type": "status", "status": 503}
            })))
            .unwrap();
        // Requests that are not hit pass, bodies included.
        assert_eq!(
            exchange(&mut client, post).await,
            Some((200, "/ok 11 bytes".into()))
        );
        assert_eq!(
            exchange(&mut client, &get("/other")).await,
            Some((200, "/other 0 bytes".into()))
        );
        let (status, body) = exchange(&mut client, &get("/fail/deeper")).await.unwrap();
        assert_eq!(status, 503);
        assert!(body.contains("iohr fault proxy"), "{body}");
        // The answer closes the connection.
        assert_eq!(exchange(&mut client, &get("/ok")).await, None);

        let mut fresh = http_client(&proxy).await;
        assert_eq!(
            exchange(&mut fresh, &get("/ok")).await,
            Some((200, "/ok 0 bytes".into()))
        );
        let mut paths = Vec::new();
        while let Ok(path) = seen.try_recv() {
            paths.push(path);
        }
        assert_eq!(
            paths,
            ["/ok", "/ok", "/other", "/ok"],
            "the hit request never reached the target"
        );
    })
    .await;
}

#[tokio::test]
async fn http_abort_closes_without_an_answer() {
    bounded(async {
        let (target, _seen) = http_server().await;
        let proxy = FaultProxy::start(loopback(), target, 1).await.unwrap();
        proxy
            .add(&fault(
                serde_json::json!({"fault": "http", "effect": {"type": "abort"}}),
            ))
            .unwrap();
        let mut client = http_client(&proxy).await;
        assert_eq!(exchange(&mut client, &get("/anything")).await, None);
    })
    .await;
}

#[tokio::test]
async fn http_delay_holds_the_matching_requests_only() {
    bounded(async {
        let (target, _seen) = http_server().await;
        let proxy = FaultProxy::start(loopback(), target, 1).await.unwrap();
        proxy
            .add(&fault(serde_json::json!({
                "fault": "http", "path": "/slow", "rate": 1.0, "effect": {"type": "delay", "delay_ms": 300}
            })))
            .unwrap();
        let mut client = http_client(&proxy).await;
        let started = Instant::now();
        assert_eq!(exchange(&mut client, &get("/fast")).await, Some((200, "/fast 0 bytes".into())));
        assert!(started.elapsed() < Duration::from_millis(200));
        let started = Instant::now();
        assert_eq!(exchange(&mut client, &get("/slow")).await, Some((200, "/slow 0 bytes".into())));
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(290), "{took:?}");
        assert!(took < Duration::from_secs(1), "{took:?}");
    })
    .await;
}

#[tokio::test]
async fn removing_an_http_delay_forwards_the_held_request_at_once() {
    bounded(async {
        let (target, _seen) = http_server().await;
        let proxy = FaultProxy::start(loopback(), target, 1).await.unwrap();
        let id = proxy
            .add(&fault(serde_json::json!({
                "fault": "http", "effect": {"type": "delay", "delay_ms": 10000}
            })))
            .unwrap();
        let mut client = http_client(&proxy).await;
        client
            .get_mut()
            .write_all(get("/held").as_bytes())
            .await
            .unwrap();
        let mut first = [0u8; 1];
        let early = tokio::time::timeout(
            Duration::from_millis(300),
            client.get_mut().peek(&mut first),
        )
        .await;
        assert!(early.is_err(), "held by the delay");
        let removed_at = Instant::now();
        proxy.remove(id);
        let mut status_line = String::new();
        client.read_line(&mut status_line).await.unwrap();
        assert!(status_line.starts_with("HTTP/1.1 200"), "{status_line}");
        assert!(removed_at.elapsed() < Duration::from_secs(1));
    })
    .await;
}

#[tokio::test]
async fn bytes_that_are_not_http_are_forwarded_untouched_under_an_http_fault() {
    bounded(async {
        let proxy = FaultProxy::start(loopback(), echo_server().await, 1)
            .await
            .unwrap();
        proxy
            .add(&fault(
                serde_json::json!({"fault": "http", "effect": {"type": "status", "status": 500}}),
            ))
            .unwrap();
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        round_trip(&mut client, b"\x00\x01 not a request\r\n\r\n").await;
        round_trip(&mut client, b"GET / HTTP/1.1\r\n\r\n").await;
    })
    .await;
}

#[tokio::test]
async fn the_proxy_takes_only_valid_network_and_http_faults() {
    bounded(async {
        let proxy = FaultProxy::start(loopback(), echo_server().await, 1)
            .await
            .unwrap();
        let hog = fault(serde_json::json!({"fault": "cpu_hog", "workers": 1}));
        assert!(matches!(
            proxy.add(&hog),
            Err(ProxyError::NotAProxyFault("cpu_hog"))
        ));
        let zero = fault(serde_json::json!({
            "fault": "network", "toxicity": 0.0, "toxic": {"type": "latency", "latency_ms": 1}
        }));
        match proxy.add(&zero) {
            Err(ProxyError::Invalid(e)) => assert_eq!(e.field, "fault.toxicity"),
            other => panic!("{other:?}"),
        }
        let latency = fault(serde_json::json!({
            "fault": "network", "toxic": {"type": "latency", "latency_ms": 1}
        }));
        let abort = fault(serde_json::json!({"fault": "http", "effect": {"type": "abort"}}));
        let a = proxy.add(&latency).unwrap();
        let b = proxy.add(&abort).unwrap();
        assert_eq!(proxy.active(), vec![(a, latency.clone()), (b, abort)]);
        assert_eq!(
            proxy.undo(a),
            Undo::ProxyFault {
                proxy: proxy.local_addr().to_string(),
                id: a
            }
        );
        proxy.clear();
        assert!(proxy.active().is_empty());
        assert!(proxy.add(&latency).unwrap() > b, "ids are never reused");
    })
    .await;
}

#[tokio::test]
async fn shutdown_closes_connections_and_stops_listening() {
    bounded(async {
        let proxy = FaultProxy::start(loopback(), echo_server().await, 1)
            .await
            .unwrap();
        let addr = proxy.local_addr();
        let mut client = TcpStream::connect(addr).await.unwrap();
        round_trip(&mut client, b"up").await;
        proxy.shutdown().await;
        assert!(
            read_to_end(&mut client)
                .await
                .unwrap_or_default()
                .is_empty()
        );
        let refused = TcpStream::connect(addr).await.unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    })
    .await;
}
