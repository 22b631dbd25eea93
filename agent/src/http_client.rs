//! The agent's plain HTTP request/response client, for the kinds that send requests one
//! at a time and judge each answer: `checks`, `scenario` (a pooled hyper client, Nagle
//! off), and the faults probes (one HTTP/1.1 connection per probe, so that a probe sees a
//! fault on connecting, and counts as sent once connected).
//!
//! Not the load engine's: its hand-written HTTP/1.1 driver (`load::h1`, and hyper's
//! HTTP/2 connection API in `load::client`) has no task, channel or header map per
//! request, which is what makes it match wrk (docs/benchmarks.md). Nor the fault proxy's
//! upstream, which copies bytes and speaks no HTTP.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::client::conn::http1;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

/// A pooled client of plain `http://` targets.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A pooled client with Nagle off: a request goes out as soon as it is written. The
/// pool's retry of a "canceled" request only moves a request never written (its reused
/// idle connection was found closed): each request still goes out once.
pub fn pooled() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("handshake: {0}")]
    Handshake(hyper::Error),
}

/// A new HTTP/1.1 connection to `host:port` (Nagle off), driven by its own task until the
/// sender is dropped.
pub async fn one_connection(
    host: &str,
    port: u16,
) -> Result<http1::SendRequest<Full<Bytes>>, ConnectError> {
    let tcp = TcpStream::connect((host, port))
        .await
        .map_err(ConnectError::Connect)?;
    let _ = tcp.set_nodelay(true);
    let (sender, connection) = http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(ConnectError::Handshake)?;
    tokio::spawn(async move {
        // Its end is seen by the sender.
        let _ = connection.await;
    });
    Ok(sender)
}
