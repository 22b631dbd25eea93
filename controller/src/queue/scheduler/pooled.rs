//! Split runs a replica cannot place with its own agents alone: what it asks the store
//! to place across replicas (see `dispatcher/pooled.rs` and `store/pooled.rs`).

use std::collections::HashSet;

use super::{LOOKAHEAD, QueuedRun, Scheduler, SessionId};

/// A split run's queued shares, and for each the agent here that can take it, if one
/// can (not every one can: else this replica places them itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitToPool {
    pub parent: String,
    pub shares: Vec<QueuedRun>,
    pub here: Vec<Option<SessionId>>,
}

impl Scheduler {
    /// The split runs with queued shares, account by account in queue order (within
    /// the look-ahead): (account, split run).
    pub fn waiting_splits(&self) -> Vec<(String, String)> {
        let mut seen = HashSet::new();
        let mut splits = Vec::new();
        for (account, queue) in &self.queues {
            for run in queue.iter().take(LOOKAHEAD) {
                if let Some((parent, _)) = &run.share
                    && seen.insert(parent.as_str())
                {
                    splits.push((account.clone(), parent.clone()));
                }
            }
        }
        splits
    }

    /// Split run `parent`'s queued shares with the agents here that can take them now,
    /// when the agents here cannot take them all and the plan (as this replica knows
    /// it) has room for all of them.
    pub fn split_to_pool(&self, account: &str, parent: &str) -> Option<SplitToPool> {
        let queue = self.queues.get(account)?;
        let room = self.max_running(account).saturating_sub(
            self.active(account)
                .saturating_add(self.remote_active.get(account).copied().unwrap_or(0)),
        );
        let shares: Vec<QueuedRun> = queue
            .iter()
            .filter(|r| r.share.as_ref().is_some_and(|(p, _)| p == parent))
            .cloned()
            .collect();
        if shares.is_empty() || shares.len() > room {
            return None;
        }
        let mut taken = HashSet::new();
        let here: Vec<Option<SessionId>> = shares
            .iter()
            .map(|share| {
                let session = self.best_agent(share, &taken)?;
                taken.insert(session);
                Some(session)
            })
            .collect();
        if here.iter().all(Option::is_some) {
            return None;
        }
        Some(SplitToPool {
            parent: parent.to_string(),
            shares,
            here,
        })
    }
}
