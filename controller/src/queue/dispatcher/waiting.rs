//! Why a queued run waits, kept current. A run that no connected agent could take (not
//! one busy agent: none that serves its account, environment and kind) says so in its
//! `reason`; so does a run split over N agents that fewer than N connected agents serve,
//! on its shares and on the split run itself. The API says it when it creates or confirms a run, from the agents this
//! publishes; the dispatcher re-reads every queued run against the connected agents after
//! they change or runs join the queue, at most once a second, and writes only the reasons
//! that change, one statement per reason (and 500 runs).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use iohr_domain::{Executor, RunKind};
use tokio::sync::watch;

use super::{Dispatcher, DispatcherHandle};
use crate::queue::scheduler::{AgentSlot, SessionId};
use crate::store::PoolAsk;

/// The connected agents as the API reads them (their leases left out).
pub(super) type Connected = Arc<Vec<Arc<AgentSlot>>>;

pub(super) struct Reasons {
    published: watch::Sender<Connected>,
    /// What is published, by session: each agent's slot copied once, as it connects, so
    /// that publishing copies pointers (10,000 agents connecting one by one would copy
    /// 50 million slots).
    slots: HashMap<SessionId, Arc<AgentSlot>>,
    /// The agents or the queue changed since the reasons were last made current.
    stale: bool,
}

impl Reasons {
    pub(super) fn new() -> (Reasons, watch::Receiver<Connected>) {
        let (published, connected) = watch::channel(Connected::default());
        let reasons = Reasons {
            published,
            slots: HashMap::new(),
            stale: false,
        };
        (reasons, connected)
    }
}

/// What a queued run's reason should be, given the connected agents.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Waiting {
    /// A connected agent serves it, busy or not: no reason.
    Served,
    /// Only agents that refused it serve it: their refusal stays its reason.
    Refused,
    /// No connected agent serves it: what is missing.
    NoAgent(String),
}

/// The run's shape: what decides which agents serve it.
struct Shape<'a> {
    account_id: &'a str,
    executor: &'a Executor,
    environment: &'a str,
    kind: RunKind,
    /// How many agents it needs at once: a split run's shares count, else 1.
    needed: usize,
    /// Replicas: how many agents linked to any live replica serve a split run, as the
    /// store has them (its shares are placed over all of them, see `pooled.rs`).
    everywhere: Option<usize>,
}

fn waiting<'a>(
    agents: impl Iterator<Item = &'a AgentSlot> + Clone,
    run: &Shape<'_>,
    refused_by: &BTreeSet<SessionId>,
) -> Waiting {
    let serves = |a: &&AgentSlot| a.serves(run.account_id, run.executor, run.environment, run.kind);
    if run.needed > 1 {
        let serving = run
            .everywhere
            .unwrap_or_else(|| agents.clone().filter(serves).count());
        if serving >= run.needed {
            return Waiting::Served;
        }
        if serving == 0 {
            return Waiting::NoAgent(no_agent(agents, run));
        }
        let (needed, environment, kind) = (run.needed, run.environment, run.kind);
        let connected = match run.everywhere {
            Some(_) => "connected to the controllers",
            None => "connected to this controller",
        };
        return Waiting::NoAgent(format!(
            "split over {needed} agents, placed all at once: {serving} agent(s) {connected} \
             serve environment {environment} with kind {kind}"
        ));
    }
    let mut serving = agents.clone().filter(serves).peekable();
    if serving.peek().is_none() {
        return Waiting::NoAgent(no_agent(agents, run));
    }
    if serving.any(|a| !refused_by.contains(&a.session)) {
        Waiting::Served
    } else {
        Waiting::Refused
    }
}

fn no_agent<'a>(mut agents: impl Iterator<Item = &'a AgentSlot>, run: &Shape<'_>) -> String {
    let Shape {
        account_id,
        environment,
        kind,
        ..
    } = run;
    match run.executor {
        Executor::Any => format!(
            "no connected agent of this account serves environment {environment} with kind {kind}"
        ),
        Executor::Agent(name) => {
            if agents.any(|a| a.account_id == *account_id && &a.name == name) {
                format!("agent {name} does not serve environment {environment} with kind {kind}")
            } else {
                format!("agent {name} is not connected")
            }
        }
        Executor::Cloud => format!("no connected cloud agent runs kind {kind}"),
    }
}

impl DispatcherHandle {
    /// Why a run of this account, executor, environment and kind would wait for an agent
    /// if queued now: none connected could take it.
    pub fn waiting_reason(
        &self,
        account_id: &str,
        executor: &Executor,
        environment: &str,
        kind: RunKind,
    ) -> Option<String> {
        let connected = self.connected.borrow();
        let shape = Shape {
            account_id,
            executor,
            environment,
            kind,
            needed: 1,
            everywhere: None,
        };
        match waiting(connected.iter().map(Arc::as_ref), &shape, &BTreeSet::new()) {
            Waiting::NoAgent(reason) => Some(reason),
            Waiting::Served | Waiting::Refused => None,
        }
    }
}

