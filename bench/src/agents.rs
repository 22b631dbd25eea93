//! Simulated agents: many in one process, each with its own certificate and its own mTLS
//! connection, speaking the real agent link. An offer is accepted at once; after the
//! configured hold the run's one `started` frame and a `passed` completion follow.

// Protocol messages are built with `..Default::default()` even when every field is set
// today, so a field the protocol gains later does not break the bench.
#![allow(clippy::needless_update)]

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use iohr_certs::AgentIdentityFiles;
use iohr_proto::link::agent_link_client::AgentLinkClient;
use iohr_proto::link::{
    AgentMessage, Completion, ControllerMessage, Frame, FrameBatch, Heartbeat, Hello, LeaseAnswer,
    LeaseOffer, agent_message, controller_message,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// How long one agent may take from dialling to the controller's welcome.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Messages an agent may queue towards the controller (as the real agent).
const OUTBOUND_BUFFER: usize = 1024;

/// When each step of one run happened, as seen by the bench.
#[derive(Default)]
pub struct RunTimes {
    pub posted: Option<Instant>,
    pub created: Option<Instant>,
    pub offered: Option<Instant>,
    pub accepted: Option<Instant>,
    pub frames_acked: Option<Instant>,
    pub finished: Option<Instant>,
    /// When the controller cancelled the run's lease on the agent that held it.
    pub cancelled: Option<Instant>,
    /// Offers of this run beyond the first (after a timeout or a lost agent).
    pub reoffers: u32,
    waiter: Option<oneshot::Sender<End>>,
}

/// How waiting for a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Its completion was acknowledged as stored: the run is `finished`.
    Finished,
    /// The controller cancelled its lease (the reason is counted in the tracker).
    Cancelled,
    TimedOut,
}

/// Counters of what the agents saw; anything but offers, acks and completions is a sign
/// of trouble and is reported.
#[derive(Default)]
pub struct Counters {
    pub offers: AtomicU64,
    pub cancels: AtomicU64,
    pub completions_refused: AtomicU64,
    pub completions_stale: AtomicU64,
    pub streams_ended: AtomicU64,
}

/// The first few distinct reasons the controller gave for refusing a completion.
const MAX_REASONS: usize = 5;

/// What the agents and the API clients of one scenario share.
#[derive(Default)]
pub struct Tracker {
    runs: Mutex<HashMap<String, RunTimes>>,
    pub counters: Counters,
    refusals: Mutex<Vec<String>>,
    cancels: Mutex<BTreeMap<String, u64>>,
}

impl Tracker {
    /// The run table; a panic while holding it is already fatal, so poisoning is ignored.
    fn runs(&self) -> MutexGuard<'_, HashMap<String, RunTimes>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn with_run(&self, run_id: &str, f: impl FnOnce(&mut RunTimes)) {
        f(self.runs().entry(run_id.to_string()).or_default());
    }

    /// The API side: the run was posted at `posted` and created at `created`.
    pub fn created(&self, run_id: &str, posted: Instant, created: Instant) {
        self.with_run(run_id, |r| {
            r.posted = Some(posted);
            r.created = Some(created);
        });
    }

    /// Waits until the run's completion is acknowledged or its lease cancelled.
    pub async fn wait_end(&self, run_id: &str, timeout: Duration) -> End {
        let rx = {
            let mut runs = self.runs();
            let run = runs.entry(run_id.to_string()).or_default();
            if run.finished.is_some() {
                return End::Finished;
            }
            if run.cancelled.is_some() {
                return End::Cancelled;
            }
            let (tx, rx) = oneshot::channel();
            run.waiter = Some(tx);
            rx
        };
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(end)) => end,
            _ => End::TimedOut,
        }
    }

    fn end(&self, run_id: &str, end: End) {
        let now = Instant::now();
        let waiter = {
            let mut runs = self.runs();
            let run = runs.entry(run_id.to_string()).or_default();
            match end {
                End::Finished => {
                    run.finished.get_or_insert(now);
                }
                End::Cancelled => {
                    run.cancelled.get_or_insert(now);
                }
                End::TimedOut => {}
            }
            run.waiter.take()
        };
        if let Some(waiter) = waiter {
            let _ = waiter.send(end);
        }
    }

    fn note_cancel(&self, reason: &str) {
        *self
            .cancels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(reason.to_string())
            .or_default() += 1;
    }

    /// How many lease cancels the agents got, by the controller's reason.
    pub fn cancel_reasons(&self) -> BTreeMap<String, u64> {
        self.cancels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn note_refusal(&self, reason: &str) {
        let mut reasons = self
            .refusals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if reasons.len() < MAX_REASONS && !reasons.iter().any(|r| r == reason) {
            reasons.push(reason.to_string());
        }
    }

    pub fn refusal_reasons(&self) -> Vec<String> {
        self.refusals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Takes every run's times, for the report.
    pub fn take(&self) -> HashMap<String, RunTimes> {
        std::mem::take(&mut *self.runs())
    }
}

/// A simulated agent's identity, read once from the files `issue_agent` wrote.
pub struct AgentIdentity {
    pub name: String,
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Vec<u8>,
}

impl AgentIdentity {
    pub fn load(name: &str, dir: &Path) -> anyhow::Result<AgentIdentity> {
        let files = AgentIdentityFiles::in_dir(dir);
        let read =
            |p: std::path::PathBuf| std::fs::read(&p).with_context(|| format!("{}", p.display()));
        Ok(AgentIdentity {
            name: name.to_string(),
            cert: read(files.cert())?,
            key: read(files.key())?,
            ca: read(files.ca_cert())?,
        })
    }
}

impl AgentIdentity {
    /// The mTLS client configuration this agent dials with.
    pub fn tls(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.cert, &self.key))
    }
}

