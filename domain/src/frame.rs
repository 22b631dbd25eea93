//! Frames: the numbered events of a run. The frame number is the SSE event id.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameKind {
    Started,
    Phase,
    Load,
    Timeline,
    /// The agent's own state, once a second while it sends load ([`crate::stress`]).
    Stress,
    Check,
    Finding,
    Finished,
}

impl FrameKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FrameKind::Started => "started",
            FrameKind::Phase => "phase",
            FrameKind::Load => "load",
            FrameKind::Timeline => "timeline",
            FrameKind::Stress => "stress",
            FrameKind::Check => "check",
            FrameKind::Finding => "finding",
            FrameKind::Finished => "finished",
        }
    }

    pub fn parse(s: &str) -> Option<FrameKind> {
        [
            FrameKind::Started,
            FrameKind::Phase,
            FrameKind::Load,
            FrameKind::Timeline,
            FrameKind::Stress,
            FrameKind::Check,
            FrameKind::Finding,
            FrameKind::Finished,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// One stored frame, as the API serves it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    pub run_id: String,
    pub number: u64,
    pub kind: String,
    pub at: String,
    pub data: serde_json::Value,
}
