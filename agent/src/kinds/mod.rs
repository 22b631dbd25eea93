//! What the agent executes, one module per kind. Each kind takes its parsed spec, the
//! run's target and a frame sender, honours the cancel token, and returns an [`Outcome`].
//!
//! The HTTP kinds share private helpers: `target` (the base URL), `headers`
//! (`${env:NAME}` values and scrubbing them), `bounded` (deadline and cancel) and
//! `describe` (an error on one line).

mod bounded;
pub mod capacity;
pub mod checks;
mod describe;
pub mod faults;
pub(crate) mod headers;
pub mod scenario;
mod sender;
mod target;
#[cfg(test)]
mod test_server;

use iohr_domain::{FrameKind, RunStatus};
use serde_json::Value;

pub use sender::FrameSender;

/// A frame an executor emits; the link numbers it and streams it to the controller.
#[derive(Debug, Clone)]
pub struct NewFrame {
    pub kind: FrameKind,
    pub data: serde_json::Value,
}

/// How a run ended on the agent.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: RunStatus,
    pub reason: Option<String>,
    pub result: serde_json::Value,
    pub units_spent: u64,
}

impl Outcome {
    /// An `error` with no result: the run could not measure anything it can report.
    pub fn error(reason: String, units_spent: u64) -> Outcome {
        Outcome {
            status: RunStatus::Error,
            reason: Some(reason),
            result: serde_json::Value::Null,
            units_spent,
        }
    }
}

/// Sends a frame, waiting while the agent's bound on unacknowledged frames is full.
pub async fn emit(frames: &FrameSender, kind: FrameKind, data: Value) {
    frames.send(NewFrame { kind, data }).await
}

/// A result value as JSON; `null` (and a warning) if it cannot be written.
pub fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "could not serialise a result value");
        Value::Null
    })
}
