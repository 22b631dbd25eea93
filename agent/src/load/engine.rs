//! The engine loop. Open model ([`open`]): every connection's worker, when free, takes
//! the next request of the arrival timeline (a shared counter, so no queue and constant
//! memory), waits for its intended time if it is early and sends at once if it is late;
//! when every worker is busy as a request falls due, the pool opens another connection,
//! up to the plan's `max_connections`. Latency is measured from the *intended* time, so a
//! stalled target shows in the tail (wrk2's correction) while the uncorrected figure is
//! kept beside it. A request that starts more than [`LATE_TOLERANCE`] after its time
//! counts as late (and as held when it waited for a connection the target held at the
//! bound); one whose time is already a whole timeout in the past when a connection gets
//! to it could not succeed in time and is dropped and counted (as k6's
//! `dropped_iterations`). Closed model: each connection sends as fast as the target
//! answers. A reporter emits one `load` frame a second.

use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use iohr_domain::FrameKind;
use iohr_domain::histogram::{HistogramError, encode};
use iohr_domain::load::{
    Exemplars, HttpVersion, LoadPlan, LoadSecond, MAX_DURATION, Model, OperationSecond,
    SLOW_SECONDS, SlowSecond, Slowest, WarmupPlan, abort_reason, first_crossed,
};
use tokio::sync::Mutex;
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

use super::client::{Connection, Endpoint, Failure};
use super::deadline;
use super::poller::Poller;
use super::recorder::{Phase, Recorder, Window};
use super::request::PreparedOp;
use super::schedule::ArrivalSchedule;
use super::schedule::timeline::{Picker, Timeline};
use crate::frames::{FrameSender, NewFrame};
use crate::stress::Meter;

mod blocks;
mod open;

use blocks::Blocks;
use open::Pool;

/// A request that starts later than this after its intended time counts as late.
pub const LATE_TOLERANCE: Duration = Duration::from_millis(10);

pub use super::schedule::timeline::Arrivals;

/// What the engine runs.
pub struct Engine {
    pub endpoint: Arc<Endpoint>,
    pub operations: Arc<Vec<PreparedOp>>,
    pub plan: LoadPlan,
    /// Open model only.
    pub arrivals: Option<Arrivals>,
    /// Open model: the warm-up's constant rate (requests per second).
    pub warmup_rate: f64,
    /// Told the measure's start and end and each measured second's sends, for the
    /// generator's verdict ([`crate::stress`]).
    pub stress: Option<Meter>,
}

/// What the engine measured.
pub struct Report {
    pub measure: Window,
    pub warmup: Window,
    pub measured: Duration,
    pub aborted: Option<String>,
    pub cancelled: bool,
    /// The measure's total latency in consecutive blocks of `block_seconds`, encoded (at
    /// most [`MAX_BLOCKS`]): what compare's block bootstrap resamples.
    pub blocks: Vec<String>,
    pub block_seconds: u64,
    /// Per operation (in plan order), its latency in blocks of `operation_block_seconds`.
    pub operation_blocks: Vec<Vec<String>>,
    pub operation_block_seconds: u64,
    /// The measure's slowest seconds by p99, with their exemplars.
    pub slow_seconds: Vec<SlowSecond>,
}

/// Blocks kept per run, whatever its length: a one-hour run keeps minute blocks.
pub const MAX_BLOCKS: u64 = 60;

/// When the measure starts: known at the start for a timed warm-up, when the last
/// warm-up request starts for a counted one.
struct PhaseClock {
    start: Instant,
    measure_start: OnceLock<Instant>,
}

impl PhaseClock {
    fn measure_start(&self) -> Option<Instant> {
        self.measure_start.get().copied()
    }
}

/// One worker's connection: its own, or (HTTP/2 with several streams) one shared by its
/// group.
enum Link {
    Own(Option<Connection>),
    Shared(Arc<Mutex<Option<Connection>>>),
}

struct Shared {
    endpoint: Arc<Endpoint>,
    operations: Arc<Vec<PreparedOp>>,
    recorder: Recorder,
    timeout: Duration,
    stop: CancellationToken,
}