impl Dispatcher {
    /// Agents came (`up`, as the scheduler has them) or went (`down`): the API sees it
    /// at once, the queued runs at the next refresh.
    pub(super) fn agents_changed(&mut self, up: &[SessionId], down: &[SessionId]) {
        let slots = &mut self.reasons.slots;
        for session in down {
            slots.remove(session);
        }
        for session in up {
            if let Some(slot) = self.scheduler.agent(*session) {
                let published = AgentSlot {
                    leases: HashMap::new(),
                    ..slot.clone()
                };
                slots.insert(*session, Arc::new(published));
            }
        }
        let connected: Vec<Arc<AgentSlot>> = slots.values().cloned().collect();
        self.reasons.published.send_replace(Arc::new(connected));
        self.reasons.stale = true;
    }

    /// A run joined the queue (new, confirmed, or returned by its agent).
    pub(super) fn queue_changed(&mut self) {
        self.reasons.stale = true;
    }

    /// A queued run's reason was written elsewhere (an agent's refusal).
    pub(super) fn note_reason(&mut self, run_id: &str, reason: String) {
        if let Some(run) = self.scheduler.queued_mut().find(|r| r.run_id == run_id) {
            run.reason = Some(reason);
        }
    }

    /// Makes every queued run's reason current, writing only those that change. Alike
    /// runs (account, executor, environment, kind, no refusals) are judged once.
    pub(super) async fn refresh_reasons(&mut self) {
        // Replicas: agents linked to other replicas come and go unseen here.
        let splits_queued = self.scheduler.queued().any(|r| r.share.is_some());
        if self.store.is_replica() && splits_queued {
            self.reasons.stale = true;
        }
        if !self.reasons.stale {
            return;
        }
        let everywhere = self.split_agents_everywhere().await;
        let mut changes: HashMap<Option<String>, Vec<String>> = HashMap::new();
        {
            let connected: Vec<&AgentSlot> = self.scheduler.agents().collect();
            let agents = connected.iter().copied();
            let mut alike: HashMap<(&str, &Executor, &str, RunKind, usize), Waiting> =
                HashMap::new();
            // A split run's reason is its shares': written once with theirs.
            let mut split_runs = BTreeSet::new();
            for run in self.scheduler.queued() {
                let shape = Shape {
                    account_id: &run.account_id,
                    executor: &run.executor,
                    environment: &run.environment,
                    kind: run.kind,
                    needed: run.share.as_ref().map_or(1, |(_, s)| s.count() as usize),
                    everywhere: run.share.as_ref().and_then(|_| {
                        everywhere
                            .get(&(
                                run.account_id.as_str(),
                                &run.executor,
                                run.environment.as_str(),
                                run.kind,
                            ))
                            .copied()
                    }),
                };
                let judged = if run.refused_by.is_empty() {
                    let key = (
                        shape.account_id,
                        shape.executor,
                        shape.environment,
                        run.kind,
                        shape.needed,
                    );
                    alike
                        .entry(key)
                        .or_insert_with(|| waiting(agents.clone(), &shape, &run.refused_by))
                        .clone()
                } else {
                    waiting(agents.clone(), &shape, &run.refused_by)
                };
                let wanted = match judged {
                    Waiting::Served => None,
                    Waiting::Refused => continue,
                    Waiting::NoAgent(reason) => Some(reason),
                };
                if wanted != run.reason {
                    let ids = changes.entry(wanted).or_default();
                    ids.push(run.run_id.clone());
                    if let Some((parent, _)) = &run.share
                        && split_runs.insert(parent.clone())
                    {
                        ids.push(parent.clone());
                    }
                }
            }
        }
        let mut written: HashMap<String, Option<String>> = HashMap::new();
        let mut failed = false;
        for (reason, run_ids) in changes {
            match self
                .store
                .set_waiting_reason(reason.as_deref(), &run_ids)
                .await
            {
                Ok(()) => written.extend(run_ids.into_iter().map(|id| (id, reason.clone()))),
                Err(error) => {
                    tracing::warn!(%error, runs = run_ids.len(), "recording why runs wait failed; retrying");
                    failed = true;
                }
            }
        }
        if !written.is_empty() {
            tracing::debug!(runs = written.len(), "waiting reasons made current");
            for run in self.scheduler.queued_mut() {
                if let Some(reason) = written.remove(&run.run_id) {
                    run.reason = reason;
                }
            }
        }
        self.reasons.stale = failed;
    }

    /// Replicas: for each shape of the queued split runs, how many agents linked to any
    /// live replica serve it (none on a single controller, or if the store fails: then
    /// the agents here are counted).
    async fn split_agents_everywhere(&self) -> HashMap<(&str, &Executor, &str, RunKind), usize> {
        let mut counts = HashMap::new();
        if !self.store.is_replica() {
            return counts;
        }
        let shapes: std::collections::HashSet<(&str, &Executor, &str, RunKind)> = self
            .scheduler
            .queued()
            .filter(|r| r.share.is_some())
            .map(|r| {
                (
                    r.account_id.as_str(),
                    &r.executor,
                    r.environment.as_str(),
                    r.kind,
                )
            })
            .collect();
        if shapes.is_empty() {
            return counts;
        }
        let live = match self.store.live_replicas().await {
            Ok(live) => live,
            Err(error) => {
                tracing::warn!(%error, "reading the live replicas failed");
                return counts;
            }
        };
        for shape in shapes {
            let (account_id, executor, environment, kind) = shape;
            let ask = PoolAsk {
                account_id,
                executor,
                environment,
                kind,
            };
            match self.store.agents_serving_everywhere(ask, &live).await {
                Ok(n) => {
                    counts.insert(shape, n);
                }
                Err(error) => tracing::warn!(%error, "counting agents across replicas failed"),
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests;
