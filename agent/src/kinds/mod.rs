//! What the agent executes, one module per kind. Each kind takes its parsed spec and the
//! run's [`RunContext`] (target, options, frame sender, cancel token, `${env:NAME}`
//! lookup, faults configuration), honours the cancel token, and returns an [`Outcome`].
//! The list at the end of this file is the one place that names every kind.
//!
//! Adding a kind: its module `agent/src/kinds/NAME.rs` (and `NAME/` for its parts, such as
//! `NAME/dry_run.rs`) implementing [`registry::Kind`], declared here, and its line in the
//! `kinds!` list.
//!
//! The HTTP kinds share private helpers: `target` (the base URL), `bounded` (deadline
//! and cancel) and `describe` (an error on one line); their headers (`${env:NAME}` values
//! and scrubbing them) are [`crate::request`]'s, as the load engine's are.

mod bounded;
pub mod capacity;
pub mod checks;
mod describe;
pub mod faults;
pub mod load;
pub mod registry;
pub mod replay;
pub mod scenario;
mod target;
#[cfg(test)]
mod test_server;

use serde_json::Value;

pub use crate::frames::{FrameSender, NewFrame, emit};
pub use crate::run_context::{EnvVars, Outcome, TargetOptions};

/// The context every kind runs in: the agent's faults configuration is its `F`.
pub type RunContext = crate::run_context::RunContext<faults::FaultsConfig>;

/// A result value as JSON; `null` (and a warning) if it cannot be written.
pub fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "could not serialise a result value");
        Value::Null
    })
}

// The kinds this agent runs, in the order its hello names them: one line per kind.
registry::kinds! {
    Checks => checks::Checks,
    Load => load::Load,
    Scenario => scenario::Scenario,
    Replay => replay::Replay,
    Faults => faults::Faults,
    Capacity => capacity::Capacity,
}
