//! The checker of issue 34: reads a [`History`] and says which of the service's promises
//! under a broken network it breaks (docs/guarantees.md), each violation with what was
//! seen. It believes the target's log, not the controller: an exclusive run runs where
//! its requests come from.

use std::collections::BTreeMap;

use crate::history::{History, Stream, TERMINAL};

/// The promises, as docs/guarantees.md numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Promise {
    /// An exclusive run executes on one agent at a time; an agent runs one exclusive run
    /// at a time: by the target's log, and by the controller's leases where recorded.
    Exclusive,
    /// An agent that cannot hear its controller stops its exclusive runs' load within the
    /// bound; nobody else runs them, nor does the store end them, before that.
    StopsInBound,
    /// Every run reaches exactly one terminal status; no request of it comes after.
    OneEnding,
    /// Each stream of each run delivers frames 1..n once each, in order, then `finished`.
    Frames,
    /// No fault outlives its deadline (or its agent's silence) plus the bound.
    FaultBound,
    /// A run acknowledged 201 exists afterwards; a confirmed run stays confirmed.
    Acknowledged,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub promise: Promise,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.promise, self.detail)
    }
}

/// Every violation of the history, none when it keeps every promise.
pub fn check(history: &History) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut report = |promise, detail: String| found.push(Violation { promise, detail });
    exclusive(history, &mut report);
    exclusive_leases(history, &mut report);
    stops_in_bound(history, &mut report);
    one_ending(history, &mut report);
    frames(history, &mut report);
    fault_bound(history, &mut report);
    acknowledged(history, &mut report);
    found
}

type Report<'a> = dyn FnMut(Promise, String) + 'a;

/// `[first, last]` request time per (run, agent), exclusive runs only.
fn spans(history: &History) -> BTreeMap<(String, String), (u64, u64)> {
    let mut spans: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for request in &history.requests {
        let Some(run) = &request.run else { continue };
        if !history.run(run).is_some_and(|r| r.exclusive) {
            continue;
        }
        spans
            .entry((run.clone(), request.agent.clone()))
            .and_modify(|(first, last)| {
                *first = (*first).min(request.at_ms);
                *last = (*last).max(request.at_ms);
            })
            .or_insert((request.at_ms, request.at_ms));
    }
    spans
}

/// When the run was first seen in a terminal status.
fn ended_at(history: &History, run: &str) -> Option<u64> {
    history
        .run(run)?
        .statuses
        .iter()
        .find(|s| TERMINAL.contains(&s.status.as_str()))
        .map(|s| s.at_ms)
}

