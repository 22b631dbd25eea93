//! The agent's plain HTTP request/response client, for the kinds that send requests one
//! at a time and judge each answer: `checks`, `scenario` (a pooled hyper client, Nagle
//! off, that dials only the addresses the agent's target policy allows, [`crate::egress`]),
//! and the faults probes (one HTTP/1.1 connection per probe, so that a probe sees a fault
//! on connecting, and counts as sent once connected; probes go to the run's own fault
//! proxy on loopback, whose upstream the policy checked).
//!
//! Not the load engine's: its hand-written HTTP/1.1 and HTTP/2 drivers (`load::h1`,
//! `load::h2`) have no task, channel or header map per request, which is what makes them
//! match wrk and h2load (docs/benchmarks.md). Nor the fault proxy's
//! upstream, which copies bytes and speaks no HTTP.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body_util::Full;
use hyper::Uri;
use hyper::body::Bytes;
use hyper::client::conn::http1;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use crate::egress::Egress;

/// A pooled client of plain `http://` targets.
pub type HttpClient = Client<EgressConnector, Full<Bytes>>;

/// A pooled client with Nagle off: a request goes out as soon as it is written. The
/// pool's retry of a "canceled" request only moves a request never written (its reused
/// idle connection was found closed): each request still goes out once. Every new
/// connection is resolved and checked against `egress` as it is made.
pub fn pooled(egress: Arc<Egress>) -> HttpClient {
    Client::builder(TokioExecutor::new()).build(EgressConnector { egress })
}

/// hyper's connector for [`pooled`]: TCP (Nagle off) to an address [`Egress`] allows.
/// Not hyper-util's `HttpConnector`, which dials an IP literal without asking its
/// resolver, so a resolver-side check would miss `http://169.254.169.254`.
#[derive(Debug, Clone)]
pub struct EgressConnector {
    egress: Arc<Egress>,
}

type Connecting = Pin<Box<dyn Future<Output = Result<TokioIo<TcpStream>, std::io::Error>> + Send>>;

impl tower_service::Service<Uri> for EgressConnector {
    type Response = TokioIo<TcpStream>;
    type Error = std::io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Connecting {
        let egress = self.egress.clone();
        Box::pin(async move {
            let (host, port) = crate::egress::host_port(&uri.to_string())?;
            let tcp = egress.connect(&host, port).await?;
            let _ = tcp.set_nodelay(true);
            Ok(TokioIo::new(tcp))
        })
    }
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
