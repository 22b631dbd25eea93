//! Domain code shared by the controller, the agent and the CLI: what a run is, what its
//! kinds and statuses are, the spec of each kind, frames, and the rules every side must
//! agree on (canonical scenario versions, credential-named headers).

pub mod audit;
pub mod capacity;
pub mod checks;
pub mod compare;
pub mod cost;
pub mod duration;
pub mod egress;
pub mod faults;
pub mod finding;
pub mod frame;
pub mod histogram;
pub mod kind;
pub mod load;
pub mod quantile;
pub mod redact;
pub mod replay;
pub mod request;
pub mod run;
pub mod scenario_kind;
pub mod stress;
pub mod summary;
pub mod target;
pub mod text;
pub mod trace;
pub mod version;

pub use frame::{Frame, FrameKind};
pub use run::{Executor, Forge, RunKind, RunRecord, RunStatus, StartedBy, Units};

#[cfg(test)]
mod range_tests;

#[cfg(test)]
mod proptests;
