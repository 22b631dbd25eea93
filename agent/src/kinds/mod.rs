//! What the agent executes, one module per kind. Each kind takes its parsed spec and the
//! run's [`RunContext`] (target, options, frame sender, cancel token, `${env:NAME}`
//! lookup, faults configuration), honours the cancel token, and returns an [`Outcome`].
//! [`registry`] is the one place that lists the kinds.
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
