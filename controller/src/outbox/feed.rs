//! "The events of an account after N, then live": the one reader of the outbox that
//! streams, served as SSE by `GET /v1/reliability/events` (api/feed.rs) and meant for
//! any other stream (a WebSocket) as it is. Stored events first, then new ones as they
//! commit, read from the store every poll; in `seq` order, without gaps or repeats.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::store::{EventRow, Store};

/// Events read per query.
const PAGE: u32 = 200;

/// The bound on live feeds of a controller, and how often they look for new events.
#[derive(Debug, Clone)]
pub struct FeedLimits {
    slots: Arc<Semaphore>,
    pub max: usize,
    pub poll: Duration,
}

impl FeedLimits {
    pub fn new(max: usize, poll: Duration) -> FeedLimits {
        FeedLimits {
            slots: Arc::new(Semaphore::new(max)),
            max,
            poll,
        }
    }

    /// A place for one more feed, or `None` at the bound.
    pub fn join(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }
}

impl Default for FeedLimits {
    fn default() -> Self {
        FeedLimits::new(256, Duration::from_millis(250))
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
