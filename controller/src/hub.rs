//! The live side of frames: every stored frame is published here once, to the viewers
//! (SSE, gRPC WatchRun, a cancel waiting for its run to end) of its own run only. Each
//! watched run has its own broadcast, made by its first viewer and dropped with its last,
//! so a viewer wakes for its run's frames and nothing else, and publishing a frame of a
//! run nobody watches costs one map lookup. A viewer that falls behind reads the rest
//! from the store, so nothing is lost.
//!
//! Viewers are bounded per run and in total, and each account has a share of the total;
//! a viewer past a bound is refused ([`HubFull`]) before it holds anything.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::broadcast;

use crate::account_shares::{AccountShares, Refused, SharePlace};
use crate::store::StoredFrame;

/// Frames one run's broadcast holds for its slowest viewer; a viewer further behind is
/// told it lagged and catches up from the store.
pub const RUN_CAPACITY: usize = 1024;

/// Viewers allowed on one run, on the whole controller, and to one account (its share of
/// the total; one not below the total is none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewerLimits {
    pub per_run: usize,
    pub total: usize,
    pub per_account: usize,
}

impl Default for ViewerLimits {
    fn default() -> Self {
        ViewerLimits {
            per_run: 256,
            total: 4096,
            per_account: 256,
        }
    }
}

/// Why a viewer was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HubFull {
    #[error("run {0} already has its limit of viewers")]
    PerRun(usize),
    #[error("the controller already serves its limit of {0} viewers")]
    Total(usize),
    #[error(
        "this account already holds {0} live viewers (streams and WebSocket connections), \
         its share of the controller's; close one"
    )]
    Account(usize),
}

impl From<Refused<HubFull>> for HubFull {
    fn from(refused: Refused<HubFull>) -> HubFull {
        match refused {
            Refused::Share(share) => HubFull::Account(share),
            Refused::Bound(full) => full,
        }
    }
}

impl HubFull {
    /// The refusal's code: the account's share has its own.
    pub fn code(self) -> &'static str {
        match self {
            HubFull::Account(_) => "too_many_account_viewers",
            HubFull::PerRun(_) | HubFull::Total(_) => "too_many_viewers",
        }
    }
}

#[derive(Debug)]
struct RunChannel {
    tx: broadcast::Sender<Arc<StoredFrame>>,
    viewers: usize,
}

#[derive(Debug, Default)]
struct Viewers {
    runs: HashMap<String, RunChannel>,
    total: usize,
}

#[derive(Debug, Clone)]
pub struct FrameHub {
    viewers: Arc<Mutex<Viewers>>,
    /// Callers' viewers per account; the controller's own (internal) viewers hold none.
    shares: AccountShares,
    limits: ViewerLimits,
}

impl Default for FrameHub {
    fn default() -> Self {
        FrameHub::new(ViewerLimits::default())
    }
}

impl FrameHub {
    pub fn new(limits: ViewerLimits) -> FrameHub {
        FrameHub {
            viewers: Arc::default(),
            shares: AccountShares::of(limits.total, limits.per_account),
            limits,
        }
    }

    pub fn limits(&self) -> ViewerLimits {
        self.limits
    }

    /// Viewers of live runs now (SSE, WebSocket, gRPC and console streams).
    pub fn viewer_count(&self) -> usize {
        self.lock().total
    }

    /// The table; every critical section is a few map operations that cannot panic, so a
    /// poisoned lock still holds a consistent table.
    fn lock(&self) -> MutexGuard<'_, Viewers> {
        self.viewers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Hands the frame to its run's viewers, if it has any.
    pub fn publish(&self, frame: StoredFrame) {
        let viewers = self.lock();
        if let Some(channel) = viewers.runs.get(&frame.run_id) {
            // A send fails only with no receiver left; the frame is in the store already.
            let _ = channel.tx.send(Arc::new(frame));
        }
    }

