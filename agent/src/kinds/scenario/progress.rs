//! The live counts of the phase in progress, and the task that sends them as a `load`
//! frame once a second.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use iohr_domain::FrameKind;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::send::Sent;
use crate::kinds::{FrameSender, emit};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Warmup,
    Load,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Warmup => "warmup",
            Phase::Load => "load",
        }
    }
}

#[derive(Debug, Default)]
struct Tally {
    phase: Option<Phase>,
    planned: usize,
    requests: u64,
    by_status: BTreeMap<u16, u64>,
    errors: BTreeMap<&'static str, u64>,
}

/// Shared by the workers (which count) and the ticker (which reports).
#[derive(Debug, Clone, Default)]
pub struct Progress(Arc<Mutex<Tally>>);

impl Progress {
    fn with<T>(&self, f: impl FnOnce(&mut Tally) -> T) -> T {
        // A worker that panicked mid-count leaves counts that are still counts.
        let mut tally = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut tally)
    }

    /// Starts counting a phase from zero.
    pub fn start(&self, phase: Phase, planned: usize) {
        self.with(|t| {
            *t = Tally {
                phase: Some(phase),
                planned,
                ..Tally::default()
            }
        });
    }

    pub fn count(&self, sent: &Sent) {
        self.with(|t| {
            t.requests += 1;
            match (sent.error, sent.status) {
                (None, Some(status)) => *t.by_status.entry(status).or_insert(0) += 1,
                (error, _) => {
                    let kind = error.map_or("unknown", |e| e.as_str());
                    *t.errors.entry(kind).or_insert(0) += 1;
                }
            }
        });
    }

    /// The `load` frame's data; none before the first phase starts.
    fn snapshot(&self) -> Option<Value> {
        self.with(|t| {
            let phase = t.phase?;
            Some(json!({
                "phase": phase.as_str(),
                "requests": t.requests,
                "planned": t.planned,
                "by_status": t.by_status,
                "errors": t.errors,
            }))
        })
    }

    /// Sends a `load` frame every second until `stop`; await the handle so that no frame
    /// follows the run's last.
    pub fn report_every_second(
        &self,
        frames: FrameSender,
        stop: CancellationToken,
    ) -> JoinHandle<()> {
        let progress = self.clone();
        tokio::spawn(async move {
            let period = Duration::from_secs(1);
            let mut every = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = every.tick() => {
                        if let Some(data) = progress.snapshot() {
                            emit(&frames, FrameKind::Load, data).await;
                        }
                    }
                }
            }
        })
    }
}
