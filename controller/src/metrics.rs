//! `GET /metrics`: the controller's Prometheus metrics, OpenMetrics text, no token (on the
//! API address, or on `serve --metrics-addr` alone). On the API address, which every
//! tenant reaches, no series names an account: `iohr_queued_runs` is one total there,
//! and by account only on `--metrics-addr`, which the operator's scrapers reach.
//!
//! Exemplars: on `--metrics-addr` only (they name runs, which the API address never
//! does), and only to a scrape that asks for OpenMetrics (`Accept:
//! application/openmetrics-text`, as Prometheus does with exemplar storage on), the
//! dispatch latency and the store's append time carry, per bucket, the id of the last
//! run observed in it (`run_id`). Any other scrape reads the same text without them.
//!
//! Two sorts. Events counted where they happen (a lease offered, frames stored) live in
//! one process-wide set, like any Prometheus client's default registry. States (runs by
//! kind and status, queues, connected agents, viewers) are read at each scrape from the
//! store, the dispatcher and the hub, so they are true after a restart. Labels are kinds,
//! statuses and account names: bounded sets, never a run id.

use std::sync::LazyLock;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::Shared;

pub const CONTENT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The exemplar of an observation: the run it was about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunExemplar {
    run_id: String,
}

/// A histogram kept twice: plain, and with exemplars, each scrape reading the one it
/// asked for (prometheus_client writes a histogram's exemplars whenever it has some).
#[derive(Clone)]
struct Observed {
    plain: Histogram,
    exemplars: HistogramWithExemplars<RunExemplar>,
}

impl Observed {
    fn new(buckets: impl Iterator<Item = f64>) -> Observed {
        let buckets: Vec<f64> = buckets.collect();
        Observed {
            plain: Histogram::new(buckets.iter().copied()),
            exemplars: HistogramWithExemplars::new(buckets.into_iter()),
        }
    }

    fn observe(&self, value: f64, run_id: &str) {
        self.plain.observe(value);
        self.exemplars.observe(
            value,
            Some(RunExemplar {
                run_id: run_id.to_string(),
            }),
            Some(std::time::SystemTime::now()),
        );
    }

