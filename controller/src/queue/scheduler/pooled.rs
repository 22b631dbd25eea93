//! Split runs a replica cannot place with its own agents alone: what it asks the store
//! to place across replicas (see `dispatcher/pooled.rs` and `store/pooled.rs`).

use std::collections::HashSet;

use super::{QueuedRun, Scheduler, SessionId};

/// A split run's queued shares, and the agents here that can take one, best first
/// (fewer than the shares: else this replica places them itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitToPool {
    pub parent: String,
    pub shares: Vec<QueuedRun>,
    pub here: Vec<SessionId>,
}

impl Scheduler {
    /// Each account's oldest split run with queued shares that the agents here cannot
    /// all take, when the plan (as this replica knows it) has room for all of them.
    pub fn splits_to_pool(&self) -> Vec<SplitToPool> {
        let mut asks = Vec::new();
        for (account, queue) in &self.queues {
            let room = self.max_running(account).saturating_sub(
                self.active(account)
                    .saturating_add(self.remote_active.get(account).copied().unwrap_or(0)),
            );
            let Some(parent) = queue.iter().find_map(|r| r.share.as_ref().map(|(p, _)| p)) else {
                continue;
            };
            let shares: Vec<QueuedRun> = queue
                .iter()
                .filter(|r| r.share.as_ref().is_some_and(|(p, _)| p == parent))
                .cloned()
                .collect();
            if shares.len() > room {
                continue;
            }
            let mut taken = HashSet::new();
            let mut here = Vec::new();
            for share in &shares {
                if let Some(session) = self.best_agent(share, &taken) {
                    taken.insert(session);
                    here.push(session);
                }
            }
            if here.len() < shares.len() {
                asks.push(SplitToPool {
                    parent: parent.clone(),
                    shares,
                    here,
                });
            }
        }
        asks
    }
}
