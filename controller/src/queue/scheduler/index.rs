//! The connected agents listed by what a run can ask of them, so that a placement
//! looks only at agents that can serve the run instead of walking all of them (with
//! 10,000 agents in one account, `best_agent` comparing account ids and hashing
//! environments for each was a quarter of the controller's CPU).
//!
//! A list holds `(leases, session)` and is ordered by it: least busy first, the session
//! id breaking ties, which is the order `best_agent` chooses in. An agent is listed only
//! where it could take a run now, refusals aside:
//! - `Executor::Any`: under its account, each environment it serves and each kind it
//!   declares, while it has room and, for an exclusive kind, holds no exclusive run;
//! - `Executor::Agent(name)`: under its account and name, while it has room (an agent's
//!   name is one agent, a few sessions at most, so kinds are checked as it is walked);
//! - `Executor::Cloud`: a platform agent under each kind, as for `Any` (a platform agent
//!   serves every account and environment, and is listed under its own account as well).
//!
//! So every agent that `AgentSlot::can_take` a run is in the run's list; the walk still
//! asks `can_take` of each agent it meets, so the list may hold more, never fewer. What
//! it passes over are the agents the run itself names (refused, lapsed, taken).
//!
//! The lists follow an agent's state: the scheduler notes where an agent stands
//! (`Standing`) before its leases change and moves it after (`moved`); `remove` works
//! out the same lists from the same state as `insert` did. Empty lists are dropped, so
//! gone accounts, environments and names leave nothing behind.

use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

use iohr_domain::{Executor, RunKind};

use super::{AgentSlot, QueuedRun, SessionId};

/// An agent's place in a list: its number of leases, then its session.
type Entry = (usize, SessionId);
type Ordered = BTreeSet<Entry>;
type ByKind = HashMap<RunKind, Ordered>;

#[derive(Debug, Default)]
pub(super) struct AgentIndex {
    /// `Executor::Any`: account → environment → kind.
    any: HashMap<String, HashMap<String, ByKind>>,
    /// `Executor::Agent(name)`: account → name.
    named: HashMap<String, HashMap<String, Ordered>>,
    /// `Executor::Cloud`: the platform's agents by kind.
    cloud: ByKind,
}

impl AgentIndex {
    /// The agents that may take `run`, least busy first: a superset of those that can.
    pub(super) fn candidates<'a>(
        &'a self,
        run: &QueuedRun,
    ) -> impl Iterator<Item = SessionId> + 'a {
        let list = match &run.executor {
            Executor::Any => self
                .any
                .get(run.account_id.as_str())
                .and_then(|environments| environments.get(run.environment.as_str()))
                .and_then(|kinds| kinds.get(&run.kind)),
            Executor::Agent(name) => self
                .named
                .get(run.account_id.as_str())
                .and_then(|names| names.get(name.as_str())),
            Executor::Cloud => self.cloud.get(&run.kind),
        };
        list.into_iter().flatten().map(|&(_, session)| session)
    }

    pub(super) fn insert(&mut self, slot: &AgentSlot) {
        self.relist(slot, None, Some(Standing::of(slot)));
    }

    /// Takes out what `insert` put in for the agent in this same state.
    pub(super) fn remove(&mut self, slot: &AgentSlot) {
        self.relist(slot, Some(Standing::of(slot)), None);
    }

    /// The agent's leases changed since it stood at `before`: it moves in its lists in
    /// one pass (its account, name, environments and kinds, which say which lists, do
    /// not change with leases).
    pub(super) fn moved(&mut self, slot: &AgentSlot, before: Standing) {
        let after = Standing::of(slot);
        if after != before {
            self.relist(slot, Some(before), Some(after));
        }
    }

    /// In every list of the agent: out where it stood `before`, in where it stands `after`.
    fn relist(&mut self, slot: &AgentSlot, before: Option<Standing>, after: Option<Standing>) {
        let change = |list: &mut Ordered, kind: Option<RunKind>| {
            if let Some(entry) = before.and_then(|b| b.entry(kind)) {
                list.remove(&entry);
            }
            if let Some(entry) = after.and_then(|a| a.entry(kind)) {
                list.insert(entry);
            }
        };
        edit(&mut self.named, slot.account_id.as_str(), |names| {
            edit(names, slot.name.as_str(), |list| change(list, None));
        });
        edit(&mut self.any, slot.account_id.as_str(), |environments| {
            for environment in &slot.environments {
                edit(environments, environment.as_str(), |by_kind| {
                    for &kind in &slot.kinds {
                        edit(by_kind, &kind, |list| change(list, Some(kind)));
                    }
                });
            }
        });
        if slot.is_platform {
            for &kind in &slot.kinds {
                edit(&mut self.cloud, &kind, |list| change(list, Some(kind)));
            }
        }
    }
}

/// What of an agent's state its leases change, and so where it is listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Standing {
    /// Its place in a list; none when it is full (it can take nothing until a lease ends).
    entry: Option<Entry>,
    holds_exclusive: bool,
}

impl Standing {
    pub(super) fn of(slot: &AgentSlot) -> Self {
        let leases = slot.leases.len();
        Standing {
            entry: (leases < slot.max_jobs).then_some((leases, slot.session)),
            holds_exclusive: slot.has_exclusive(),
        }
    }

    /// Its entry in a list of `kind` (`None`: the list of a name, any kind), if it is in.
    fn entry(self, kind: Option<RunKind>) -> Option<Entry> {
        let barred = kind.is_some_and(RunKind::is_exclusive) && self.holds_exclusive;
        self.entry.filter(|_| !barred)
    }
}

/// A map's value that can be empty: an empty one is not kept.
trait Emptiable {
    fn is_empty(&self) -> bool;
}

impl<K, V> Emptiable for HashMap<K, V> {
    fn is_empty(&self) -> bool {
        HashMap::is_empty(self)
    }
}

impl<T> Emptiable for BTreeSet<T> {
    fn is_empty(&self) -> bool {
        BTreeSet::is_empty(self)
    }
}

/// Changes the value under `key` with `change`: made when missing, dropped when left
/// empty. The key is copied only when a value is made (not on every lease's change).
fn edit<K, Q, V>(map: &mut HashMap<K, V>, key: &Q, change: impl FnOnce(&mut V))
where
    K: Borrow<Q> + Hash + Eq,
    Q: ToOwned<Owned = K> + Hash + Eq + ?Sized,
    V: Default + Emptiable,
{
    if let Some(value) = map.get_mut(key) {
        change(value);
        if value.is_empty() {
            map.remove(key);
        }
    } else {
        let mut value = V::default();
        change(&mut value);
        if !value.is_empty() {
            map.insert(key.to_owned(), value);
        }
    }
}

#[cfg(test)]
mod tests;
