//! The agent registry: who is connected, on which session. An agent comes up with its
//! declaration and the leases it reports, replaces an older stream of itself, goes down
//! (stream ended, silent, removed), and is listed for `GET /agents`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use iohr_domain::RunKind;
use iohr_proto::link::{ControllerMessage, RecoveredFault, RunningLease, controller_message};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Dispatcher, LeaseState};
use crate::queue::scheduler::{AgentSlot, SessionId};
use crate::store::{AgentIdentity, Declaration, LeaseGuard};

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

pub(super) struct Session {
    pub(super) agent_id: String,
    pub(super) name: String,
    pub(super) incarnation: String,
    pub(super) tx: mpsc::Sender<ControllerMessage>,
    pub(super) last_heard: Arc<AtomicU64>,
    pub(super) close: CancellationToken,
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

impl Dispatcher {
    pub(super) async fn agent_up(&mut self, up: AgentUp) -> Result<Vec<String>, String> {
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
        for &id in &old {
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
        self.agents_changed(&[session], &old);
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
            let reported_guard = LeaseGuard {
                lease_id: report.lease_id.clone(),
                epoch: report.epoch,
            };
            self.adopt_reported(&report.run_id, &reported_guard, &identity.agent_id)
                .await;
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

    pub(super) async fn agent_down(&mut self, session: SessionId, why: &str) {
        let Some(s) = self.sessions.remove(&session) else {
            return;
        };
        s.close.cancel();
        self.scheduler.remove_agent(session);
        self.agents_changed(&[], &[session]);
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

    /// Closes the streams of agents removed since the last look: a removed agent's
    /// certificate is refused at once for new streams, and within a second for live ones.
    pub(super) async fn close_removed(&mut self) {
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

    /// Drops the agents silent past the suspect time.
    pub(super) async fn close_silent(&mut self) {
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
    }

    /// What `GET /agents` shows: each connected agent and the leases it holds.
    pub(super) fn online(&self) -> Vec<OnlineAgent> {
        self.sessions
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
            .collect()
    }

    pub(super) fn send(&self, session: Option<SessionId>, message: controller_message::Body) {
        if let Some(s) = session.and_then(|id| self.sessions.get(&id)) {
            let _ = s.tx.try_send(ControllerMessage {
                body: Some(message),
            });
        }
    }
}
