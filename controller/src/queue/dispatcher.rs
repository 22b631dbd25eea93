//! The dispatcher: one task owns the scheduler and every lease's deadline, so decisions
//! about a run are made in one place, one at a time. Frames and completions go straight
//! from an agent's session to the store (fenced by the lease); only what changes who holds
//! what comes through here.
//!
//! Here: the commands, the task's loop and its tick. Beside it, by job: `handle` (what
//! the API and the link call), `registry` (connected agents), `placement` (placed runs
//! become leases), `offers` (the offer and its answer), `endings` (leases ending, lost or
//! past their deadline), `cancels`, `confirmations` (lapsed ones), `splits` (a run over
//! several agents), `pooled` (its shares placed across replicas) and `waiting` (why a
//! queued run waits).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use iohr_domain::RunStatus;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::scheduler::{QueuedRun, Scheduler, SessionId};
use crate::hub::FrameHub;
use crate::store::{LeaseGuard, RunRow, Store, StoreError};
use crate::timing::Timing;

mod cancels;
mod confirmations;
mod endings;
mod handle;
mod offers;
mod placement;
mod pooled;
mod registry;
mod replicas;
mod splits;
mod waiting;

pub use handle::{COMMAND_QUEUE, DispatcherHandle, QueueSlot, Refused, Stopped};
use registry::Session;
pub use registry::{AgentUp, OnlineAgent};

/// How soon a replica tries again to place an account's runs that another replica was
/// placing (a placement's transaction takes a few milliseconds).
const PLACE_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_millis(5);

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
    /// Replicas: a run queued on another one.
    QueuedElsewhere {
        run_id: String,
    },
    /// Replicas: a lease of the account ended, here or on another one.
    LeaseFreed {
        account_id: String,
    },
    /// Replicas: a cancel asked on another one.
    CancelAsked {
        run_id: String,
    },
    /// Replicas: a split run's share leased by another one to an agent linked here.
    OfferedHere {
        run_id: String,
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
        share: run.share_of.clone(),
    }
}

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
    /// A placement found its account being placed by another replica: try again soon
    /// rather than at the next tick.
    place_again: bool,
    /// Cancels of split runs' shares still to carry out (see `splits.rs`).
    cascade: Vec<(String, String)>,
    /// Replicas: when each waiting split run was last tried across replicas (see
    /// `pooled.rs`).
    pool_tried: HashMap<String, Instant>,
    /// When the queues were last walked for such split runs.
    pool_looked: Instant,
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
        let (mut dispatcher, handle) = Dispatcher::new(store, hub, timing);
        dispatcher.rebuild().await?;
        let task = tokio::spawn(dispatcher.run(shutdown));
        Ok((handle, task))
    }

    /// A dispatcher with empty queues and its handle, before it runs (the tests drive one
    /// by hand).
    fn new(store: Store, hub: FrameHub, timing: Timing) -> (Dispatcher, DispatcherHandle) {
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let epoch = Instant::now();
        let (reasons, connected) = waiting::Reasons::new();
        let dispatcher = Dispatcher {
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
            place_again: false,
            cascade: Vec::new(),
            pool_tried: HashMap::new(),
            pool_looked: epoch,
            rx,
        };
        let handle = DispatcherHandle {
            tx,
            epoch,
            next_session: Arc::new(AtomicU64::new(1)),
            connected,
        };
        (dispatcher, handle)
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
                // Another replica's: it tracks the lease, or a live one takes it over.
                (Some(_), Some(_))
                    if self.store.is_replica()
                        && run.lease_state.is_some()
                        && run.replica != self.store.replica() => {}
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
            let place_again = self.place_again;
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => self.on_tick().await,
                // Replicas: another was placing the same account's runs.
                _ = tokio::time::sleep(PLACE_AGAIN_AFTER), if place_again => {}
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
            self.run_cascade().await;
            self.dispatch().await;
            self.place_pooled().await;
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
                // A replica may have learnt of it by its notice first.
                if !self.scheduler.is_queued(&run.account_id, &run.run_id)
                    && !self.leases.contains_key(&run.run_id)
                {
                    self.scheduler.enqueue(*run);
                    self.queue_changed();
                }
            }
            Command::QueuedElsewhere { run_id } => self.queued_elsewhere(&run_id).await,
            Command::CancelAsked { run_id } => self.cancel_asked(&run_id).await,
            Command::OfferedHere { run_id } => self.offered_here(&run_id).await,
            Command::LeaseFreed { account_id } => self.scheduler.lease_freed(&account_id),
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
                let split = self.split_of(&run_id);
                self.lease_ended(&run_id, &guard);
                if let Some(parent) = split {
                    self.settle_split(&parent).await;
                }
            }
            Command::Online { reply } => {
                let _ = reply.send(self.online());
            }
        }
    }

    /// Every deadline, looked at each tick.
    async fn on_tick(&mut self) {
        // Store reads that need not run every tick: once a second.
        if self.store_checked.elapsed() >= std::time::Duration::from_secs(1) {
            self.store_checked = Instant::now();
            self.close_removed().await;
            self.lapse_confirmations().await;
            self.refresh_reasons().await;
            if self.store.is_replica() {
                self.look_at_replicas().await;
            }
        }
        let now = Instant::now();
        self.close_silent().await;
        self.expire_due(now).await;
        self.resend_cancels();
    }
}

#[cfg(test)]
mod tests;
