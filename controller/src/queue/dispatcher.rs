//! The dispatcher: one task owns the scheduler and every lease's deadline, so decisions
//! about a run are made in one place, one at a time. Frames and completions go straight
//! from an agent's session to the store (fenced by the lease); only what changes who holds
//! what comes through here.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use iohr_domain::{RunKind, RunStatus};
use iohr_proto::link::{
    CancelLease, ControllerMessage, LeaseOffer, RecoveredFault, RunningLease, controller_message,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::scheduler::{AgentSlot, Placement, QueuedRun, Scheduler, SessionId};
use crate::hub::FrameHub;
use crate::store::{
    AgentIdentity, AuditLine, Declaration, Ending, LeaseGuard, RunRow, Store, StoreError,
};
use crate::timing::Timing;

mod waiting;

/// A connected agent, as its session hands it to the dispatcher after the hello.
pub struct AgentUp {
    pub session: SessionId,
    pub identity: AgentIdentity,
    pub declaration: Declaration,
    pub reported: Vec<RunningLease>,
    /// Faults a previous process of the agent left applied and this one found in its
    /// ledger at start.
    pub recovered: Vec<RecoveredFault>,
    /// Random per agent process: a reconnect of the same process replaces its old stream,
    /// another process with the same identity is refused while the first is alive.
    pub incarnation: String,
    pub tx: mpsc::Sender<ControllerMessage>,
    /// Milliseconds since the dispatcher's start when the agent was last heard.
    pub last_heard: Arc<AtomicU64>,
    pub close: CancellationToken,
}

/// What `GET /agents` shows of a connected agent.
#[derive(Debug, Clone)]
pub struct OnlineAgent {
    pub agent_id: String,
    /// How long ago the agent was last heard.
    pub silent_ms: u64,
    pub running: Vec<(String, String, RunKind, &'static str)>,
}

enum Command {
    RunQueued {
        run: Box<QueuedRun>,
        max_running: usize,
    },
    Cancel {
        run_id: String,
        reason: String,
        reply: oneshot::Sender<()>,
    },
    AgentUp {
        up: Box<AgentUp>,
        reply: oneshot::Sender<Result<Vec<String>, String>>,
    },
    AgentDown {
        session: SessionId,
    },
    LeaseAnswer {
        session: SessionId,
        guard: LeaseGuard,
        accepted: bool,
        retry_later: bool,
        reason: String,
        reply: oneshot::Sender<()>,
    },
    LeaseEnded {
        run_id: String,
        guard: LeaseGuard,
    },
    Online {
        reply: oneshot::Sender<Vec<OnlineAgent>>,
    },
}

#[derive(Debug, Clone)]
enum LeaseState {
    /// Offered; back to the queue at the deadline unless accepted.
    Offered { deadline: Instant },
    /// Accepted and its agent connected.
    Running,
    /// Its agent is gone (or the controller restarted): at the deadline the run goes back
    /// to the queue if it never started, or ends `error` ("agent lost") if it did.
    Orphaned { deadline: Instant, started: bool },
}

#[derive(Debug, Clone)]
struct Lease {
    run: QueuedRun,
    agent_id: String,
    session: Option<SessionId>,
    guard: LeaseGuard,
    state: LeaseState,
    cancel_requested: bool,
    /// When the cancel was last sent to the agent.
    cancel_sent: Option<Instant>,
}

struct Session {
    agent_id: String,
    name: String,
    incarnation: String,
    tx: mpsc::Sender<ControllerMessage>,
    last_heard: Arc<AtomicU64>,
    close: CancellationToken,
}

/// Commands waiting for the dispatcher. The API never waits on a full queue: it answers
/// 503 `busy` at once ([`Refused::Busy`]), and a new run reserves its place before its
/// transaction commits so the run is never stored unannounced. An agent's session waits
/// for room instead (backpressure on that agent's stream), as what it reports (an answer,
/// an end, its disconnect) must not be lost.
pub const COMMAND_QUEUE: usize = 1024;

/// The handle every other part of the controller uses.
#[derive(Clone)]
pub struct DispatcherHandle {
    tx: mpsc::Sender<Command>,
    epoch: Instant,
    next_session: Arc<AtomicU64>,
    /// The agents connected now, for [`DispatcherHandle::waiting_reason`].
    connected: tokio::sync::watch::Receiver<waiting::Connected>,
}

#[derive(Debug, thiserror::Error)]
#[error("the dispatcher has stopped")]
pub struct Stopped;

/// Why the dispatcher did not take an API command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the dispatcher's queue is full")]
    Busy,
    #[error("the dispatcher has stopped")]
    Stopped,
}

/// A place in the dispatcher's queue for one queued run, taken before the run's
/// transaction commits; sending on it cannot fail or wait.
pub struct QueueSlot(mpsc::OwnedPermit<Command>);

impl QueueSlot {
    pub fn run_queued(self, run: &RunRow, max_running: i64) {
        self.0.send(Command::RunQueued {
            run: Box::new(queued_from_row(run)),
            max_running: usize::try_from(max_running).unwrap_or(usize::MAX),
        });
    }
}

impl DispatcherHandle {
    /// Milliseconds since the dispatcher started, on the controller's own clock.
    pub fn clock_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub fn new_session_id(&self) -> SessionId {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// A place for a run about to be queued, or `Busy` at once.
    pub fn reserve(&self) -> Result<QueueSlot, Refused> {
        self.tx
            .clone()
            .try_reserve_owned()
            .map(QueueSlot)
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => Refused::Busy,
                mpsc::error::TrySendError::Closed(_) => Refused::Stopped,
            })
    }

    /// An API command: sent at once or refused `Busy`.
    fn try_send(&self, command: Command) -> Result<(), Refused> {
        self.tx.try_send(command).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Refused::Busy,
            mpsc::error::TrySendError::Closed(_) => Refused::Stopped,
        })
    }

    /// Cancels a run wherever it is; returns once the agent (if any) has been told.
    pub async fn cancel(&self, run_id: &str, reason: &str) -> Result<(), Refused> {
        let (reply, rx) = oneshot::channel();
        self.try_send(Command::Cancel {
            run_id: run_id.to_string(),
            reason: reason.to_string(),
            reply,
        })?;
        rx.await.map_err(|_| Refused::Stopped)
    }

    /// Registers a connected agent; returns the reported leases it must drop, or why it
    /// is refused.
    pub async fn agent_up(&self, up: AgentUp) -> Result<Result<Vec<String>, String>, Stopped> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Command::AgentUp {
                up: Box::new(up),
                reply,
            })
            .await
            .map_err(|_| Stopped)?;
        rx.await.map_err(|_| Stopped)
    }

    pub async fn agent_down(&self, session: SessionId) {
        let _ = self.tx.send(Command::AgentDown { session }).await;
    }

    /// An agent's answer to an offer; returns once the answer is stored, so the frames
    /// that follow it on the stream find the run running.
    pub async fn lease_answer(
        &self,
        session: SessionId,
        guard: LeaseGuard,
        accepted: bool,
        retry_later: bool,
        reason: String,
    ) {
        let (reply, rx) = oneshot::channel();
        let command = Command::LeaseAnswer {
            session,
            guard,
            accepted,
            retry_later,
            reason,
            reply,
        };
        if self.tx.send(command).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// A run's completion under this lease was stored (or refused as stale): if the lease
    /// is still the one tracked, its agent and plan slot are free.
    pub async fn lease_ended(&self, run_id: &str, guard: LeaseGuard) {
        let _ = self
            .tx
            .send(Command::LeaseEnded {
                run_id: run_id.to_string(),
                guard,
            })
            .await;
    }

    pub async fn online(&self) -> Result<Vec<OnlineAgent>, Refused> {
        let (reply, rx) = oneshot::channel();
        self.try_send(Command::Online { reply })?;
        rx.await.map_err(|_| Refused::Stopped)
    }
}

