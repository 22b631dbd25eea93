//! Who runs what next: per-account queues in order, the plan's concurrency per account,
//! `max_concurrent_jobs` and exclusivity per agent, and turns between accounts.
//!
//! Pure state, no I/O: the dispatcher feeds it events and carries out its placements.
//!
//! Choices (see docs/architecture.md): each account's queue is scanned in order and the
//! first run that can be placed now goes, so a run waiting for a busy named agent does not
//! hold back the account's other runs; accounts take turns one placement at a time, so a
//! thousand queued runs of one account delay another account's run by at most one round.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use iohr_domain::load::Share;
use iohr_domain::{Executor, RunKind};

use index::{AgentIndex, Standing};

mod index;

/// Runs considered per account per turn: bounds a round when a queue's head is blocked.
/// Alike runs that found no agent are skipped without looking again (see `place_one`),
/// so a long blocked stretch costs a hash lookup per run.
const LOOKAHEAD: usize = 10_000;

pub type SessionId = u64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedRun {
    pub run_id: String,
    pub account_id: String,
    pub kind: RunKind,
    pub environment: String,
    pub executor: Executor,
    /// What the offer carries, so offering needs no store read.
    pub target: String,
    pub scenario_id: String,
    pub scenario_version: String,
    /// The person who confirmed a production faults run.
    pub confirmed_by: Option<String>,
    /// Sessions that refused this run: not offered it again.
    pub refused_by: BTreeSet<SessionId>,
    /// Sessions that let an offer of this run lapse: offered it again only when no other
    /// agent can take it (a wedged agent should not hold a run, a lone one should).
    pub lapsed_with: BTreeSet<SessionId>,
    /// The run's `reason` as stored, so a refresh rewrites only what changes.
    pub reason: Option<String>,
    /// A share of a split run: that run's id and which share. The shares queued of one
    /// split run are placed together or not at all, each on an agent of its own.
    pub share: Option<(String, Share)>,
}

#[derive(Debug, Clone)]
pub struct AgentSlot {
    pub session: SessionId,
    pub agent_id: String,
    pub name: String,
    pub account_id: String,
    pub is_platform: bool,
    pub environments: HashSet<String>,
    pub kinds: HashSet<RunKind>,
    pub max_jobs: usize,
    /// Runs offered to or running on this agent, with their kinds.
    pub leases: HashMap<String, RunKind>,
}

impl AgentSlot {
    fn has_exclusive(&self) -> bool {
        self.leases.values().any(|k| k.is_exclusive())
    }

    /// Whether this agent's declarations let it run such a run at all, busy or not.
    pub fn serves(
        &self,
        account_id: &str,
        executor: &Executor,
        environment: &str,
        kind: RunKind,
    ) -> bool {
        if !self.kinds.contains(&kind) {
            return false;
        }
        match executor {
            Executor::Any => {
                self.account_id == account_id && self.environments.contains(environment)
            }
            Executor::Agent(name) => {
                self.account_id == account_id
                    && &self.name == name
                    && self.environments.contains(environment)
            }
            // Our cloud's agents serve every account and environment.
            Executor::Cloud => self.is_platform,
        }
    }

    fn can_take(&self, run: &QueuedRun) -> bool {
        !run.refused_by.contains(&self.session)
            && self.serves(&run.account_id, &run.executor, &run.environment, run.kind)
            && self.leases.len() < self.max_jobs
            && !(run.kind.is_exclusive() && self.has_exclusive())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub run: QueuedRun,
    pub session: SessionId,
}

#[derive(Debug, Default)]
pub struct Scheduler {
    queues: HashMap<String, VecDeque<QueuedRun>>,
    /// When each account last had a run placed (a placement counter): the account served
    /// longest ago goes first, so turns survive accounts coming and going.
    last_served: HashMap<String, u64>,
    placements: u64,
    /// Runs offered or running per account (including those of lost agents until they end).
    active: HashMap<String, usize>,
    max_running: HashMap<String, usize>,
    /// Leases other replicas hold per account (replicas only), as last read from the
    /// store: they count against the plan too.
    remote_active: HashMap<String, usize>,
    agents: HashMap<SessionId, AgentSlot>,
    /// The agents in `agents` listed by what they can take now (see `index.rs`): kept
    /// current by every change of `agents`, so `best_agent` need not walk them all.
    index: AgentIndex,
}

impl Scheduler {
    pub fn set_max_running(&mut self, account_id: &str, max_running: usize) {
        self.max_running.insert(account_id.to_string(), max_running);
    }

