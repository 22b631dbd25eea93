//! `GET /metrics` on `iohr-agent run --metrics-addr`: a small hyper HTTP/1.1 listener (the
//! agent has no other), no token, like the controller's. Bounded: a few connections at
//! once, each given a few seconds for its request's head and a deadline for all of it.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::{CONTENT, EVENTS, KindLabel};
use crate::execute::SUPPORTED_KINDS;
use crate::leases::Leases;

/// Scrapers served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 8;
/// For a request's head to arrive.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// For a whole connection, kept alive or not.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `/metrics` on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, leases: Leases, shutdown: CancellationToken) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => tokio::select! {
                    _ = shutdown.cancelled() => return,
                    accepted = listener.accept() => accepted.map(|a| (a, permit)),
                },
                Err(_) => return, // never closed
            },
        };
        let ((stream, _), permit) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors and the like: wait a moment rather than spin.
                tracing::warn!(%error, "metrics listener: accept failed");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let leases = leases.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| answer(request, leases.clone()));
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Ok(Err(error)) = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await {
                tracing::debug!(%error, "metrics connection ended");
            }
            drop(permit);
        });
    }
}

async fn answer(
    request: Request<Incoming>,
    leases: Leases,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, text: String| {
        let mut response = Response::new(Full::new(Bytes::from(text)));
        *response.status_mut() = status;
        response
    };
    if request.uri().path() != "/metrics" {
        return Ok(reply(
            StatusCode::NOT_FOUND,
            "not found: try /metrics\n".into(),
        ));
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = reply(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
        response
            .headers_mut()
            .insert(ALLOW, hyper::header::HeaderValue::from_static("GET, HEAD"));
        return Ok(response);
    }
    Ok(match render(&leases) {
        Ok(text) => {
            let mut response = reply(StatusCode::OK, text);
            response.headers_mut().insert(
                CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(CONTENT),
            );
            response
        }
        Err(error) => {
            tracing::warn!(%error, "a metrics scrape failed");
            reply(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("metrics unavailable: {error}\n"),
            )
        }
    })
}

/// The scrape: every metric, read now.
pub fn render(leases: &Leases) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::with_prefix("iohr_agent");
    let census = leases.census();

    // Every kind this agent runs has its series, 0 when none: absent and zero read alike
    // to no alert.
    let held = Family::<KindLabel, Gauge>::default();
    for kind in SUPPORTED_KINDS {
        let count = census.by_kind.get(kind).copied().unwrap_or(0);
        held.get_or_create(&KindLabel::of(*kind))
            .set(i64::try_from(count).unwrap_or(i64::MAX));
        drop(EVENTS.leases_taken.get_or_create(&KindLabel::of(*kind)));
        drop(EVENTS.executor_errors.get_or_create(&KindLabel::of(*kind)));
    }
    registry.register("leases", "Leases held now, by run kind", held);
    registry.register(
        "leases_taken",
        "Leases taken (offers accepted), by run kind",
        EVENTS.leases_taken.clone(),
    );
    registry.register(
        "executor_errors",
        "Runs ended error on this agent (a failed executor, or stopped after losing the controller), by run kind",
        EVENTS.executor_errors.clone(),
    );

    let frames = Gauge::<i64>::default();
    frames.set(i64::try_from(census.unacked_frames).unwrap_or(i64::MAX));
    registry.register(
        "unacknowledged_frames",
        "Frames held until the controller acknowledges them",
        frames,
    );
    let bytes = Gauge::<i64>::default();
    bytes.set(i64::try_from(leases.frame_bytes()).unwrap_or(i64::MAX));
    registry.register_with_unit(
        "unacknowledged_frame",
        "What the unacknowledged frames hold, against --frame-buffer-mib",
        Unit::Bytes,
        bytes,
    );
    let limit = Gauge::<i64>::default();
    limit.set(i64::from(leases.frame_buffer_limit()));
    registry.register_with_unit(
        "frame_buffer_limit",
        "The bound on unacknowledged frames (--frame-buffer-mib)",
        Unit::Bytes,
        limit,
    );

    registry.register(
        "requests_sent",
        "Requests sent to targets (load engine, checks, scenarios, fault probes)",
        EVENTS.requests_sent.clone(),
    );
    registry.register(
        "link_connected",
        "1 while the link to the controller is up, else 0",
        EVENTS.link_connected.clone(),
    );
    registry.register(
        "link_reconnects",
        "Times the agent dialled the controller again after its link failed, ended or could not be made",
        EVENTS.reconnects.clone(),
    );
    registry.register(
        "certificate_renewals",
        "Certificates renewed over the link and installed",
        EVENTS.renewals.clone(),
    );
    registry.register(
        "certificate_renewal_failures",
        "Renewals that failed (tried again before the certificate expires)",
        EVENTS.renewal_failures.clone(),
    );
    registry.register_with_unit(
        "certificate_expiry_timestamp",
        "When the agent's certificate stops working, in Unix time",
        Unit::Seconds,
        EVENTS.certificate_expiry.clone(),
    );

    // The agent's own spans (`iohr_telemetry`), counted by the exporter itself.
    let spans_exported = Counter::<u64>::default();
    spans_exported.inc_by(iohr_telemetry::exported());
    registry.register(
        "otlp_spans_exported",
        "The agent's own spans accepted by the operator's OTLP collector",
        spans_exported,
    );
    let spans_dropped = Counter::<u64>::default();
    spans_dropped.inc_by(iohr_telemetry::dropped());
    registry.register(
        "otlp_spans_dropped",
        "The agent's own spans dropped: the export queue was full or the collector failed",
        spans_dropped,
    );

    let mut text = String::new();
    encode(&mut text, &registry)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use iohr_domain::RunKind;

    use super::*;

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series} in {text}"))
            .parse()
            .expect("a number")
    }

    #[test]
    fn the_scrape_counts_the_lease_table_by_kind() {
        let leases = Leases::with_frame_buffer(4096);
        leases.insert("l1", 1, "run-1", RunKind::Checks);
        leases.insert("l2", 1, "run-2", RunKind::Checks);
        leases.push_frame("l1", "started", "{}".into());
        leases.push_frame("l2", "started", "{}".into());
        leases.push_frame("l2", "check", "{}".into());
        let text = render(&leases).expect("render");
        assert_eq!(value(&text, "iohr_agent_leases{kind=\"checks\"}"), 2.0);
        assert_eq!(value(&text, "iohr_agent_leases{kind=\"load\"}"), 0.0);
        assert_eq!(value(&text, "iohr_agent_unacknowledged_frames"), 3.0);
        assert!(value(&text, "iohr_agent_unacknowledged_frame_bytes") > 0.0);
        assert_eq!(value(&text, "iohr_agent_frame_buffer_limit_bytes"), 4096.0);
        // Counters are process-wide (other tests take leases too): at least these two.
        assert!(value(&text, "iohr_agent_leases_taken_total{kind=\"checks\"}") >= 2.0);
        leases.ack("l2", 2, 2);
        let text = render(&leases).expect("render");
        assert_eq!(value(&text, "iohr_agent_unacknowledged_frames"), 1.0);
        assert!(!text.contains("run-1"), "a run id in the scrape: {text}");
        assert!(
            text.ends_with("# EOF\n"),
            "OpenMetrics ends with EOF: {text}"
        );
    }

    /// One request on a connection of its own; the whole answer as text.
    async fn ask(addr: std::net::SocketAddr, head: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let request = format!("{head}\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
            .await
            .expect("an answer within 10 s")
            .expect("read");
        answer
    }

    #[tokio::test]
    async fn the_listener_serves_get_metrics_only_and_stops_on_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shutdown = CancellationToken::new();
        let served = tokio::spawn(serve(listener, Leases::default(), shutdown.clone()));
        let ok = ask(addr, "GET /metrics HTTP/1.1").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.contains(CONTENT), "{ok}");
        assert!(ok.contains("iohr_agent_link_connected"), "{ok}");
        let head = ask(addr, "HEAD /metrics HTTP/1.1").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(!head.contains("# EOF"), "no body for HEAD: {head}");
        let elsewhere = ask(addr, "GET /other HTTP/1.1").await;
        assert!(elsewhere.starts_with("HTTP/1.1 404"), "{elsewhere}");
        let post = ask(addr, "POST /metrics HTTP/1.1").await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        assert!(
            post.to_ascii_lowercase().contains("allow: get, head"),
            "{post}"
        );
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .expect("stopped within 10 s")
            .expect("no panic");
    }

    #[test]
    fn a_run_ended_error_counts_once_for_its_kind() {
        let before = EVENTS
            .executor_errors
            .get_or_create(&KindLabel::of(RunKind::Replay))
            .get();
        let leases = Leases::default();
        leases.insert("l1", 1, "run-1", RunKind::Replay);
        leases.complete("l1", "error", "executor failed: test", "null".into(), 0);
        leases.insert("l2", 1, "run-2", RunKind::Replay);
        leases.complete("l2", "passed", "", "null".into(), 0);
        let after = EVENTS
            .executor_errors
            .get_or_create(&KindLabel::of(RunKind::Replay))
            .get();
        assert_eq!(after - before, 1);
    }
}