impl Shared {
    /// One request on the worker's link, bounded by the per-request timeout (which
    /// covers connecting when the link has to). On a worker's own connection a failure
    /// drops the connection, and so does an answer after which it cannot be reused
    /// (`Connection: close`, GOAWAY); a shared HTTP/2 connection is replaced only once
    /// the server closed it or sent GOAWAY.
    ///
    /// `timer` is the worker's own, moved on only when it fires ([`deadline`]): a
    /// `timeout` per request inserts and removes a timer-wheel entry under the driver's
    /// lock, and even a reset per request cost instructions that add up.
    ///
    /// `kept`: a handle on the shared connection with a stream kept for this request
    /// (the open model's, [`open`]); used while that connection is still the group's,
    /// else dropped, which gives the stream back.
    ///
    /// `trace`: the random half of the request's trace id ([`Shared::traced`]).
    async fn exchange(
        &self,
        link: &mut Link,
        (operation, trace): (usize, u64),
        started: Instant,
        mut timer: Pin<&mut Sleep>,
        mut kept: Option<Connection>,
    ) -> Result<u16, Failure> {
        let op = &self.operations[operation];
        // The handle on the shared connection the request goes on: also what tells that
        // connection from its replacement afterwards.
        let mut used: Option<Connection> = None;
        let attempt = async {
            // A request the server did not process (HTTP/2: refused by a GOAWAY or with
            // REFUSED_STREAM, RFC 9113 8.7) is sent once more, on a new connection when
            // the old one is going away: it cost the server nothing, so it did not fail. A
            // connection that cannot take more is left before a request.
            let mut tries = 0;
            loop {
                tries += 1;
                let conn = match &mut *link {
                    Link::Own(slot) => {
                        if slot.as_ref().is_none_or(|c| !c.is_reusable()) {
                            *slot = Some(self.endpoint.connect().await?);
                        }
                        slot.as_mut().ok_or(Failure::Connect)?
                    }
                    Link::Shared(slot) => {
                        let mut guard = slot.lock().await;
                        if guard.as_ref().is_none_or(|c| !c.is_reusable()) {
                            *guard = Some(self.endpoint.connect().await?);
                        }
                        used = match (kept.take(), guard.as_ref()) {
                            (Some(k), Some(current)) if k.same_as(current) => Some(k),
                            (_, current) => current.and_then(Connection::share),
                        };
                        used.as_mut().ok_or(Failure::Connect)?
                    }
                };
                match conn.send(op, trace).await {
                    Err(_) if tries == 1 && conn.unprocessed() => continue,
                    outcome => return Ok((outcome?, conn.is_reusable())),
                }
            }
        };
        let due = started + self.timeout;
        deadline::arm(&mut timer, due);
        let attempt = {
            let mut attempt = pin!(attempt);
            std::future::poll_fn(|cx| deadline::poll_within(cx, &mut timer, due, attempt.as_mut()))
                .await
        };
        let (outcome, keep) = match attempt {
            Ok((status, reusable)) => (Ok(status), reusable),
            Err(failure) => (Err(failure), false),
        };
        // A shared HTTP/2 connection stays after one stream's failure (its stream reset,
        // the others' go on), but not after a timeout: the connection may be stalled as a
        // whole, and without a new one the group would time out for the rest of the run.
        // Only the connection the request went on is dropped, not a new one another
        // worker put in its place. One the server closed or sent GOAWAY on is replaced at
        // the next request (`is_reusable`).
        match link {
            Link::Own(slot) if !keep => *slot = None,
            Link::Shared(slot) if outcome == Err(Failure::Timeout) => {
                let mut guard = slot.lock().await;
                if let (Some(current), Some(used)) = (guard.as_ref(), used.as_ref())
                    && current.same_as(used)
                {
                    *guard = None;
                }
            }
            _ => {}
        }
        outcome
    }
}

