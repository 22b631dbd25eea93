//! The one entry point that undoes a host fault ([`undo`]), for the rollbacks and for the
//! ledger's recovery at start: process signals, hogs, disk fills and netem.

use serde::Serialize;

use super::{FaultError, Undo, hog, netem, process};

/// What an undo did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UndoReport {
    /// False when nothing was left to undo (the process or file already gone, a fault that
    /// cannot be undone); the message says which.
    pub undone: bool,
    pub message: String,
}

impl UndoReport {
    pub fn undone(message: impl Into<String>) -> Self {
        UndoReport {
            undone: true,
            message: message.into(),
        }
    }

    pub fn nothing_left(message: impl Into<String>) -> Self {
        UndoReport {
            undone: false,
            message: message.into(),
        }
    }
}

/// Undoes one host fault. Blocking (it waits, bounded, for processes to go and commands to
/// end): call it off the async runtime. Undoing twice is harmless: the second finds nothing
/// left. [`Undo::ProxyFault`] belongs to the fault proxy and is refused here.
pub fn undo(undo: &Undo) -> Result<UndoReport, FaultError> {
    match undo {
        Undo::Resume { pid, start_time } => {
            match process::signal_pinned(*pid, *start_time, nix::sys::signal::Signal::SIGCONT) {
                Ok(sent) => Ok(UndoReport::undone(sent)),
                Err(FaultError::NotFound(why)) => Ok(UndoReport::nothing_left(why)),
                Err(e) => Err(e),
            }
        }
        Undo::Restart { command } => process::run_restart(command).map(UndoReport::undone),
        Undo::StopChild { pid, start_time } => hog::stop_child(*pid, *start_time),
        Undo::RemoveFile { path } => hog::remove_fill(path),
        Undo::RemoveQdisc { interface } => netem::remove(&netem::Tc::host(), interface),
        Undo::Nothing { why } => Ok(UndoReport::nothing_left(why.clone())),
        Undo::ProxyFault { proxy, id } => Err(FaultError::Failed(format!(
            "fault {id} of proxy {proxy} is not a host fault; the fault proxy undoes it"
        ))),
    }
}
