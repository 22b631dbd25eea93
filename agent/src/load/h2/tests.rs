use super::*;

#[test]
fn connection_specific_headers_are_stripped_and_te_trailers_kept() {
    let mut headers = HeaderMap::new();
    headers.insert("connection", "keep-alive".parse().unwrap());
    headers.insert("transfer-encoding", "chunked".parse().unwrap());
    headers.insert("x-kept", "1".parse().unwrap());
    headers.insert("te", "trailers".parse().unwrap());
    strip_connection_headers(&mut headers);
    assert_eq!(headers.len(), 2, "{headers:?}");
    assert!(headers.contains_key("x-kept") && headers.contains_key("te"));
    headers.insert("te", "gzip".parse().unwrap());
    strip_connection_headers(&mut headers);
    assert!(!headers.contains_key("te"));
}

// The client against a real HTTP/2 server (the `h2` crate's) on loopback.

use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

type Respond = h2::server::SendResponse<Bytes>;

/// A server on 127.0.0.1 whose streams go to `handle` (its request's path and body
/// length); `builder` sets its limits. Returns its address and a task that ends when the
/// client's connection ends.
async fn server<F, Fut>(
    builder: h2::server::Builder,
    handle: F,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>)
where
    F: Fn(String, usize, Respond) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let handle = Arc::new(handle);
    let task = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.expect("accept");
        let mut conn = builder
            .handshake::<_, Bytes>(socket)
            .await
            .expect("server handshake");
        while let Some(Ok((request, respond))) = conn.accept().await {
            let handle = handle.clone();
            tokio::spawn(async move {
                let path = request.uri().path().to_string();
                let mut body = request.into_body();
                let mut len = 0;
                while let Some(Ok(chunk)) = body.data().await {
                    len += chunk.len();
                    let _ = body.flow_control().release_capacity(chunk.len());
                }
                handle(path, len, respond).await;
            });
        }
    });
    (addr, task)
}

fn answer(respond: &mut Respond, status: u16, body: Option<Bytes>) {
    let response = hyper::Response::builder()
        .status(status)
        .body(())
        .expect("response");
    let mut send = respond
        .send_response(response, body.is_none())
        .expect("send response");
    if let Some(body) = body {
        send.send_data(body, true).expect("send data");
    }
}

async fn connect(addr: std::net::SocketAddr) -> H2Conn {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    H2Conn::handshake(Stream::Plain(tcp))
        .await
        .expect("client handshake")
}

fn block(method: &str, path: &str) -> Vec<u8> {
    let mut block = Vec::new();
    hpack::field(&mut block, ":method", method.as_bytes());
    hpack::field(&mut block, ":scheme", b"http");
    hpack::field(&mut block, ":authority", b"127.0.0.1");
    hpack::field(&mut block, ":path", path.as_bytes());
    block
}

