//! A person confirms a production faults run: the hash they read must be the run's, before
//! its deadline; the run then waits for an agent like any queued run.

use super::guards::waiting_reason;
use crate::Shared;
use crate::queue::Refused;
use crate::store::{Account, ConfirmRefusal, RunRow, StoreError};

/// Why a confirmation was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfirmError {
    #[error("run {id}: {why}")]
    NotAwaiting { id: String, why: String },
    #[error(
        "run {id} waits for a confirmation of {expected}; the hash sent names another experiment or target"
    )]
    HashMismatch { id: String, expected: String },
    #[error("run {id}: its confirmation deadline has passed")]
    Lapsed { id: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Dispatcher(#[from] Refused),
}

/// Confirms run `id` of the account for `person` with the `hash` they read, and queues it.
pub async fn confirm(
    shared: &Shared,
    account: &Account,
    id: &str,
    hash: &str,
    person: &str,
) -> Result<RunRow, ConfirmError> {
    // Taken before the confirmation commits, as for a new run (see `start::submit`).
    let slot = shared.dispatcher.reserve()?;
    let outcome = shared
        .store
        .confirm_run(&account.id, id, hash, person, |run| {
            // No longer waiting for a person; maybe for an agent, which it then says.
            waiting_reason(
                shared,
                &run.account_id,
                run.kind,
                &run.environment,
                &run.executor,
            )
        })
        .await
        .map_err(|e| match e {
            StoreError::NotFound(_) => StoreError::NotFound(format!("run {id}")),
            other => other,
        })?;
    let id = id.to_string();
    match outcome {
        Ok(run) => {
            slot.run_queued(&run, account.max_running);
            tracing::info!(run = %run.id, %person, "production faults run confirmed and queued");
            Ok(run)
        }
        Err(ConfirmRefusal::NotAwaiting(why)) => Err(ConfirmError::NotAwaiting { id, why }),
        Err(ConfirmRefusal::HashMismatch { expected }) => {
            Err(ConfirmError::HashMismatch { id, expected })
        }
        Err(ConfirmRefusal::Lapsed) => Err(ConfirmError::Lapsed { id }),
    }
}