    fn register(&self, registry: &mut Registry, name: &str, help: &str, exemplars: bool) {
        if exemplars {
            registry.register_with_unit(name, help, Unit::Seconds, self.exemplars.clone());
        } else {
            registry.register_with_unit(name, help, Unit::Seconds, self.plain.clone());
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

/// Why an OpenTelemetry export's frames were dropped: a buffer was full, or the classes
/// of a failed send (`outbox::deliveries::FailureClass`).
const DROP_REASONS: [&str; 7] = [
    "buffer_full",
    "denied",
    "connect_failed",
    "timeout",
    "tls",
    "http_status",
    "internal",
];

struct Events {
    dispatch: Observed,
    frames_stored: Counter,
    frame_append: Observed,
    otlp_exported: Counter,
    otlp_dropped: Family<ReasonLabel, Counter>,
}

static EVENTS: LazyLock<Events> = LazyLock::new(|| {
    let otlp_dropped = Family::<ReasonLabel, Counter>::default();
    for reason in DROP_REASONS {
        let _ = otlp_dropped.get_or_create(&ReasonLabel {
            reason: reason.to_string(),
        });
    }
    Events {
        // 1 ms to about 65 s: a lease is offered in milliseconds unless the run waited its turn.
        dispatch: Observed::new(exponential_buckets(0.001, 2.0, 17)),
        frames_stored: Counter::default(),
        // 0.1 ms to about 1.6 s.
        frame_append: Observed::new(exponential_buckets(0.0001, 2.0, 15)),
        otlp_exported: Counter::default(),
        otlp_dropped,
    }
});

/// `count` load frames were accepted by an OpenTelemetry collector.
pub fn otlp_exported(count: u64) {
    if count > 0 {
        EVENTS.otlp_exported.inc_by(count);
    }
}

/// `count` load frames' export was dropped, for `reason` (one of [`DROP_REASONS`]).
pub fn otlp_dropped(reason: &str, count: u64) {
    EVENTS
        .otlp_dropped
        .get_or_create(&ReasonLabel {
            reason: reason.to_string(),
        })
        .inc_by(count);
}

/// A lease was offered for `run_id`: the time since the run was accepted (its id is a
/// UUIDv7, whose first 48 bits are that moment in Unix milliseconds).
pub fn lease_offered(run_id: &str) {
    let Ok(id) = uuid::Uuid::parse_str(run_id) else {
        return;
    };
    let Some(created) = id.get_timestamp() else {
        return;
    };
    let (secs, nanos) = created.to_unix();
    let created = Duration::new(secs, nanos);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    EVENTS
        .dispatch
        .observe(now.saturating_sub(created).as_secs_f64(), run_id);
}

/// `count` new frames of `run_id` were stored in one append that took `took`.
pub fn frames_stored(run_id: &str, count: usize, took: Duration) {
    EVENTS.frames_stored.inc_by(count as u64);
    EVENTS.frame_append.observe(took.as_secs_f64(), run_id);
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    kind: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AccountLabel {
    account: String,
}

/// Whether the scrape asked for OpenMetrics (the only format with exemplars).
fn asks_openmetrics(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|media| {
            media.split(';').next().is_some_and(|t| {
                t.trim()
                    .eq_ignore_ascii_case("application/openmetrics-text")
            })
        })
}

/// The scrape on `--metrics-addr`: every metric, read now, with account names, and
/// exemplars when OpenMetrics is asked for.
pub async fn serve(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    answer(render(&shared, true, asks_openmetrics(&headers)).await)
}

/// The scrape on the API address: the same, without a series (or exemplar) that names an
/// account or a run.
pub async fn serve_public(State(shared): State<Shared>) -> Response {
    answer(render(&shared, false, false).await)
}

fn answer(rendered: Result<String, String>) -> Response {
    match rendered {
        Ok(text) => ([(CONTENT_TYPE, CONTENT)], text).into_response(),
        Err(error) => {
            tracing::warn!(%error, "a metrics scrape failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("metrics unavailable: {error}\n"),
            )
                .into_response()
        }
    }
}

async fn render(shared: &Shared, by_account: bool, exemplars: bool) -> Result<String, String> {
    let mut registry = Registry::with_prefix("iohr");

    let runs = Family::<RunLabels, Gauge>::default();
    for (kind, status, count) in shared.store.run_counts().await.map_err(|e| e.to_string())? {
        runs.get_or_create(&RunLabels { kind, status }).set(count);
    }
    registry.register("runs", "Runs in the store, by kind and status", runs);

    let by_name = shared
        .store
        .queued_by_account()
        .await
        .map_err(|e| e.to_string())?;
    if by_account {
        let queued = Family::<AccountLabel, Gauge>::default();
        for (account, count) in by_name {
            queued.get_or_create(&AccountLabel { account }).set(count);
        }
        registry.register(
            "queued_runs",
            "Runs waiting for an agent, by account",
            queued,
        );
    } else {
        let queued = Gauge::<i64>::default();
        queued.set(by_name.iter().map(|(_, count)| count).sum());
        registry.register(
            "queued_runs",
            "Runs waiting for an agent (by account on --metrics-addr only)",
            queued,
        );
    }

    let agents = Gauge::<i64>::default();
    let online = shared
        .dispatcher
        .online()
        .await
        .map_err(|e| e.to_string())?;
    agents.set(online.len() as i64);
    registry.register("agents_connected", "Agents holding a link now", agents);

    let viewers = Gauge::<i64>::default();
    viewers.set(shared.hub.viewer_count() as i64);
    registry.register(
        "viewers",
        "Viewers of live runs now (SSE, WebSocket, gRPC and console streams)",
        viewers,
    );

    EVENTS.dispatch.register(
        &mut registry,
        "dispatch_latency",
        "From a run's acceptance to its lease's offer",
        exemplars,
    );
    registry.register(
        "frames_stored",
        "Frames stored (their rate is frames per second)",
        EVENTS.frames_stored.clone(),
    );
    EVENTS.frame_append.register(
        &mut registry,
        "store_frame_append",
        "The store's time for one append of an agent's frame batch",
        exemplars,
    );
    registry.register(
        "otlp_exported_frames",
        "Load frames accepted by accounts' OpenTelemetry collectors",
        EVENTS.otlp_exported.clone(),
    );
    registry.register(
        "otlp_dropped_frames",
        "Load frames whose OpenTelemetry export was dropped, by reason: a full buffer, or the failed send's class",
        EVENTS.otlp_dropped.clone(),
    );

    // The controller's own spans (`iohr_telemetry`), counted by the exporter itself.
    let spans_exported = Counter::<u64>::default();
    spans_exported.inc_by(iohr_telemetry::exported());
    registry.register(
        "otlp_spans_exported",
        "The controller's own spans accepted by the operator's OTLP collector",
        spans_exported,
    );
    let spans_dropped = Counter::<u64>::default();
    spans_dropped.inc_by(iohr_telemetry::dropped());
    registry.register(
        "otlp_spans_dropped",
        "The controller's own spans dropped: the export queue was full or the collector failed",
        spans_dropped,
    );

    let mut text = String::new();
    encode(&mut text, &registry).map_err(|e| e.to_string())?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_latency_reads_the_run_ids_time_and_ignores_other_ids() {
        let before = EVENTS.dispatch.plain.clone();
        lease_offered("not-a-uuid");
        lease_offered(&uuid::Uuid::new_v4().to_string()); // v4: no time in it
        lease_offered(&uuid::Uuid::now_v7().to_string());
        let mut registry = Registry::default();
        registry.register_with_unit("d", "d", Unit::Seconds, before);
        let mut text = String::new();
        encode(&mut text, &registry).expect("encode");
        let count: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("d_seconds_count "))
            .expect("a count")
            .parse()
            .expect("a number");
        assert!(count >= 1.0, "{text}");
    }
}