#[tokio::test]
async fn requests_one_after_another_get_their_status_and_bodies() {
    let (addr, _server) = server(
        h2::server::Builder::new(),
        |path, _, mut respond| async move {
            let status = if path == "/missing" { 404 } else { 200 };
            answer(&mut respond, status, Some(Bytes::from_static(b"hello")));
        },
    )
    .await;
    let mut conn = connect(addr).await;
    for i in 0..200 {
        let path = if i % 10 == 9 { "/missing" } else { "/" };
        let status = conn.send(&block("GET", path), &Bytes::new()).await;
        assert_eq!(
            status,
            Ok(if i % 10 == 9 { 404 } else { 200 }),
            "request {i}"
        );
    }
    assert!(conn.is_reusable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_share_a_connection_within_the_servers_limit() {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (flight, peak) = (in_flight.clone(), most.clone());
    let mut builder = h2::server::Builder::new();
    builder.max_concurrent_streams(2);
    let (addr, _server) = server(builder, move |_, _, mut respond| {
        let (flight, peak) = (flight.clone(), peak.clone());
        async move {
            let now = flight.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            tokio::task::yield_now().await;
            flight.fetch_sub(1, Ordering::SeqCst);
            answer(&mut respond, 204, None);
        }
    })
    .await;
    let conn = connect(addr).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let mut conn = conn.clone();
        tasks.spawn(async move {
            for _ in 0..50 {
                assert_eq!(conn.send(&block("GET", "/"), &Bytes::new()).await, Ok(204));
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a worker panicked");
    }
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "the server's limit was passed"
    );
}

#[tokio::test]
async fn a_body_larger_than_the_servers_window_is_sent_whole() {
    let mut builder = h2::server::Builder::new();
    builder.initial_window_size(1000).max_frame_size(16_384);
    let (addr, _server) = server(builder, |_, len, mut respond| async move {
        answer(&mut respond, if len == 200_000 { 201 } else { 500 }, None);
    })
    .await;
    let mut conn = connect(addr).await;
    let body = Bytes::from(vec![b'x'; 200_000]);
    for _ in 0..3 {
        assert_eq!(conn.send(&block("POST", "/"), &body).await, Ok(201));
    }
}

#[tokio::test]
async fn a_body_larger_than_our_windows_is_read_to_its_end() {
    let (addr, _server) = server(h2::server::Builder::new(), |_, _, mut respond| async move {
        answer(&mut respond, 200, Some(Bytes::from(vec![b'y'; 3 << 20])));
    })
    .await;
    let mut conn = connect(addr).await;
    // 3 MiB each, 24 MiB in all: past both our stream's and the connection's window.
    for _ in 0..8 {
        assert_eq!(
            conn.send(&block("GET", "/big"), &Bytes::new()).await,
            Ok(200)
        );
    }
}

#[tokio::test]
async fn a_reset_stream_fails_its_request_only() {
    let (addr, _server) = server(
        h2::server::Builder::new(),
        |path, _, mut respond| async move {
            if path == "/reset" {
                respond.send_reset(h2::Reason::INTERNAL_ERROR);
            } else {
                answer(&mut respond, 200, None);
            }
        },
    )
    .await;
    let mut conn = connect(addr).await;
    let empty = Bytes::new();
    assert_eq!(
        conn.send(&block("GET", "/reset"), &empty).await,
        Err(Failure::Reset)
    );
    assert_eq!(conn.send(&block("GET", "/"), &empty).await, Ok(200));
}

#[tokio::test]
async fn a_request_given_up_is_cancelled_and_the_connection_goes_on() {
    let (addr, _server) = server(
        h2::server::Builder::new(),
        |path, _, mut respond| async move {
            if path == "/slow" {
                // Held until the client cancels the stream.
                std::future::poll_fn(|cx| respond.poll_reset(cx)).await.ok();
            } else {
                answer(&mut respond, 200, Some(Bytes::from_static(b"ok")));
            }
        },
    )
    .await;
    let mut conn = connect(addr).await;
    let empty = Bytes::new();
    let slow = block("GET", "/slow");
    let given_up = tokio::time::timeout(Duration::from_millis(50), conn.send(&slow, &empty)).await;
    assert!(given_up.is_err(), "the slow request answered: {given_up:?}");
    for _ in 0..10 {
        assert_eq!(conn.send(&block("GET", "/"), &empty).await, Ok(200));
    }
}

#[tokio::test]
async fn after_a_goaway_the_connection_is_not_reused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.expect("accept");
        let mut conn = h2::server::handshake(socket).await.expect("handshake");
        if let Some(Ok((_, mut respond))) = conn.accept().await {
            conn.graceful_shutdown();
            answer(&mut respond, 200, None);
        }
        while conn.accept().await.is_some() {}
    });
    let mut conn = connect(addr).await;
    assert_eq!(conn.send(&block("GET", "/"), &Bytes::new()).await, Ok(200));
    // The GOAWAY comes in its own time: a bounded wait for it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while conn.is_reusable() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!conn.is_reusable());
    assert_eq!(
        conn.send(&block("GET", "/"), &Bytes::new()).await,
        Err(Failure::Reset)
    );
    // Nothing of it went out: the engine sends it again on a new connection.
    assert!(conn.unprocessed());
}

