//! The agent link, agent side: dial the controller over mTLS, say hello, answer offers,
//! stream frames, and reconnect with jittered exponential backoff when the stream breaks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use iohr_domain::RunKind;
use iohr_domain::load::Share;
use iohr_proto::link::agent_link_client::AgentLinkClient;
use iohr_proto::link::{
    AgentMessage, ControllerMessage, FrameBatch, Heartbeat, Hello, LeaseAnswer, LeaseOffer,
    agent_message, controller_message,
};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::backoff::Backoff;
use crate::execute::{self, SUPPORTED_KINDS};
use crate::leases::Leases;

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("reading {path}: {source}")]
    Identity {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("controller address {0:?} is not a valid https URL")]
    Address(String),
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("controller refused the stream: {0}")]
    Status(#[from] tonic::Status),
    #[error("the controller sent no welcome")]
    NoWelcome,
    #[error("no link to the controller within {0:?}")]
    NotOpened(Duration),
    #[error("no message from the controller for {0:?}")]
    Silent(Duration),
}

#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The agent links of the controllers it may dial, in turn (at least one).
    pub controllers: Vec<String>,
    pub identity_dir: PathBuf,
    pub name: String,
    pub environments: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub max_concurrent_jobs: u32,
    pub reconnect_min: Duration,
    pub reconnect_max: Duration,
    /// How often an agent linked to another controller than its first tries the first,
    /// to move back to it while it holds no run (`None`: never).
    pub return_after: Option<Duration>,
    pub target_options: crate::load::TargetOptions,
    /// Which environment variables runs may read (`--secret-env`); a platform agent's
    /// read none, whatever this says.
    pub secrets: crate::secrets::SecretGrant,
    /// The fault policy and ledger; without them faults runs end in an error.
    pub faults: Option<std::sync::Arc<crate::kinds::faults::FaultsConfig>>,
}

fn tls(config: &AgentConfig) -> Result<ClientTlsConfig, LinkError> {
    let files = iohr_certs_paths(&config.identity_dir);
    let read =
        |path: PathBuf| std::fs::read(&path).map_err(|source| LinkError::Identity { path, source });
    let cert = read(files.0)?;
    let key = read(files.1)?;
    let ca = read(files.2)?;
    Ok(ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .identity(Identity::from_pem(cert, key)))
}

/// How long a dial (TCP, TLS) and then the session's opening (its response headers) may
/// each take before the agent gives up on it and dials again.
const OPEN_WITHIN: Duration = Duration::from_secs(10);

/// A controller's address with the identity files as they are now.
fn endpoint(config: &AgentConfig, controller: &str) -> Result<Endpoint, LinkError> {
    Ok(Channel::from_shared(controller.to_string())
        .map_err(|_| LinkError::Address(controller.to_string()))?
        .tls_config(tls(config)?)?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(10)))
}

/// agent.pem, agent.key, ca.pem in the identity dir (as `iohr-controller agent-cert` writes).
fn iohr_certs_paths(dir: &std::path::Path) -> (PathBuf, PathBuf, PathBuf) {
    (
        dir.join("agent.pem"),
        dir.join("agent.key"),
        dir.join("ca.pem"),
    )
}

