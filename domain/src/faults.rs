//! The `faults` kind: what an experiment names and what an agent may touch.
//!
//! - [`fault`]: every fault an agent can apply, with what it touches.
//! - [`confirmation`]: a person's confirmation of a production fault run.

pub mod confirmation;
pub mod fault;

pub use fault::{Fault, Touch};
