//! One API connection: TLS handshake (bounded), then HTTP/1.1 or HTTP/2 until the peer
//! leaves, the connection is idle too long, or the controller shuts down.
//!
//! Idle means no request in flight: a request counts from its head being read until its
//! answer's body is done or dropped, so a live stream (SSE, `WatchRun`) is never idle.
//! A connection that has not sent a request head within the header timeout is closed
//! outright (this covers the protocol sniffing of h2c, which hyper does not time out); one
//! idle for the idle timeout after its last answer is asked to close gracefully (HTTP/2:
//! GOAWAY). HTTP/1.1 also has hyper's header read timeout, which bounds a trickled head
//! and the wait between keep-alive requests.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, HttpBody};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// What every connection task shares.
pub(super) struct Serving {
    pub builder: auto::Builder<TokioExecutor>,
    pub router: Router,
    pub tls: Option<TlsAcceptor>,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub shutdown: CancellationToken,
}

/// Requests in flight on one connection, and whether it has had any.
#[derive(Clone, Copy, Default)]
struct Activity {
    in_flight: usize,
    served: bool,
}

/// Serves one accepted connection; `permit` is given back when it closes.
pub(super) async fn serve(serving: Arc<Serving>, stream: TcpStream, permit: OwnedSemaphorePermit) {
    let _permit = permit;
    match &serving.tls {
        None => http(&serving, stream).await,
        Some(acceptor) => {
            let handshake = tokio::time::timeout(serving.header_timeout, acceptor.accept(stream));
            let stream = tokio::select! {
                done = handshake => match done {
                    Ok(Ok(stream)) => stream,
                    // Not TLS, a certificate the client refused, or too slow: its problem.
                    Ok(Err(error)) => {
                        tracing::debug!(%error, "API TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!("API TLS handshake timed out");
                        return;
                    }
                },
                _ = serving.shutdown.cancelled() => return,
            };
            http(&serving, stream).await;
        }
    }
}

async fn http<I>(serving: &Serving, io: I)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (activity, mut changes) = watch::channel(Activity::default());
    let service = Tracked {
        router: serving.router.clone(),
        activity: Arc::new(activity),
    };
    let mut conn = pin!(
        serving
            .builder
            .serve_connection_with_upgrades(TokioIo::new(io), service)
    );
    let mut closing = false;
    loop {
        let now = *changes.borrow_and_update();
        // Idle: none yet (the header timeout), idle after answers (the idle timeout), or
        // asked to close and still open with nothing in flight (the header timeout again,
        // so a peer that ignores GOAWAY cannot keep its permit).
        let limit = match (closing, now.served) {
            (false, false) | (true, _) => serving.header_timeout,
            (false, true) => serving.idle_timeout,
        };
        let idle = async {
            if now.in_flight == 0 {
                tokio::time::sleep(limit).await
            } else {
                std::future::pending().await
            }
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "API connection ended with an error");
                }
                return;
            }
            // A request began or ended: measure idleness again from now.
            changed = changes.changed() => {
                if changed.is_err() {
                    // The service went with the connection; let it finish.
                    let _ = conn.as_mut().await;
                    return;
                }
            }
            _ = idle => {
                if closing || !now.served {
                    tracing::debug!(closing, "API connection idle: closed");
                    return;
                }
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            _ = serving.shutdown.cancelled(), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
        }
    }
}

/// The router as a hyper service that counts its requests in flight.
#[derive(Clone)]
struct Tracked {
    router: Router,
    activity: Arc<watch::Sender<Activity>>,
}

impl hyper::service::Service<Request<Incoming>> for Tracked {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let guard = InFlight::start(self.activity.clone());
        let answer = self.router.clone().oneshot(request.map(Body::new));
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| {
                Body::new(Guarded {
                    body,
                    _guard: guard,
                })
            }))
        })
    }
}

/// One request in flight, until dropped.
struct InFlight(Arc<watch::Sender<Activity>>);

impl InFlight {
    fn start(activity: Arc<watch::Sender<Activity>>) -> InFlight {
        activity.send_modify(|a| {
            a.in_flight += 1;
            a.served = true;
        });
        InFlight(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0
            .send_modify(|a| a.in_flight = a.in_flight.saturating_sub(1));
    }
}

/// An answer's body that keeps its request in flight until it is done or dropped.
struct Guarded {
    body: Body,
    _guard: InFlight,
}

impl HttpBody for Guarded {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
