//! The handle every other part of the controller holds: it turns calls into commands for
//! the dispatcher's task, refusing the API at once when the queue is full and making an
//! agent's session wait for room.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::registry::{AgentUp, OnlineAgent};
use super::{Command, queued_from_row, waiting};
use crate::queue::scheduler::SessionId;
use crate::store::{LeaseGuard, RunRow};

/// Commands waiting for the dispatcher. The API never waits on a full queue: it answers
/// 503 `busy` at once ([`Refused::Busy`]), and a new run reserves its place before its
/// transaction commits so the run is never stored unannounced. An agent's session waits
/// for room instead (backpressure on that agent's stream), as what it reports (an answer,
/// an end, its disconnect) must not be lost.
pub const COMMAND_QUEUE: usize = 1024;

/// The handle every other part of the controller uses.
#[derive(Clone)]
pub struct DispatcherHandle {
    pub(super) tx: mpsc::Sender<Command>,
    pub(super) epoch: Instant,
    pub(super) next_session: Arc<AtomicU64>,
    /// The agents connected now, for [`DispatcherHandle::waiting_reason`].
    pub(super) connected: tokio::sync::watch::Receiver<waiting::Connected>,
}

#[derive(Debug, thiserror::Error)]
#[error("the dispatcher has stopped")]
pub struct Stopped;

/// Why the dispatcher did not take an API command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the dispatcher's queue is full")]
    Busy,
    #[error("the dispatcher has stopped")]
    Stopped,
}

/// A place in the dispatcher's queue for one queued run, taken before the run's
/// transaction commits; sending on it cannot fail or wait.
pub struct QueueSlot(mpsc::OwnedPermit<Command>);

impl QueueSlot {
    pub fn run_queued(self, run: &RunRow, max_running: i64) {
        self.0.send(Command::RunQueued {
            run: Box::new(queued_from_row(run)),
            max_running: usize::try_from(max_running).unwrap_or(usize::MAX),
        });
    }
}

impl DispatcherHandle {
    /// Milliseconds since the dispatcher started, on the controller's own clock.
    pub fn clock_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub fn new_session_id(&self) -> SessionId {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// A place for a run about to be queued, or `Busy` at once.
    pub fn reserve(&self) -> Result<QueueSlot, Refused> {
        self.tx
            .clone()
            .try_reserve_owned()
            .map(QueueSlot)
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => Refused::Busy,
                mpsc::error::TrySendError::Closed(_) => Refused::Stopped,
            })
    }

    /// An API command: sent at once or refused `Busy`.
    fn try_send(&self, command: Command) -> Result<(), Refused> {
        self.tx.try_send(command).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Refused::Busy,
            mpsc::error::TrySendError::Closed(_) => Refused::Stopped,
        })
    }

    /// Cancels a run wherever it is; returns once the agent (if any) has been told.
    pub async fn cancel(&self, run_id: &str, reason: &str) -> Result<(), Refused> {
        let (reply, rx) = oneshot::channel();
        self.try_send(Command::Cancel {
            run_id: run_id.to_string(),
            reason: reason.to_string(),
            reply,
        })?;
        rx.await.map_err(|_| Refused::Stopped)
    }

    /// Registers a connected agent; returns the reported leases it must drop, or why it
    /// is refused.
    pub async fn agent_up(&self, up: AgentUp) -> Result<Result<Vec<String>, String>, Stopped> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Command::AgentUp {
                up: Box::new(up),
                reply,
            })
            .await
            .map_err(|_| Stopped)?;
        rx.await.map_err(|_| Stopped)
    }

    pub async fn agent_down(&self, session: SessionId) {
        let _ = self.tx.send(Command::AgentDown { session }).await;
    }

    /// An agent's answer to an offer; returns once the answer is stored, so the frames
    /// that follow it on the stream find the run running.
    pub async fn lease_answer(
        &self,
        session: SessionId,
        guard: LeaseGuard,
        accepted: bool,
        retry_later: bool,
        reason: String,
    ) {
        let (reply, rx) = oneshot::channel();
        let command = Command::LeaseAnswer {
            session,
            guard,
            accepted,
            retry_later,
            reason,
            reply,
        };
        if self.tx.send(command).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// A run's completion under this lease was stored (or refused as stale): if the lease
    /// is still the one tracked, its agent and plan slot are free.
    pub async fn lease_ended(&self, run_id: &str, guard: LeaseGuard) {
        let _ = self
            .tx
            .send(Command::LeaseEnded {
                run_id: run_id.to_string(),
                guard,
            })
            .await;
    }

    /// Replicas: a notice that another replica queued a run. Dropped when the queue is
    /// full: the once-a-second look at the store finds it.
    pub fn queued_elsewhere(&self, run_id: &str) {
        let _ = self.try_send(Command::QueuedElsewhere {
            run_id: run_id.to_string(),
        });
    }

    /// Replicas: a notice that a lease of the account ended somewhere (dropped when the
    /// queue is full, as above).
    pub fn lease_freed(&self, account_id: &str) {
        let _ = self.try_send(Command::LeaseFreed {
            account_id: account_id.to_string(),
        });
    }

    /// Replicas: a notice that a cancel was asked on another replica (dropped when the
    /// queue is full, as above).
    pub fn cancel_asked(&self, run_id: &str) {
        let _ = self.try_send(Command::CancelAsked {
            run_id: run_id.to_string(),
        });
    }

    /// Replicas: a notice that another replica leased a split run's share to an agent
    /// linked here (dropped when the queue is full, as above).
    pub fn offered_here(&self, run_id: &str) {
        let _ = self.try_send(Command::OfferedHere {
            run_id: run_id.to_string(),
        });
    }

    pub async fn online(&self) -> Result<Vec<OnlineAgent>, Refused> {
        let (reply, rx) = oneshot::channel();
        self.try_send(Command::Online { reply })?;
        rx.await.map_err(|_| Refused::Stopped)
    }
}

#[cfg(test)]
mod tests;
