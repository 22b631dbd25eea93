//! What the agent executes, one module per kind. Each kind takes its parsed spec, the
//! run's target and a frame sender, honours the cancel token, and returns an [`Outcome`].

pub mod checks;

use iohr_domain::{FrameKind, RunStatus};
use tokio::sync::mpsc;

/// A frame an executor emits; the link numbers it and streams it to the controller.
#[derive(Debug, Clone)]
pub struct NewFrame {
    pub kind: FrameKind,
    pub data: serde_json::Value,
}

pub type FrameSender = mpsc::UnboundedSender<NewFrame>;

/// How a run ended on the agent.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: RunStatus,
    pub reason: Option<String>,
    pub result: serde_json::Value,
    pub units_spent: u64,
}
