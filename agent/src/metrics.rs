//! The agent's Prometheus metrics, served as OpenMetrics text on `run --metrics-addr`
//! ([`endpoint`]), like the controller's `GET /metrics`.
//!
//! Two sorts, as on the controller. Events counted where they happen (a lease taken, a
//! run ended `error`, requests sent, the link's state and redials) live here in one
//! process-wide set, like any Prometheus client's default registry. States (leases held,
//! frames unacknowledged) are read from the lease table at each scrape. Labels are run
//! kinds only: a bounded set, never a run id.
//!
//! This file is a leaf (prometheus-client, iohr-domain and std): the load engine counts
//! its requests here without knowing the lease table.

use std::sync::LazyLock;

use iohr_domain::RunKind;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

pub mod endpoint;

pub const CONTENT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabel {
    pub kind: &'static str,
}

impl KindLabel {
    pub(crate) fn of(kind: RunKind) -> KindLabel {
        KindLabel {
            kind: kind.as_str(),
        }
    }
}

pub(crate) struct Events {
    pub leases_taken: Family<KindLabel, Counter>,
    pub executor_errors: Family<KindLabel, Counter>,
    pub requests_sent: Counter,
    pub link_connected: Gauge,
    pub reconnects: Counter,
    pub renewals: Counter,
    pub renewal_failures: Counter,
    /// When the certificate the agent connects with stops working, Unix seconds.
    pub certificate_expiry: Gauge,
}

pub(crate) static EVENTS: LazyLock<Events> = LazyLock::new(|| Events {
    leases_taken: Family::default(),
    executor_errors: Family::default(),
    requests_sent: Counter::default(),
    link_connected: Gauge::default(),
    reconnects: Counter::default(),
    renewals: Counter::default(),
    renewal_failures: Counter::default(),
    certificate_expiry: Gauge::default(),
});

/// A lease of `kind` was taken into the table.
pub fn lease_taken(kind: RunKind) {
    EVENTS
        .leases_taken
        .get_or_create(&KindLabel::of(kind))
        .inc();
}

/// A run of `kind` ended `error` on this agent (its executor failed, or the agent stopped
/// it after losing the controller).
pub fn executor_error(kind: RunKind) {
    EVENTS
        .executor_errors
        .get_or_create(&KindLabel::of(kind))
        .inc();
}

/// `count` requests went out to a target. The load engine adds each second's at once, so
/// its workers' hot path stays free of a shared counter.
pub fn requests_sent(count: u64) {
    if count > 0 {
        EVENTS.requests_sent.inc_by(count);
    }
}

/// The link to the controller is up (welcomed) while this lives.
#[must_use = "the link counts as connected while the guard lives"]
pub struct Connected(());

impl Connected {
    pub fn now() -> Connected {
        EVENTS.link_connected.set(1);
        Connected(())
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        EVENTS.link_connected.set(0);
    }
}

/// The link failed, ended or could not be made, and the agent will dial again.
pub fn reconnecting() {
    EVENTS.reconnects.inc();
}

/// The certificate on disk stops working at `not_after` (Unix seconds).
pub fn certificate_expires(not_after_secs: i64) {
    EVENTS.certificate_expiry.set(not_after_secs);
}

/// A renewal installed a new certificate, or failed (and will be tried again).
pub fn renewed(ok: bool) {
    if ok {
        EVENTS.renewals.inc();
    } else {
        EVENTS.renewal_failures.inc();
    }
}