fn queued_from_row(run: &RunRow) -> QueuedRun {
    QueuedRun {
        run_id: run.id.clone(),
        account_id: run.account_id.clone(),
        kind: run.kind,
        environment: run.environment.clone(),
        executor: run.executor.clone(),
        target: run.target.clone(),
        scenario_id: run.scenario_id.clone(),
        scenario_version: run.scenario_version.clone(),
        confirmed_by: run
            .confirmation
            .as_ref()
            .and_then(|c| c.confirmed_by.clone()),
        refused_by: BTreeSet::new(),
        lapsed_with: BTreeSet::new(),
        reason: run.reason.clone(),
    }
}

/// Why a restarted agent's run ended: and, for a faults run, what the new process found
/// left applied in its ledger and undid (or could not).
fn restart_reason(run_id: &str, recovered: &[RecoveredFault]) -> String {
    let mut undone = Vec::new();
    let mut failed = Vec::new();
    for r in recovered.iter().filter(|r| r.run_id == run_id) {
        if r.error.is_empty() {
            undone.push(format!("{} ({})", r.fault, r.ledger_id));
        } else {
            failed.push(format!("{} ({}): {}", r.fault, r.ledger_id, r.error));
        }
    }
    let mut reason = "agent lost (it restarted without the run)".to_string();
    if !undone.is_empty() {
        reason.push_str(&format!(
            "; on restart it undid the faults it had left applied: {}",
            undone.join(", ")
        ));
    }
    if !failed.is_empty() {
        reason.push_str(&format!(
            "; ALERT: it could not undo: {}",
            failed.join(", ")
        ));
    }
    reason
}