fn overlap(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

fn exclusive(history: &History, report: &mut Report<'_>) {
    let spans: Vec<_> = spans(history).into_iter().collect();
    for (i, ((run_a, agent_a), a)) in spans.iter().enumerate() {
        for ((run_b, agent_b), b) in &spans[i + 1..] {
            if !overlap(*a, *b) {
                continue;
            }
            if run_a == run_b && agent_a != agent_b {
                report(
                    Promise::Exclusive,
                    format!(
                        "run {run_a} executed on {agent_a} ({a:?}) and {agent_b} ({b:?}) at once"
                    ),
                );
            }
            if agent_a == agent_b && run_a != run_b {
                report(
                    Promise::Exclusive,
                    format!(
                        "agent {agent_a} ran exclusive runs {run_a} ({a:?}) and {run_b} ({b:?}) at once"
                    ),
                );
            }
        }
    }
}

/// The controller's leases: no look shows an exclusive run held by two agents, or an
/// agent holding two exclusive runs. Each offence reported at its first look.
fn exclusive_leases(history: &History, report: &mut Report<'_>) {
    let exclusive = |run: &String| history.run(run).is_some_and(|r| r.exclusive);
    let mut seen = std::collections::BTreeSet::new();
    for look in &history.leases {
        let mut holders: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
        for (agent, runs) in &look.held {
            let mine: Vec<&String> = runs.iter().filter(|r| exclusive(r)).collect();
            if mine.len() > 1 && seen.insert(format!("{agent} {mine:?}")) {
                report(
                    Promise::Exclusive,
                    format!(
                        "at {} agent {agent} held exclusive runs {mine:?} at once",
                        look.at_ms
                    ),
                );
            }
            for run in mine {
                holders.entry(run).or_default().push(agent);
            }
        }
        for (run, agents) in holders {
            if agents.len() > 1 && seen.insert(format!("{run} {agents:?}")) {
                report(
                    Promise::Exclusive,
                    format!("at {} run {run} was held by {agents:?} at once", look.at_ms),
                );
            }
        }
    }
}

fn stops_in_bound(history: &History, report: &mut Report<'_>) {
    let spans = spans(history);
    for cut in history.cuts.iter().filter(|c| c.silences_controller) {
        // The agent's side: its last request by `stop`; the controller's: nothing of
        // the agent's runs handed on or ended before `bound`.
        let stop = cut.from_ms + history.bounds.agent_stop_ms();
        let bound = cut.from_ms + history.bounds.stop_ms;
        let until = cut.to_ms.unwrap_or(u64::MAX);
        // What the agent was running when the cut began: begun, not yet seen ended.
        let running: Vec<&String> = spans
            .iter()
            .filter(|((run, agent), (first, _))| {
                *agent == cut.agent
                    && *first <= cut.from_ms
                    && ended_at(history, run).is_none_or(|end| end > cut.from_ms)
            })
            .map(|((run, _), _)| run)
            .collect();
        for request in &history.requests {
            let Some(run) = &request.run else { continue };
            let exclusive = history.run(run).is_some_and(|r| r.exclusive);
            if !exclusive {
                continue;
            }
            if request.agent == cut.agent && request.at_ms > stop && request.at_ms <= until {
                report(
                    Promise::StopsInBound,
                    format!(
                        "{} sent run {run}'s load {} ms after the cut {} began (bound {} ms)",
                        cut.agent,
                        request.at_ms - cut.from_ms,
                        cut.what,
                        history.bounds.agent_stop_ms()
                    ),
                );
            }
            if request.agent != cut.agent
                && running.contains(&run)
                && (cut.from_ms..bound).contains(&request.at_ms)
            {
                report(
                    Promise::StopsInBound,
                    format!(
                        "run {run} of the cut {} reached {} {} ms after the cut, inside the bound",
                        cut.agent,
                        request.agent,
                        request.at_ms.saturating_sub(cut.from_ms)
                    ),
                );
            }
        }
        for run in running {
            let Some(record) = history.run(run) else {
                continue;
            };
            if let Some(end) = record
                .statuses
                .iter()
                .find(|s| TERMINAL.contains(&s.status.as_str()))
                .filter(|s| s.reason.as_deref() == Some("agent lost") && s.at_ms < bound)
            {
                report(
                    Promise::StopsInBound,
                    format!(
                        "run {run} ended `agent lost` {} ms after {}'s cut, before its bound",
                        end.at_ms.saturating_sub(cut.from_ms),
                        cut.agent
                    ),
                );
            }
        }
    }
}

fn one_ending(history: &History, report: &mut Report<'_>) {
    for run in &history.runs {
        let ending = run
            .statuses
            .iter()
            .position(|s| TERMINAL.contains(&s.status.as_str()));
        let Some(first) = ending.map(|i| &run.statuses[i]) else {
            report(
                Promise::OneEnding,
                format!(
                    "run {} never ended (last seen {:?})",
                    run.id,
                    run.statuses.last().map(|s| &s.status)
                ),
            );
            continue;
        };
        for later in &run.statuses[ending.unwrap_or_default()..] {
            if (&later.status, &later.reason) != (&first.status, &first.reason) {
                report(
                    Promise::OneEnding,
                    format!(
                        "run {} ended {} ({:?}) and later showed {} ({:?})",
                        run.id, first.status, first.reason, later.status, later.reason
                    ),
                );
            }
        }
        if let Some(late) = history
            .requests
            .iter()
            .filter(|r| r.run.as_deref() == Some(run.id.as_str()))
            .find(|r| r.at_ms > first.at_ms)
        {
            report(
                Promise::OneEnding,
                format!(
                    "run {} got a request from {} {} ms after it was seen {}",
                    run.id,
                    late.agent,
                    late.at_ms - first.at_ms,
                    first.status
                ),
            );
        }
    }
}

fn frames(history: &History, report: &mut Report<'_>) {
    for run in &history.runs {
        for stream in &run.streams {
            for fault in stream_faults(&run.id, stream) {
                report(Promise::Frames, fault);
            }
        }
    }
}

/// What breaks the promise on one stream of run `id`: its frames 1..n once each, in
/// order, one `finished`, last. Also what every other test asserts of a stream
/// ([`crate::history::assert_gapless`]).
pub fn stream_faults(id: &str, stream: &Stream) -> Vec<String> {
    let mut faults = Vec::new();
    let ids: Vec<Option<u64>> = stream.frames.iter().map(|f| f.0).collect();
    let expected: Vec<Option<u64>> = (1..=ids.len() as u64).map(Some).collect();
    if ids != expected {
        let first_wrong = ids
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(ids.len().min(expected.len()));
        faults.push(format!(
            "run {id} on {}: frame {} of the stream has id {:?}, not {}",
            stream.replica,
            first_wrong + 1,
            ids.get(first_wrong).copied().flatten(),
            first_wrong + 1
        ));
    }
    let finished = stream.frames.iter().filter(|f| f.1 == "finished").count();
    let last = stream.frames.last().map(|f| f.1.as_str());
    if finished != 1 || last != Some("finished") {
        faults.push(format!(
            "run {id} on {}: {finished} `finished` frames, the last frame {last:?}",
            stream.replica
        ));
    }
    faults
}

fn fault_bound(history: &History, report: &mut Report<'_>) {
    let bound = history.bounds.fault_ms;
    for fault in &history.faults {
        // The earliest the fault had to be gone: its deadline, or the agent's dead man's
        // switch when a cut kept it from its controller while the fault held.
        let silenced = history
            .cuts
            .iter()
            .filter(|c| c.silences_controller && c.agent == fault.agent)
            .filter(|c| c.from_ms < fault.deadline_ms && c.from_ms >= fault.applied_ms)
            .filter(|c| {
                c.to_ms
                    .is_none_or(|to| to >= c.from_ms + history.bounds.agent_stop_ms())
            })
            .map(|c| c.from_ms + history.bounds.agent_stop_ms())
            .min();
        let due = silenced.map_or(fault.deadline_ms, |s| s.min(fault.deadline_ms)) + bound;
        match fault.undone_ms {
            Some(undone) if undone <= due => {}
            undone => report(
                Promise::FaultBound,
                format!(
                    "fault of run {} applied at {} (deadline {}) undone {undone:?}, due by {due}",
                    fault.run, fault.applied_ms, fault.deadline_ms
                ),
            ),
        }
    }
}

fn acknowledged(history: &History, report: &mut Report<'_>) {
    for run in history.runs.iter().filter(|r| r.acknowledged) {
        if !run.exists_after {
            report(
                Promise::Acknowledged,
                format!("run {} was acknowledged 201 and is gone", run.id),
            );
        }
        if let Some(confirmed) = run.statuses.iter().position(|s| s.confirmed)
            && let Some(lost) = run.statuses[confirmed..].iter().find(|s| !s.confirmed)
        {
            report(
                Promise::Acknowledged,
                format!(
                    "run {} was confirmed and at {} no longer was",
                    run.id, lost.at_ms
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests;