impl Shared {
    /// The random half of a request's trace id, drawn by the worker (the stamper draws
    /// only the span id), and what the recorder keeps of it: nothing when the operation
    /// sends a traceparent of the spec's own.
    fn traced(&self, operation: usize, trace: u64) -> Option<u64> {
        self.operations
            .get(operation)
            .is_some_and(PreparedOp::stamps)
            .then_some(trace)
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Engine {
    pub async fn run(
        self,
        frames: &FrameSender,
        cancel: CancellationToken,
    ) -> Result<Report, HistogramError> {
        let plan = self.plan;
        let workers = (plan.connections * plan.streams) as usize;
        let shards = std::thread::available_parallelism().map_or(2, |n| n.get());
        let shared = Arc::new(Shared {
            endpoint: self.endpoint,
            operations: self.operations,
            recorder: Recorder::new(plan.operations.len(), shards)?,
            timeout: plan.timeout,
            stop: cancel.child_token(),
        });
        let weights: Vec<u32> = plan.operations.iter().map(|o| o.weight).collect();
        let start = Instant::now();
        let clock = Arc::new(PhaseClock {
            start,
            measure_start: OnceLock::new(),
        });
        let mut tasks = JoinSet::new();
        let workers_done = CancellationToken::new();
        let mut opened: Option<Arc<Pool>> = None;

        match plan.model {
            Model::Open => {
                let warmup = match plan.warmup {
                    WarmupPlan::None => Duration::ZERO,
                    WarmupPlan::Duration(d) => d,
                    // The plan bounds the count by what the rate sends in its cap; should
                    // one come unchecked, the warm-up stops at the cap, not in a panic.
                    WarmupPlan::Requests(n) if self.warmup_rate > 0.0 => {
                        Duration::try_from_secs_f64(n as f64 / self.warmup_rate)
                            .map_or(MAX_DURATION, |d| d.min(MAX_DURATION))
                    }
                    WarmupPlan::Requests(_) => Duration::ZERO,
                };
                let _ = clock.measure_start.set(start + warmup);
                let warm = (!warmup.is_zero() && self.warmup_rate > 0.0)
                    .then(|| ArrivalSchedule::constant(self.warmup_rate, warmup).ok())
                    .flatten();
                let timeline = Arc::new(Timeline::new(
                    warm,
                    warmup,
                    self.arrivals.unwrap_or(Arrivals::Recorded(Vec::new())),
                    &weights,
                    plan.share,
                ));
                let pool = Arc::new(Pool::new(
                    shared.clone(),
                    timeline,
                    start,
                    (plan.connections, plan.max_connections),
                    plan.http,
                    plan.streams,
                ));
                pool.spawn(plan.connections, &mut tasks);
                if let Some(meter) = &self.stress {
                    meter.connection_bound(plan.max_connections);
                }
                opened = Some(pool);
            }
            Model::Closed => {
                let counter = Arc::new(AtomicU64::new(0));
                let picker = Arc::new(Picker::new(&weights));
                match plan.warmup {
                    WarmupPlan::None => {
                        let _ = clock.measure_start.set(start);
                    }
                    WarmupPlan::Duration(d) => {
                        let _ = clock.measure_start.set(start + d);
                    }
                    WarmupPlan::Requests(_) => {}
                }
                let warmup_requests = match plan.warmup {
                    WarmupPlan::Requests(n) => n,
                    _ => 0,
                };
                let poller = Poller::applies().then(|| Arc::new(Poller::default()));
                let links = make_links(workers, plan.http, plan.streams);
                for (id, link) in links.into_iter().enumerate() {
                    tasks.spawn(closed_worker(ClosedWorker {
                        id,
                        link,
                        shared: shared.clone(),
                        picker: picker.clone(),
                        counter: counter.clone(),
                        clock: clock.clone(),
                        warmup_requests,
                        duration: plan.duration,
                        poller: poller.clone(),
                    }));
                }
                if let Some(poller) = poller {
                    let done = workers_done.clone();
                    tokio::spawn(async move { poller.run(&counter, &done).await });
                }
            }
        }

        let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            while tasks.join_next().await.is_some() {}
            workers_done.cancel();
            let _ = done_tx.send(());
        });

        let reporter = Reporter {
            shared: shared.clone(),
            plan: &plan,
            frames,
            stress: self.stress,
        };
        let report = reporter.run(&clock, &mut done_rx, &cancel).await;
        if let (Some(pool), Some(meter)) = (opened, &reporter.stress) {
            meter.connections_opened(pool.connections_opened());
        }
        report
    }
}

fn make_links(workers: usize, http: HttpVersion, streams: u32) -> Vec<Link> {
    if http == HttpVersion::Http2 && streams > 1 {
        let groups: Vec<_> = (0..workers.div_ceil(streams as usize))
            .map(|_| Arc::new(Mutex::new(None)))
            .collect();
        (0..workers)
            .map(|i| Link::Shared(groups[i / streams as usize].clone()))
            .collect()
    } else {
        (0..workers).map(|_| Link::Own(None)).collect()
    }
}

struct ClosedWorker {
    id: usize,
    link: Link,
    shared: Arc<Shared>,
    picker: Arc<Picker>,
    counter: Arc<AtomicU64>,
    clock: Arc<PhaseClock>,
    warmup_requests: u64,
    duration: Duration,
    /// Set on a current-thread runtime (see [`Poller`]).
    poller: Option<Arc<Poller>>,
}

