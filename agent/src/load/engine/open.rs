//! The open model's workers and the pool that grows them. Every worker, when free, takes
//! the next request of the arrival timeline (a shared counter: no queue, constant
//! memory), waits for its time if early and sends at once if late.
//!
//! A request due while every worker is busy would wait for one: the pool opens another
//! connection for it instead, up to the plan's `max_connections` (k6's `maxVUs`; Gatling's
//! open model opens a user per arrival, unbounded). One task, the grower, looks a little
//! after the next untaken request is due; if no worker has taken it by then, all were
//! busy and it starts one for each request due and untaken.
//!
//! Over HTTP/2 with streams shared, a worker is free only once its connection has a
//! stream for it: it keeps one (below the server's SETTINGS_MAX_CONCURRENT_STREAMS)
//! before it takes a request, so a request due while every stream is taken is left to
//! the grower, as one due while every worker is busy.
//!
//! Why a send was late, counted apart ([`ScheduleTally`]): a worker that was still in its
//! previous exchange when the request was due, with the pool at its bound, waited for the
//! target to free a connection (`late_held`: the target's latency, and the
//! configuration's bound); one that was free by then and still sent more than the
//! generator's bound late was behind on its own runtime (`late_behind`: the generator's).
//!
//! [`ScheduleTally`]: crate::load::recorder::ScheduleTally

use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use iohr_domain::load::HttpVersion;
use tokio::sync::Mutex as AsyncMutex;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{LATE_TOLERANCE, Link, Shared, micros};
use crate::load::client::Connection;
use crate::load::h2::Reservation;
use crate::load::schedule::timeline::Timeline;

/// How long after a request is due the grower looks whether a worker took it: well
/// inside the late tolerance, so a new connection still sends it on time.
const GRACE: Duration = Duration::from_millis(2);
/// The grower looks at most once a millisecond, whatever the rate.
const MIN_GAP: Duration = Duration::from_millis(1);
/// Later than this with a connection free, a send is the generator's
/// ([`iohr_domain::stress::BEHIND_BOUND_MS`]).
const BEHIND_BOUND: Duration = Duration::from_millis(iohr_domain::stress::BEHIND_BOUND_MS);

/// A connection several workers' streams share (HTTP/2).
type Group = Arc<AsyncMutex<Option<Connection>>>;

/// The open model's workers: how many there are, their bound, and the timeline they
/// share.
pub(super) struct Pool {
    pub(super) shared: Arc<Shared>,
    timeline: Arc<Timeline>,
    /// The timeline's next untaken request.
    next: AtomicU64,
    start: Instant,
    /// Workers started so far, and the most there may be (`max_connections` times the
    /// streams per connection).
    started: AtomicU64,
    most: u64,
    streams: u64,
    /// When `started` reached `most` (at the start, when the plan allows no growth).
    full_at: OnceLock<Instant>,
    /// HTTP/2 with several streams: the connections workers share, `streams` each.
    groups: Option<Mutex<Vec<Group>>>,
}

impl Pool {
    /// A pool of `connections` to start and at most `max_connections`.
    pub(super) fn new(
        shared: Arc<Shared>,
        timeline: Arc<Timeline>,
        start: Instant,
        (connections, max_connections): (u32, u32),
        http: HttpVersion,
        streams: u32,
    ) -> Pool {
        let streams = u64::from(streams.max(1));
        let pool = Pool {
            shared,
            timeline,
            next: AtomicU64::new(0),
            start,
            started: AtomicU64::new(0),
            most: u64::from(max_connections.max(connections)) * streams,
            streams,
            full_at: OnceLock::new(),
            groups: (http == HttpVersion::Http2 && streams > 1).then(|| Mutex::new(Vec::new())),
        };
        if u64::from(connections) * streams >= pool.most {
            let _ = pool.full_at.set(start);
        }
        pool
    }

    /// The most connections the run opened (or shares, for HTTP/2 with several streams).
    pub(super) fn connections_opened(&self) -> u32 {
        let workers = self.started.load(Ordering::Relaxed);
        u32::try_from(workers.div_ceil(self.streams)).unwrap_or(u32::MAX)
    }

    /// Whether the pool had reached its bound by `at`.
    fn full_by(&self, at: Instant) -> bool {
        self.full_at.get().is_some_and(|full| *full <= at)
    }

    /// A new worker's id and link, or `None` at the bound.
    fn claim(&self) -> Option<(usize, Link)> {
        let id = self
            .started
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.most).then_some(n + 1)
            })
            .ok()?;
        if id + 1 == self.most {
            let _ = self.full_at.set(Instant::now());
        }
        let link = match &self.groups {
            None => Link::Own(None),
            Some(groups) => {
                let mut groups = groups.lock().unwrap_or_else(PoisonError::into_inner);
                let group = usize::try_from(id / self.streams).unwrap_or(usize::MAX);
                // Ids are claimed in order but may get here out of it.
                while groups.len() <= group {
                    groups.push(Arc::new(AsyncMutex::new(None)));
                }
                Link::Shared(groups[group].clone())
            }
        };
        Some((usize::try_from(id).unwrap_or(usize::MAX), link))
    }

    /// Starts the plan's first `connections` workers into `tasks`, and the grower.
    pub(super) fn spawn(self: &Arc<Pool>, connections: u32, tasks: &mut JoinSet<()>) {
        for _ in 0..u64::from(connections) * self.streams {
            let Some((id, link)) = self.claim() else {
                break;
            };
            tasks.spawn(worker(self.clone(), id, link));
        }
        if self.full_at.get().is_none() {
            tasks.spawn(grow(self.clone()));
        }
    }
}