/// Scenario specs kept in memory before the cache starts over.
const SPEC_CACHE: usize = 4096;

pub struct Dispatcher {
    store: Store,
    hub: FrameHub,
    timing: Timing,
    epoch: Instant,
    scheduler: Scheduler,
    leases: HashMap<String, Lease>,
    sessions: HashMap<SessionId, Session>,
    /// Canonical spec JSON by (account, scenario version).
    specs: HashMap<(String, String), Arc<str>>,
    /// When the once-a-second store checks (removed agents, lapsed confirmations) last ran.
    store_checked: Instant,
    /// Why queued runs wait, kept current (see `waiting.rs`).
    reasons: waiting::Reasons,
    rx: mpsc::Receiver<Command>,
}

impl Dispatcher {
    /// Rebuilds the queues from the store and starts the dispatcher task. Leases found
    /// in the store get one lease period for their agents to report before they expire.
    pub async fn start(
        store: Store,
        hub: FrameHub,
        timing: Timing,
        shutdown: CancellationToken,
    ) -> Result<(DispatcherHandle, tokio::task::JoinHandle<()>), StoreError> {
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let epoch = Instant::now();
        let (reasons, connected) = waiting::Reasons::new();
        let mut dispatcher = Dispatcher {
            store,
            hub,
            timing,
            epoch,
            scheduler: Scheduler::default(),
            leases: HashMap::new(),
            sessions: HashMap::new(),
            specs: HashMap::new(),
            store_checked: epoch,
            reasons,
            rx,
        };
        dispatcher.rebuild().await?;
        let handle = DispatcherHandle {
            tx,
            epoch,
            next_session: Arc::new(AtomicU64::new(1)),
            connected,
        };
        let task = tokio::spawn(dispatcher.run(shutdown));
        Ok((handle, task))
    }

    async fn rebuild(&mut self) -> Result<(), StoreError> {
        for account in self.store.accounts().await? {
            self.scheduler.set_max_running(
                &account.id,
                usize::try_from(account.max_running).unwrap_or(usize::MAX),
            );
        }
        let deadline = Instant::now() + self.timing.restart_window();
        let mut rebuilt = (0, 0);
        for run in self.store.unfinished_runs().await? {
            match (&run.lease, &run.agent_id) {
                (Some(guard), Some(agent_id)) if run.lease_state.is_some() => {
                    self.scheduler.count_active(&run.account_id);
                    self.leases.insert(
                        run.id.clone(),
                        Lease {
                            run: queued_from_row(&run),
                            agent_id: agent_id.clone(),
                            session: None,
                            guard: guard.clone(),
                            state: LeaseState::Orphaned {
                                deadline,
                                started: run.status == RunStatus::Running,
                            },
                            cancel_requested: false,
                            cancel_sent: None,
                        },
                    );
                    rebuilt.1 += 1;
                }
                // A production faults run waits for a person, not in a queue.
                _ if run.confirmation.as_ref().is_some_and(|c| c.is_pending()) => {}
                _ => {
                    self.scheduler.enqueue(queued_from_row(&run));
                    rebuilt.0 += 1;
                }
            }
        }
        tracing::info!(
            queued = rebuilt.0,
            leased = rebuilt.1,
            "queues rebuilt from the store"
        );
        Ok(())
    }