async fn closed_worker(mut w: ClosedWorker) {
    let mut timer = pin!(tokio::time::sleep(w.shared.timeout));
    // One waiter for the whole run: a fresh `cancelled()` per request registered and
    // unregistered itself under the token's lock each time.
    let mut stopped = pin!(w.shared.stop.cancelled());
    loop {
        let now = Instant::now();
        let measure_start = w.clock.measure_start();
        if measure_start.is_some_and(|t0| now >= t0 + w.duration) || w.shared.stop.is_cancelled() {
            return;
        }
        let seq = w.counter.fetch_add(1, Ordering::Relaxed);
        if let Some(poller) = &w.poller {
            poller.request_started();
        }
        let phase = match measure_start {
            Some(t0) if now >= t0 => Phase::Measure,
            Some(_) => Phase::Warmup,
            // A counted warm-up that takes as long as the measure would gives up.
            None if seq < w.warmup_requests && now < w.clock.start + w.duration => Phase::Warmup,
            None => {
                // The first request past a counted warm-up starts the measure.
                let _ = w.clock.measure_start.set(now);
                Phase::Measure
            }
        };
        let operation = w.picker.pick(seq);
        let trace: u64 = rand::random();
        // Biased: no random branch order (and no RNG draw) per request.
        let outcome = tokio::select! {
            biased;
            outcome = w.shared.exchange(&mut w.link, (operation, trace), now, timer.as_mut(), None) => outcome,
            () = stopped.as_mut() => return,
        };
        let took = micros(now.elapsed());
        // Sent and ended under one lock: the closed model's hot path.
        w.shared.recorder.record_sent(
            w.id,
            phase,
            operation,
            outcome,
            took,
            w.shared.traced(operation, trace),
        );
    }
}

struct Reporter<'a> {
    shared: Arc<Shared>,
    plan: &'a LoadPlan,
    frames: &'a FrameSender,
    stress: Option<Meter>,
}

