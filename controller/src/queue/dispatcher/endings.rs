//! Endings of leases: a completion frees the agent's and the plan's slot; a lease whose
//! agent is lost or whose deadline passed goes back to the queue or ends the run here.

use iohr_domain::RunStatus;
use tokio::time::Instant;

use super::{Dispatcher, Lease, LeaseState};
use crate::queue::scheduler::SessionId;
use crate::store::{Ending, LeaseGuard};

impl Dispatcher {
    /// A run's completion under this lease was stored: its agent and plan slot are free
    /// if the lease is still the one tracked.
    pub(super) fn lease_ended(&mut self, run_id: &str, guard: &LeaseGuard) {
        if self.leases.get(run_id).is_some_and(|l| &l.guard == guard) {
            self.forget_lease(run_id);
        }
    }

    pub(super) fn forget_lease(&mut self, run_id: &str) {
        if let Some(lease) = self.leases.remove(run_id) {
            if let Some(session) = lease.session {
                self.scheduler.detach_lease(session, run_id);
            }
            self.scheduler.release_active(&lease.run.account_id);
        }
    }

    /// Ends a run here (not through its agent) and publishes its `finished` frame.
    /// True when the run has ended (now or before, or the lease is no longer its);
    /// false when the store failed, and the caller keeps what it tracks to retry.
    pub(super) async fn end_run(
        &mut self,
        run_id: &str,
        guard: Option<&LeaseGuard>,
        status: RunStatus,
        reason: &str,
    ) -> bool {
        self.end_run_here(run_id, guard, status, reason)
            .await
            .is_some()
    }

    /// [`Dispatcher::end_run`], saying whether this call ended it (`Some(true)`) or it
    /// had ended before (`Some(false)`, say by another replica); None when the store
    /// failed.
    pub(super) async fn end_run_here(
        &mut self,
        run_id: &str,
        guard: Option<&LeaseGuard>,
        status: RunStatus,
        reason: &str,
    ) -> Option<bool> {
        let ending = Ending {
            status,
            reason: Some(reason.to_string()),
            result: None,
            units_spent: None,
        };
        let split = self.split_of(run_id);
        match crate::runs::ending::end_by_controller(&self.store, run_id, guard, &ending).await {
            Ok(Some(frames)) => {
                tracing::info!(run = %run_id, status = %status, reason, "run ended by the controller");
                for frame in frames {
                    self.hub.publish(frame);
                }
                if let Some(parent) = split {
                    self.settle_split(&parent).await;
                }
                Some(true)
            }
            Ok(None) => Some(false),
            Err(error) => {
                tracing::error!(run = %run_id, %error, "ending a run failed; retrying");
                None
            }
        }
    }

    /// Returns a lease's run to the queue (its offer was never taken up). False when the
    /// store failed: the caller retries.
    pub(super) async fn requeue(
        &mut self,
        run_id: &str,
        lease: Lease,
        refused: Option<SessionId>,
        lapsed: Option<SessionId>,
    ) -> bool {
        match self.store.withdraw_offer(run_id, &lease.guard).await {
            Ok(requeued) => {
                self.forget_lease(run_id);
                if requeued {
                    let mut run = lease.run;
                    run.refused_by.extend(refused);
                    run.lapsed_with.extend(lapsed);
                    self.scheduler.enqueue(run);
                    self.queue_changed();
                }
                true
            }
            Err(error) => {
                tracing::error!(run = %run_id, %error, "returning a run to the queue failed; retrying");
                false
            }
        }
    }

    /// Keeps a lease whose ending failed in the store, to try again on the next tick.
    pub(super) fn retry_next_tick(&mut self, run_id: &str, started: bool) {
        let deadline = Instant::now() + self.timing.tick();
        if let Some(lease) = self.leases.get_mut(run_id) {
            lease.state = LeaseState::Orphaned { deadline, started };
        }
    }

    /// A lease whose agent can no longer run it: back to the queue if it never started,
    /// `error` if it did (`cancelled` if a cancel was asked for).
    pub(super) async fn lease_lost(&mut self, run_id: &str, reason: &str) {
        let Some(lease) = self.leases.get(run_id).cloned() else {
            return;
        };
        let started = match lease.state {
            LeaseState::Offered { .. } => false,
            LeaseState::Orphaned { started, .. } => started,
            LeaseState::Running => true,
        };
        if started || lease.cancel_requested {
            let status = if lease.cancel_requested {
                RunStatus::Cancelled
            } else {
                RunStatus::Error
            };
            if self
                .end_run(run_id, Some(&lease.guard), status, reason)
                .await
            {
                self.forget_lease(run_id);
            } else {
                self.retry_next_tick(run_id, started);
            }
        } else if !self.requeue(run_id, lease, None, None).await {
            self.retry_next_tick(run_id, false);
        }
    }

    /// Leases past their deadline: a lapsed offer goes back to the queue, a lost agent's
    /// lease ends (see [`Dispatcher::lease_lost`]).
    pub(super) async fn expire_due(&mut self, now: Instant) {
        let due: Vec<(String, LeaseState)> = self
            .leases
            .iter()
            .filter(|(_, l)| match l.state {
                LeaseState::Offered { deadline } | LeaseState::Orphaned { deadline, .. } => {
                    deadline <= now
                }
                LeaseState::Running => false,
            })
            .map(|(id, l)| (id.clone(), l.state.clone()))
            .collect();
        for (run_id, state) in due {
            match state {
                LeaseState::Offered { .. } => self.lapse_offer(&run_id).await,
                _ => self.lease_lost(&run_id, "agent lost").await,
            }
        }
    }
}