    pub fn max_running(&self, account_id: &str) -> usize {
        self.max_running
            .get(account_id)
            .copied()
            .unwrap_or(usize::MAX)
    }

    /// Leases held per account across replicas (this one's included): what other
    /// replicas hold is what this one does not track.
    pub fn set_leases_everywhere(&mut self, everywhere: &HashMap<String, usize>) {
        self.remote_active = everywhere
            .iter()
            .map(|(account, n)| (account.clone(), n.saturating_sub(self.active(account))))
            .filter(|(_, n)| *n > 0)
            .collect();
    }

    /// A lease of the account ended on some replica: one fewer held elsewhere, as far
    /// as this one knows (the store has the last word at the offer).
    pub fn lease_freed(&mut self, account_id: &str) {
        if let Some(n) = self.remote_active.get_mut(account_id) {
            *n = n.saturating_sub(1);
        }
    }

    /// The account has no room across replicas until the next look at the store.
    pub fn mark_full(&mut self, account_id: &str) {
        let room = self
            .max_running(account_id)
            .saturating_sub(self.active(account_id));
        self.remote_active.insert(account_id.to_string(), room);
    }

    /// Queues a run after the account's others; a run returning to the queue keeps its
    /// place (run ids sort by creation).
    pub fn enqueue(&mut self, run: QueuedRun) {
        let queue = self.queues.entry(run.account_id.clone()).or_default();
        let at = queue.partition_point(|q| q.run_id < run.run_id);
        queue.insert(at, run);
    }

    pub fn remove_queued(&mut self, account_id: &str, run_id: &str) -> Option<QueuedRun> {
        let queue = self.queues.get_mut(account_id)?;
        let at = queue.iter().position(|q| q.run_id == run_id)?;
        queue.remove(at)
    }

    pub fn is_queued(&self, account_id: &str, run_id: &str) -> bool {
        self.queues
            .get(account_id)
            .is_some_and(|q| q.iter().any(|r| r.run_id == run_id))
    }

    /// Every queued run, account by account in order.
    pub fn queued(&self) -> impl Iterator<Item = &QueuedRun> {
        self.queues.values().flatten()
    }

    /// Every queued run, to update what is kept beside it (never its place or id).
    pub fn queued_mut(&mut self) -> impl Iterator<Item = &mut QueuedRun> {
        self.queues.values_mut().flatten()
    }

    pub fn add_agent(&mut self, slot: AgentSlot) {
        // The same session again: the slot it replaces leaves the lists first.
        if let Some(old) = self.agents.remove(&slot.session) {
            self.index.remove(&old);
        }
        self.index.insert(&slot);
        self.agents.insert(slot.session, slot);
    }

    pub fn remove_agent(&mut self, session: SessionId) -> Option<AgentSlot> {
        let slot = self.agents.remove(&session)?;
        self.index.remove(&slot);
        Some(slot)
    }

    pub fn agent(&self, session: SessionId) -> Option<&AgentSlot> {
        self.agents.get(&session)
    }

    pub fn agents(&self) -> impl Iterator<Item = &AgentSlot> {
        self.agents.values()
    }

    /// A lease the dispatcher tracks outside a placement (restart, reconnect) counts
    /// against the account's plan.
    pub fn count_active(&mut self, account_id: &str) {
        *self.active.entry(account_id.to_string()).or_default() += 1;
    }

    /// A run of the account ended or returned to the queue.
    pub fn release_active(&mut self, account_id: &str) {
        if let Some(n) = self.active.get_mut(account_id) {
            *n = n.saturating_sub(1);
        }
    }

    /// A lease changes where the agent is listed (its count orders the lists; a full
    /// agent or one holding an exclusive run is in fewer): the index moves it.
    pub fn attach_lease(&mut self, session: SessionId, run_id: &str, kind: RunKind) {
        if let Some(slot) = self.agents.get_mut(&session) {
            let before = Standing::of(slot);
            slot.leases.insert(run_id.to_string(), kind);
            self.index.moved(slot, before);
        }
    }

    pub fn detach_lease(&mut self, session: SessionId, run_id: &str) {
        if let Some(slot) = self.agents.get_mut(&session) {
            let before = Standing::of(slot);
            slot.leases.remove(run_id);
            self.index.moved(slot, before);
        }
    }