/// Runs the agent until `shutdown`: connects, serves, reconnects.
pub async fn run(
    config: AgentConfig,
    leases: Leases,
    shutdown: CancellationToken,
) -> Result<(), LinkError> {
    // Unreadable identity files or a bad address stop the agent at start; later, a
    // renewal may have replaced the files, so every dial reads them again.
    let mut endpoints = Vec::with_capacity(config.controllers.len());
    for controller in &config.controllers {
        endpoints.push(endpoint(&config, controller)?);
    }
    if endpoints.is_empty() {
        return Err(LinkError::Address(String::new()));
    }
    let mut turn = 0;
    let incarnation = uuid_like();
    let last_heard = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let lease_ttl = Arc::new(AtomicU64::new(15_000));
    // Set by a welcome that says this agent is the platform's; it stays set (an agent's
    // account does not change), so no later session can loosen it.
    let platform = Arc::new(AtomicBool::new(false));
    tokio::spawn(fence_when_silent(
        leases.clone(),
        last_heard.clone(),
        lease_ttl.clone(),
        started,
        shutdown.clone(),
    ));
    let mut backoff = Backoff::new(config.reconnect_min, config.reconnect_max);
    while !shutdown.is_cancelled() {
        let at = turn % endpoints.len();
        let controller = config.controllers[at].as_str();
        match self::endpoint(&config, controller) {
            Ok(fresh) => endpoints[at] = fresh,
            Err(error) => {
                tracing::warn!(%error, "reading the identity again failed; dialling with the previous one")
            }
        }
        // Away from the first controller, the session looks in on it now and then.
        let home = (at != 0)
            .then_some(config.return_after)
            .flatten()
            .map(|every| (endpoints[0].clone(), every));
        // Bounded whole: a controller that takes the connection but neither answers nor
        // closes it (seen once mid-handshake) must not hold the agent from its next dial.
        let connected = tokio::time::timeout(OPEN_WITHIN, endpoints[at].connect()).await;
        let outcome = match connected {
            Err(_) => Err(LinkError::NotOpened(OPEN_WITHIN)),
            Ok(Ok(channel)) => {
                let session = Session {
                    config: &config,
                    controller,
                    leases: &leases,
                    last_heard: &last_heard,
                    lease_ttl: &lease_ttl,
                    platform: &platform,
                    started,
                    incarnation: &incarnation,
                };
                session.serve(channel, home, &shutdown, &mut backoff).await
            }
            Ok(Err(error)) => Err(LinkError::Transport(error)),
        };
        if shutdown.is_cancelled() {
            break;
        }
        if let Ok(Ended::Home) = outcome {
            // Straight back to the first controller, which just answered.
            turn = 0;
            continue;
        }
        // The next dial goes to the next controller: this one failed or let go.
        turn += 1;
        crate::metrics::reconnecting();
        let wait = backoff.next_wait();
        match outcome {
            Ok(_) => tracing::info!(
                %controller,
                wait_ms = wait.as_millis() as u64,
                "stream ended; reconnecting"
            ),
            Err(error) => {
                tracing::warn!(
                    %controller,
                    error = %error_chain(&error),
                    wait_ms = wait.as_millis() as u64,
                    "link failed; reconnecting"
                )
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => break,
        }
    }
    Ok(())
}

/// An error with its causes, so a refused handshake says why ("unknown issuer", ...).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn uuid_like() -> String {
    format!(
        "{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    )
}

/// The dead man's switch: an agent that has not heard from the controller for one lease
/// TTL stops its exclusive runs, whatever its streams are doing.
async fn fence_when_silent(
    leases: Leases,
    last_heard: Arc<AtomicU64>,
    ttl: Arc<AtomicU64>,
    started: Instant,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let silent = (started.elapsed().as_millis() as u64)
            .saturating_sub(last_heard.load(Ordering::Relaxed));
        if silent > ttl.load(Ordering::Relaxed) && leases.has_exclusive() {
            let stopped = leases.fence_exclusive();
            if stopped > 0 {
                tracing::warn!(
                    stopped,
                    silent_ms = silent,
                    "no word from the controller for a lease TTL: exclusive runs stopped"
                );
            }
        }
    }
}

struct Session<'a> {
    config: &'a AgentConfig,
    /// The address this session dialled.
    controller: &'a str,
    leases: &'a Leases,
    last_heard: &'a Arc<AtomicU64>,
    lease_ttl: &'a Arc<AtomicU64>,
    /// Whether a controller said this agent is a platform agent.
    platform: &'a AtomicBool,
    started: Instant,
    incarnation: &'a str,
}

/// How a session's stream ended without an error.
enum Ended {
    /// The controller ended it, or the agent is shutting down.
    Closed,
    /// The agent's first controller answers again and this agent holds no run: it moves
    /// back, so that agents spread over replicas again once a lost one returns.
    Home,
}

/// How long a look at the first controller may take (a TLS handshake on its network).
const HOME_PROBE: Duration = Duration::from_secs(2);

/// Frames per batch message.
const BATCH: usize = 256;

/// How often a share waiting for a step's verdict asks again ([`crate::verdicts`]): the
/// verdict exists once the last share's step is stored, on whichever replica.
const STEP_ASK_EVERY: Duration = Duration::from_millis(100);

