//! Placement carried out: the scheduler chooses an agent for each queued run it can place
//! now (see `scheduler.rs`); here each choice becomes a lease in the store and an offer on
//! the agent's stream, or goes back to the queue.

use tokio::time::Instant;

use super::{Dispatcher, Lease, LeaseState};
use crate::queue::scheduler::{Placement, QueuedRun, SessionId};

impl Dispatcher {
    pub(super) async fn dispatch(&mut self) {
        let mut placed = Vec::new();
        for Placement { run, session } in self.scheduler.next_placements() {
            match self.sessions.get(&session).map(|s| s.agent_id.clone()) {
                Some(agent_id) => placed.push((run, session, agent_id)),
                None => self.unplace(run, session),
            }
        }
        // The leases of one round are written together: each is its own fenced UPDATE,
        // but they wait on the store side by side instead of one after another.
        let store = &self.store;
        let guards = futures_util::future::join_all(
            placed
                .iter()
                .map(|(run, _, agent_id)| store.offer_lease(&run.run_id, agent_id)),
        )
        .await;
        for ((run, session, agent_id), guard) in placed.into_iter().zip(guards) {
            let guard = match guard {
                Ok(Some(guard)) => guard,
                Ok(None) => {
                    // Ended (cancelled) or leased meanwhile: not ours to offer.
                    self.scheduler.detach_lease(session, &run.run_id);
                    self.scheduler.release_active(&run.account_id);
                    continue;
                }
                Err(error) => {
                    tracing::error!(run = %run.run_id, %error, "offering a lease failed");
                    self.unplace(run, session);
                    continue;
                }
            };
            let spec = self.offer_message(&run, &guard).await;
            let sent = match (spec, self.sessions.get(&session)) {
                (Some(offer), Some(s)) => s.tx.try_send(offer).is_ok(),
                _ => false,
            };
            tracing::debug!(run = %run.run_id, agent = %agent_id, lease = %guard.lease_id, epoch = guard.epoch, sent, "lease offered");
            crate::metrics::lease_offered(&run.run_id);
            let deadline = Instant::now() + self.timing.offer_timeout;
            self.leases.insert(
                run.run_id.clone(),
                Lease {
                    run,
                    agent_id,
                    session: Some(session),
                    guard,
                    state: LeaseState::Offered { deadline },
                    cancel_requested: false,
                    cancel_sent: None,
                },
            );
        }
    }

    pub(super) fn unplace(&mut self, run: QueuedRun, session: SessionId) {
        self.scheduler.detach_lease(session, &run.run_id);
        self.scheduler.release_active(&run.account_id);
        self.scheduler.enqueue(run);
    }
}