#[derive(Debug, Clone, Copy)]
pub struct AgentBehaviour {
    pub max_concurrent_jobs: u32,
    /// How long an accepted run "runs" before its frame and completion are sent.
    pub hold: Duration,
}

/// Dials the controller as one agent, says hello and waits for the welcome; the session
/// then goes on in the returned task until the stream ends or the task is aborted.
pub async fn connect(
    identity: AgentIdentity,
    controller_url: String,
    behaviour: AgentBehaviour,
    tracker: Arc<Tracker>,
) -> anyhow::Result<JoinHandle<()>> {
    let tls = identity.tls();
    // One endpoint per agent: each agent its own TCP and TLS connection, as in production.
    let channel = Channel::from_shared(controller_url)
        .context("agent link URL")?
        .tls_config(tls)?
        .connect_timeout(CONNECT_TIMEOUT)
        .connect()
        .await
        .map_err(|e| explain_connect_error(&identity.name, e))?;
    let mut client = AgentLinkClient::new(channel);
    let (tx, rx) = mpsc::channel::<AgentMessage>(OUTBOUND_BUFFER);
    let hello = Hello {
        agent_id: identity.name.clone(),
        version: "bench".to_string(),
        kinds: vec!["checks".to_string()],
        environments: vec!["staging".to_string()],
        labels: HashMap::new(),
        max_concurrent_jobs: behaviour.max_concurrent_jobs,
        leases: Vec::new(),
        incarnation: format!("bench-{}", identity.name),
        // Fields the protocol gains later keep their defaults, as an older agent sends.
        ..Default::default()
    };
    send(&tx, agent_message::Body::Hello(hello)).await;
    let mut inbound =
        tokio::time::timeout(CONNECT_TIMEOUT, client.session(ReceiverStream::new(rx)))
            .await
            .context("opening the session timed out")??
            .into_inner();
    let first = tokio::time::timeout(CONNECT_TIMEOUT, inbound.message())
        .await
        .context("no welcome in time")??;
    let heartbeat = match first {
        Some(ControllerMessage {
            body: Some(controller_message::Body::Welcome(welcome)),
        }) => Duration::from_millis(u64::from(welcome.heartbeat_interval_ms.max(10))),
        other => bail!("{}: expected a welcome, got {other:?}", identity.name),
    };
    let mut session = AgentSession {
        name: identity.name,
        tx,
        behaviour,
        tracker,
        leases: HashMap::new(),
    };
    Ok(tokio::spawn(async move {
        // The controller drops an agent it has not heard from for three heartbeats.
        let mut beat = tokio::time::interval(heartbeat);
        let mut sequence = 0;
        loop {
            tokio::select! {
                _ = beat.tick() => {
                    sequence += 1;
                    send(&session.tx, agent_message::Body::Heartbeat(Heartbeat { sequence })).await;
                }
                message = inbound.message() => match message {
                    Ok(Some(ControllerMessage { body: Some(body) })) => session.handle(body).await,
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => {
                        session.tracker.counters.streams_ended.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                },
            }
        }
    }))
}

fn explain_connect_error(name: &str, error: tonic::transport::Error) -> anyhow::Error {
    let text = format!("{error:?}");
    if text.contains("Too many open files") {
        anyhow::anyhow!(
            "{name}: out of file descriptors while connecting; raise the limit (ulimit -n) and run again: {error}"
        )
    } else {
        anyhow::anyhow!("{name}: connecting to the agent link: {error} ({text})")
    }
}

async fn send(tx: &mpsc::Sender<AgentMessage>, body: agent_message::Body) {
    // A closed channel means the stream is gone; the session loop sees that and ends.
    let _ = tx.send(AgentMessage { body: Some(body) }).await;
}

/// A lease this agent holds until its completion is acknowledged.
struct Held {
    offer: LeaseOffer,
    /// Set when the lease is cancelled, so a held run does not report afterwards.
    stopped: Arc<AtomicBool>,
    frame_acked: bool,
    resends: u32,
}

/// Completions one run may resend after refusals before the bench gives up on it.
const MAX_RESENDS: u32 = 10;

struct AgentSession {
    name: String,
    tx: mpsc::Sender<AgentMessage>,
    behaviour: AgentBehaviour,
    tracker: Arc<Tracker>,
    leases: HashMap<String, Held>,
}

impl AgentSession {
    async fn handle(&mut self, body: controller_message::Body) {
        let tracker = &self.tracker;
        match body {
            controller_message::Body::Offer(offer) => {
                let offered = Instant::now();
                tracker.counters.offers.fetch_add(1, Ordering::Relaxed);
                let answer = LeaseAnswer {
                    lease_id: offer.lease_id.clone(),
                    epoch: offer.epoch,
                    accepted: true,
                    reason: String::new(),
                    retry_later: false,
                };
                // The measured moment: the answer handed to the stream.
                let accepted = Instant::now();
                send(&self.tx, agent_message::Body::LeaseAnswer(answer)).await;
                tracker.with_run(&offer.run_id, |r| {
                    if r.offered.is_some() {
                        r.reoffers += 1;
                    }
                    r.offered.get_or_insert(offered);
                    r.accepted = Some(accepted);
                });
                let stopped = Arc::new(AtomicBool::new(false));
                if self.behaviour.hold.is_zero() {
                    // As the real agent: the `started` frame goes right after the answer.
                    finish(&self.name, &offer, true, &self.tx).await;
                } else {
                    let (name, tx, offer, hold, stopped) = (
                        self.name.clone(),
                        self.tx.clone(),
                        offer.clone(),
                        self.behaviour.hold,
                        stopped.clone(),
                    );
                    tokio::spawn(async move {
                        tokio::time::sleep(hold).await;
                        if !stopped.load(Ordering::Relaxed) {
                            finish(&name, &offer, true, &tx).await;
                        }
                    });
                }
                self.leases.insert(
                    offer.run_id.clone(),
                    Held {
                        offer,
                        stopped,
                        frame_acked: false,
                        resends: 0,
                    },
                );
            }
            controller_message::Body::FrameAck(ack) => {
                if ack.contiguous_through >= 1 {
                    let now = Instant::now();
                    tracker.with_run(&ack.run_id, |r| {
                        r.frames_acked.get_or_insert(now);
                    });
                    if let Some(held) = self.leases.get_mut(&ack.run_id) {
                        held.frame_acked = true;
                    }
                }
            }
            controller_message::Body::CompletionAck(ack) => {
                if !ack.accepted {
                    tracker
                        .counters
                        .completions_refused
                        .fetch_add(1, Ordering::Relaxed);
                    tracker.note_refusal(&ack.reason);
                    // As the real agent does: resend what is not acknowledged, then the
                    // completion again (bounded here, so a stuck run cannot spin).
                    if let Some(held) = self.leases.get_mut(&ack.run_id)
                        && held.resends < MAX_RESENDS
                    {
                        held.resends += 1;
                        finish(&self.name, &held.offer, !held.frame_acked, &self.tx).await;
                    }
                    return;
                }
                self.leases.remove(&ack.run_id);
                if !ack.reason.is_empty() {
                    // Accepted but not stored by this completion: the run had ended already.
                    tracker
                        .counters
                        .completions_stale
                        .fetch_add(1, Ordering::Relaxed);
                    return;
                }
                tracker.end(&ack.run_id, End::Finished);
            }
            controller_message::Body::Cancel(cancel) => {
                tracker.counters.cancels.fetch_add(1, Ordering::Relaxed);
                tracker.note_cancel(&cancel.reason);
                // As the real agent does: the run stops here and is never completed.
                if let Some(held) = self.leases.remove(&cancel.run_id) {
                    held.stopped.store(true, Ordering::Relaxed);
                    tracker.end(&cancel.run_id, End::Cancelled);
                }
            }
            // The simulated agents run no capacity shares: nothing asks for a step verdict.
            controller_message::Body::Welcome(_)
            | controller_message::Body::Heartbeat(_)
            | controller_message::Body::StepVerdict(_) => {}
        }
    }
}

/// The run's only frame, then its completion: what a trivial checks run sends.
async fn finish(name: &str, offer: &LeaseOffer, with_frame: bool, tx: &mpsc::Sender<AgentMessage>) {
    if with_frame {
        send_frame(name, offer, tx).await;
    }
    let completion = Completion {
        lease_id: offer.lease_id.clone(),
        epoch: offer.epoch,
        run_id: offer.run_id.clone(),
        status: "passed".to_string(),
        reason: String::new(),
        result_json: r#"{"passed":true,"total":1,"failed":0,"checks":[]}"#.to_string(),
        last_frame: 1,
        units_spent: 1,
        ..Default::default()
    };
    send(tx, agent_message::Body::Completion(completion)).await;
}

async fn send_frame(name: &str, offer: &LeaseOffer, tx: &mpsc::Sender<AgentMessage>) {
    let payload = serde_json::json!({"agent": name, "kind": offer.kind, "target": offer.target});
    let frames = FrameBatch {
        lease_id: offer.lease_id.clone(),
        epoch: offer.epoch,
        run_id: offer.run_id.clone(),
        frames: vec![Frame {
            number: 1,
            kind: "started".to_string(),
            payload_json: payload.to_string(),
            ..Default::default()
        }],
        ..Default::default()
    };
    send(tx, agent_message::Body::Frames(frames)).await;
}
