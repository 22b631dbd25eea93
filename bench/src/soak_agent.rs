//! Reconnecting simulated agents, for the soak (`iohr-bench-soak`). Each has its own
//! certificate and mTLS link on the real agent link and knows every replica's address; as
//! the real agent (agent/src/link.rs, agent/src/leases.rs) it:
//!
//! - dials the next address when its stream fails or ends, after a jittered, bounded
//!   backoff, and says in its `Hello` which leases it holds with the last frame the
//!   controller acknowledged for each (the same incarnation on every stream);
//! - linked elsewhere than its first address, looks in on that one every
//!   `return_after` and, holding no run, moves back to it once it answers;
//! - numbers each run's frames from 1, one every `frame_every`, then sends the completion
//!   once every frame is sent; after a reconnect, or an ack that shows a gap, it resends
//!   from the last acknowledged frame; a refused completion is sent again after 250 ms;
//! - stops a lease the welcome revokes or a `stale lease` cancel names, and completes a
//!   cancelled one as `cancelled`.
//!
//! The tracker sees, per run, which agents accepted it and over which span each held it,
//! and which agents had a completion stored: a run two agents held at once is a run
//! placed twice.

// Protocol messages are built with `..Default::default()` even when every field is set
// today, so a field the protocol gains later does not break the bench.
#![allow(clippy::needless_update)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use iohr_proto::link::agent_link_client::AgentLinkClient;
use iohr_proto::link::{
    AgentMessage, Completion, ControllerMessage, Frame, FrameBatch, Heartbeat, Hello, LeaseAnswer,
    LeaseOffer, RunningLease, agent_message, controller_message,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::agents::AgentIdentity;

/// How long one dial, the session's opening and its welcome may each take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages an agent may queue towards the controller (as the real agent).
const OUTBOUND_BUFFER: usize = 1024;
/// Frames per batch message (as the real agent).
const BATCH: usize = 256;
/// A refused completion is sent again after this long (as the real agent).
const COMPLETION_RETRY: Duration = Duration::from_millis(250);
/// Completions one lease may send before the agent gives it up (bounded: a stuck run
/// cannot spin for ever; at 250 ms apart this is over a minute).
const MAX_COMPLETIONS: u32 = 300;
/// The most replicas the soak counts agents on.
pub const MAX_REPLICAS: usize = 8;

/// Dials one agent may make over the whole soak.
const MAX_DIALS: u64 = 10_000;

/// How every simulated agent behaves.
#[derive(Debug, Clone)]
pub struct SoakAgentConfig {
    /// Every replica's agent link URL.
    pub urls: Vec<String>,
    pub max_concurrent_jobs: u32,
    /// Frames each run streams before its completion.
    pub frames_per_run: u64,
    pub frame_every: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Away from its first replica, how often an agent looks in on it (`None`: never).
    pub return_after: Option<Duration>,
    /// No dial after this.
    pub deadline: Instant,
}

/// Counters of what the agents saw.
#[derive(Default)]
pub struct SoakCounters {
    pub offers: AtomicU64,
    pub offers_refused: AtomicU64,
    pub dials: AtomicU64,
    pub dial_failures: AtomicU64,
    pub sessions: AtomicU64,
    pub sessions_ended: AtomicU64,
    pub live_sessions: AtomicI64,
    pub leases_reported: AtomicU64,
    pub leases_revoked: AtomicU64,
    pub frames_sent: AtomicU64,
    /// Frames sent again (after a reconnect or a gap the controller's ack showed).
    pub frames_resent: AtomicU64,
    pub gap_acks: AtomicU64,
    pub completions_sent: AtomicU64,
    pub completions_refused: AtomicU64,
    pub completions_stale: AtomicU64,
    pub completions_stored: AtomicU64,
    pub completions_given_up: AtomicU64,
    pub cancels: AtomicU64,
    pub silent_streams: AtomicU64,
    /// Sessions ended to move back to the agent's first replica.
    pub moves_home: AtomicU64,
    /// Live sessions per replica (its index in `urls`).
    pub live_on: [AtomicI64; MAX_REPLICAS],
}

/// One agent's hold of one run: from its accepted offer until it let the lease go.
#[derive(Debug, Clone)]
pub struct Hold {
    pub agent: String,
    pub lease_id: String,
    pub from: Instant,
    pub until: Option<Instant>,
}

#[derive(Debug, Default)]
pub struct RunSeen {
    pub holds: Vec<Hold>,
    /// Agents whose completion of this run was acknowledged as stored.
    pub stored_by: Vec<String>,
}

impl RunSeen {
    /// Two different agents held the run at the same time.
    pub fn placed_twice(&self, now: Instant) -> bool {
        self.holds.iter().enumerate().any(|(i, a)| {
            self.holds[i + 1..].iter().any(|b| {
                a.agent != b.agent
                    && a.from < b.until.unwrap_or(now)
                    && b.from < a.until.unwrap_or(now)
            })
        })
    }

    /// Different agents accepted it (at once or one after another).
    pub fn agents(&self) -> usize {
        let mut names: Vec<&str> = self.holds.iter().map(|h| h.agent.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names.len()
    }
}

/// What every agent of the soak shares with the driver.
#[derive(Default)]
pub struct SoakTracker {
    runs: Mutex<HashMap<String, RunSeen>>,
    pub counters: SoakCounters,
    reasons: Mutex<BTreeMap<String, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl SoakTracker {
    fn accepted(&self, run_id: &str, agent: &str, lease_id: &str) {
        lock(&self.runs)
            .entry(run_id.to_string())
            .or_default()
            .holds
            .push(Hold {
                agent: agent.to_string(),
                lease_id: lease_id.to_string(),
                from: Instant::now(),
                until: None,
            });
    }

    fn released(&self, run_id: &str, lease_id: &str) {
        let now = Instant::now();
        if let Some(run) = lock(&self.runs).get_mut(run_id) {
            for hold in run.holds.iter_mut().filter(|h| h.lease_id == lease_id) {
                hold.until.get_or_insert(now);
            }
        }
    }

    fn stored(&self, run_id: &str, agent: &str) {
        lock(&self.runs)
            .entry(run_id.to_string())
            .or_default()
            .stored_by
            .push(agent.to_string());
    }

    /// Counts one of the controller's reasons (a cancel's, a refused completion's, ...).
    fn note(&self, what: &str, reason: &str) {
        *lock(&self.reasons)
            .entry(format!("{what}: {reason}"))
            .or_default() += 1;
    }

    pub fn reasons(&self) -> BTreeMap<String, u64> {
        lock(&self.reasons).clone()
    }

    /// Whether this run's completion was stored (by any agent).
    pub fn is_stored(&self, run_id: &str) -> bool {
        lock(&self.runs)
            .get(run_id)
            .is_some_and(|r| !r.stored_by.is_empty())
    }

    /// Runs the agents saw, taken for the report.
    pub fn take(&self) -> HashMap<String, RunSeen> {
        std::mem::take(&mut *lock(&self.runs))
    }
}

/// A lease this agent holds until its completion is acknowledged.
struct SimLease {
    lease_id: String,
    epoch: u64,
    run_id: String,
    accepted_at: Instant,
    /// Frames made so far (1..=made).
    made: u64,
    acked: u64,
    sent_through: u64,
    /// The highest frame ever sent: a frame at or below it sent again is a resend.
    max_sent: u64,
    status: Option<&'static str>,
    completion_sent: bool,
    completion_hold: Option<Instant>,
    completions: u32,
}

/// The agent's leases, which outlive its streams.
struct AgentState {
    name: String,
    config: Arc<SoakAgentConfig>,
    tracker: Arc<SoakTracker>,
    leases: HashMap<String, SimLease>,
}

/// Why a session returned.
enum SessionEnd {
    /// The soak is over.
    Stopped,
    /// The stream failed or ended; `welcomed` says whether it had been let in.
    Broken { welcomed: bool },
    /// Its first replica answers again and it holds no run: it moves back.
    Home,
}

/// A small xorshift for the backoff's jitter (no need for a real generator here).
struct Jitter(u64);

impl Jitter {
    fn below(&mut self, max_ms: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % max_ms.max(1)
    }
}

/// One agent for the whole soak: dials `urls[first]`, then the next address after every
/// broken stream, until `stop` is set or the deadline passes (at most `MAX_DIALS` dials).
pub async fn run_agent(
    identity: AgentIdentity,
    first: usize,
    config: Arc<SoakAgentConfig>,
    tracker: Arc<SoakTracker>,
    mut stop: watch::Receiver<bool>,
) {
    let mut state = AgentState {
        name: identity.name.clone(),
        config: config.clone(),
        tracker: tracker.clone(),
        leases: HashMap::new(),
    };
    let incarnation = format!("soak-{}-{}", identity.name, std::process::id());
    let mut jitter = Jitter(seed(&identity.name) | 1);
    let mut backoff = config.backoff_min;
    let tls = identity.tls();
    let mut turn = first;
    for _ in 0..MAX_DIALS {
        if *stop.borrow() || Instant::now() >= config.deadline {
            break;
        }
        let at = turn % config.urls.len();
        let home = (at != first % config.urls.len())
            .then_some(config.return_after)
            .flatten()
            .map(|every| (config.urls[first % config.urls.len()].clone(), every));
        tracker.counters.dials.fetch_add(1, Ordering::Relaxed);
        let link = Link {
            at,
            tls: tls.clone(),
            home,
        };
        let end = session(&mut state, &link, &incarnation, &mut stop).await;
        match end {
            Ok(SessionEnd::Stopped) => break,
            Ok(SessionEnd::Home) => {
                // Straight back to the first replica, which just answered.
                tracker.counters.moves_home.fetch_add(1, Ordering::Relaxed);
                turn = first;
                continue;
            }
            Ok(SessionEnd::Broken { welcomed }) => {
                if welcomed {
                    backoff = config.backoff_min;
                } else {
                    tracker
                        .counters
                        .dial_failures
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                tracker
                    .counters
                    .dial_failures
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        // The next dial (the next turn) goes to the next replica: this one failed or let go.
        turn += 1;
        let base = backoff.as_millis() as u64;
        let wait = Duration::from_millis(base / 2 + jitter.below(base / 2 + 1));
        backoff = (backoff * 2).min(config.backoff_max);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => break,
        }
    }
}

fn seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// What one session dials: replica `at` (in `urls`) and, away from its first replica,
/// that one's URL and how often to look in on it.
struct Link {
    at: usize,
    tls: tonic::transport::ClientTlsConfig,
    home: Option<(String, Duration)>,
}

/// A TLS channel to `url`, within [`DIAL_TIMEOUT`].
async fn dial(url: &str, tls: &tonic::transport::ClientTlsConfig) -> anyhow::Result<Channel> {
    Ok(Channel::from_shared(url.to_string())
        .context("agent link URL")?
        .tls_config(tls.clone())?
        .connect_timeout(DIAL_TIMEOUT)
        .connect()
        .await?)
}

/// One stream: dial, hello with the leases held, welcome, then serve until it breaks.
async fn session(
    state: &mut AgentState,
    link: &Link,
    incarnation: &str,
    stop: &mut watch::Receiver<bool>,
) -> anyhow::Result<SessionEnd> {
    let url = state.config.urls[link.at].clone();
    let channel = dial(&url, &link.tls).await?;
    let mut client = AgentLinkClient::new(channel);
    let (tx, rx) = mpsc::channel::<AgentMessage>(OUTBOUND_BUFFER);
    let reported = state.report_for_new_stream();
    let counters = &state.tracker.counters;
    counters
        .leases_reported
        .fetch_add(reported.len() as u64, Ordering::Relaxed);
    let hello = Hello {
        agent_id: state.name.clone(),
        version: "bench-soak".to_string(),
        kinds: vec!["checks".to_string()],
        environments: vec!["staging".to_string()],
        labels: HashMap::new(),
        max_concurrent_jobs: state.config.max_concurrent_jobs,
        leases: reported,
        incarnation: incarnation.to_string(),
        ..Default::default()
    };
    send(&tx, agent_message::Body::Hello(hello)).await;
    let mut inbound = tokio::time::timeout(DIAL_TIMEOUT, client.session(ReceiverStream::new(rx)))
        .await
        .context("opening the session timed out")??
        .into_inner();
    let first = tokio::time::timeout(DIAL_TIMEOUT, inbound.message())
        .await
        .context("no welcome in time")??;
    let welcome = match first {
        Some(ControllerMessage {
            body: Some(controller_message::Body::Welcome(welcome)),
        }) => welcome,
        other => bail!("{}: expected a welcome, got {other:?}", state.name),
    };
    let mut last_heard = Instant::now();
    let heartbeat = Duration::from_millis(u64::from(welcome.heartbeat_interval_ms.max(10)));
    let ttl = Duration::from_millis(u64::from(welcome.lease_ttl_ms.max(10)));
    for lease_id in &welcome.revoked_lease_ids {
        if let Some(lease) = state.leases.remove(lease_id) {
            counters.leases_revoked.fetch_add(1, Ordering::Relaxed);
            state.tracker.note("revoked at welcome", &lease.run_id);
            state.tracker.released(&lease.run_id, lease_id);
        }
    }
    counters.sessions.fetch_add(1, Ordering::Relaxed);
    counters.live_sessions.fetch_add(1, Ordering::Relaxed);
    let _live = LiveSession::new(state.tracker.clone(), link.at);
    let every = link
        .home
        .as_ref()
        .map_or(Duration::from_secs(86_400), |(_, e)| *e);
    let every = every.max(Duration::from_millis(100));
    let mut look_home = tokio::time::interval_at((Instant::now() + every).into(), every);
    let mut beat = tokio::time::interval(heartbeat);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tick = tokio::time::interval(state.config.frame_every.min(Duration::from_millis(250)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sequence = 0;
    loop {
        state.flush(&tx).await;
        tokio::select! {
            _ = stop.changed() => return Ok(SessionEnd::Stopped),
            _ = look_home.tick(), if link.home.is_some() => {
                if let Some((first, _)) = &link.home
                    && state.leases.is_empty()
                    && dial(first, &link.tls).await.is_ok()
                {
                    return Ok(SessionEnd::Home);
                }
            }
            _ = beat.tick() => {
                sequence += 1;
                send(&tx, agent_message::Body::Heartbeat(Heartbeat { sequence })).await;
            }
            _ = tick.tick() => {
                // As the real agent's watchdog: silence for a lease TTL ends the stream.
                if last_heard.elapsed() > ttl {
                    state.tracker.counters.silent_streams.fetch_add(1, Ordering::Relaxed);
                    return Ok(SessionEnd::Broken { welcomed: true });
                }
            }
            message = inbound.message() => match message {
                Ok(Some(ControllerMessage { body })) => {
                    last_heard = Instant::now();
                    if let Some(body) = body {
                        state.handle(body, &tx).await;
                    }
                }
                Ok(None) | Err(_) => return Ok(SessionEnd::Broken { welcomed: true }),
            },
        }
    }
}

/// Counts a session as live while it is held.
struct LiveSession(Arc<SoakTracker>, usize);

impl LiveSession {
    fn new(tracker: Arc<SoakTracker>, at: usize) -> LiveSession {
        if let Some(on) = tracker.counters.live_on.get(at) {
            on.fetch_add(1, Ordering::Relaxed);
        }
        LiveSession(tracker, at)
    }
}

impl Drop for LiveSession {
    fn drop(&mut self) {
        self.0
            .counters
            .live_sessions
            .fetch_sub(1, Ordering::Relaxed);
        if let Some(on) = self.0.counters.live_on.get(self.1) {
            on.fetch_sub(1, Ordering::Relaxed);
        }
        self.0
            .counters
            .sessions_ended
            .fetch_add(1, Ordering::Relaxed);
    }
}

impl AgentState {
    /// The leases to report in a new stream's hello; what was sent but not acknowledged
    /// on the old stream goes again.
    fn report_for_new_stream(&mut self) -> Vec<RunningLease> {
        self.leases
            .values_mut()
            .map(|lease| {
                lease.sent_through = lease.acked;
                lease.completion_sent = false;
                RunningLease {
                    lease_id: lease.lease_id.clone(),
                    epoch: lease.epoch,
                    run_id: lease.run_id.clone(),
                    last_acked_frame: lease.acked,
                }
            })
            .collect()
    }

    /// Makes the frames that are due, sends what is not sent, and completions whose
    /// frames are all sent.
    async fn flush(&mut self, tx: &mpsc::Sender<AgentMessage>) {
        let now = Instant::now();
        let (per_run, every) = (self.config.frames_per_run, self.config.frame_every);
        let counters = &self.tracker.counters;
        let mut out = Vec::new();
        for lease in self.leases.values_mut() {
            if lease.status.is_none() {
                let elapsed = now.saturating_duration_since(lease.accepted_at);
                let due = (elapsed.as_millis() / every.as_millis().max(1)) as u64 + 1;
                lease.made = lease.made.max(due.min(per_run));
                if lease.made == per_run && elapsed >= every * per_run as u32 {
                    lease.status = Some("passed");
                }
            }
            let from = lease.sent_through.max(lease.acked) + 1;
            let mut number = from;
            while number <= lease.made {
                let last = (number + BATCH as u64 - 1).min(lease.made);
                let frames: Vec<Frame> = (number..=last).map(|n| frame(&self.name, n)).collect();
                let resent = lease.max_sent.min(last).saturating_sub(number - 1);
                counters.frames_resent.fetch_add(resent, Ordering::Relaxed);
                counters
                    .frames_sent
                    .fetch_add(frames.len() as u64, Ordering::Relaxed);
                out.push(agent_message::Body::Frames(FrameBatch {
                    lease_id: lease.lease_id.clone(),
                    epoch: lease.epoch,
                    run_id: lease.run_id.clone(),
                    frames,
                    ..Default::default()
                }));
                lease.sent_through = last;
                lease.max_sent = lease.max_sent.max(last);
                number = last + 1;
            }
            let held = lease.completion_hold.is_some_and(|until| until > now);
            if let Some(status) = lease.status
                && lease.sent_through >= lease.made
                && !lease.completion_sent
                && !held
            {
                lease.completion_sent = true;
                lease.completions += 1;
                counters.completions_sent.fetch_add(1, Ordering::Relaxed);
                out.push(agent_message::Body::Completion(Completion {
                    lease_id: lease.lease_id.clone(),
                    epoch: lease.epoch,
                    run_id: lease.run_id.clone(),
                    status: status.to_string(),
                    reason: String::new(),
                    result_json: r#"{"passed":true,"total":1,"failed":0,"checks":[]}"#.to_string(),
                    last_frame: lease.made,
                    units_spent: 1,
                    ..Default::default()
                }));
            }
        }
        for body in out {
            send(tx, body).await;
        }
    }

    fn drop_lease(&mut self, lease_id: &str) -> Option<SimLease> {
        let lease = self.leases.remove(lease_id)?;
        self.tracker.released(&lease.run_id, lease_id);
        Some(lease)
    }

    async fn handle(&mut self, body: controller_message::Body, tx: &mpsc::Sender<AgentMessage>) {
        let tracker = self.tracker.clone();
        let counters = &tracker.counters;
        match body {
            controller_message::Body::Offer(offer) => {
                counters.offers.fetch_add(1, Ordering::Relaxed);
                let refusal = if self.leases.len() >= self.config.max_concurrent_jobs as usize {
                    Some("at max_concurrent_jobs")
                } else if self.leases.values().any(|l| l.run_id == offer.run_id) {
                    Some("still stopping an earlier lease of this run")
                } else {
                    None
                };
                let answer = LeaseAnswer {
                    lease_id: offer.lease_id.clone(),
                    epoch: offer.epoch,
                    accepted: refusal.is_none(),
                    reason: refusal.unwrap_or_default().to_string(),
                    retry_later: refusal.is_some(),
                };
                send(tx, agent_message::Body::LeaseAnswer(answer)).await;
                match refusal {
                    Some(reason) => {
                        counters.offers_refused.fetch_add(1, Ordering::Relaxed);
                        tracker.note("offer refused", reason);
                    }
                    None => self.accept(&offer),
                }
            }
            controller_message::Body::FrameAck(ack) => {
                if let Some(lease) = self.leases.get_mut(&ack.lease_id) {
                    lease.acked = lease.acked.max(ack.contiguous_through);
                    if ack.contiguous_through < ack.batch_last {
                        // A gap: send again from the last frame stored without one.
                        counters.gap_acks.fetch_add(1, Ordering::Relaxed);
                        lease.sent_through = lease.acked;
                    }
                }
            }
            controller_message::Body::CompletionAck(ack) => {
                if ack.accepted {
                    if self.drop_lease(&ack.lease_id).is_some() {
                        if ack.reason.is_empty() {
                            counters.completions_stored.fetch_add(1, Ordering::Relaxed);
                            tracker.stored(&ack.run_id, &self.name);
                        } else {
                            counters.completions_stale.fetch_add(1, Ordering::Relaxed);
                            tracker.note("completion accepted, not stored", &ack.reason);
                        }
                    }
                    return;
                }
                counters.completions_refused.fetch_add(1, Ordering::Relaxed);
                tracker.note("completion refused", &ack.reason);
                let give_up = match self.leases.get_mut(&ack.lease_id) {
                    Some(lease) if lease.completions < MAX_COMPLETIONS => {
                        lease.sent_through = lease.acked;
                        lease.completion_sent = false;
                        lease.completion_hold = Some(Instant::now() + COMPLETION_RETRY);
                        false
                    }
                    Some(_) => true,
                    None => false,
                };
                if give_up {
                    counters
                        .completions_given_up
                        .fetch_add(1, Ordering::Relaxed);
                    self.drop_lease(&ack.lease_id);
                }
            }
            controller_message::Body::Cancel(cancel) => {
                counters.cancels.fetch_add(1, Ordering::Relaxed);
                tracker.note("cancel", &cancel.reason);
                if cancel.reason == "stale lease" {
                    // Nothing of this lease will ever be stored: stop sending it.
                    self.drop_lease(&cancel.lease_id);
                } else if let Some(lease) = self.leases.get_mut(&cancel.lease_id)
                    && lease.status.is_none()
                {
                    // As the real agent's executor: the run stops and reports cancelled.
                    lease.status = Some("cancelled");
                }
            }
            // The simulated agents run no capacity shares: nothing asks for a step verdict.
            controller_message::Body::Welcome(_)
            | controller_message::Body::Heartbeat(_)
            | controller_message::Body::StepVerdict(_) => {}
        }
    }

    fn accept(&mut self, offer: &LeaseOffer) {
        self.tracker
            .accepted(&offer.run_id, &self.name, &offer.lease_id);
        self.leases.insert(
            offer.lease_id.clone(),
            SimLease {
                lease_id: offer.lease_id.clone(),
                epoch: offer.epoch,
                run_id: offer.run_id.clone(),
                accepted_at: Instant::now(),
                made: 0,
                acked: 0,
                sent_through: 0,
                max_sent: 0,
                status: None,
                completion_sent: false,
                completion_hold: None,
                completions: 0,
            },
        );
    }
}

/// Frame `number` of a run: `started` first, then `phase` notes.
fn frame(agent: &str, number: u64) -> Frame {
    let (kind, payload) = if number == 1 {
        ("started", serde_json::json!({"agent": agent}))
    } else {
        (
            "phase",
            serde_json::json!({"note": "soak", "frame": number}),
        )
    };
    Frame {
        number,
        kind: kind.to_string(),
        payload_json: payload.to_string(),
        ..Default::default()
    }
}

async fn send(tx: &mpsc::Sender<AgentMessage>, body: agent_message::Body) {
    // A closed channel means the stream is gone; the session loop sees that and ends.
    let _ = tx.send(AgentMessage { body: Some(body) }).await;
}
