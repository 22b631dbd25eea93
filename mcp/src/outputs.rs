//! The tools' structured outputs. Records are REST's, passed through as objects (their
//! fields are documented in docs/api.md); what the tools add is typed here.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};

/// A REST answer that is a JSON object (a run record, a list page, the agents).
pub type Record = Map<String, Value>;

#[derive(Debug, Serialize, JsonSchema)]
pub struct Waited {
    /// The run record as it stands.
    pub run: Record,
    /// True when `timeout_s` passed with the run still queued or running.
    pub timed_out: bool,
    /// Whole seconds waited.
    pub waited_s: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Compared {
    /// regressed, improved or unchanged.
    pub verdict: String,
    /// The difference lines, e.g. `p99 total: 12ms -> 16ms (+33%)`.
    pub differences: Vec<String>,
    /// What `iohr reliability compare` would exit with: 0 unchanged or improved, 1
    /// regressed (2, refused, is a tool error with the API's code).
    pub exit_code: u8,
    /// The exit code in words.
    pub meaning: String,
    /// The whole comparison as `GET /v1/reliability/compare` answers it.
    pub comparison: Record,
}