    pub fn active(&self, account_id: &str) -> usize {
        self.active.get(account_id).copied().unwrap_or(0)
    }

    /// Places as many queued runs as agents and plans allow, accounts taking turns.
    pub fn next_placements(&mut self) -> Vec<Placement> {
        self.queues.retain(|_, q| !q.is_empty());
        let mut placements = Vec::new();
        loop {
            let mut turns: Vec<(u64, String)> = self
                .queues
                .keys()
                .map(|a| (self.last_served.get(a).copied().unwrap_or(0), a.clone()))
                .collect();
            turns.sort();
            let mut placed = false;
            for (_, account) in turns {
                let placed_now = self.place_one(&account);
                if !placed_now.is_empty() {
                    self.placements += 1;
                    self.last_served.insert(account, self.placements);
                    placements.extend(placed_now);
                    placed = true;
                }
            }
            if !placed {
                return placements;
            }
        }
    }

    /// The agent that should take `run` now, if one can, leaving out `taken`: agents that
    /// let this run's offer lapse last, then the least busy; the session id makes the
    /// choice deterministic.
    ///
    /// That is the least `(lapsed, leases, session)` over the agents that can take the
    /// run. The index lists every such agent in `(leases, session)` order, so the first
    /// one not lapsed is the choice, and when all are lapsed, the first lapsed one: the
    /// walk stops at the first agent that can take the run unless the run lapsed with it.
    fn best_agent(&self, run: &QueuedRun, taken: &HashSet<SessionId>) -> Option<SessionId> {
        let mut first_lapsed = None;
        for session in self.index.candidates(run) {
            let can_take = self.agents.get(&session).is_some_and(|s| s.can_take(run));
            if !can_take || taken.contains(&session) {
                continue;
            }
            if !run.lapsed_with.contains(&session) {
                return Some(session);
            }
            first_lapsed = first_lapsed.or(Some(session));
        }
        first_lapsed
    }

    /// The account's next placement: one run, or every queued share of one split run
    /// (each on an agent of its own, all within the plan's room, or none of them).
    fn place_one(&mut self, account: &str) -> Vec<Placement> {
        let limit = self.max_running(account);
        let remote = self.remote_active.get(account).copied().unwrap_or(0);
        let room = limit.saturating_sub(self.active(account).saturating_add(remote));
        if room == 0 {
            return Vec::new();
        }
        let Some(queue) = self.queues.get(account) else {
            return Vec::new();
        };
        // Runs alike (executor, environment, kind, no refusals) find the same agents:
        // once one found none, the others are not asked again in this turn.
        let mut no_agent: HashSet<(&Executor, &str, RunKind)> = HashSet::new();
        let mut split_runs_seen: HashSet<&str> = HashSet::new();
        let chosen: Option<Vec<(String, SessionId)>> =
            queue.iter().take(LOOKAHEAD).find_map(|run| {
                if let Some((parent, _)) = &run.share {
                    if !split_runs_seen.insert(parent.as_str()) {
                        return None;
                    }
                    let shares: Vec<&QueuedRun> = queue
                        .iter()
                        .filter(|r| r.share.as_ref().is_some_and(|(p, _)| p == parent))
                        .collect();
                    if shares.len() > room {
                        return None;
                    }
                    let mut taken = HashSet::new();
                    let mut picks = Vec::with_capacity(shares.len());
                    for share in shares {
                        let session = self.best_agent(share, &taken)?;
                        taken.insert(session);
                        picks.push((share.run_id.clone(), session));
                    }
                    return Some(picks);
                }
                let plain = run.refused_by.is_empty() && run.lapsed_with.is_empty();
                let shape = (&run.executor, run.environment.as_str(), run.kind);
                if plain && no_agent.contains(&shape) {
                    return None;
                }
                let best = self.best_agent(run, &HashSet::new());
                if best.is_none() && plain {
                    no_agent.insert(shape);
                }
                best.map(|session| vec![(run.run_id.clone(), session)])
            });
        let mut placements = Vec::new();
        for (run_id, session) in chosen.unwrap_or_default() {
            let Some(run) = self.remove_queued(account, &run_id) else {
                continue;
            };
            self.count_active(account);
            self.attach_lease(session, &run.run_id, run.kind);
            placements.push(Placement { run, session });
        }
        placements
    }
}

mod pooled;
pub use pooled::SplitToPool;

#[cfg(test)]
mod bench;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
