//! Where comparisons are computed: on blocking threads (a comparison of two long load
//! runs takes 50-130 ms of CPU, too long for the async runtime), at most `concurrency`
//! at once, with at most `queue` more waiting. A caller past that is refused at once
//! rather than left waiting behind work it cannot see the end of; the wait of one that
//! is let in is bounded by the queue's length times one comparison. Each account may hold
//! `per_account` of those places (computing or waiting), so one account's burst leaves
//! the rest to the others.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::account_shares::{AccountShares, Refused, SharePlace};

#[derive(Debug, Clone)]
pub struct ComparePool {
    /// Permits for those computing.
    running: Arc<Semaphore>,
    /// Permits for those computing or waiting to.
    admitted: Arc<Semaphore>,
    places: usize,
    /// Places one account may hold.
    shares: AccountShares,
}

/// Why a comparison was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    /// Every place is taken.
    #[error("{0} comparisons are being computed or waiting, the limit")]
    Total(usize),
    /// The account holds its share of the places.
    #[error(
        "this account already has {0} comparisons being computed or waiting, its share of \
         the controller's"
    )]
    Account(usize),
}

impl Full {
    /// The refusal's code: the account's share has its own.
    pub fn code(self) -> &'static str {
        match self {
            Full::Total(_) => "too_many_compares",
            Full::Account(_) => "too_many_account_compares",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Failed {
    #[error("a comparison's thread failed: {0}")]
    Thread(#[from] tokio::task::JoinError),
    #[error("the comparison pool is closed")]
    Closed,
}

/// A place taken in the pool; the comparison runs on [`Admitted::run`].
#[derive(Debug)]
pub struct Admitted {
    running: Arc<Semaphore>,
    place: OwnedSemaphorePermit,
    share: SharePlace,
}

impl ComparePool {
    /// `concurrency` computing and `queue` waiting, `per_account` of those places to
    /// one account (at least one; a share of all of them is none).
    pub fn new(concurrency: usize, queue: usize, per_account: usize) -> ComparePool {
        let concurrency = concurrency.max(1);
        let places = concurrency.saturating_add(queue);
        ComparePool {
            running: Arc::new(Semaphore::new(concurrency)),
            admitted: Arc::new(Semaphore::new(places)),
            places,
            shares: AccountShares::of(places, per_account.max(1)),
        }
    }

    /// A place for `account_id`, or `Full` at once. Taken before the inputs are read, so
    /// what waiting callers hold in memory is bounded too.
    pub fn admit(&self, account_id: &str) -> Result<Admitted, Full> {
        let (share, place) = self
            .shares
            .take(account_id, || self.admitted.clone().try_acquire_owned())
            .map_err(|refused| match refused {
                Refused::Share(share) => Full::Account(share),
                Refused::Bound(_) => Full::Total(self.places),
            })?;
        Ok(Admitted {
            running: self.running.clone(),
            place,
            share,
        })
    }
}

impl Admitted {
    /// Runs `work` on a blocking thread once one of the `concurrency` slots is free. The
    /// permits go with the thread: a caller who hangs up does not free a slot its
    /// comparison still occupies.
    pub async fn run<T: Send + 'static>(
        self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Failed> {
        let Admitted {
            running,
            place,
            share,
        } = self;
        let slot = running.acquire_owned().await.map_err(|_| Failed::Closed)?;
        Ok(tokio::task::spawn_blocking(move || {
            let _held = (place, slot, share);
            work()
        })
        .await?)
    }
}

#[cfg(test)]
mod tests;
