//! Finished spans to the collector: a bounded queue the span's ender only tries to fill
//! (never waits: a full queue drops the span and counts it), and one task that sends
//! batches over OTLP/HTTP protobuf, one at a time, each sent once. A slow, absent or
//! failing collector therefore costs a run nothing but the spans it loses, counted in
//! [`dropped`].

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanProcessor};
use tokio::sync::{mpsc, oneshot};

use crate::config::Config;

/// Spans waiting to be sent: minutes of a busy controller's runs (a few spans each).
pub const QUEUE_SPANS: usize = 4096;
/// Spans in one export request.
pub const BATCH_SPANS: usize = 512;
/// How long a span waits for others to share its request.
pub const LINGER: Duration = Duration::from_millis(500);
/// The longest wait for a collector's answer.
pub const TIMEOUT: Duration = Duration::from_secs(10);

static QUEUE: OnceLock<mpsc::Sender<SpanData>> = OnceLock::new();
/// Asks of the sender to send what is queued now; each answered once it has.
static FLUSHES: OnceLock<mpsc::Sender<oneshot::Sender<()>>> = OnceLock::new();
static DROPPED: AtomicU64 = AtomicU64::new(0);
static EXPORTED: AtomicU64 = AtomicU64::new(0);

/// Spans lost: the queue was full, or the collector failed or did not answer.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Spans the collector took.
pub fn exported() -> u64 {
    EXPORTED.load(Ordering::Relaxed)
}

/// Whether spans are exported at all: when not, nothing is made.
pub fn enabled() -> bool {
    QUEUE.get().is_some()
}

