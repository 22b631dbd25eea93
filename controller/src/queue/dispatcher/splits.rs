//! Split runs (`"agents": N`) in the dispatcher. Their shares are queued, placed (all at
//! once, see `scheduler.rs`) and leased as runs of their own; what is the split run's
//! is here: a cancel of it is a cancel of each share, and a share that ends `error` or
//! `cancelled` cancels the others, since the whole can no longer be measured. The
//! run-lifecycle layer ends the split run with its last share (`runs/settle.rs`).

use iohr_domain::RunStatus;

use super::Dispatcher;
use iohr_domain::load::AgentLoss;

use crate::runs::settle::lost_agent;
use crate::store::RunRow;

impl Dispatcher {
    /// The split run `run_id` is a share of, as tracked here (its lease or its place in
    /// the queue).
    pub(super) fn split_of(&self, run_id: &str) -> Option<String> {
        let share = match self.leases.get(run_id) {
            Some(lease) => lease.run.share.as_ref(),
            None => self
                .scheduler
                .queued()
                .find(|q| q.run_id == run_id)
                .and_then(|q| q.share.as_ref()),
        };
        share.map(|(parent, _)| parent.clone())
    }

    /// A share of `parent` ended: when one ended `error` or `cancelled`, the shares still
    /// live are cancelled, with why; but not when only agents were lost and the spec says
    /// `on_agent_lost: continue`.
    pub(super) async fn settle_split(&mut self, parent: &str) {
        let shares = match self.store.shares_of(parent).await {
            Ok(shares) => shares,
            Err(error) => {
                tracing::error!(run = %parent, %error, "reading a split run's shares failed");
                return;
            }
        };
        let stopped: Vec<&RunRow> = shares
            .iter()
            .filter(|s| matches!(s.status, RunStatus::Error | RunStatus::Cancelled))
            .collect();
        let Some(ended) = stopped.first() else {
            return;
        };
        // With `on_agent_lost: continue`, the others run on without a lost agent's share.
        if stopped.iter().all(|s| lost_agent(s)) {
            match crate::runs::settle::on_agent_lost(&self.store, ended).await {
                Ok(AgentLoss::Continue) => {
                    tracing::info!(run = %parent, share = %ended.id, "a split run's share lost its agent; the others run on");
                    return;
                }
                Ok(AgentLoss::Error) => {}
                Err(error) => {
                    tracing::error!(run = %parent, %error, "reading a split run's spec failed; its shares stop");
                }
            }
        }
        let index = ended.share_of.as_ref().map_or(0, |(_, s)| s.index());
        let why = ended.reason.as_deref().unwrap_or("no reason given");
        let reason = format!("share {index} ended {}: {why}", ended.status);
        for live in shares.iter().filter(|s| !s.status.is_finished()) {
            tracing::info!(run = %parent, share = %live.id, %reason, "cancelling a split run's share");
            self.cascade.push((live.id.clone(), reason.clone()));
        }
    }

    /// A cancel of a split run: its reason kept on it, and a cancel of each live share.
    pub(super) async fn cancel_split(&mut self, run: &RunRow, reason: &str) {
        if let Err(error) = self.store.set_reason(&run.id, Some(reason)).await {
            tracing::warn!(run = %run.id, %error, "recording the cancel's reason failed");
        }
        match self.store.shares_of(&run.id).await {
            Ok(shares) => {
                for share in shares.iter().filter(|s| !s.status.is_finished()) {
                    self.cascade.push((share.id.clone(), reason.to_string()));
                }
            }
            Err(error) => {
                tracing::error!(run = %run.id, %error, "reading a split run's shares failed")
            }
        }
    }

    /// The cancels split runs asked for, carried out one after another (a cancel may ask
    /// for more: each share is cancelled once, as an ended share is not asked again).
    pub(super) async fn run_cascade(&mut self) {
        while let Some((run_id, reason)) = self.cascade.pop() {
            self.cancel(&run_id, &reason).await;
        }
    }
}
