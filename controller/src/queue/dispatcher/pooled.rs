//! A split run's shares placed across replicas. When the agents linked here cannot take
//! every share, the store leases them to free agents on any live replica at once, or to
//! none (see `store/pooled.rs`); each replica then offers the shares leased to its own
//! agents, and the shares start together at the start barrier.

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
        let asks = self.scheduler.splits_to_pool();
        // Only split runs still waiting are remembered, so this stays as small as the queue.
        self.pool_tried
            .retain(|parent, _| asks.iter().any(|a| &a.parent == parent));
        let now = Instant::now();
        let due: Vec<SplitToPool> = asks
            .into_iter()
            .filter(|a| {
                self.pool_tried
                    .get(&a.parent)
                    .is_none_or(|at| now.duration_since(*at) >= POOL_EVERY)
            })
            .collect();
        if due.is_empty() {
            return;
        }
        let live = match self.store.live_replicas().await {
            Ok(live) => live,
            Err(error) => {
                tracing::warn!(%error, "reading the live replicas failed");
                return;
            }
        };
        for ask in due {
            self.pool_tried.insert(ask.parent.clone(), now);
            self.pool_one(ask, &live).await;
        }
    }

    async fn pool_one(&mut self, ask: SplitToPool, live: &[i64]) {
        let Some(first) = ask.shares.first().cloned() else {
            return;
        };
        let here: Vec<(SessionId, String)> = ask
            .here
            .iter()
            .filter_map(|s| self.sessions.get(s).map(|x| (*s, x.agent_id.clone())))
            .collect();
        let here_ids: Vec<String> = here.iter().map(|(_, a)| a.clone()).collect();
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
        if let Some(session) = session {
            self.scheduler.attach_lease(session, &run.id, run.kind);
        }
        tracing::debug!(run = %run.id, agent = %agent_id, linked = session.is_some(), "share leased here by another replica");
        let split_start = Instant::now() + self.timing.split_start;
        self.track_offer(queued_from_row(&run), session, agent_id, guard, split_start)
            .await;
    }
}
