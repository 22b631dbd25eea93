//! The one place a lease's run ends on this agent. Whatever becomes of its executor (an
//! outcome, a panic, a task aborted or dropped), the run gets exactly one completion, so
//! the lease leaves the table once the controller stores it and its slot (an exclusive one
//! too) is free again.

use tokio::task::JoinError;
use tokio_util::sync::CancellationToken;

use crate::kinds::Outcome;
use crate::leases::Leases;

/// Ends its lease's run when dropped: with the outcome given to [`Ending::finish`], or
/// `error` when none was.
pub struct Ending {
    leases: Leases,
    lease_id: String,
    run_id: String,
    /// Cancelled when the executor failed, so what it spawned (load workers, a progress
    /// reporter) stops too.
    cancel: CancellationToken,
    outcome: Option<Outcome>,
}

impl Ending {
    pub fn new(leases: &Leases, lease_id: &str, run_id: &str, cancel: CancellationToken) -> Self {
        Ending {
            leases: leases.clone(),
            lease_id: lease_id.to_string(),
            run_id: run_id.to_string(),
            cancel,
            outcome: None,
        }
    }

    /// The executor's task ended: with its outcome, or with why it has none.
    pub fn finish(mut self, joined: Result<Outcome, JoinError>) {
        match joined {
            Ok(outcome) => self.outcome = Some(outcome),
            Err(error) => self.fail(&failure(error)),
        }
    }

    /// A failed executor's run ends `error`. Its units are not known: it reports none.
    fn fail(&mut self, why: &str) {
        tracing::error!(run = %self.run_id, why, "executor failed");
        self.cancel.cancel();
        self.outcome = Some(Outcome::error(format!("executor failed: {why}"), 0));
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        if self.outcome.is_none() {
            self.fail("its task ended without an outcome");
        }
        let Some(outcome) = self.outcome.take() else {
            return;
        };
        tracing::info!(run = %self.run_id, status = %outcome.status, "run ended on this agent");
        self.leases.complete(
            &self.lease_id,
            outcome.status.as_str(),
            outcome.reason.as_deref().unwrap_or_default(),
            outcome.result.to_string(),
            outcome.units_spent,
        );
    }
}

/// Why a task ended without an outcome: its panic's message (our own code's text), or that
/// it was aborted.
fn failure(error: JoinError) -> String {
    if error.is_cancelled() {
        return "its task was aborted".to_string();
    }
    match error.try_into_panic() {
        Ok(payload) => panic_message(payload.as_ref()),
        Err(error) => error.to_string(),
    }
}

/// A panic payload's message: `panic!` gives a `&str` or a `String`.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string());
    // One line, and not a book: it becomes the run's reason.
    let line: String = text
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(500)
        .collect();
    format!("panicked: {line}")
}

#[cfg(test)]
mod tests;