/// Queues a finished span without waiting.
pub fn offer(span: SpanData) {
    if let Some(queue) = QUEUE.get()
        && queue.try_send(span).is_err()
    {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Sends what is queued now, waiting at most `within`: a process about to exit would
/// otherwise lose its last runs' spans, which wait up to [`LINGER`] for company. Without
/// export, returns at once.
pub async fn flush(within: Duration) {
    let Some(flushes) = FLUSHES.get() else {
        return;
    };
    let (done, flushed) = oneshot::channel();
    if flushes.try_send(done).is_ok() {
        let _ = tokio::time::timeout(within, flushed).await;
    }
}

/// The SDK's end of the queue: what `tracing` spans become when they end.
#[derive(Debug)]
pub(crate) struct Bounded;

impl SpanProcessor for Bounded {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        offer(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("the OTLP exporter was started twice")]
    Twice,
    #[error("the system's TLS roots: {0}")]
    Tls(std::io::Error),
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Installs the queue and starts its sender on the current runtime.
pub(crate) fn start(config: &Config, resource: &Resource) -> Result<(), StartError> {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(StartError::Tls)?
        .https_or_http()
        .enable_http1()
        .build();
    let client: HttpsClient = Client::builder(TokioExecutor::new()).build(connector);
    let (tx, rx) = mpsc::channel(QUEUE_SPANS);
    QUEUE.set(tx).map_err(|_| StartError::Twice)?;
    let (ask, flushes) = mpsc::channel(4);
    FLUSHES.set(ask).map_err(|_| StartError::Twice)?;
    let sender = Sender {
        config: config.clone(),
        resource: ResourceAttributesWithSchema::from(resource),
        client,
    };
    tokio::spawn(sender.run(rx, flushes));
    Ok(())
}

struct Sender {
    config: Config,
    resource: ResourceAttributesWithSchema,
    client: HttpsClient,
}

impl Sender {
    async fn run(
        self,
        mut rx: mpsc::Receiver<SpanData>,
        mut flushes: mpsc::Receiver<oneshot::Sender<()>>,
    ) {
        loop {
            // A span, or a flush asked of an empty-handed sender.
            // Biased to the spans: those queued before a flush was asked go in its batch.
            let (mut batch, mut flush) = tokio::select! {
                biased;
                span = rx.recv() => match span {
                    Some(span) => (vec![span], None),
                    None => return,
                },
                Some(done) = flushes.recv() => (Vec::new(), Some(done)),
            };
            if flush.is_none() {
                let linger = tokio::time::sleep(LINGER);
                tokio::pin!(linger);
                while batch.len() < BATCH_SPANS {
                    tokio::select! {
                        biased;
                        next = rx.recv() => match next {
                            Some(span) => batch.push(span),
                            None => break,
                        },
                        Some(done) = flushes.recv() => {
                            flush = Some(done);
                            break;
                        }
                        _ = &mut linger => break,
                    }
                }
            }
            self.deliver(batch).await;
            if let Some(done) = flush {
                // Everything queued when the flush was asked, in batches.
                loop {
                    let mut batch = Vec::new();
                    while batch.len() < BATCH_SPANS {
                        match rx.try_recv() {
                            Ok(span) => batch.push(span),
                            Err(_) => break,
                        }
                    }
                    if batch.is_empty() {
                        break;
                    }
                    self.deliver(batch).await;
                }
                let _ = done.send(());
            }
        }
    }

    /// Sends `batch` once, counting it exported or dropped.
    async fn deliver(&self, batch: Vec<SpanData>) {
        if batch.is_empty() {
            return;
        }
        let spans = batch.len() as u64;
        match self.send(batch).await {
            Ok(()) => {
                EXPORTED.fetch_add(spans, Ordering::Relaxed);
            }
            Err(why) => {
                let total = DROPPED.fetch_add(spans, Ordering::Relaxed) + spans;
                tracing::info!(endpoint = %self.config.endpoint, spans, dropped_total = total, %why, "exporting spans failed: they are dropped");
            }
        }
    }

    async fn send(&self, batch: Vec<SpanData>) -> Result<(), String> {
        let request = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(batch, &self.resource),
        };
        let body = prost::Message::encode_to_vec(&request);
        let mut builder = Request::post(&self.config.endpoint)
            .header("content-type", "application/x-protobuf")
            .header(
                "user-agent",
                format!("{}/{}", self.config.service_name, env!("CARGO_PKG_VERSION")),
            );
        for (name, value) in &self.config.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let request = builder
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(TIMEOUT, self.client.request(request)).await {
            Err(_) => Err(format!("no answer within {TIMEOUT:?}")),
            Ok(Err(error)) => Err(chain(&error)),
            Ok(Ok(response)) if response.status().is_success() => Ok(()),
            Ok(Ok(response)) => Err(format!("the collector answered {}", response.status())),
        }
    }
}

/// An error with its sources: hyper's own says only "client error (Connect)".
fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};

    use super::*;
    use crate::run::spans;
    use crate::run::tests::life;

    /// A collector on loopback answering 200 to every request, each counted.
    fn collector() -> (String, std::sync::Arc<AtomicU64>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let requests = std::sync::Arc::new(AtomicU64::new(0));
        let counted = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut reader = BufReader::new(stream);
                'connection: loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            break 'connection;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0u8; length];
                    if reader.read_exact(&mut body).is_err() {
                        break 'connection;
                    }
                    counted.fetch_add(1, Ordering::Relaxed);
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                    if reader.get_mut().write_all(answer).is_err() {
                        break 'connection;
                    }
                }
            }
        });
        (format!("http://{addr}/v1/traces"), requests)
    }

    /// Spans offered just before a process exits would wait [`LINGER`] for company: a
    /// flush sends them and returns only once the collector has them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flush_returns_once_the_queued_spans_are_sent() {
        let (endpoint, requests) = collector();
        let config = Config {
            endpoint,
            headers: Vec::new(),
            service_name: "flush-test".to_string(),
        };
        start(&config, &Resource::builder_empty().build()).expect("start");
        let life = life(Some(2_000), Some((3_000, 8_000)));
        let made = spans(&life);
        let count = made.len() as u64;
        for span in made {
            offer(span);
        }
        flush(Duration::from_secs(30)).await;
        assert_eq!(
            exported(),
            count,
            "every queued span sent by the flush's return"
        );
        assert_eq!(dropped(), 0);
        assert_eq!(requests.load(Ordering::Relaxed), 1, "in one request");
        // A flush with nothing queued returns as soon as the sender answers.
        flush(Duration::from_secs(30)).await;
        assert_eq!(exported(), count);
    }
}
