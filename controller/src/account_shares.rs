//! Each account's share of a process bound (live viewers, event feeds, comparisons): the
//! places an account holds, counted in one table, so one account at its share leaves the
//! rest of the bound to the others. The bound itself stays its owner's (a semaphore, the
//! hub's table); [`AccountShares::take`] checks the share and takes the bound's place
//! while the table is locked, so two callers of one account cannot both pass the last
//! place of its share.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Debug, Clone)]
pub struct AccountShares {
    /// Places held now, per account; an account holding none has no entry.
    held: Arc<Mutex<HashMap<String, usize>>>,
    /// Places one account may hold.
    pub per_account: usize,
}

/// Why a place was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused<E> {
    /// The account holds its share: `per_account`.
    Share(usize),
    /// The process bound refused.
    Bound(E),
}

/// One place of an account's share; dropping it frees the place.
#[derive(Debug)]
pub struct SharePlace {
    held: Arc<Mutex<HashMap<String, usize>>>,
    account_id: String,
}

impl Drop for SharePlace {
    fn drop(&mut self) {
        let mut held = lock(&self.held);
        if let Some(count) = held.get_mut(&self.account_id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.account_id);
            }
        }
    }
}

/// The table's critical sections are a few map operations that cannot panic: a poisoned
/// lock still holds a consistent table.
fn lock(table: &Mutex<HashMap<String, usize>>) -> MutexGuard<'_, HashMap<String, usize>> {
    table
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl AccountShares {
    /// Each account's share of a bound of `bound` places. A share not below the bound
    /// is none: the bound answers alone, with its own refusal.
    pub fn of(bound: usize, per_account: usize) -> AccountShares {
        AccountShares {
            held: Arc::default(),
            per_account: if per_account < bound {
                per_account
            } else {
                usize::MAX
            },
        }
    }

    /// A place of `account_id`'s share and what `bound` gives (the process bound's own
    /// place), or why not: the share is checked first, so an account at its share is told
    /// so whatever the bound's state. `bound` runs with the table locked; it must not
    /// take a place of these same shares.
    pub fn take<T, E>(
        &self,
        account_id: &str,
        bound: impl FnOnce() -> Result<T, E>,
    ) -> Result<(SharePlace, T), Refused<E>> {
        let mut held = lock(&self.held);
        let count = held.get(account_id).copied().unwrap_or(0);
        if count >= self.per_account {
            return Err(Refused::Share(self.per_account));
        }
        let place = bound().map_err(Refused::Bound)?;
        held.insert(account_id.to_string(), count + 1);
        Ok((
            SharePlace {
                held: self.held.clone(),
                account_id: account_id.to_string(),
            },
            place,
        ))
    }

    /// Places `account_id` holds now.
    pub fn held(&self, account_id: &str) -> usize {
        lock(&self.held).get(account_id).copied().unwrap_or(0)
    }
}

/// A process bound that is a plain count of places (event feeds, API requests in flight)
/// with each account's share of it: the semaphore and the shares together, so each such
/// bound is the same few lines.
#[derive(Debug, Clone)]
pub struct SharedBound {
    slots: Arc<Semaphore>,
    shares: AccountShares,
    /// Places the process holds at most.
    pub max: usize,
}

/// Why a place of a [`SharedBound`] was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The process holds `max` places.
    Total(usize),
    /// The account holds its share.
    Account(usize),
}

/// One place of a [`SharedBound`]; dropping it frees the place and the account's.
#[derive(Debug)]
pub struct BoundPlace {
    _slot: OwnedSemaphorePermit,
    _share: SharePlace,
}

impl SharedBound {
    pub fn new(max: usize, per_account: usize) -> SharedBound {
        SharedBound {
            slots: Arc::new(Semaphore::new(max)),
            shares: AccountShares::of(max, per_account),
            max,
        }
    }

    /// A place for `account_id`, or why not (its share is checked first).
    pub fn join(&self, account_id: &str) -> Result<BoundPlace, Full> {
        let (share, slot) = self
            .shares
            .take(account_id, || self.slots.clone().try_acquire_owned())
            .map_err(|refused| match refused {
                Refused::Share(share) => Full::Account(share),
                Refused::Bound(_) => Full::Total(self.max),
            })?;
        Ok(BoundPlace {
            _slot: slot,
            _share: share,
        })
    }

    /// Places `account_id` holds now.
    pub fn held(&self, account_id: &str) -> usize {
        self.shares.held(account_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_checked_first_and_a_place_frees_on_drop() {
        let shares = AccountShares::of(3, 2);
        let (a1, ()) = shares.take("a", || Ok::<_, ()>(())).unwrap();
        let _a2 = shares.take("a", || Ok::<_, ()>(())).unwrap();
        // At its share, `a` is told so even when the bound would refuse too.
        assert_eq!(
            shares.take("a", || Err::<(), _>("full")).unwrap_err(),
            Refused::Share(2)
        );
        // A refusal of the bound takes nothing.
        assert_eq!(
            shares.take("b", || Err::<(), _>("full")).unwrap_err(),
            Refused::Bound("full")
        );
        assert_eq!(shares.held("b"), 0);
        drop(a1);
        assert_eq!(shares.held("a"), 1);
        let _a3 = shares.take("a", || Ok::<_, ()>(())).unwrap();
        assert_eq!(shares.held("a"), 2);
    }

    #[test]
    fn a_shared_bound_refuses_the_account_at_its_share_then_the_process_at_its_bound() {
        let bound = SharedBound::new(3, 2);
        let a1 = bound.join("a").unwrap();
        let _a2 = bound.join("a").unwrap();
        assert_eq!(bound.join("a").unwrap_err(), Full::Account(2));
        let _b1 = bound.join("b").unwrap();
        assert_eq!(bound.join("b").unwrap_err(), Full::Total(3));
        drop(a1);
        assert_eq!(bound.held("a"), 1);
        let _b2 = bound.join("b").unwrap();
        assert_eq!(bound.held("b"), 2);
    }

    #[test]
    fn a_share_not_below_its_bound_is_none() {
        let shares = AccountShares::of(2, 2);
        let _a1 = shares.take("a", || Ok::<_, ()>(())).unwrap();
        let _a2 = shares.take("a", || Ok::<_, ()>(())).unwrap();
        assert_eq!(
            shares.take("a", || Err::<(), _>("full")).unwrap_err(),
            Refused::Bound("full")
        );
    }
}
