//! Cancels: a queued run ends at once; a leased one is told to its agent (again each
//! second until it answers), or ends here when no agent will answer for it.

use iohr_domain::RunStatus;
use iohr_proto::link::{CancelLease, controller_message};
use tokio::time::Instant;

use super::{Dispatcher, LeaseState};
use crate::queue::scheduler::SessionId;
use crate::store::LeaseGuard;

impl Dispatcher {
    pub(super) fn cancel_message(
        guard: &LeaseGuard,
        run_id: &str,
        reason: &str,
    ) -> controller_message::Body {
        controller_message::Body::Cancel(CancelLease {
            lease_id: guard.lease_id.clone(),
            epoch: guard.epoch,
            run_id: run_id.to_string(),
            reason: reason.to_string(),
        })
    }

    pub(super) async fn cancel(&mut self, run_id: &str, reason: &str) {
        let stored = if self.leases.contains_key(run_id) {
            None
        } else {
            self.store.run(run_id).await.ok().flatten()
        };
        if let Some(run) = stored.as_ref().filter(|r| r.agents.is_some()) {
            // A split run is never leased: its shares are, and end it as they end.
            self.cancel_split(run, reason).await;
            return;
        }
        if !self.leases.contains_key(run_id) && self.store.is_replica() {
            // Another replica may track its lease: that one tells the agent.
            match self.store.request_cancel(run_id, reason).await {
                Ok(true) => return,
                Ok(false) => {}
                Err(error) => {
                    tracing::error!(run = %run_id, %error, "asking for a cancel failed");
                    return;
                }
            }
        }
        let queued_account = stored
            .map(|r| r.account_id)
            .filter(|account| self.scheduler.is_queued(account, run_id));
        if let Some(account) = queued_account {
            if self
                .end_run(run_id, None, RunStatus::Cancelled, reason)
                .await
            {
                self.scheduler.remove_queued(&account, run_id);
            }
            return;
        }
        let Some(lease) = self.leases.get_mut(run_id) else {
            // Not queued here and not leased: ended already, or about to be stored.
            self.end_run(run_id, None, RunStatus::Cancelled, reason)
                .await;
            return;
        };
        lease.cancel_requested = true;
        lease.cancel_sent = Some(Instant::now());
        let (guard, session, state) = (lease.guard.clone(), lease.session, lease.state.clone());
        // The canceller's reason becomes the run's, whatever the agent says as it stops.
        if let Err(error) = self.store.set_reason(run_id, Some(reason)).await {
            tracing::warn!(run = %run_id, %error, "recording the cancel's reason failed");
        }
        self.send(session, Self::cancel_message(&guard, run_id, reason));
        let agent_will_answer = matches!(state, LeaseState::Running) && session.is_some();
        if !agent_will_answer {
            // Never started, or its agent is gone: nothing will answer for it.
            if self
                .end_run(run_id, Some(&guard), RunStatus::Cancelled, reason)
                .await
            {
                self.forget_lease(run_id);
            } else {
                self.retry_next_tick(run_id, true);
            }
        }
    }

    /// A cancel not yet answered is sent again each second: a dropped message must not
    /// leave a run running after it was cancelled.
    pub(super) fn resend_cancels(&mut self) {
        let unanswered: Vec<(String, LeaseGuard, Option<SessionId>)> = self
            .leases
            .iter()
            .filter(|(_, l)| {
                l.cancel_requested
                    && l.cancel_sent
                        .is_some_and(|at| at.elapsed() >= std::time::Duration::from_secs(1))
            })
            .map(|(id, l)| (id.clone(), l.guard.clone(), l.session))
            .collect();
        for (run_id, guard, session) in unanswered {
            self.send(session, Self::cancel_message(&guard, &run_id, "cancelled"));
            if let Some(lease) = self.leases.get_mut(&run_id) {
                lease.cancel_sent = Some(Instant::now());
            }
        }
    }
}
