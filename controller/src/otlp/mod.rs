//! OpenTelemetry export: each account may name an OTLP/HTTP endpoint
//! (`PUT /v1/reliability/otlp`, `store/otlp_exports.rs`) its runs' per-second figures are
//! sent to as OTLP metrics ([`encode`]), protobuf over HTTP, to `ENDPOINT/v1/metrics`.
//!
//! Off the run's path: the agent link hands each stored `load` frame to [`offer`], which
//! only tries to put it in a bounded buffer (never waits); the exporter task
//! ([`export::run`], one per controller, each exporting the frames its own agents sent)
//! finds the run's account and its export, and queues the second for that account's
//! sender, bounded too, which sends batches one at a time. A slow, absent or failing
//! collector therefore fills a buffer and loses export points, never a frame (frames are
//! stored before they are offered) and never the run's time. What is not delivered is
//! counted: `iohr_otlp_dropped_frames_total{reason}` on `/metrics`, and per account on
//! its export resource (`dropped_frames`, `last_error`). Sent once, never retried: a
//! second's figures arriving late help no dashboard.
//!
//! Where exports may go is the webhooks' policy (`outbox/egress.rs`): checked on the
//! URL when it is set, and on every address at connection.

pub mod encode;
pub mod export;

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::mpsc;

use crate::store::StoredFrame;

/// One stored `load` frame, as offered by the link.
#[derive(Debug)]
pub struct Offered {
    pub agent: String,
    pub run_id: String,
    pub at_ms: i64,
    pub payload: serde_json::Value,
}

/// The exporter's buffer, installed by [`export::run`] while it runs.
static BUFFER: RwLock<Option<mpsc::Sender<Offered>>> = RwLock::new(None);
/// Whether any account has an export: when none has, offering costs one load.
static ANY_EXPORT: AtomicBool = AtomicBool::new(false);
/// Bumped when this controller's API changes an export, so the exporter reads it again at
/// once (other replicas read it within `export::REFRESH`).
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// An account's export was set, replaced or deleted through this controller: the next
/// frame of any account is exported by what is stored now.
pub fn export_changed(set: bool) {
    if set {
        set_any_export(true);
    }
    CHANGES.fetch_add(1, Ordering::Relaxed);
}

fn changes() -> u64 {
    CHANGES.load(Ordering::Relaxed)
}

/// Hands an agent's newly stored frames to the exporter, without waiting: a full buffer
/// drops the frame's export (counted), never the frame.
pub fn offer(agent: &str, frames: &[StoredFrame]) {
    if !ANY_EXPORT.load(Ordering::Relaxed) {
        return;
    }
    let buffer = BUFFER
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(buffer) = buffer.as_ref() else {
        return;
    };
    for frame in frames.iter().filter(|f| f.kind == "load") {
        let offered = Offered {
            agent: agent.to_string(),
            run_id: frame.run_id.clone(),
            at_ms: frame.at,
            payload: frame.payload.clone(),
        };
        if let Err(mpsc::error::TrySendError::Full(_)) = buffer.try_send(offered) {
            crate::metrics::otlp_dropped("buffer_full", 1);
        }
    }
}

fn install(buffer: Option<mpsc::Sender<Offered>>) {
    *BUFFER
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = buffer;
}

fn set_any_export(any: bool) {
    ANY_EXPORT.store(any, Ordering::Relaxed);
}
