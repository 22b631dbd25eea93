//! The `scenario` kind: a list of operations driven against the run's base URL, in a
//! fixed order, and recorded verbatim so that a later run (after a fix) replays it
//! unchanged and the two can be compared.
//!
//! - [`op`]: one operation, `METHOD PATH [COUNT] [BODY]`, and the ops file.
//! - [`spec`]: the spec, its defaults, limits and canonical JSON.
//! - [`identity`]: the User-Agent and traceparent every request carries.
//! - [`plan`](mod@plan): the run-wide sequence numbers (warm-up first, then the load).
//! - [`base_url`]: which base URLs a scenario may drive.
//! - [`command`]: the shell command that replays a scenario unchanged.
//! - [`record`]: the result of a run, its dry-run form and their text lines.
//!
//! This is not [`crate::version`], which versions stored specs of every kind.

pub mod base_url;
pub mod command;
pub mod identity;
pub mod op;
pub mod plan;
pub mod record;
pub mod spec;

pub use base_url::{check_base_url, op_url};
pub use command::{replay_command, shell_quote};
pub use identity::{Identity, IdentityRecord, run8, traceparent, user_agent};
pub use op::{Op, parse_ops_file};
pub use plan::{OpSeqs, PlannedRequest, SeqRange, layout, plan};
pub use record::{
    DryRun, Latency, LoadRecord, OpRecord, PlannedOp, RequestRecord, ScenarioRecord, WarmupRecord,
    utc_seconds,
};
pub use spec::{
    DEFAULT_CONCURRENCY, DEFAULT_COUNT, DEFAULT_PREFIX, DEFAULT_TIMEOUT, DEFAULT_WARMUP,
    MAX_CONCURRENCY, MAX_COUNT, MAX_OPS, MAX_TIMEOUT, MAX_TOTAL_REQUESTS, ScenarioSpec,
    spec_with_ops,
};