    /// A viewer of one run for `account_id`, within the limits and the account's share.
    pub fn subscribe(&self, run_id: &str, account_id: &str) -> Result<Subscription, HubFull> {
        let (share, mut subscription) = self
            .shares
            .take(account_id, || {
                let mut viewers = self.lock();
                if viewers.total >= self.limits.total {
                    return Err(HubFull::Total(self.limits.total));
                }
                if viewers.runs.get(run_id).map_or(0, |c| c.viewers) >= self.limits.per_run {
                    return Err(HubFull::PerRun(self.limits.per_run));
                }
                Ok(self.seat(&mut viewers, run_id))
            })
            .map_err(HubFull::from)?;
        subscription._share = Some(share);
        Ok(subscription)
    }

    /// A viewer the controller itself needs (a cancel waiting for its run's end): counted,
    /// never refused, as it lasts a few seconds and a caller cannot hold it open.
    pub fn subscribe_internal(&self, run_id: &str) -> Subscription {
        let mut viewers = self.lock();
        self.seat(&mut viewers, run_id)
    }

    /// A place of its own for a WebSocket stream's connection (`api::stream`), counted
    /// in the total like a viewer: the connection holds memory and a task before it
    /// subscribes to anything, and upgraded connections hold no place of the API
    /// listener's bound. Each of its subscriptions takes a viewer's place besides. It
    /// counts in its account's share as well.
    pub fn hold_connection(&self, account_id: &str) -> Result<ConnectionSeat, HubFull> {
        let (share, ()) = self
            .shares
            .take(account_id, || {
                let mut viewers = self.lock();
                if viewers.total >= self.limits.total {
                    return Err(HubFull::Total(self.limits.total));
                }
                viewers.total += 1;
                Ok(())
            })
            .map_err(HubFull::from)?;
        Ok(ConnectionSeat {
            hub: self.clone(),
            _share: share,
        })
    }

    fn seat(&self, viewers: &mut Viewers, run_id: &str) -> Subscription {
        viewers.total += 1;
        let channel = viewers
            .runs
            .entry(run_id.to_string())
            .or_insert_with(|| RunChannel {
                tx: broadcast::channel(RUN_CAPACITY).0,
                viewers: 0,
            });
        channel.viewers += 1;
        Subscription {
            frames: channel.tx.subscribe(),
            _seat: Seat {
                hub: self.clone(),
                run_id: run_id.to_string(),
            },
            _share: None,
        }
    }

    fn leave(&self, run_id: &str) {
        let mut viewers = self.lock();
        viewers.total = viewers.total.saturating_sub(1);
        if let Some(channel) = viewers.runs.get_mut(run_id) {
            channel.viewers = channel.viewers.saturating_sub(1);
            if channel.viewers == 0 {
                viewers.runs.remove(run_id);
            }
        }
    }

    /// Viewers now: (on this run, in total).
    pub fn viewers(&self, run_id: &str) -> (usize, usize) {
        let viewers = self.lock();
        (
            viewers.runs.get(run_id).map_or(0, |c| c.viewers),
            viewers.total,
        )
    }

    /// Runs with a broadcast now (one per watched run).
    pub fn watched_runs(&self) -> usize {
        self.lock().runs.len()
    }
}

/// One viewer's frames; dropping it frees its place (and its run's broadcast with the
/// last viewer).
#[derive(Debug)]
pub struct Subscription {
    pub frames: broadcast::Receiver<Arc<StoredFrame>>,
    _seat: Seat,
    /// The caller's account's place; none for an internal viewer.
    _share: Option<SharePlace>,
}

/// A WebSocket connection's place in the total and its account's share; dropping it
/// frees the place.
#[derive(Debug)]
pub struct ConnectionSeat {
    hub: FrameHub,
    _share: SharePlace,
}

impl Drop for ConnectionSeat {
    fn drop(&mut self) {
        let mut viewers = self.hub.lock();
        viewers.total = viewers.total.saturating_sub(1);
    }
}

#[derive(Debug)]
struct Seat {
    hub: FrameHub,
    run_id: String,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.hub.leave(&self.run_id);
    }
}

#[cfg(test)]
mod tests;
