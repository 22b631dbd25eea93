//! "The events of an account after N, then live": the one reader of the outbox that
//! streams, served as SSE by `GET /v1/reliability/events` (api/feed.rs) and meant for
//! any other stream (a WebSocket) as it is. Stored events first, then new ones as they
//! commit, read from the store every poll; in `seq` order, without gaps or repeats.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::Stream;
use tokio_util::sync::CancellationToken;

use crate::account_shares::{BoundPlace, Full, SharedBound};
use crate::store::{EventRow, Store};

/// Events read per query.
const PAGE: u32 = 200;

/// The bound on live feeds of a controller, each account's share of it, and how often
/// feeds look for new events.
#[derive(Debug, Clone)]
pub struct FeedLimits {
    /// Feeds at once, and one account's share: one account at its share leaves the rest
    /// to others.
    bound: SharedBound,
    pub poll: Duration,
}

/// Why a feed was refused: the controller serves `max` feeds (`Total`), or the account
/// holds its share (`Account`).
pub type FeedFull = Full;

/// One feed's place; dropping it frees the place.
pub type FeedPlace = BoundPlace;

impl FeedLimits {
    pub fn new(max: usize, per_account: usize, poll: Duration) -> FeedLimits {
        FeedLimits {
            bound: SharedBound::new(max, per_account),
            poll,
        }
    }

    /// Feeds the controller serves at most.
    pub fn max(&self) -> usize {
        self.bound.max
    }

    /// A place for one more feed of `account_id`, or why not.
    pub fn join(&self, account_id: &str) -> Result<FeedPlace, FeedFull> {
        self.bound.join(account_id)
    }
}

/// A refused feed's code and message.
pub fn refusal(full: FeedFull) -> (&'static str, String) {
    match full {
        FeedFull::Total(max) => (
            "too_many_feeds",
            format!("the controller already serves {max} event feeds, its limit; retry later"),
        ),
        FeedFull::Account(share) => (
            "too_many_account_feeds",
            format!(
                "this account already holds {share} event feeds, its share of the controller's; close one"
            ),
        ),
    }
}

impl Default for FeedLimits {
    fn default() -> Self {
        FeedLimits::new(256, 32, Duration::from_millis(250))
    }
}

/// The account's events after `after`, then live ones, until `shutdown` or a store error
/// (logged; the client resumes with the last id it saw).
pub fn account_events(
    store: Store,
    account_id: String,
    after: i64,
    poll: Duration,
    shutdown: CancellationToken,
) -> impl Stream<Item = EventRow> + Send {
    let reader = Reader {
        store,
        account_id,
        last: after,
        pending: VecDeque::new(),
        poll,
        shutdown,
    };
    futures_util::stream::unfold(reader, |mut reader| async move {
        let event = reader.next().await?;
        Some((event, reader))
    })
}

struct Reader {
    store: Store,
    account_id: String,
    last: i64,
    pending: VecDeque<EventRow>,
    poll: Duration,
    shutdown: CancellationToken,
}

impl Reader {
    async fn next(&mut self) -> Option<EventRow> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                self.last = event.seq;
                return Some(event);
            }
            match self
                .store
                .events_after(&self.account_id, self.last, PAGE)
                .await
            {
                Ok(events) if !events.is_empty() => self.pending.extend(events),
                Ok(_) => {
                    tokio::select! {
                        () = tokio::time::sleep(self.poll) => {}
                        _ = self.shutdown.cancelled() => return None,
                    }
                }
                Err(error) => {
                    tracing::error!(account = %self.account_id, %error, "reading events for a feed failed");
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_at_its_share_leaves_the_rest_to_others() {
        let limits = FeedLimits::new(3, 2, Duration::from_millis(10));
        let a1 = limits.join("a").unwrap();
        let _a2 = limits.join("a").unwrap();
        assert_eq!(limits.join("a").unwrap_err(), FeedFull::Account(2));
        let b1 = limits.join("b").unwrap();
        assert_eq!(limits.join("b").unwrap_err(), FeedFull::Total(3));
        drop(a1);
        let _b2 = limits.join("b").unwrap();
        drop(b1);
        let a3 = limits.join("a").unwrap();
        assert_eq!(limits.join("c").unwrap_err(), FeedFull::Total(3));
        drop(a3);
        assert!(limits.join("c").is_ok());
        assert_eq!(limits.bound.held("c"), 0, "dropped at once");
    }
}
