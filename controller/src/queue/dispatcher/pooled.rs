//! A split run's shares placed across replicas. When the agents linked here cannot take
//! every share, the store leases them to free agents on any live replica at once, or to
//! none (see `store/pooled.rs`); each replica then offers the shares leased to its own
//! agents, and the shares start together at the start barrier.

use std::collections::HashSet;
use std::time::Duration;

use iohr_domain::RunStatus;
use tokio::time::Instant;

use super::{Dispatcher, queued_from_row};
use crate::queue::scheduler::{SessionId, SplitToPool};
use crate::store::{PoolAsk, Pooled};

/// How often one waiting split run is tried across replicas: each try is a store
/// transaction.
const POOL_EVERY: Duration = Duration::from_millis(500);
/// How often the queues are walked for split runs to try so.
const POOL_LOOK_EVERY: Duration = Duration::from_millis(50);

impl Dispatcher {
    /// Replicas: the split runs this one cannot place with its own agents, tried across
    /// every live replica's agents.
    pub(super) async fn place_pooled(&mut self) {
        // Looking costs a walk of the queues: not at every command of a busy dispatcher.
        if !self.store.is_replica() || self.pool_looked.elapsed() < POOL_LOOK_EVERY {
            return;
        }
        self.pool_looked = Instant::now();
        let waiting = self.scheduler.waiting_splits();
        // Only split runs still waiting are remembered, so this stays as small as the queue.
        let parents: HashSet<&str> = waiting.iter().map(|(_, p)| p.as_str()).collect();
        self.pool_tried
            .retain(|parent, _| parents.contains(parent.as_str()));
        let now = Instant::now();
        let mut live = None;
        for (account, parent) in waiting {
            let due = self
                .pool_tried
                .get(&parent)
                .is_none_or(|at| now.duration_since(*at) >= POOL_EVERY);
            if !due {
                continue;
            }
            // Asked now, after the split runs before it took their agents here.
            let Some(ask) = self.scheduler.split_to_pool(&account, &parent) else {
                continue;
            };
            self.pool_tried.insert(parent, now);
            if live.is_none() {
                match self.store.live_replicas().await {
                    Ok(read) => live = Some(read),
                    Err(error) => {
                        tracing::warn!(%error, "reading the live replicas failed");
                        return;
                    }
                }
            }
            self.pool_one(ask, live.as_deref().unwrap_or_default())
                .await;
        }
    }

    async fn pool_one(&mut self, ask: SplitToPool, live: &[i64]) {
        let Some(first) = ask.shares.first().cloned() else {
            return;
        };
        let here: Vec<Option<(SessionId, String)>> = ask
            .here
            .iter()
            .map(|s| {
                let session = (*s)?;
                Some((session, self.sessions.get(&session)?.agent_id.clone()))
            })
            .collect();
        let here_ids: Vec<Option<String>> = here
            .iter()
            .map(|h| h.as_ref().map(|(_, a)| a.clone()))
            .collect();
        let share_ids: Vec<String> = ask.shares.iter().map(|r| r.run_id.clone()).collect();
        let pool_ask = PoolAsk {
            account_id: &first.account_id,
            executor: &first.executor,
            environment: &first.environment,
            kind: first.kind,
        };
        let pooled = self
            .store
            .offer_pooled(pool_ask, &share_ids, &here_ids, live)
            .await;
        let leased = match pooled {
            Ok(Pooled::Leased(leased)) => leased,
            Ok(Pooled::AccountBusy) => {
                // Another replica is placing this account: soon, not in POOL_EVERY.
                self.pool_tried.remove(&ask.parent);
                self.place_again = true;
                return;
            }
            Ok(Pooled::AccountFull) => {
                self.scheduler.mark_full(&first.account_id);
                return;
            }
            Ok(Pooled::TooFewAgents(found)) => {
                tracing::debug!(run = %ask.parent, found, shares = share_ids.len(), "too few free agents across replicas");
                return;
            }
            Ok(Pooled::Gone) => return,
            Err(error) => {
                tracing::warn!(run = %ask.parent, %error, "placing a split run across replicas failed");
                return;
            }
        };
        let elsewhere = leased
            .iter()
            .filter(|l| l.replica != self.store.replica())
            .count();
        tracing::info!(run = %ask.parent, shares = leased.len(), elsewhere, "split run placed across replicas");
        let split_start = Instant::now() + self.timing.split_start;
        for (share, lease) in ask.shares.into_iter().zip(leased) {
            self.scheduler
                .remove_queued(&share.account_id, &share.run_id);
            // A share leased to another replica's agent is that replica's to offer.
            if lease.replica != self.store.replica() {
                continue;
            }
            let session = here
                .iter()
                .flatten()
                .find(|(_, agent)| *agent == lease.agent_id)
                .map(|(s, _)| *s);
            self.scheduler.count_active(&share.account_id);
            if let Some(session) = session {
                self.scheduler
                    .attach_lease(session, &share.run_id, share.kind);
            }
            self.track_offer(share, session, lease.agent_id, lease.guard, split_start)
                .await;
        }
    }

    /// Replicas: another replica leased a split run's share to an agent linked here (by
    /// its notice, or found at the once-a-second look): offered and tracked here. An
    /// agent no longer linked here lets the offer lapse, which queues the share again.
    pub(super) async fn offered_here(&mut self, run_id: &str) {
        if self.leases.contains_key(run_id) {
            return;
        }
        let run = match self.store.run(run_id).await {
            Ok(Some(run)) => run,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(run = %run_id, %error, "reading a share offered here failed");
                return;
            }
        };
        let (Some(guard), Some(agent_id)) = (run.lease.clone(), run.agent_id.clone()) else {
            return;
        };
        let offered = run.status == RunStatus::Queued
            && run.lease_state.as_deref() == Some("offered")
            && run.replica == self.store.replica();
        if !offered {
            return;
        }
        self.scheduler.remove_queued(&run.account_id, &run.id);
        self.scheduler.count_active(&run.account_id);
        let session = self
            .sessions
            .iter()
            .find(|(_, s)| s.agent_id == agent_id)
            .map(|(id, _)| *id);
        let cancel = run.cancel_requested.clone();
        // Offered only to a linked agent, and not when a cancel came first.
        let send_to = session.filter(|_| cancel.is_none());
        if let Some(session) = send_to {
            self.scheduler.attach_lease(session, &run.id, run.kind);
        }
        tracing::debug!(run = %run.id, agent = %agent_id, linked = session.is_some(), "share leased here by another replica");
        let split_start = Instant::now() + self.timing.split_start;
        self.track_offer(queued_from_row(&run), send_to, agent_id, guard, split_start)
            .await;
        if let Some(reason) = cancel {
            self.cancel(&run.id, &reason).await;
        } else if session.is_none() {
            // Its agent left this replica meanwhile: queued again now, not at the deadline.
            self.lapse_offer(&run.id).await;
        }
    }
}
