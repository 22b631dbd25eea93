//! Tests of the HTTP/1.1 driver against a hyper server and raw byte servers on 127.0.0.1.

use super::*;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::service::service_fn;
use hyper::{HeaderMap, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn full(text: &'static str) -> BoxBody {
    Full::new(Bytes::from_static(text.as_bytes())).boxed()
}

/// What the test server answers: by path.
async fn answer(request: Request<Incoming>) -> Result<Response<BoxBody>, Infallible> {
    let path = request.uri().path().to_string();
    // Read the request's body so the connection stays in step.
    let _ = request.into_body().collect().await;
    let response = match path.as_str() {
        "/chunked" => {
            let mut trailers = HeaderMap::new();
            trailers.insert("x-checksum", hyper::header::HeaderValue::from_static("abc"));
            let frames = vec![
                Ok(Frame::data(Bytes::from_static(b"first chunk;"))),
                Ok(Frame::data(Bytes::from(vec![b'x'; 40_000]))),
                Ok(Frame::data(Bytes::from_static(b"last"))),
                Ok(Frame::trailers(trailers)),
            ];
            let body = StreamBody::new(futures_util::stream::iter(frames));
            Response::builder()
                .header("trailer", "x-checksum")
                .body(BodyExt::boxed(body))
        }
        "/empty" => Response::builder()
            .status(StatusCode::NO_CONTENT)
            .body(full("")),
        "/close" => Response::builder()
            .header("connection", "close")
            .body(full("bye")),
        "/large" => Response::builder().body(Full::new(Bytes::from(vec![b'y'; 100_000])).boxed()),
        _ => Response::builder().body(full("hello")),
    };
    Ok(response.unwrap_or_else(|_| Response::new(full(""))))
}

/// A hyper HTTP/1.1 server on 127.0.0.1; counts the connections it accepted.
async fn server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(answer))
                    .await;
            });
        }
    });
    (addr, accepted)
}

/// A raw server that answers every connection's first request with `bytes`, then
/// closes.
async fn raw_server(bytes: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let _ = stream.write_all(bytes).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n").into_bytes()
}

async fn connect(addr: SocketAddr) -> H1Conn<Stream> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    H1Conn::new(Stream::Plain(tcp))
}

/// What a GET gets from a server that answers `bytes` and closes.
async fn answer_to(bytes: &'static [u8]) -> Result<u16, Failure> {
    let mut conn = connect(raw_server(bytes).await).await;
    conn.send(&get("/"), &Method::GET).await
}

