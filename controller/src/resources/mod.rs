//! The account's resources besides a run's life: typed reads (and the few writes the
//! console makes too) of findings, scenarios, schedules and agents, one module each.
//!
//! A sibling of [`crate::runs`] rather than inside it: these are not a run's life (a
//! finding outlives its runs, a schedule is the ticker's input), and the run-lifecycle
//! layer stays about starting, reading and comparing runs. Like `runs`, this layer takes
//! the caller's account (already authenticated by the surface) and typed inputs, returns
//! domain records and [`crate::query::Page`]s, and imports the store and `domain`, never
//! a surface (`crate::api`, `crate::console`, `crate::mcp`).

pub mod agents;
pub mod findings;
pub mod scenarios;
pub mod schedules;
pub mod triggers;

use crate::queue::Refused;
use crate::store::StoreError;

/// Why a read that asks the dispatcher too (which agents are online) failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the dispatcher refused: {0:?}")]
    Dispatcher(Refused),
}

impl From<Refused> for ReadError {
    fn from(refused: Refused) -> ReadError {
        ReadError::Dispatcher(refused)
    }
}