impl Session<'_> {
    fn heard(&self) {
        self.last_heard
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// `home`: the first controller's address and how often to look in on it, when this
    /// session is with another.
    async fn serve(
        &self,
        channel: Channel,
        home: Option<(Endpoint, Duration)>,
        shutdown: &CancellationToken,
        backoff: &mut Backoff,
    ) -> Result<Ended, LinkError> {
        let renewing = CancellationToken::new();
        let _stop_renewing = renewing.clone().drop_guard();
        let mut client = AgentLinkClient::new(channel.clone())
            .max_decoding_message_size(iohr_proto::MAX_LINK_MESSAGE);
        let (tx, rx) = mpsc::channel::<AgentMessage>(1024);
        let hello = Hello {
            agent_id: self.config.name.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            kinds: SUPPORTED_KINDS
                .iter()
                .map(|k| k.as_str().to_string())
                .collect(),
            environments: self.config.environments.clone(),
            labels: self.config.labels.clone().into_iter().collect(),
            max_concurrent_jobs: self.config.max_concurrent_jobs,
            leases: self.leases.report_for_new_stream(),
            incarnation: self.incarnation.to_string(),
            recovered: self
                .config
                .faults
                .as_ref()
                .map(|f| {
                    f.recovered
                        .iter()
                        .map(|r| iohr_proto::link::RecoveredFault {
                            run_id: r.run_id.clone(),
                            ledger_id: r.ledger_id.clone(),
                            fault: r.fault.clone(),
                            error: r.error.clone().unwrap_or_default(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        };
        send(&tx, agent_message::Body::Hello(hello)).await;
        let mut inbound =
            tokio::time::timeout(OPEN_WITHIN, client.session(ReceiverStream::new(rx)))
                .await
                .map_err(|_| LinkError::NotOpened(OPEN_WITHIN))??
                .into_inner();
        let first = tokio::time::timeout(Duration::from_secs(30), inbound.message())
            .await
            .map_err(|_| LinkError::NoWelcome)??;
        let Some(ControllerMessage {
            body: Some(controller_message::Body::Welcome(welcome)),
        }) = first
        else {
            return Err(LinkError::NoWelcome);
        };
        self.heard();
        // Up from the welcome until this session returns, whichever way.
        let _connected = crate::metrics::Connected::now();
        backoff.reset();
        if welcome.reconnect_max_ms > 0 {
            // The controller waits for agents this long after a restart: come back sooner.
            backoff.cap(Duration::from_millis(u64::from(welcome.reconnect_max_ms)));
        }
        let heartbeat = Duration::from_millis(u64::from(welcome.heartbeat_interval_ms.max(10)));
        let ttl = Duration::from_millis(u64::from(welcome.lease_ttl_ms.max(10)));
        self.lease_ttl
            .store(ttl.as_millis() as u64, Ordering::Relaxed);
        if welcome.platform && !self.platform.swap(true, Ordering::Relaxed) {
            tracing::info!(
                "a platform agent: runs read no environment variable and targets are held to the deny-list"
            );
        }
        for lease_id in &welcome.revoked_lease_ids {
            tracing::warn!(lease = %lease_id, "controller revoked a lease this agent held: stopped");
            self.leases.revoke(lease_id);
        }
        tracing::info!(controller = %self.controller, heartbeat_ms = heartbeat.as_millis() as u64, "connected");
        // Renewals ride this connection and end with it; the next one starts its own.
        tokio::spawn(crate::renew::keep_renewed(
            channel,
            self.config.identity_dir.clone(),
            renewing,
        ));
        let mut beat = tokio::time::interval(heartbeat);
        let mut watchdog = tokio::time::interval(heartbeat.min(Duration::from_millis(250)));
        let mut asks = tokio::time::interval(STEP_ASK_EVERY);
        // (A period of zero would panic the interval: at least 100 ms.)
        let every = home
            .as_ref()
            .map_or(Duration::from_secs(86_400), |(_, every)| *every)
            .max(Duration::from_millis(100));
        let mut look_home = tokio::time::interval_at(Instant::now() + every, every);
        let mut sequence = 0;
        loop {
            self.flush(&tx).await;
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(Ended::Closed),
                _ = look_home.tick(), if home.is_some() => {
                    if let Some((first, _)) = &home
                        && self.leases.is_empty()
                        && matches!(tokio::time::timeout(HOME_PROBE, first.connect()).await, Ok(Ok(_)))
                    {
                        tracing::info!(controller = %self.controller, first = %self.config.controllers[0], "the first controller answers again: moving back to it");
                        return Ok(Ended::Home);
                    }
                }
                _ = self.leases.changed.notified() => {}
                _ = beat.tick() => {
                    sequence += 1;
                    send(&tx, agent_message::Body::Heartbeat(Heartbeat { sequence })).await;
                }
                _ = asks.tick() => {
                    for ask in self.leases.asking() {
                        send(&tx, agent_message::Body::StepAsk(ask)).await;
                    }
                }
                _ = watchdog.tick() => {
                    let silent = Duration::from_millis((self.started.elapsed().as_millis() as u64).saturating_sub(self.last_heard.load(Ordering::Relaxed)));
                    if silent > ttl {
                        return Err(LinkError::Silent(silent));
                    }
                }
                message = inbound.message() => match message? {
                    Some(message) => {
                        self.heard();
                        if let Some(body) = message.body {
                            self.handle(body, &tx).await;
                        }
                    }
                    None => return Ok(Ended::Closed),
                },
            }
        }
    }

    async fn flush(&self, tx: &mpsc::Sender<AgentMessage>) {
        while self.leases.has_outgoing() {
            let out = self.leases.take_outgoing(BATCH);
            for batch in out.batches {
                let frames = FrameBatch {
                    lease_id: batch.lease_id,
                    epoch: batch.epoch,
                    run_id: batch.run_id,
                    frames: batch.frames,
                };
                send(tx, agent_message::Body::Frames(frames)).await;
            }
            for completion in out.completions {
                send(tx, agent_message::Body::Completion(completion)).await;
            }
        }
    }

    /// What a leased run is given: the operator's target policy and grant, or on a
    /// platform agent the deny-list (with the exceptions the controller's operator opened
    /// for the run's account, `allow_targets`) and no environment at all.
    fn run_options(
        &self,
        allow_targets: &[String],
    ) -> (crate::load::TargetOptions, crate::run_context::EnvVars) {
        let options = &self.config.target_options;
        let env = crate::run_context::EnvVars::process();
        if self.platform.load(Ordering::Relaxed) {
            let account = allow_targets.iter().filter_map(|entry| {
                entry
                    .parse::<crate::egress::AllowRule>()
                    .inspect_err(|error| tracing::warn!(entry, %error, "an account egress exception of the offer does not parse: left out"))
                    .ok()
            });
            let options = crate::load::TargetOptions {
                egress: Arc::new(options.egress.denying().allowing(account)),
                ..options.clone()
            };
            (options, env.granting(crate::secrets::SecretGrant::Platform))
        } else {
            (options.clone(), env.granting(self.config.secrets.clone()))
        }
    }

    async fn handle(&self, body: controller_message::Body, tx: &mpsc::Sender<AgentMessage>) {
        match body {
            controller_message::Body::Welcome(_) | controller_message::Body::Heartbeat(_) => {}
            controller_message::Body::Offer(offer) => {
                let start_at = execute::start_at(tokio::time::Instant::now(), offer.start_after_ms);
                let answer = self.consider(&offer);
                let (accepted, retry_later, reason) = match &answer {
                    Ok(_) => (true, false, String::new()),
                    Err(refusal) => (false, refusal.retry_later, refusal.reason.clone()),
                };
                if !accepted {
                    tracing::info!(run = %offer.run_id, reason, retry_later, "offer refused");
                }
                let answer_message = LeaseAnswer {
                    lease_id: offer.lease_id.clone(),
                    epoch: offer.epoch,
                    accepted,
                    reason,
                    retry_later,
                };
                send(tx, agent_message::Body::LeaseAnswer(answer_message)).await;
                if let Ok((kind, plan)) = answer {
                    tracing::info!(run = %offer.run_id, kind = %kind, "lease accepted");
                    let (options, env) = self.run_options(&offer.allow_targets);
                    execute::start(
                        self.leases,
                        &self.config.name,
                        &options,
                        env,
                        self.config.faults.clone(),
                        execute::Accepted {
                            lease_id: offer.lease_id.clone(),
                            epoch: offer.epoch,
                            run_id: offer.run_id.clone(),
                            kind,
                            plan,
                            target: offer.target,
                            environment: offer.environment,
                            scenario_id: offer.scenario_id,
                            scenario_version: offer.scenario_version,
                            start_at,
                            split: offer.share_count > 1,
                            secrets: offer.secrets.into_iter().collect(),
                        },
                    );
                }
            }
            controller_message::Body::FrameAck(ack) => {
                self.leases
                    .ack(&ack.lease_id, ack.contiguous_through, ack.batch_last);
            }
            controller_message::Body::Cancel(cancel) => {
                if self.leases.cancel(&cancel.lease_id) {
                    tracing::info!(run = %cancel.run_id, reason = %cancel.reason, "run cancelled by the controller");
                }
                if cancel.reason == "stale lease" {
                    // Nothing of this lease will ever be stored: stop sending it.
                    self.leases.revoke(&cancel.lease_id);
                }
            }
            controller_message::Body::StepVerdict(verdict) => {
                let kept = self.leases.answer(
                    &verdict.lease_id,
                    verdict.epoch,
                    crate::verdicts::StepVerdict {
                        step: verdict.step,
                        meets_slo: verdict.meets_slo,
                        reason: verdict.reason,
                        start_after: Duration::from_millis(u64::from(verdict.start_after_ms))
                            .min(execute::MAX_START_AFTER),
                    },
                );
                tracing::debug!(run = %verdict.run_id, step = verdict.step, kept, "step verdict");
            }
            controller_message::Body::CompletionAck(ack) => {
                if ack.accepted {
                    self.leases.forget(&ack.lease_id);
                    tracing::info!(run = %ack.run_id, "run done: its completion is stored");
                } else {
                    tracing::warn!(run = %ack.run_id, reason = %ack.reason, "completion not accepted yet; resending");
                    self.leases.rewind(&ack.lease_id);
                }
            }
        }
    }

    /// Accepts an offer this agent can run now; the error is the reason it cannot.
    fn consider(&self, offer: &LeaseOffer) -> Result<(RunKind, execute::Plan), Refusal> {
        let kind: RunKind = offer
            .kind
            .parse()
            .map_err(|e: iohr_domain::run::UnknownWord| Refusal::for_good(e.to_string()))?;
        if !SUPPORTED_KINDS.contains(&kind) {
            return Err(Refusal::for_good(format!(
                "this agent does not run kind {kind}"
            )));
        }
        if self.leases.len() >= self.config.max_concurrent_jobs as usize {
            return Err(Refusal::for_now("at max_concurrent_jobs"));
        }
        if kind.is_exclusive() && self.leases.has_exclusive() {
            return Err(Refusal::for_now("an exclusive run is already running here"));
        }
        if self.leases.holds_run(&offer.run_id) {
            // The executor of an older lease of this run is still winding down.
            return Err(Refusal::for_now(
                "still stopping an earlier lease of this run",
            ));
        }
        let share = Share::from_offer(offer.share_index, offer.share_count)
            .map_err(|e| Refusal::for_good(e.to_string()))?;
        let plan = execute::plan(kind, &offer.spec_json).map_err(Refusal::for_good)?;
        let plan = plan
            .bind(&execute::RunOf {
                run_id: &offer.run_id,
                confirmed_by: Some(offer.confirmed_by.as_str()).filter(|p| !p.is_empty()),
                dry_run: false,
                check_target: None,
                share,
            })
            .map_err(Refusal::for_good)?;
        Ok((kind, plan))
    }
}

/// Why an offer is refused, and whether it may be offered here again later.
struct Refusal {
    reason: String,
    retry_later: bool,
}

impl Refusal {
    fn for_now(reason: &str) -> Refusal {
        Refusal {
            reason: reason.to_string(),
            retry_later: true,
        }
    }
    fn for_good(reason: String) -> Refusal {
        Refusal {
            reason,
            retry_later: false,
        }
    }
}

async fn send(tx: &mpsc::Sender<AgentMessage>, body: agent_message::Body) {
    // A closed channel means the stream is gone; the session loop notices and reconnects.
    let _ = tx.send(AgentMessage { body: Some(body) }).await;
}
