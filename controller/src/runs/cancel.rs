//! Cancelling runs: one run on a caller's word (waiting a little for it to end), and a
//! halt that cancels every unfinished run of the kinds a halt stops. Each leaves its audit
//! line; the surfaces only read the request and say the outcome.

use std::time::Duration;

use iohr_domain::{RunKind, RunRecord, RunStatus};

use super::read;
use crate::Shared;
use crate::queue::Refused;
use crate::store::{AuditLine, StoreError};

/// How long a cancel waits for the run to end before answering with where it stands.
pub const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// Why a cancel or a halt did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    /// The run has ended already (with this status).
    #[error("run {id} already ended {status}")]
    AlreadyFinished { id: String, status: RunStatus },
    /// The controller stopped before the cancel was done.
    #[error("the controller is stopping")]
    ShuttingDown,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Dispatcher(#[from] Refused),
}

/// Where a cancelled run stands: its status (ended or still stopping) and its record.
pub struct Cancelled {
    pub status: RunStatus,
    pub record: RunRecord,
}

/// Cancels one run of the account for `reason` (the caller's, already bounded), waits up
/// to [`CANCEL_WAIT`] for it to end and says where it stands.
pub async fn cancel(
    shared: &Shared,
    account_id: &str,
    id: &str,
    reason: String,
    actor: String,
) -> Result<Cancelled, CancelError> {
    let run = read::owned(&shared.store, account_id, id).await?;
    if run.status.is_finished() {
        return Err(CancelError::AlreadyFinished {
            id: id.to_string(),
            status: run.status,
        });
    }
    let mut viewer = shared.hub.subscribe_internal(id);
    let shared = shared.clone();
    let account_id = account_id.to_string();
    let id = id.to_string();
    // The cancel, its wait and its audit line run apart from the caller: a client that
    // hangs up does not stop the cancel or lose its audit line.
    let outcome = tokio::spawn(async move {
        shared.dispatcher.cancel(&id, &reason).await?;
        let wait = async {
            loop {
                match viewer.frames.recv().await {
                    Ok(frame) if frame.kind == "finished" => return,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        };
        let _ = tokio::time::timeout(CANCEL_WAIT, wait).await;
        let run = read::owned(&shared.store, &account_id, &id).await?;
        let line = AuditLine {
            at: 0,
            actor,
            action: "run.cancel".into(),
            run_id: Some(id.clone()),
            targets: Some(run.target.clone()),
            outcome: run.status.to_string(),
            ..Default::default()
        };
        shared.store.audit(&account_id, &line).await?;
        let record = shared.store.run_record(&run).await?;
        Ok::<_, CancelError>(Cancelled {
            status: run.status,
            record,
        })
    });
    outcome.await.map_err(|_| CancelError::ShuttingDown)?
}

/// Cancels every queued or running run of the account whose kind a halt stops
/// (`Kind::HALTED`: the experiments) and returns their ids; idempotent.
pub async fn halt(
    shared: &Shared,
    account_id: &str,
    reason: &str,
    actor: String,
) -> Result<Vec<String>, CancelError> {
    let mut runs = Vec::new();
    for kind in RunKind::ALL.into_iter().filter(|k| k.halted()) {
        runs.extend(
            shared
                .store
                .unfinished_runs_of_kind(account_id, kind.as_str())
                .await?,
        );
    }
    let mut halted = Vec::with_capacity(runs.len());
    for run in runs {
        shared
            .dispatcher
            .cancel(&run.id, reason)
            .await
            .map_err(|_| CancelError::ShuttingDown)?;
        halted.push(run.id);
    }
    let line = AuditLine {
        at: 0,
        actor,
        action: "halt".into(),
        run_id: None,
        targets: None,
        outcome: format!("{} faults runs cancelled", halted.len()),
        ..Default::default()
    };
    shared.store.audit(account_id, &line).await?;
    tracing::warn!(account = %account_id, runs = halted.len(), "halt");
    Ok(halted)
}