impl Reporter<'_> {
    async fn run(
        &self,
        clock: &PhaseClock,
        done: &mut tokio::sync::oneshot::Receiver<()>,
        cancel: &CancellationToken,
    ) -> Result<Report, HistogramError> {
        let names: Vec<String> = self
            .plan
            .operations
            .iter()
            .map(|o| o.display_name())
            .collect();
        let mut warm_total = Window::new(names.len(), Phase::Warmup)?;
        let mut measure_total = Window::new(names.len(), Phase::Measure)?;
        let mut in_measure = clock.measure_start().is_some_and(|t0| t0 <= clock.start);
        let mut anchor = clock.start;
        if in_measure && let Some(meter) = &self.stress {
            meter.measure_started(anchor);
        }
        let mut second = 1u64;
        let mut aborted = None;
        let mut finished = false;
        let mut frames_sent = 0u64;
        let mut blocks = Blocks::new(self.plan.duration, names.len())?;
        let mut slow = Slowest::<SlowSecond, SLOW_SECONDS>::default();
        let mut frame_work = Duration::ZERO;
        while !finished {
            let tick = anchor + Duration::from_secs(second);
            let next = match clock.measure_start() {
                Some(t0) if !in_measure => tick.min(t0),
                _ => tick,
            };
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = &mut *done => finished = true,
                _ = cancel.cancelled() => finished = true,
            }
            let now = Instant::now();
            let work = std::time::Instant::now();
            frames_sent += 1;
            if !in_measure {
                let crossed = clock.measure_start().filter(|t0| *t0 <= now);
                let window = self.shared.recorder.take(Phase::Warmup)?;
                crate::metrics::requests_sent(window.schedule.sent);
                self.frames
                    .send(self.frame(second, Phase::Warmup, &window, &names, &mut slow)?)
                    .await;
                warm_total.add(&window);
                if let Some(t0) = crossed {
                    in_measure = true;
                    anchor = t0;
                    second = 1;
                    if let Some(meter) = &self.stress {
                        meter.measure_started(t0);
                    }
                } else {
                    second += 1;
                }
                if !finished {
                    frame_work += work.elapsed();
                    continue;
                }
            }
            let window = self.shared.recorder.take(Phase::Measure)?;
            crate::metrics::requests_sent(window.schedule.sent);
            if window.total_counts().requests > 0 || window.schedule.intended > 0 || !finished {
                self.frames
                    .send(self.frame(second, Phase::Measure, &window, &names, &mut slow)?)
                    .await;
            }
            if let Some(meter) = self
                .stress
                .as_ref()
                .filter(|_| self.plan.model == Model::Open)
            {
                let schedule = window.schedule;
                meter.sends(
                    second,
                    schedule.sent,
                    schedule.late_behind,
                    schedule.late_held,
                );
            }
            measure_total.add(&window);
            blocks.add_second(&window)?;
            second += 1;
            if self.plan.abort_on_fail && aborted.is_none() {
                let latency = measure_total.total_latency()?;
                let counts = measure_total.total_counts();
                if let Some((threshold, observed)) =
                    first_crossed(&self.plan.thresholds, &latency, &counts)
                {
                    let at = now.saturating_duration_since(anchor).as_secs();
                    aborted = Some(abort_reason(threshold, at, &observed));
                    self.shared.stop.cancel();
                }
            }
            frame_work += work.elapsed();
        }
        // What the once-a-second frames cost (collecting, merging, encoding), for the
        // benchmark that holds it under 2% of the engine's CPU.
        tracing::info!(
            frames = frames_sent,
            frame_work_us = frame_work.as_micros() as u64,
            "load frames emitted"
        );
        // Late completions of the warm-up still count as warm-up requests.
        let late_warmup = self.shared.recorder.take(Phase::Warmup)?;
        crate::metrics::requests_sent(late_warmup.schedule.sent);
        warm_total.add(&late_warmup);
        let ended = Instant::now();
        if let Some(meter) = &self.stress {
            meter.measure_ended(ended);
        }
        // A run that ran its course measured its planned span; one stopped early, up to
        // the stop.
        let stopped = aborted.is_some() || cancel.is_cancelled();
        let measured = match clock.measure_start() {
            Some(_) if !stopped => self.plan.duration,
            Some(t0) if ended > t0 => (ended - t0).min(self.plan.duration),
            _ => Duration::ZERO,
        };
        let (block_seconds, operation_block_seconds) = (blocks.seconds, blocks.operation_seconds());
        let (blocks, operation_blocks) = blocks.finish()?;
        Ok(Report {
            slow_seconds: slow.iter().map(|(_, s)| s.clone()).collect(),
            blocks,
            block_seconds,
            operation_blocks,
            operation_block_seconds,
            measure: measure_total,
            warmup: warm_total,
            measured,
            aborted,
            cancelled: cancel.is_cancelled(),
        })
    }

    /// A second's `load` frame. It is sent after, waiting for room in the agent's bound.
    /// A measured second with exemplars is offered to `slow`, the result's slowest.
    fn frame(
        &self,
        second: u64,
        phase: Phase,
        window: &Window,
        names: &[String],
        slow: &mut Slowest<SlowSecond, SLOW_SECONDS>,
    ) -> Result<NewFrame, HistogramError> {
        let measure = phase == Phase::Measure;
        let total = if measure {
            Some(window.total_latency()?)
        } else {
            None
        };
        let exemplars = match self.trace_prefix() {
            Some(prefix) if measure => window.marks.exemplars(prefix, names),
            _ => Exemplars::default(),
        };
        if let Some(total) = &total
            && !exemplars.is_empty()
        {
            let p99_us = total.value_at_quantile(0.99);
            if slow.keeps(p99_us) {
                slow.offer(
                    p99_us,
                    SlowSecond {
                        second,
                        p99_us,
                        exemplars: exemplars.clone(),
                    },
                );
            }
        }
        let mut operations = std::collections::BTreeMap::new();
        for (i, name) in names.iter().enumerate() {
            let counts = window.tallies[i].counts();
            let histogram = match window.latency.get(i) {
                Some(h) if measure => Some(encode(h)?),
                _ => None,
            };
            operations.insert(name.clone(), OperationSecond { counts, histogram });
        }
        let frame = LoadSecond {
            second,
            phase: if measure { "measure" } else { "warmup" }.to_string(),
            counts: window.total_counts(),
            intended: window.schedule.intended,
            sent: window.schedule.sent,
            late: window.schedule.late,
            late_held: window.schedule.late_held,
            late_behind: window.schedule.late_behind,
            dropped: window.schedule.dropped,
            histogram: total.as_ref().map(encode).transpose()?,
            uncorrected_histogram: if measure {
                Some(encode(&window.uncorrected)?)
            } else {
                None
            },
            operations,
            exemplars,
        };
        let data = serde_json::to_value(&frame).unwrap_or_default();
        Ok(NewFrame {
            kind: FrameKind::Load,
            data,
        })
    }
}

impl Reporter<'_> {
    /// The run's half of the trace ids its requests carry (none when every operation
    /// sends the spec's own traceparent).
    fn trace_prefix(&self) -> Option<u64> {
        self.shared
            .operations
            .iter()
            .find_map(PreparedOp::trace_prefix)
    }
}