#[tokio::test]
async fn a_server_that_does_not_speak_http2_is_a_protocol_failure() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        let mut preface = [0u8; 24];
        let _ = socket.read_exact(&mut preface).await;
        let _ = socket
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await;
    });
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let outcome = H2Conn::handshake(Stream::Plain(tcp)).await;
    assert_eq!(outcome.map(|_| ()), Err(Failure::Protocol));
}

#[tokio::test]
async fn the_last_handle_dropped_closes_the_connection() {
    let (addr, server) = server(h2::server::Builder::new(), |_, _, mut respond| async move {
        answer(&mut respond, 200, None);
    })
    .await;
    let mut conn = connect(addr).await;
    let other = conn.clone();
    assert_eq!(conn.send(&block("GET", "/"), &Bytes::new()).await, Ok(200));
    drop(conn);
    // One handle left: the connection still serves it.
    let mut other = other;
    assert_eq!(other.send(&block("GET", "/"), &Bytes::new()).await, Ok(200));
    drop(other);
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server saw the connection end")
        .expect("server task");
}

/// How a test server answers one stream.
#[derive(Debug, Clone, Copy)]
enum Reply {
    Ok,
    /// REFUSED_STREAM: the server did not process it.
    Refuse,
    /// Never answered (as a hung backend behind a live socket).
    Hold,
}