/// Looks, a little after the next untaken request is due, whether a worker took it; if
/// none did, every worker was busy, and it starts one for each request due and untaken,
/// up to the bound. A runtime a whole late tolerance behind its own timer would not send
/// sooner on a new connection: then it waits for the next look. Ends with the timeline, the bound or
/// the run, after the workers it started.
async fn grow(pool: Arc<Pool>) {
    let mut grown = JoinSet::new();
    let mut stopped = pin!(pool.shared.stop.cancelled());
    let mut last = pool.start;
    while pool.full_at.get().is_none() {
        let i = pool.next.load(Ordering::Relaxed);
        let Some((offset, _, _)) = pool.timeline.at(i) else {
            break;
        };
        let look = (pool.start + offset + GRACE).max(last + MIN_GAP);
        tokio::select! {
            biased;
            () = stopped.as_mut() => break,
            () = tokio::time::sleep_until(look) => {}
        }
        let now = Instant::now();
        last = now;
        if pool.next.load(Ordering::Relaxed) != i || now > look + LATE_TOLERANCE {
            continue;
        }
        let mut due = i;
        while pool
            .timeline
            .at(due)
            .is_some_and(|(offset, _, _)| pool.start + offset <= now)
        {
            let Some((id, link)) = pool.claim() else {
                break;
            };
            grown.spawn(worker(pool.clone(), id, link));
            due += 1;
        }
    }
    while grown.join_next().await.is_some() {}
}

/// One worker: takes the timeline's next request until there is none.
async fn worker(pool: Arc<Pool>, id: usize, mut link: Link) {
    let shared = &pool.shared;
    let recorder = &shared.recorder;
    let mut timer = pin!(tokio::time::sleep(shared.timeout));
    // One waiter for the whole run: a fresh `cancelled()` per request registered and
    // unregistered itself under the token's lock each time.
    let mut stopped = pin!(shared.stop.cancelled());
    // Since when this worker has been free to send.
    let mut free_since = Instant::now();
    // HTTP/2 with streams shared: a stream kept on the group's connection for the next
    // request.
    let mut kept: Option<Connection> = None;
    loop {
        // A worker whose connection has no stream free (the server's
        // SETTINGS_MAX_CONCURRENT_STREAMS reached) is not free: it waits for one before it
        // takes a request, so that a request due meanwhile is left to the grower (a new
        // connection) or, at the bound, counts as held. Taken first, it would wait inside
        // the exchange, counted as sent on time and with no connection opened for it. A
        // connection not yet made is made by the exchange, as before: its first requests
        // past the server's limit still wait there.
        if kept.is_none()
            && let Link::Shared(slot) = &link
        {
            let current = slot
                .lock()
                .await
                .as_ref()
                .filter(|c| c.is_reusable())
                .and_then(Connection::share);
            if let Some(mut handle) = current {
                let reservation = tokio::select! {
                    biased;
                    reservation = handle.reserve() => reservation,
                    () = stopped.as_mut() => return,
                };
                match reservation {
                    Reservation::Free => kept = Some(handle),
                    Reservation::Waited => {
                        kept = Some(handle);
                        free_since = Instant::now();
                    }
                    Reservation::None => {}
                }
            }
        }
        let i = pool.next.fetch_add(1, Ordering::Relaxed);
        let Some((offset, operation, phase)) = pool.timeline.at(i) else {
            return;
        };
        let intended = pool.start + offset;
        let now = Instant::now();
        if intended > now {
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(intended) => {}
                () = stopped.as_mut() => return,
            }
        } else if now - intended > shared.timeout {
            recorder.schedule(id, phase, |s| {
                s.intended += 1;
                s.dropped += 1;
            });
            continue;
        }
        if shared.stop.is_cancelled() {
            return;
        }
        let started = Instant::now();
        let lateness = started.saturating_duration_since(intended);
        let late = lateness > LATE_TOLERANCE;
        // Busy when it was due, with no connection to be had: the target held them all.
        let held = late && free_since > intended && pool.full_by(intended + GRACE);
        let behind = !held && lateness > BEHIND_BOUND;
        recorder.schedule(id, phase, |s| {
            s.intended += 1;
            s.sent += 1;
            s.late += u64::from(late);
            s.late_held += u64::from(held);
            s.late_behind += u64::from(behind);
        });
        let trace: u64 = rand::random();
        // Biased: no random branch order (and no RNG draw) per request.
        let outcome = tokio::select! {
            biased;
            outcome = shared.exchange(&mut link, (operation, trace), started, timer.as_mut(), kept.take()) => outcome,
            () = stopped.as_mut() => return,
        };
        let ended = Instant::now();
        free_since = ended;
        recorder.record(
            id,
            phase,
            operation,
            outcome,
            micros(ended - intended),
            micros(ended - started),
            shared.traced(operation, trace),
        );
    }
}

#[cfg(test)]
mod h2_tests;
#[cfg(test)]
mod tests;