    async fn run(mut self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.timing.tick());
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => self.on_tick().await,
                command = self.rx.recv() => match command {
                    Some(command) => self.handle(command).await,
                    None => break,
                },
            }
            // Drain what else is waiting before placing, so a burst of POSTs is placed in
            // one round instead of one round each.
            while let Ok(command) = self.rx.try_recv() {
                self.handle(command).await;
            }
            self.dispatch().await;
        }
        for session in self.sessions.values() {
            session.close.cancel();
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    async fn handle(&mut self, command: Command) {
        match command {
            Command::RunQueued { run, max_running } => {
                self.scheduler.set_max_running(&run.account_id, max_running);
                self.scheduler.enqueue(*run);
                self.queue_changed();
            }
            Command::Cancel {
                run_id,
                reason,
                reply,
            } => {
                self.cancel(&run_id, &reason).await;
                let _ = reply.send(());
            }
            Command::AgentUp { up, reply } => {
                let answer = self.agent_up(*up).await;
                let _ = reply.send(answer);
            }
            Command::AgentDown { session } => self.agent_down(session, "stream ended").await,
            Command::LeaseAnswer {
                session,
                guard,
                accepted,
                retry_later,
                reason,
                reply,
            } => {
                self.lease_answer(session, guard, accepted, retry_later, reason)
                    .await;
                let _ = reply.send(());
            }
            Command::LeaseEnded { run_id, guard } => {
                if self.leases.get(&run_id).is_some_and(|l| l.guard == guard) {
                    self.forget_lease(&run_id);
                }
            }
            Command::Online { reply } => {
                let online = self
                    .sessions
                    .iter()
                    .map(|(id, s)| OnlineAgent {
                        agent_id: s.agent_id.clone(),
                        silent_ms: self
                            .now_ms()
                            .saturating_sub(s.last_heard.load(Ordering::Relaxed)),
                        running: self
                            .leases
                            .iter()
                            .filter(|(_, l)| l.session == Some(*id))
                            .map(|(run_id, l)| {
                                let state = match l.state {
                                    LeaseState::Offered { .. } => "offered",
                                    LeaseState::Running => "running",
                                    LeaseState::Orphaned { .. } => "orphaned",
                                };
                                (run_id.clone(), l.guard.lease_id.clone(), l.run.kind, state)
                            })
                            .collect(),
                    })
                    .collect();
                let _ = reply.send(online);
            }
        }
    }

    async fn dispatch(&mut self) {
        let mut placed = Vec::new();
        for Placement { run, session } in self.scheduler.next_placements() {
            match self.sessions.get(&session).map(|s| s.agent_id.clone()) {
                Some(agent_id) => placed.push((run, session, agent_id)),
                None => self.unplace(run, session),
            }
        }
        // The leases of one round are written together: each is its own fenced UPDATE,
        // but they wait on the store side by side instead of one after another.
        let store = &self.store;
        let guards = futures_util::future::join_all(
            placed
                .iter()
                .map(|(run, _, agent_id)| store.offer_lease(&run.run_id, agent_id)),
        )
        .await;
        for ((run, session, agent_id), guard) in placed.into_iter().zip(guards) {
            let guard = match guard {
                Ok(Some(guard)) => guard,
                Ok(None) => {
                    // Ended (cancelled) or leased meanwhile: not ours to offer.
                    self.scheduler.detach_lease(session, &run.run_id);
                    self.scheduler.release_active(&run.account_id);
                    continue;
                }
                Err(error) => {
                    tracing::error!(run = %run.run_id, %error, "offering a lease failed");
                    self.unplace(run, session);
                    continue;
                }
            };
            let spec = self.offer_message(&run, &guard).await;
            let sent = match (spec, self.sessions.get(&session)) {
                (Some(offer), Some(s)) => s.tx.try_send(offer).is_ok(),
                _ => false,
            };
            tracing::debug!(run = %run.run_id, agent = %agent_id, lease = %guard.lease_id, epoch = guard.epoch, sent, "lease offered");
            let deadline = Instant::now() + self.timing.offer_timeout;
            self.leases.insert(
                run.run_id.clone(),
                Lease {
                    run,
                    agent_id,
                    session: Some(session),
                    guard,
                    state: LeaseState::Offered { deadline },
                    cancel_requested: false,
                    cancel_sent: None,
                },
            );
        }
    }

    /// The offer of a placed run. Specs are read once per scenario version and kept:
    /// versions never change, and reading one per offer would cost a store round trip.
    async fn offer_message(
        &mut self,
        run: &QueuedRun,
        guard: &LeaseGuard,
    ) -> Option<ControllerMessage> {
        let key = (run.account_id.clone(), run.scenario_version.clone());
        let spec_json = match self.specs.get(&key) {
            Some(spec) => spec.clone(),
            None => {
                let scenario = self
                    .store
                    .scenario(&run.account_id, &run.scenario_version)
                    .await
                    .ok()??;
                let spec: Arc<str> = iohr_domain::version::compact_json(&scenario.spec).into();
                if self.specs.len() >= SPEC_CACHE {
                    self.specs.clear();
                }
                self.specs.insert(key, spec.clone());
                spec
            }
        };
        Some(ControllerMessage {
            body: Some(controller_message::Body::Offer(LeaseOffer {
                lease_id: guard.lease_id.clone(),
                epoch: guard.epoch,
                run_id: run.run_id.clone(),
                kind: run.kind.as_str().to_string(),
                spec_json: spec_json.to_string(),
                target: run.target.clone(),
                environment: run.environment.clone(),
                accept_within_ms: self.timing.offer_timeout.as_millis() as u32,
                scenario_id: run.scenario_id.clone(),
                scenario_version: run.scenario_version.clone(),
                confirmed_by: run.confirmed_by.clone().unwrap_or_default(),
            })),
        })
    }

    fn unplace(&mut self, run: QueuedRun, session: SessionId) {
        self.scheduler.detach_lease(session, &run.run_id);
        self.scheduler.release_active(&run.account_id);
        self.scheduler.enqueue(run);
    }

    fn forget_lease(&mut self, run_id: &str) {
        if let Some(lease) = self.leases.remove(run_id) {
            if let Some(session) = lease.session {
                self.scheduler.detach_lease(session, run_id);
            }
            self.scheduler.release_active(&lease.run.account_id);
        }
    }

    fn send(&self, session: Option<SessionId>, message: controller_message::Body) {
        if let Some(s) = session.and_then(|id| self.sessions.get(&id)) {
            let _ = s.tx.try_send(ControllerMessage {
                body: Some(message),
            });
        }
    }

    fn cancel_message(guard: &LeaseGuard, run_id: &str, reason: &str) -> controller_message::Body {
        controller_message::Body::Cancel(CancelLease {
            lease_id: guard.lease_id.clone(),
            epoch: guard.epoch,
            run_id: run_id.to_string(),
            reason: reason.to_string(),
        })
    }

    /// Ends a run here (not through its agent) and publishes its `finished` frame.
    /// True when the run has ended (now or before, or the lease is no longer its);
    /// false when the store failed, and the caller keeps what it tracks to retry.
    async fn end_run(
        &mut self,
        run_id: &str,
        guard: Option<&LeaseGuard>,
        status: RunStatus,
        reason: &str,
    ) -> bool {
        let ending = Ending {
            status,
            reason: Some(reason.to_string()),
            result: None,
            units_spent: None,
        };
        match self.store.finish_run(run_id, guard, None, &ending).await {
            Ok(Some(frame)) => {
                tracing::info!(run = %run_id, status = %status, reason, "run ended by the controller");
                self.hub.publish(frame);
                true
            }
            Ok(None) => true,
            Err(error) => {
                tracing::error!(run = %run_id, %error, "ending a run failed; retrying");
                false
            }
        }
    }

    /// Returns a lease's run to the queue (its offer was never taken up). False when the
    /// store failed: the caller retries.
    async fn requeue(
        &mut self,
        run_id: &str,
        lease: Lease,
        refused: Option<SessionId>,
        lapsed: Option<SessionId>,
    ) -> bool {
        match self.store.withdraw_offer(run_id, &lease.guard).await {
            Ok(requeued) => {
                self.forget_lease(run_id);
                if requeued {
                    let mut run = lease.run;
                    run.refused_by.extend(refused);
                    run.lapsed_with.extend(lapsed);
                    self.scheduler.enqueue(run);
                    self.queue_changed();
                }
                true
            }
            Err(error) => {
                tracing::error!(run = %run_id, %error, "returning a run to the queue failed; retrying");
                false
            }
        }
    }

    /// Keeps a lease whose ending failed in the store, to try again on the next tick.
    fn retry_next_tick(&mut self, run_id: &str, started: bool) {
        let deadline = Instant::now() + self.timing.tick();
        if let Some(lease) = self.leases.get_mut(run_id) {
            lease.state = LeaseState::Orphaned { deadline, started };
        }
    }

    async fn cancel(&mut self, run_id: &str, reason: &str) {
        let queued_account = self
            .store
            .run(run_id)
            .await
            .ok()
            .flatten()
            .map(|r| r.account_id)
            .filter(|account| self.scheduler.is_queued(account, run_id));
        if let Some(account) = queued_account {
            if self
                .end_run(run_id, None, RunStatus::Cancelled, reason)
                .await
            {
                self.scheduler.remove_queued(&account, run_id);
            }
            return;
        }
        let Some(lease) = self.leases.get_mut(run_id) else {
            // Not queued here and not leased: ended already, or about to be stored.
            self.end_run(run_id, None, RunStatus::Cancelled, reason)
                .await;
            return;
        };
        lease.cancel_requested = true;
        lease.cancel_sent = Some(Instant::now());
        let (guard, session, state) = (lease.guard.clone(), lease.session, lease.state.clone());
        // The canceller's reason becomes the run's, whatever the agent says as it stops.
        if let Err(error) = self.store.set_reason(run_id, Some(reason)).await {
            tracing::warn!(run = %run_id, %error, "recording the cancel's reason failed");
        }
        self.send(session, Self::cancel_message(&guard, run_id, reason));
        let agent_will_answer = matches!(state, LeaseState::Running) && session.is_some();
        if !agent_will_answer {
            // Never started, or its agent is gone: nothing will answer for it.
            if self
                .end_run(run_id, Some(&guard), RunStatus::Cancelled, reason)
                .await
            {
                self.forget_lease(run_id);
            } else {
                self.retry_next_tick(run_id, true);
            }
        }
    }

    /// Production faults runs unconfirmed past their deadline end `refused`.
    async fn lapse_confirmations(&mut self) {
        let lapsed = match self
            .store
            .lapsed_confirmations(crate::store::now_ms())
            .await
        {
            Ok(runs) => runs,
            Err(error) => {
                tracing::warn!(%error, "reading lapsed confirmations failed; retrying next tick");
                return;
            }
        };
        for run in lapsed {
            let reason = "confirmation lapsed";
            if self
                .end_run(&run.id, None, RunStatus::Refused, reason)
                .await
            {
                let line = AuditLine {
                    at: 0,
                    actor: "controller".to_string(),
                    action: "run.confirmation_lapsed".to_string(),
                    run_id: Some(run.id.clone()),
                    targets: Some(run.target.clone()),
                    outcome: "refused".to_string(),
                };
                if let Err(error) = self.store.audit(&run.account_id, &line).await {
                    tracing::warn!(run = %run.id, %error, "writing the lapse's audit line failed");
                }
            }
        }
    }

    async fn agent_up(&mut self, up: AgentUp) -> Result<Vec<String>, String> {
        let AgentUp {
            session,
            identity,
            declaration,
            reported,
            recovered,
            incarnation,
            tx,
            last_heard,
            close,
        } = up;
        let now_ms = self.now_ms();
        let suspect_ms = self.timing.suspect_after.as_millis() as u64;
        if let Some(other) = self.sessions.values().find(|s| {
            s.agent_id == identity.agent_id
                && s.incarnation != incarnation
                && now_ms.saturating_sub(s.last_heard.load(Ordering::Relaxed)) < suspect_ms
        }) {
            tracing::warn!(agent = %identity.name, "a second process with this agent's identity was refused");
            return Err(format!(
                "agent {} is already connected from another process ({}); one identity per agent process",
                other.name, other.incarnation
            ));
        }
        // A newer stream of the same agent replaces the old one.
        let old: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.agent_id == identity.agent_id)
            .map(|(id, _)| *id)
            .collect();
        for id in old {
            if let Some(s) = self.sessions.remove(&id) {
                s.close.cancel();
            }
            self.scheduler.remove_agent(id);
            for lease in self.leases.values_mut().filter(|l| l.session == Some(id)) {
                lease.session = None;
            }
        }
        let kinds: HashSet<RunKind> = declaration
            .kinds
            .iter()
            .filter_map(|k| k.parse().ok())
            .collect();
        self.scheduler.add_agent(AgentSlot {
            session,
            agent_id: identity.agent_id.clone(),
            name: identity.name.clone(),
            account_id: identity.account_id.clone(),
            is_platform: identity.is_platform,
            environments: declaration.environments.iter().cloned().collect(),
            kinds,
            max_jobs: declaration.max_concurrent_jobs.max(1) as usize,
            leases: HashMap::new(),
        });
        self.agents_changed();
        self.sessions.insert(
            session,
            Session {
                agent_id: identity.agent_id.clone(),
                name: identity.name.clone(),
                incarnation,
                tx,
                last_heard,
                close,
            },
        );

        let mut revoked = Vec::new();
        let mut kept = HashSet::new();
        for report in reported {
            let lease = self.leases.get_mut(&report.run_id).filter(|l| {
                l.agent_id == identity.agent_id
                    && l.guard.lease_id == report.lease_id
                    && l.guard.epoch == report.epoch
            });
            let Some(lease) = lease else {
                revoked.push(report.lease_id);
                continue;
            };
            let was_offered = matches!(lease.state, LeaseState::Offered { .. })
                || matches!(lease.state, LeaseState::Orphaned { started: false, .. });
            let (guard, kind, run_id) =
                (lease.guard.clone(), lease.run.kind, report.run_id.clone());
            if was_offered {
                // The agent accepted just before the link broke (or the controller
                // restarted): the run is running now, if the store agrees.
                if !matches!(self.store.accept_lease(&run_id, &guard).await, Ok(true)) {
                    revoked.push(report.lease_id);
                    continue;
                }
            }
            if let Some(lease) = self.leases.get_mut(&run_id) {
                lease.session = Some(session);
                lease.state = LeaseState::Running;
            }
            self.scheduler.attach_lease(session, &run_id, kind);
            kept.insert(run_id);
        }
        // This agent's leases it no longer runs: a restarted agent lost them.
        let lost: Vec<String> = self
            .leases
            .iter()
            .filter(|(run_id, l)| l.agent_id == identity.agent_id && !kept.contains(*run_id))
            .map(|(run_id, _)| run_id.clone())
            .collect();
        for run_id in lost {
            let reason = restart_reason(&run_id, &recovered);
            self.lease_lost(&run_id, &reason).await;
        }
        tracing::info!(agent = %identity.name, session, kept = kept.len(), revoked = revoked.len(), "agent connected");
        Ok(revoked)
    }

    /// A lease whose agent can no longer run it: back to the queue if it never started,
    /// `error` if it did (`cancelled` if a cancel was asked for).
    async fn lease_lost(&mut self, run_id: &str, reason: &str) {
        let Some(lease) = self.leases.get(run_id).cloned() else {
            return;
        };
        let started = match lease.state {
            LeaseState::Offered { .. } => false,
            LeaseState::Orphaned { started, .. } => started,
            LeaseState::Running => true,
        };
        if started || lease.cancel_requested {
            let status = if lease.cancel_requested {
                RunStatus::Cancelled
            } else {
                RunStatus::Error
            };
            if self
                .end_run(run_id, Some(&lease.guard), status, reason)
                .await
            {
                self.forget_lease(run_id);
            } else {
                self.retry_next_tick(run_id, started);
            }
        } else if !self.requeue(run_id, lease, None, None).await {
            self.retry_next_tick(run_id, false);
        }
    }

    async fn agent_down(&mut self, session: SessionId, why: &str) {
        let Some(s) = self.sessions.remove(&session) else {
            return;
        };
        s.close.cancel();
        self.scheduler.remove_agent(session);
        self.agents_changed();
        let heard_ms = s.last_heard.load(Ordering::Relaxed);
        let silent_for = std::time::Duration::from_millis(self.now_ms().saturating_sub(heard_ms));
        let deadline = Instant::now()
            + (self.timing.lease_ttl + self.timing.lease_grace).saturating_sub(silent_for);
        for lease in self
            .leases
            .values_mut()
            .filter(|l| l.session == Some(session))
        {
            lease.session = None;
            // An offer the agent may have accepted just before the link broke waits as
            // long as a started run: handing it on at once could run it twice.
            let started = !matches!(lease.state, LeaseState::Offered { .. });
            lease.state = LeaseState::Orphaned { deadline, started };
        }
        let seen_at = crate::store::now_ms() - silent_for.as_millis() as i64;
        if let Err(error) = self.store.touch_agent(&s.agent_id, seen_at).await {
            tracing::warn!(agent = %s.name, %error, "recording when the agent was last seen failed");
        }
        tracing::warn!(agent = %s.name, session, why, "agent disconnected");
    }

    async fn lease_answer(
        &mut self,
        session: SessionId,
        guard: LeaseGuard,
        accepted: bool,
        retry_later: bool,
        reason: String,
    ) {
        let run_id = self
            .leases
            .iter()
            .find(|(_, l)| l.guard == guard && l.session == Some(session))
            .map(|(id, _)| id.clone());
        let Some(run_id) = run_id else {
            // An answer to an offer that was withdrawn: make sure the agent drops it.
            self.send(
                Some(session),
                controller_message::Body::Cancel(CancelLease {
                    lease_id: guard.lease_id,
                    epoch: guard.epoch,
                    run_id: String::new(),
                    reason: "offer withdrawn".to_string(),
                }),
            );
            return;
        };
        let Some(lease) = self.leases.get(&run_id).cloned() else {
            return;
        };
        if !matches!(lease.state, LeaseState::Offered { .. }) {
            return;
        }
        if accepted {
            match self.store.accept_lease(&run_id, &guard).await {
                Ok(true) => {
                    if let Some(l) = self.leases.get_mut(&run_id) {
                        l.state = LeaseState::Running;
                    }
                    tracing::debug!(run = %run_id, session, "lease accepted");
                }
                Ok(false) => {
                    self.send(
                        Some(session),
                        Self::cancel_message(&guard, &run_id, "lease no longer valid"),
                    );
                    self.forget_lease(&run_id);
                }
                // The offer stays as it is and lapses (the agent is told to stop then).
                Err(error) => {
                    tracing::error!(run = %run_id, %error, "storing an acceptance failed")
                }
            }
        } else {
            tracing::info!(run = %run_id, session, reason, retry_later, "lease refused");
            // A refusal for now (the agent is full) only puts this agent last for the run.
            let (refused, lapsed) = if retry_later {
                (None, Some(session))
            } else {
                (Some(session), None)
            };
            if self.requeue(&run_id, lease, refused, lapsed).await && !retry_later {
                // Said in the record, so a run that no agent will take does not wait
                // silently; the next agent that accepts it clears the reason.
                let agent = self
                    .sessions
                    .get(&session)
                    .map(|s| s.name.clone())
                    .unwrap_or_default();
                let why = format!("refused by agent {agent}: {reason}");
                match self.store.set_reason(&run_id, Some(&why)).await {
                    Ok(()) => self.note_reason(&run_id, why),
                    Err(error) => {
                        tracing::warn!(run = %run_id, %error, "recording a refusal failed")
                    }
                }
            }
        }
    }

    /// Closes the streams of agents removed since the last look: a removed agent's
    /// certificate is refused at once for new streams, and within a second for live ones.
    async fn close_removed(&mut self) {
        let connected: Vec<String> = self.sessions.values().map(|s| s.agent_id.clone()).collect();
        let removed = match self.store.removed_among(&connected).await {
            Ok(removed) => removed,
            Err(error) => {
                tracing::warn!(%error, "checking for removed agents failed");
                return;
            }
        };
        let sessions: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, s)| removed.contains(&s.agent_id))
            .map(|(id, _)| *id)
            .collect();
        for session in sessions {
            self.agent_down(session, "agent removed").await;
        }
    }

    async fn on_tick(&mut self) {
        // Store reads that need not run every tick: once a second.
        if self.store_checked.elapsed() >= std::time::Duration::from_secs(1) {
            self.store_checked = Instant::now();
            self.close_removed().await;
            self.lapse_confirmations().await;
            self.refresh_reasons().await;
        }
        let now = Instant::now();
        let now_ms = self.now_ms();
        let silent: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, s)| {
                let heard = s.last_heard.load(Ordering::Relaxed);
                now_ms.saturating_sub(heard) > self.timing.suspect_after.as_millis() as u64
            })
            .map(|(id, _)| *id)
            .collect();
        for session in silent {
            self.agent_down(session, "silent past the suspect time")
                .await;
        }
        let due: Vec<(String, LeaseState)> = self
            .leases
            .iter()
            .filter(|(_, l)| match l.state {
                LeaseState::Offered { deadline } | LeaseState::Orphaned { deadline, .. } => {
                    deadline <= now
                }
                LeaseState::Running => false,
            })
            .map(|(id, l)| (id.clone(), l.state.clone()))
            .collect();
        for (run_id, state) in due {
            match state {
                LeaseState::Offered { .. } => {
                    if let Some(lease) = self.leases.get(&run_id).cloned() {
                        self.send(
                            lease.session,
                            Self::cancel_message(
                                &lease.guard,
                                &run_id,
                                "offer not accepted in time",
                            ),
                        );
                        if lease.cancel_requested {
                            self.lease_lost(&run_id, "cancelled").await;
                        } else {
                            // Not refused: a wedged agent gets it again only if no other can.
                            let session = lease.session;
                            if !self.requeue(&run_id, lease, None, session).await {
                                self.retry_next_tick(&run_id, false);
                            }
                        }
                    }
                }
                _ => self.lease_lost(&run_id, "agent lost").await,
            }
        }
        // A cancel not yet answered is sent again each second: a dropped message must not
        // leave a run running after it was cancelled.
        let unanswered: Vec<(String, LeaseGuard, Option<SessionId>)> = self
            .leases
            .iter()
            .filter(|(_, l)| {
                l.cancel_requested
                    && l.cancel_sent
                        .is_some_and(|at| at.elapsed() >= std::time::Duration::from_secs(1))
            })
            .map(|(id, l)| (id.clone(), l.guard.clone(), l.session))
            .collect();
        for (run_id, guard, session) in unanswered {
            self.send(session, Self::cancel_message(&guard, &run_id, "cancelled"));
            if let Some(lease) = self.leases.get_mut(&run_id) {
                lease.cancel_sent = Some(Instant::now());
            }
        }
    }
}

#[cfg(test)]
mod tests;