/// A server of any number of connections: `reply(connection, stream)` (the connection
/// counted from 0, its streams from 1) says how each stream is answered, and whether the
/// connection then ends gracefully (GOAWAY), as nginx's do after `keepalive_requests`.
async fn serve_streams(reply: fn(usize, usize) -> (Reply, bool)) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut connection = 0;
        while let Ok((socket, _)) = listener.accept().await {
            let this = connection;
            connection += 1;
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(socket).await else {
                    return;
                };
                let mut stream = 0;
                let mut held = Vec::new();
                while let Some(Ok((_, mut respond))) = conn.accept().await {
                    stream += 1;
                    let (how, go_away) = reply(this, stream);
                    if go_away {
                        conn.graceful_shutdown();
                    }
                    match how {
                        Reply::Ok => answer(&mut respond, 200, Some(Bytes::from_static(b"ok"))),
                        Reply::Refuse => respond.send_reset(h2::Reason::REFUSED_STREAM),
                        Reply::Hold => held.push(respond),
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_going_away_every_50_requests_costs_the_engine_no_errors() {
    // Many connections' worth: each ended after its 50th stream.
    let target = serve_streams(|_, stream| (Reply::Ok, stream == 50)).await;
    let requests = run_without_errors(target, 4).await;
    assert!(requests > 200, "{requests} requests");
}

/// A closed run of `streams` streams over 2 connections for 1 s against `target`: its
/// requests, having asserted that every one was a 2xx and none an error.
async fn run_without_errors(target: String, streams: u32) -> u64 {
    use iohr_domain::RunStatus;
    use iohr_domain::load::LoadSpec;

    let spec = serde_json::json!({"operations": [{"path": "/"}], "model": "closed",
        "connections": 2, "streams": streams, "duration": "1s", "http": "2"});
    let plan = LoadSpec::from_json(&spec)
        .and_then(|s| s.plan())
        .expect("plan");
    let (tx, _rx) = crate::frames::FrameSender::channel();
    let context = crate::run_context::RunContext::<()>::new(target, tx);
    let outcome = tokio::time::timeout(Duration::from_secs(30), crate::load::run(plan, &context))
        .await
        .expect("the run ends");
    assert_eq!(outcome.status, RunStatus::Passed, "{:?}", outcome.reason);
    let result = &outcome.result;
    let requests = result["requests"].as_u64().expect("requests");
    assert_eq!(
        result["responses"]["2xx"].as_u64(),
        Some(requests),
        "{result}"
    );
    let errors: u64 = result["errors"]
        .as_object()
        .map_or(0, |e| e.values().filter_map(|v| v.as_u64()).sum());
    assert_eq!(errors, 0, "{result}");
    requests
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_the_server_refused_are_sent_again_not_counted_as_errors() {
    // The 10th stream of the first two connections (one per group of streams) refused:
    // it is sent once more. The engine resends once, so a resent request must not be
    // refused again: it goes on its group's connection, the same one as a later stream
    // or, after that one's GOAWAY (after 20), a new one that refuses nothing. Refusing the
    // 10th stream of every connection could refuse a resent one again, when a slow
    // worker's resend came 10th on a new connection.
    static REFUSED: AtomicUsize = AtomicUsize::new(0);
    let target = serve_streams(|connection, stream| {
        let how = if stream == 10 && connection < 2 {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            Reply::Refuse
        } else {
            Reply::Ok
        };
        (how, stream == 20)
    })
    .await;
    let requests = run_without_errors(target, 4).await;
    assert!(requests > 200, "{requests} requests");
    assert_eq!(
        REFUSED.load(Ordering::Relaxed),
        2,
        "both connections refused one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_connection_whose_requests_time_out_is_replaced() {
    use iohr_domain::load::LoadSpec;

    let spec = serde_json::json!({"operations": [{"path": "/"}], "model": "closed",
        "connections": 1, "streams": 4, "duration": "1s", "timeout": "200ms", "http": "2"});
    let plan = LoadSpec::from_json(&spec)
        .and_then(|s| s.plan())
        .expect("plan");
    let (tx, _rx) = crate::frames::FrameSender::channel();
    // The first connection never answers; later ones do.
    let target = serve_streams(|connection, _| {
        let how = if connection == 0 {
            Reply::Hold
        } else {
            Reply::Ok
        };
        (how, false)
    })
    .await;
    let context = crate::run_context::RunContext::<()>::new(target, tx);
    let outcome = tokio::time::timeout(Duration::from_secs(30), crate::load::run(plan, &context))
        .await
        .expect("the run ends");
    let result = &outcome.result;
    // The first requests time out on the stalled connection; the rest go on a new one.
    assert!(result["errors"]["timeout"].as_u64() >= Some(1), "{result}");
    assert!(result["responses"]["2xx"].as_u64() > Some(50), "{result}");
}

// The client against servers of raw frames: what a correct server never sends, and how
// our GOAWAY for it goes out.

/// A loopback listener whose connections take few bytes unread: a client's writes back
/// up as soon as the server stops reading.
async fn small_buffer_listener() -> (TcpListener, std::net::SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("receive buffer");
    socket.bind(([127, 0, 0, 1], 0).into()).expect("bind");
    let listener = socket.listen(1).expect("listen");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

/// The next connection, its client preface read.
async fn accept_raw(listener: &TcpListener) -> TcpStream {
    let (mut socket, _) = listener.accept().await.expect("accept");
    let mut preface = [0; 24];
    socket.read_exact(&mut preface).await.expect("preface");
    assert_eq!(&preface[..], frame::PREFACE);
    socket
}

fn raw_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::Head {
        len: payload.len() as u32,
        kind,
        flags,
        stream,
    }
    .write(&mut out);
    out.extend_from_slice(payload);
    out
}

/// A server's SETTINGS, the largest stream window in it, and the connection's window
/// raised to the largest: a request's whole body is queued at once.
fn wide_open_settings() -> Vec<u8> {
    let mut out = Vec::new();
    frame::settings(
        &mut out,
        &[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 0x7fff_ffff)],
    );
    frame::window_update(&mut out, 0, 0x7fff_ffff - 65_535);
    out
}

/// Reads the client's frames up to the first that `wanted` takes: its head and payload;
/// None if the connection ended first.
async fn read_until(
    socket: &mut TcpStream,
    wanted: impl Fn(&frame::Head) -> bool,
) -> Option<(frame::Head, Vec<u8>)> {
    loop {
        let mut head = [0; frame::HEAD_LEN];
        socket.read_exact(&mut head).await.ok()?;
        let head = frame::Head::parse(&head)?;
        let mut payload = vec![0; head.len as usize];
        socket.read_exact(&mut payload).await.ok()?;
        if wanted(&head) {
            return Some((head, payload));
        }
    }
}

/// The GOAWAY's payload we send: no server stream taken (last stream 0), then `code`.
fn goaway_payload(code: u32) -> Vec<u8> {
    let mut payload = 0u32.to_be_bytes().to_vec();
    payload.extend_from_slice(&code.to_be_bytes());
    payload
}

/// Waits, bounded (5 s), for the connection's driver to end: it holds the only other
/// reference to the state.
async fn driver_ended(conn: &H2Conn) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while Arc::strong_count(&conn.shared) > 1 {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

#[tokio::test]
async fn our_goaway_goes_out_behind_a_write_the_server_had_not_read() {
    let (listener, addr) = small_buffer_listener().await;
    let server = tokio::spawn(async move {
        let mut socket = accept_raw(&listener).await;
        socket
            .write_all(&wide_open_settings())
            .await
            .expect("settings");
        // The request's HEADERS, then nothing read: its 1 MiB body backs up in the client.
        read_until(&mut socket, |h| h.kind == frame::HEADERS)
            .await
            .expect("a request");
        let short_ping = raw_frame(frame::PING, 0, 0, &[0; 7]);
        socket.write_all(&short_ping).await.expect("bad frame");
        let goaway = read_until(&mut socket, |h| h.kind == frame::GOAWAY).await;
        let after = socket.read(&mut [0; 1]).await.map_err(|e| e.kind());
        (goaway.map(|(_, payload)| payload), after)
    });
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_send_buffer_size(4096).expect("send buffer");
    let tcp = socket.connect(addr).await.expect("connect");
    let conn = H2Conn::handshake(Stream::Plain(tcp))
        .await
        .expect("client handshake");
    let mut sender = conn.clone();
    let body = Bytes::from(vec![b'x'; 1 << 20]);
    let request = tokio::spawn(async move { sender.send(&block("POST", "/"), &body).await });
    let (goaway, after) = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server is done in time")
        .expect("server task");
    assert_eq!(goaway, Some(goaway_payload(frame::FRAME_SIZE_ERROR)));
    assert_eq!(after, Ok(0), "the client closes after its GOAWAY");
    assert_eq!(request.await.expect("request task"), Err(Failure::Protocol));
    assert!(driver_ended(&conn).await, "the driver ended");
}

#[tokio::test]
async fn a_server_that_never_closes_after_our_goaway_holds_the_driver_only_for_the_linger() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let mut socket = accept_raw(&listener).await;
        socket
            .write_all(&wide_open_settings())
            .await
            .expect("settings");
        // Our SETTINGS acknowledged: the client's handshake is over, its driver runs.
        read_until(&mut socket, |h| {
            h.kind == frame::SETTINGS && h.flags & frame::ACK != 0
        })
        .await
        .expect("settings acknowledged");
        let priority_on_stream_0 = raw_frame(frame::PRIORITY, 0, 0, &[0; 5]);
        socket
            .write_all(&priority_on_stream_0)
            .await
            .expect("bad frame");
        let goaway = read_until(&mut socket, |h| h.kind == frame::GOAWAY).await;
        // Kept open and never read again.
        (socket, goaway.map(|(_, payload)| payload))
    });
    let conn = connect(addr).await;
    let (_held, goaway) = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server is done in time")
        .expect("server task");
    assert_eq!(goaway, Some(goaway_payload(frame::PROTOCOL_ERROR)));
    // The server's side still open: the driver gives up at the linger's end.
    let waited = tokio::time::Instant::now();
    assert!(driver_ended(&conn).await, "the driver ended");
    assert!(
        waited.elapsed() < 2 * CLOSE_LINGER,
        "{:?}",
        waited.elapsed()
    );
}

#[tokio::test]
async fn a_server_whose_first_frame_is_not_settings_is_sent_a_goaway() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let mut socket = accept_raw(&listener).await;
        let ping = raw_frame(frame::PING, 0, 0, &[0; 8]);
        socket.write_all(&ping).await.expect("ping");
        read_until(&mut socket, |h| h.kind == frame::GOAWAY)
            .await
            .map(|(_, payload)| payload)
    });
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let outcome = H2Conn::handshake(Stream::Plain(tcp)).await;
    assert_eq!(outcome.map(|_| ()), Err(Failure::Protocol));
    let goaway = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server is done in time")
        .expect("server task");
    assert_eq!(goaway, Some(goaway_payload(frame::PROTOCOL_ERROR)));
}
