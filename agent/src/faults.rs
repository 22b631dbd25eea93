//! Faults the agent applies for `faults` runs, and how each is undone.
//!
//! Every fault is written to the ledger with its [`Undo`] before it is applied, so that a
//! restarted agent can undo what a crashed one left open, newest first.
//!
//! - [`proxy`]: the fault proxy (network and HTTP faults) in front of a target's port.
//! - [`host`]: process, host and netem faults behind one entry point: [`process`] (signals
//!   to a pinned process), [`hog`] (CPU and memory hogs, disk fills, in child processes),
//!   [`netem`] (tc netem).
//! - [`ledger`]: the durable record of applied faults.
//! - [`warden`]: the undo of a fault that outlives the agent, armed outside its process.
//! - [`lifecycle`]: an experiment from hypothesis to rollbacks.
//! - [`due`]: deadlines stored on the wall clock, waited for on the boot clock.
//! - [`probe`]: HTTP and load probes.

pub mod due;
pub mod hog;
pub mod host;
pub mod ledger;
pub mod lifecycle;
pub mod netem;
pub mod probe;
pub mod process;
pub mod proxy;
pub mod warden;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How one applied fault is undone, written to the ledger before the fault is applied.
/// Processes are pinned by pid and start time (clock ticks since boot, `/proc/PID/stat`
/// field 22) so a reused pid is never signalled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "undo", rename_all = "snake_case")]
pub enum Undo {
    /// A fault in the agent's own fault proxy: removed from the proxy; if the agent died, the
    /// proxy died with it and nothing is left to undo.
    ProxyFault { proxy: String, id: u64 },
    /// SIGCONT to a process paused with SIGSTOP.
    Resume { pid: u32, start_time: u64 },
    /// Runs the policy's restart command for a process that was terminated or killed.
    Restart { command: String },
    /// Kills a child process group the agent started (a hog, a disk filler).
    StopChild { pid: u32, start_time: u64 },
    /// Removes the file a disk fill wrote.
    RemoveFile { path: PathBuf },
    /// Deletes the agent's netem root qdisc (handle `504d:`) from an interface.
    RemoveQdisc { interface: String },
    /// Nothing can be undone (said why), e.g. a terminated process with no restart command.
    Nothing { why: String },
}

/// Why a fault could not be applied or undone.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    /// The agent's policy does not allow it (the run is refused before anything is applied).
    #[error("not allowed by the agent's policy: {0}")]
    NotAllowed(String),
    /// The host cannot do it (e.g. no tc netem in this kernel).
    #[error("unsupported on this host: {0}")]
    Unsupported(String),
    /// The process, file or port it names is not there.
    #[error("not found: {0}")]
    NotFound(String),
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