#[tokio::test]
async fn content_length_bodies_are_read_to_their_end() {
    let (addr, accepted) = server().await;
    let mut conn = connect(addr).await;
    assert_eq!(conn.send(&get("/"), &Method::GET).await, Ok(200));
    // A body larger than the buffer, then a small one: still in step.
    assert_eq!(conn.send(&get("/large"), &Method::GET).await, Ok(200));
    assert_eq!(conn.send(&get("/"), &Method::GET).await, Ok(200));
    assert!(conn.is_reusable());
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_post_with_a_body_is_answered() {
    let (addr, _) = server().await;
    let mut conn = connect(addr).await;
    let request = b"POST /post HTTP/1.1\r\nhost: test\r\ncontent-length: 7\r\n\r\npayload".to_vec();
    assert_eq!(conn.send(&request, &Method::POST).await, Ok(200));
    assert_eq!(conn.send(&get("/"), &Method::GET).await, Ok(200));
}

#[tokio::test]
async fn chunked_bodies_with_trailers_are_read_to_their_end() {
    let (addr, accepted) = server().await;
    let mut conn = connect(addr).await;
    for _ in 0..3 {
        assert_eq!(conn.send(&get("/chunked"), &Method::GET).await, Ok(200));
    }
    assert_eq!(conn.send(&get("/"), &Method::GET).await, Ok(200));
    assert!(conn.is_reusable());
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn chunked_bodies_split_anywhere_are_read() {
    // Every byte in its own read: each state waits for the rest.
    let body = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nx-t: 1\r\n\r\n";
    let (client, mut server) = tokio::io::duplex(1);
    tokio::spawn(async move {
        // The whole request first, a byte at a time, so the writes cannot cross.
        let mut request = Vec::new();
        let mut byte = [0u8; 1];
        while !request.ends_with(b"\r\n\r\n") && server.read(&mut byte).await.is_ok_and(|n| n == 1)
        {
            request.push(byte[0]);
        }
        let _ = server.write_all(body).await;
        let _ = server.read(&mut byte).await;
    });
    let mut conn = H1Conn::new(client);
    assert_eq!(conn.send(&get("/"), &Method::GET).await, Ok(200));
    assert!(conn.is_reusable());
}

#[tokio::test]
async fn a_head_request_reads_no_body() {
    let (addr, accepted) = server().await;
    let mut conn = connect(addr).await;
    let head = b"HEAD /large HTTP/1.1\r\nhost: test\r\n\r\n";
    // The answer declares 100,000 bytes it does not send: waiting for them would hang.
    assert_eq!(conn.send(head, &Method::HEAD).await, Ok(200));
    assert_eq!(conn.send(&get("/"), &Method::GET).await, Ok(200));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_204_has_no_body() {
    let (addr, accepted) = server().await;
    let mut conn = connect(addr).await;
    assert_eq!(conn.send(&get("/empty"), &Method::GET).await, Ok(204));
    assert_eq!(conn.send(&get("/"), &Method::GET).await, Ok(200));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn connection_close_is_not_reused_and_the_next_request_reconnects() {
    let (addr, accepted) = server().await;
    let mut conn = connect(addr).await;
    assert_eq!(conn.send(&get("/close"), &Method::GET).await, Ok(200));
    assert!(!conn.is_reusable());
    // Through the engine's connection: it reconnects for the next request.
    let endpoint = super::super::client::Endpoint::new(
        &format!("http://{addr}"),
        iohr_domain::load::HttpVersion::Http1,
        None,
    )
    .expect("endpoint");
    let op: iohr_domain::load::Operation =
        serde_json::from_value(serde_json::json!({"path": "/close"})).expect("operation");
    let op = super::super::request::PreparedOp::new(&op, &endpoint, &|r| {
        Err(crate::secrets::EnvRefusal::NotSet(r.written()))
    })
    .expect("operation");
    let mut conn = endpoint.connect().await.expect("connect");
    assert_eq!(conn.send(&op, 1).await, Ok(200));
    assert!(!conn.is_reusable());
    let mut conn = endpoint.connect().await.expect("connect");
    assert_eq!(conn.send(&op, 2).await, Ok(200));
    assert!(!conn.is_reusable());
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_informational_answer_is_skipped() {
    let addr =
        raw_server(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await;
    let mut conn = connect(addr).await;
    assert_eq!(conn.send(&get("/"), &Method::GET).await, Ok(200));
}

#[tokio::test]
async fn a_body_to_the_close_is_read_and_the_connection_not_reused() {
    let addr = raw_server(b"HTTP/1.1 200 OK\r\n\r\nall of this, then the close").await;
    let mut conn = connect(addr).await;
    assert_eq!(conn.send(&get("/"), &Method::GET).await, Ok(200));
    assert!(!conn.is_reusable());
}

#[tokio::test]
async fn a_close_mid_body_is_a_reset() {
    assert_eq!(
        answer_to(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part").await,
        Err(Failure::Reset)
    );
    assert_eq!(
        answer_to(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel").await,
        Err(Failure::Reset)
    );
    assert_eq!(
        answer_to(b"HTTP/1.1 200 OK\r\ncontent-le").await,
        Err(Failure::Reset)
    );
}

#[tokio::test]
async fn garbage_is_a_protocol_failure() {
    assert_eq!(
        answer_to(b"this is not HTTP at all\r\n\r\n").await,
        Err(Failure::Protocol)
    );
    assert_eq!(
        answer_to(b"HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\nx").await,
        Err(Failure::Protocol)
    );
    assert_eq!(
        answer_to(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n").await,
        Err(Failure::Protocol)
    );
}

#[tokio::test]
async fn keep_alive_carries_many_requests_on_one_connection() {
    let (addr, accepted) = server().await;
    let mut conn = connect(addr).await;
    for i in 0..1000 {
        let path = ["/", "/chunked", "/empty", "/large"][i % 4];
        let status = conn.send(&get(path), &Method::GET).await;
        assert!(matches!(status, Ok(200 | 204)), "{i}: {status:?}");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[test]
fn chunk_sizes_parse_as_hex_with_extensions() {
    assert_eq!(chunk_size(b"1a"), Ok(26));
    assert_eq!(chunk_size(b"FF ; name=value"), Ok(255));
    assert_eq!(chunk_size(b"0"), Ok(0));
    assert_eq!(chunk_size(b""), Err(Failure::Protocol));
    assert_eq!(chunk_size(b"12x"), Err(Failure::Protocol));
    assert_eq!(chunk_size(b"11111111111111111"), Err(Failure::Protocol));
}

/// One connection whose far end answers each request with the next of `answers`.
async fn conn_answering(answers: Vec<&'static [u8]>) -> H1Conn<tokio::io::DuplexStream> {
    let (near, mut far) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        for answer in answers {
            // Every request here ends its head and has no body.
            let mut request = Vec::new();
            let mut byte = [0u8; 1];
            while !request.ends_with(b"\r\n\r\n") {
                match far.read(&mut byte).await {
                    Ok(1) => request.push(byte[0]),
                    _ => return,
                }
            }
            if far.write_all(answer).await.is_err() {
                return;
            }
        }
        let _ = far.read(&mut [0u8; 1]).await;
    });
    H1Conn::new(near)
}

#[tokio::test]
async fn a_repeated_head_is_read_as_its_first_reading_was() {
    let ok: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    let mut conn = conn_answering(vec![
        ok,
        ok,
        // A longer length after the same prefix: parsed, not taken for the last head.
        b"HTTP/1.1 200 OK\r\ncontent-length: 20\r\n\r\n01234567890123456789",
        ok,
        // The same bytes to a HEAD request: no body, whatever GET's reading said.
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n",
        ok,
        b"HTTP/1.1 503 Busy\r\ncontent-length: 2\r\n\r\nno",
        b"HTTP/1.1 503 Busy\r\ncontent-length: 2\r\n\r\nno",
        ok,
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
    ])
    .await;
    let head = b"HEAD / HTTP/1.1\r\nhost: test\r\n\r\n";
    let expected = [
        (Method::GET, 200),
        (Method::GET, 200),
        (Method::GET, 200),
        (Method::GET, 200),
        (Method::HEAD, 200),
        (Method::GET, 200),
        (Method::GET, 503),
        (Method::GET, 503),
        (Method::GET, 200),
    ];
    for (i, (method, status)) in expected.into_iter().enumerate() {
        let request = if method == Method::HEAD {
            head.to_vec()
        } else {
            get("/")
        };
        let outcome = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            conn.send(&request, &method),
        )
        .await
        .expect("answered");
        assert_eq!(outcome, Ok(status), "answer {i}");
        assert!(conn.is_reusable(), "answer {i} leaves the stream in step");
    }
    assert_eq!(conn.send(&get("/"), &Method::GET).await, Ok(200));
    assert!(
        !conn.is_reusable(),
        "connection: close is kept as it was parsed"
    );
}
