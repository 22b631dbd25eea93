//! A run's baseline: the run it is compared with, found, not hand-picked (design notes §9).
//!
//! The rule (issue 33): the latest `passed` run of the same scenario version and
//! environment, on the same target (or the trigger's base target), whose `change` is the
//! run's base (`owner/repo@main`), ended within the trigger's window; or, when the
//! trigger asked for one, the fresh before-run started beside it.
//!
//! This file's signature is shared by the trigger surface, `GET /runs/{id}/baseline`, the
//! gate and the forge reporter; its body is filled in with the triggers.

use crate::store::{RunRow, Store, StoreError};

/// What a run's baseline is now.
#[derive(Debug, Clone)]
pub enum Baseline {
    /// The run to compare with, ended `passed`.
    Found(RunRow),
    /// The fresh before-run started beside the run, not ended yet.
    Waiting(RunRow),
    /// No run meets the rule; the text says which rule found nothing, for people.
    Missing(String),
}

/// Why a baseline could not be looked for.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// The run is missing (`NotFound`), or the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The baseline of the account's run `run_id` (another account's run reads as missing).
pub async fn baseline_of(
    store: &Store,
    account_id: &str,
    run_id: &str,
) -> Result<Baseline, BaselineError> {
    let run = super::read::owned(store, account_id, run_id).await?;
    Ok(Baseline::Missing(format!(
        "run {} has no baseline rule yet",
        run.id
    )))
}
