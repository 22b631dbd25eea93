//! The exporter task: the buffer the link fills, routed to one sender per account.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Offered;
use super::encode::{RunMeta, Second, request};
use crate::outbox::deliveries::{Clients, FailureClass, HttpsClient, error_chain};
use crate::outbox::egress::EgressPolicy;
use crate::store::{OtlpTarget, Store};

/// Frames waiting for the exporter to route them (a few seconds of many runs).
pub const BUFFER_FRAMES: usize = 4096;
/// Seconds waiting for one account's sender: about a minute of a few runs.
pub const ACCOUNT_FRAMES: usize = 512;
/// Seconds in one export request.
pub const BATCH_FRAMES: usize = 64;
/// The longest wait for a collector's answer.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// How long an account's export (and the egress exceptions) are trusted before read again.
pub const REFRESH: Duration = Duration::from_secs(2);
/// Runs whose details are kept; beyond, the cache starts again.
const MAX_RUNS: usize = 10_000;

/// One second for a sender, with where it goes.
struct Queued {
    second: Second,
    target: Arc<OtlpTarget>,
    client: HttpsClient,
}

struct Sender {
    queue: mpsc::Sender<Queued>,
    /// Seconds dropped because `queue` was full, not yet added to the account's count.
    overflow: Arc<AtomicU64>,
}

struct Router {
    store: Store,
    clients: Clients,
    runs: HashMap<String, Option<Arc<RunMeta>>>,
    exports: HashMap<String, (Instant, Option<Arc<OtlpTarget>>)>,
    /// [`super::changes`] when `exports` was last trusted whole.
    changes: u64,
    senders: HashMap<String, Sender>,
}

/// Runs until `shutdown`: installs the buffer [`super::offer`] fills and routes it.
pub async fn run(store: Store, policy: Arc<EgressPolicy>, shutdown: CancellationToken) {
    let clients = match Clients::new(policy) {
        Ok(clients) => clients,
        Err(error) => {
            tracing::error!(%error, "the OpenTelemetry export cannot start: TLS configuration");
            return;
        }
    };
    let (tx, mut rx) = mpsc::channel(BUFFER_FRAMES);
    super::install(Some(tx));
    let mut router = Router {
        store,
        clients,
        runs: HashMap::new(),
        exports: HashMap::new(),
        changes: super::changes(),
        senders: HashMap::new(),
    };
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            offered = rx.recv() => match offered {
                Some(offered) => router.route(offered).await,
                None => break,
            },
            _ = tick.tick() => router.refresh().await,
            _ = shutdown.cancelled() => break,
        }
    }
    super::install(None);
    super::set_any_export(false);
}

impl Router {
    async fn refresh(&mut self) {
        match self.store.any_otlp_export().await {
            Ok(any) => super::set_any_export(any),
            Err(error) => tracing::warn!(%error, "reading whether any account exports failed"),
        }
        let now = Instant::now();
        self.exports.retain(|_, (read, _)| now - *read < REFRESH);
        match self.store.all_egress_allow().await {
            Ok(stored) => {
                if let Err(error) = self.clients.refresh(stored) {
                    tracing::error!(%error, "building the OpenTelemetry export's clients failed");
                }
            }
            Err(error) => tracing::warn!(%error, "reading the egress exceptions failed"),
        }
        self.senders.retain(|_, sender| !sender.queue.is_closed());
    }

    async fn run_meta(&mut self, run_id: &str) -> Option<Arc<RunMeta>> {
        if let Some(meta) = self.runs.get(run_id) {
            return meta.clone();
        }
        let meta = match self.store.run(run_id).await {
            Ok(row) => row.map(|run| {
                Arc::new(RunMeta {
                    run_id: run.id,
                    account_id: run.account_id,
                    kind: run.kind.as_str().to_string(),
                    scenario_id: run.scenario_id,
                    scenario_version: run.scenario_version,
                    environment: run.environment,
                    share_of: run.share_of.map(|(whole, _)| whole),
                })
            }),
            Err(error) => {
                tracing::warn!(run = %run_id, %error, "reading a run to export its frame failed");
                return None;
            }
        };
        if self.runs.len() >= MAX_RUNS {
            self.runs.clear();
        }
        self.runs.insert(run_id.to_string(), meta.clone());
        meta
    }

    /// The account's export, read again after [`REFRESH`]; `Err` when the store failed.
    async fn export(&mut self, account_id: &str) -> Result<Option<Arc<OtlpTarget>>, ()> {
        let changes = super::changes();
        if changes != self.changes {
            self.exports.clear();
            self.changes = changes;
        }
        if let Some((read, target)) = self.exports.get(account_id)
            && read.elapsed() < REFRESH
        {
            return Ok(target.clone());
        }
        match self.store.otlp_export_target(account_id).await {
            Ok(target) => {
                let target = target.map(Arc::new);
                self.exports
                    .insert(account_id.to_string(), (Instant::now(), target.clone()));
                Ok(target)
            }
            Err(error) => {
                tracing::warn!(account = %account_id, %error, "reading an account's OpenTelemetry export failed");
                Err(())
            }
        }
    }

