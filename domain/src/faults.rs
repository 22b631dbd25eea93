//! The `faults` kind: what an experiment names and what an agent may touch.
//!
//! - [`fault`]: every fault an agent can apply, with what it touches.
//! - [`confirmation`]: a person's confirmation of a production fault run.
//! - [`experiment`]: the experiment in the Chaos Toolkit's shape, its providers and probes.
//! - [`tolerance`]: what a steady-state probe's output must be.
//! - [`journal`]: what happened, with the Chaos Toolkit's field names.
//! - [`policy`]: what the agent's configuration lets a run touch.

pub mod confirmation;
pub mod experiment;
pub mod fault;
pub mod journal;
pub mod policy;
pub mod tolerance;

pub use experiment::{Activity, Experiment, ProbeOutput, Provider};
pub use fault::{Fault, Touch};
pub use journal::{Journal, JournalStatus};
pub use policy::Policy;
pub use tolerance::Tolerance;
