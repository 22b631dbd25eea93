//! The API's listener: accepts TCP connections (at most `max_connections` at once), wraps
//! them in TLS when configured and serves the router on each with HTTP/1.1 and HTTP/2
//! (h2c, or ALPN `h2` over TLS).
//!
//! Why not `axum::serve`: it has no bound on open connections and no timeouts, so idle
//! connections pile up until the process runs out of descriptors and a real client can
//! no longer get in. Here every connection holds a permit; at the limit the loop stops
//! accepting, so new clients wait in the kernel's backlog (not refused) until a permit is
//! free, and the timeouts in `connection.rs` make sure idle holders give theirs back.

mod connection;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// How long the TLS handshake and the first request's head may take, and the wait for
/// the next request's head on an HTTP/1.1 keep-alive connection.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection (HTTP/2 above all) may stay open with no request in flight.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Open API connections at once; more wait in the listen backlog.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// HTTP/2 pings on a connection with streams open, so a dead peer of a long stream
/// (SSE over h2, `WatchRun`) is found.
const H2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
const H2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The limits and the TLS configuration of the API listener.
#[derive(Clone)]
pub struct ApiListenerConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl Default for ApiListenerConfig {
    fn default() -> Self {
        ApiListenerConfig {
            tls: None,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Serves `router` on `listener` until `shutdown`; then stops accepting, asks every open
/// connection to finish (HTTP/1.1: after its current answer; HTTP/2: GOAWAY) and returns
/// when all of them have closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    config: ApiListenerConfig,
    shutdown: CancellationToken,
) {
    let max = u32::try_from(config.max_connections.max(1)).unwrap_or(u32::MAX);
    let permits = Arc::new(Semaphore::new(max as usize));
    let shared = Arc::new(connection::Serving {
        builder: builder(&config),
        router,
        tls: config.tls.map(TlsAcceptor::from),
        header_timeout: config.header_timeout,
        idle_timeout: config.idle_timeout,
        shutdown: shutdown.clone(),
    });
    loop {
        // A permit first: at the limit the next connection stays in the backlog.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = shutdown.cancelled() => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.cancelled() => break,
        };
        match accepted {
            Ok((stream, _peer)) => {
                // Small answers must not wait for Nagle's algorithm.
                let _ = stream.set_nodelay(true);
                tokio::spawn(connection::serve(shared.clone(), stream, permit));
            }
            Err(error) if is_per_connection(&error) => {}
            Err(error) => {
                // Out of descriptors and the like: back off rather than spin, as
                // axum::serve does; the timeouts free descriptors meanwhile.
                tracing::error!(%error, "API accept failed");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = shutdown.cancelled() => break,
                }
            }
        }
    }
    drop(listener);
    // Every connection holds a permit until it closes: all of them back means all closed.
    let _ = permits.acquire_many(max).await;
}

/// Errors of one connection that was reset before it was accepted: not the listener's.
fn is_per_connection(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        error.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

fn builder(config: &ApiListenerConfig) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT);
    builder
}

#[cfg(test)]
mod tests;
