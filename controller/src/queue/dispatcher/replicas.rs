//! A dispatcher among replicas (`serve --replica`, see `store/replicas.rs`): what the
//! others did reaches it by NOTIFY (a run queued, a cancel asked) and, in case a notice
//! was lost, by a look at the store once a second, which also takes over the leases of
//! replicas that died.

use iohr_domain::RunStatus;
use tokio::time::Instant;

use super::{Dispatcher, Lease, LeaseState, queued_from_row};
use crate::store::{LeaseGuard, RunRow};

/// Queued runs read per look: a longer backlog is read as it shortens.
const UNLEASED_PER_LOOK: u32 = 5_000;

impl Dispatcher {
    /// A run was queued on another replica (or came back from an offer there).
    pub(super) async fn queued_elsewhere(&mut self, run_id: &str) {
        tracing::debug!(run = %run_id, "a run was queued on another replica");
        if self.leases.contains_key(run_id) {
            return;
        }
        match self.store.run(run_id).await {
            Ok(Some(run)) => self.learn_queued(&run),
            Ok(None) => {}
            Err(error) => tracing::warn!(run = %run_id, %error, "reading a queued run failed"),
        }
    }

    fn learn_queued(&mut self, run: &RunRow) {
        let unleased = run.status == RunStatus::Queued && run.lease_state.is_none();
        let pending = run.confirmation.as_ref().is_some_and(|c| c.is_pending());
        if unleased
            && !pending
            && !self.leases.contains_key(&run.id)
            && !self.scheduler.is_queued(&run.account_id, &run.id)
        {
            self.scheduler.enqueue(queued_from_row(run));
            self.queue_changed();
        }
    }

    /// A cancel was asked on another replica for a lease this one tracks.
    pub(super) async fn cancel_asked(&mut self, run_id: &str) {
        if self.leases.get(run_id).is_none_or(|l| l.cancel_requested) {
            return;
        }
        match self.store.run(run_id).await {
            Ok(Some(RunRow {
                cancel_requested: Some(reason),
                ..
            })) => self.cancel(run_id, &reason).await,
            Ok(_) => {}
            Err(error) => tracing::warn!(run = %run_id, %error, "reading a cancel failed"),
        }
    }

    /// Once a second: the queue, the plans' counts and the cancels as the store has them,
    /// and the leases of dead replicas taken over.
    pub(super) async fn look_at_replicas(&mut self) {
        if let Err(error) = self.try_look_at_replicas().await {
            tracing::warn!(%error, "reading the other replicas' work failed");
        }
    }

    async fn try_look_at_replicas(&mut self) -> Result<(), crate::store::StoreError> {
        let live = self.store.live_replicas().await?;
        let deadline = Instant::now() + self.timing.restart_window();
        for run in self.store.adopt_orphans(&live).await? {
            self.track_adopted(&run, deadline);
            tracing::info!(run = %run.id, "took over the lease of a replica that stopped");
        }
        let unleased = self.store.unleased_runs(UNLEASED_PER_LOOK).await?;
        // Runs queued here that another replica leased or ended: forgotten, so that
        // this one neither offers them nor writes why they wait. Only below the last id
        // read, when the backlog is longer than one look.
        let complete = unleased.len() < UNLEASED_PER_LOOK as usize;
        let last = unleased.last().map(|r| r.id.clone());
        let known: std::collections::HashSet<&str> =
            unleased.iter().map(|r| r.id.as_str()).collect();
        let stale: Vec<(String, String)> = self
            .scheduler
            .queued()
            .filter(|q| !known.contains(q.run_id.as_str()))
            .filter(|q| complete || last.as_ref().is_some_and(|l| &q.run_id < l))
            .map(|q| (q.account_id.clone(), q.run_id.clone()))
            .collect();
        for (account, run_id) in &stale {
            self.scheduler.remove_queued(account, run_id);
        }
        for run in &unleased {
            self.learn_queued(run);
        }
        if !stale.is_empty() {
            self.queue_changed();
        }
        // Shares other replicas leased to agents here, whose notices were lost.
        let untracked = self
            .store
            .untracked_offers(|id| self.leases.contains_key(id))
            .await?;
        for run_id in untracked {
            self.offered_here(&run_id).await;
        }
        let everywhere = self.store.leases_by_account().await?;
        self.scheduler.set_leases_everywhere(&everywhere);
        for (run_id, reason) in self.store.cancels_asked().await? {
            if self
                .leases
                .get(&run_id)
                .is_some_and(|l| !l.cancel_requested)
            {
                self.cancel(&run_id, &reason).await;
            }
        }
        Ok(())
    }

    /// A lease this replica took over from the store: it waits for its agent as after a
    /// restart (see `rebuild`).
    pub(super) fn track_adopted(&mut self, run: &RunRow, deadline: Instant) {
        let (Some(guard), Some(agent_id)) = (run.lease.clone(), run.agent_id.clone()) else {
            return;
        };
        if self.leases.contains_key(&run.id) {
            return;
        }
        self.scheduler.remove_queued(&run.account_id, &run.id);
        self.scheduler.count_active(&run.account_id);
        self.leases.insert(
            run.id.clone(),
            Lease {
                run: queued_from_row(run),
                agent_id,
                session: None,
                guard,
                state: LeaseState::Orphaned {
                    deadline,
                    started: run.status == RunStatus::Running,
                },
                cancel_requested: false,
                cancel_sent: None,
            },
        );
    }

    /// A lease an agent reports here that this replica does not track: taken over when
    /// it is current, wherever it was tracked before.
    pub(super) async fn adopt_reported(
        &mut self,
        run_id: &str,
        guard: &LeaseGuard,
        agent_id: &str,
    ) {
        if !self.store.is_replica() || self.leases.contains_key(run_id) {
            return;
        }
        match self.store.adopt_lease(run_id, guard, agent_id).await {
            Ok(Some(run)) => {
                self.track_adopted(&run, Instant::now() + self.timing.restart_window());
                tracing::info!(run = %run_id, agent = %agent_id, "took over a lease its agent brought from another replica");
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(run = %run_id, %error, "taking over a lease failed"),
        }
    }
}
