//! Process, host and netem faults behind one entry point for the `faults` kind.

use std::path::Path;

use iohr_domain::faults::{Fault, Policy};

use super::{FaultError, Undo};

/// How `fault` would be undone, without touching anything.
pub fn plan(fault: &Fault, _policy: &Policy) -> Result<Undo, FaultError> {
    Err(FaultError::Unsupported(format!("{} faults", fault.name())))
}

/// Applies a host fault until `deadline_ms` (epoch milliseconds).
pub async fn apply(
    fault: &Fault,
    _policy: &Policy,
    _hog_program: &Path,
    _deadline_ms: u64,
) -> Result<Undo, FaultError> {
    Err(FaultError::Unsupported(format!("{} faults", fault.name())))
}

/// Undoes a host fault.
pub async fn undo(undo: &Undo) -> Result<(), FaultError> {
    match undo {
        Undo::Nothing { .. } => Ok(()),
        other => Err(FaultError::Unsupported(format!("undo {other:?}"))),
    }
}