    async fn route(&mut self, offered: Offered) {
        let Some(run) = self.run_meta(&offered.run_id).await else {
            return;
        };
        let target = match self.export(&run.account_id).await {
            Ok(Some(target)) => target,
            Ok(None) => return,
            Err(()) => {
                crate::metrics::otlp_dropped(FailureClass::Internal.as_str(), 1);
                return;
            }
        };
        let load = match serde_json::from_value(offered.payload) {
            Ok(load) => load,
            Err(error) => {
                tracing::warn!(run = %offered.run_id, %error, "a load frame does not read as one: not exported");
                return;
            }
        };
        let queued = Queued {
            second: Second {
                run: run.clone(),
                agent: offered.agent,
                at_ms: offered.at_ms,
                load,
            },
            target,
            client: self.clients.of(&run.account_id).clone(),
        };
        let sender = self
            .senders
            .entry(run.account_id.clone())
            .or_insert_with(|| spawn_sender(self.store.clone(), run.account_id.clone()));
        match sender.queue.try_send(queued) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                sender.overflow.fetch_add(1, Ordering::Relaxed);
                crate::metrics::otlp_dropped("buffer_full", 1);
            }
            Err(mpsc::error::TrySendError::Closed(queued)) => {
                let sender = spawn_sender(self.store.clone(), run.account_id.clone());
                let _ = sender.queue.try_send(queued);
                self.senders.insert(run.account_id.clone(), sender);
            }
        }
    }
}

fn spawn_sender(store: Store, account_id: String) -> Sender {
    let (queue, rx) = mpsc::channel(ACCOUNT_FRAMES);
    let overflow = Arc::new(AtomicU64::new(0));
    tokio::spawn(send_loop(store, account_id, rx, overflow.clone()));
    Sender { queue, overflow }
}

/// One account's sender: a batch at a time, each sent once; ends when the router drops
/// its queue (the controller stops).
async fn send_loop(
    store: Store,
    account_id: String,
    mut rx: mpsc::Receiver<Queued>,
    overflow: Arc<AtomicU64>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH_FRAMES {
            match rx.try_recv() {
                Ok(queued) => batch.push(queued),
                Err(_) => break,
            }
        }
        let frames = batch.len() as u64;
        let outcome = send(&batch).await;
        let (exported, mut dropped, failure) = match outcome {
            Ok(()) => (frames, 0, None),
            Err(class) => (0, frames, Some(class.as_str())),
        };
        crate::metrics::otlp_exported(exported);
        if let Some(reason) = failure {
            crate::metrics::otlp_dropped(reason, dropped);
        }
        dropped += overflow.swap(0, Ordering::Relaxed);
        if let Err(error) = store
            .record_otlp_outcome(&account_id, exported, dropped, failure)
            .await
        {
            tracing::warn!(account = %account_id, %error, "recording an OpenTelemetry export's outcome failed");
        }
    }
}

/// The metrics path under an endpoint (as `OTEL_EXPORTER_OTLP_ENDPOINT` is read).
pub fn metrics_url(endpoint: &str) -> String {
    format!("{}/v1/metrics", endpoint.trim_end_matches('/'))
}

async fn send(batch: &[Queued]) -> Result<(), FailureClass> {
    let Some(last) = batch.last() else {
        return Ok(());
    };
    // The newest target: a changed export applies from the next batch at the latest.
    let target = &last.target;
    let seconds: Vec<Second> = batch.iter().map(|q| q.second.clone()).collect();
    let body = prost::Message::encode_to_vec(&request(&seconds));
    let mut builder = Request::post(metrics_url(&target.endpoint))
        .header("content-type", "application/x-protobuf")
        .header(
            "user-agent",
            concat!("iohr-controller/", env!("CARGO_PKG_VERSION")),
        );
    for (name, value) in &target.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let request = builder
        .body(Full::new(Bytes::from(body)))
        .map_err(|_| FailureClass::Internal)?;
    let failed = |class: FailureClass, detail: String| {
        tracing::info!(endpoint = %target.endpoint, frames = batch.len(), class = class.as_str(), %detail, "an OpenTelemetry export failed: its points are dropped");
        class
    };
    match tokio::time::timeout(TIMEOUT, last.client.request(request)).await {
        Err(_) => Err(failed(
            FailureClass::Timeout,
            format!("no answer within {TIMEOUT:?}"),
        )),
        Ok(Err(error)) => Err(failed(FailureClass::of(&error), error_chain(&error))),
        Ok(Ok(response)) if response.status().is_success() => Ok(()),
        Ok(Ok(response)) => Err(failed(
            FailureClass::HttpStatus,
            format!("the collector answered {}", response.status()),
        )),
    }
}
