//! The state machine of a lifecycle: the policy, the hypothesis before, the method, the
//! hypothesis after and the rollbacks, with the faults applied so far and their deadlines.

use std::future::Future;
use std::time::Duration;

use iohr_domain::faults::experiment::{Activity, ActivityType, Mask, Provider};
use iohr_domain::faults::journal::{ActivityStatus, PlannedFault, SteadyState, TimelineStep};
use iohr_domain::faults::{Experiment, Fault, Journal, JournalStatus, Touch};
use serde_json::{Value, json};

use super::super::Undo;
use super::{Clock, Driver, Run};

/// One fault that was applied.
pub(super) struct Applied {
    pub(super) ledger_id: String,
    pub(super) activity: String,
    pub(super) fault: Fault,
    pub(super) undo: Undo,
    /// Its deadline on the monotonic clock (the journal's record has it on the wall clock).
    pub(super) due: tokio::time::Instant,
    /// Its index in the journal's ledger.
    pub(super) record: usize,
    pub(super) undone: bool,
}

pub(super) enum Bounded<T> {
    Done(T),
    Cancelled,
}

pub(super) struct State<'a, D, E, T> {
    pub(super) run: Run<'a, D, E, T>,
    pub(super) journal: Journal,
    pub(super) applied: Vec<Applied>,
    /// The experiment's rollback actions run only once the method has started.
    pub(super) method_started: bool,
    /// The secrets' values: masked in every timeline step and in the journal.
    pub(super) mask: Mask,
}

impl<'a, D: Driver, E: Clock, T: Fn(TimelineStep) + Send + Sync> State<'a, D, E, T> {
    pub(super) fn end_as(&mut self, status: JournalStatus, reason: impl Into<String>) {
        self.journal.status = status;
        self.journal.reason = Some(reason.into());
    }

    pub(super) async fn execute(&mut self, experiment: &Experiment) {
        self.journal.targets = targets(&self.run.target, experiment);
        self.journal.dry_run = self.run.dry_run;
        if let Err(refusal) = self
            .run
            .policy
            .check_experiment(experiment, self.run.target_port)
        {
            tracing::warn!(run = %self.run.run_id, field = %refusal.field, reason = %refusal.reason, "faults refused by the policy");
            self.end_as(
                JournalStatus::Refused,
                format!("refused by the agent's policy: {refusal}"),
            );
            return;
        }
        if self.run.dry_run {
            self.dry_run(experiment).await;
            return;
        }
        if let Some(h) = &experiment.hypothesis {
            let Some(before) = self.hypothesis("hypothesis_before", &h.probes).await else {
                self.end_as(JournalStatus::Interrupted, "cancelled before the method");
                return;
            };
            let met = before.steady_state_met;
            self.journal.steady_states.before = Some(before);
            if !met {
                self.end_as(
                    JournalStatus::Failed,
                    "the steady state was not met before the method; nothing was injected",
                );
                return;
            }
        }

        let method_ended = self.method(experiment).await;
        if method_ended && let Some(h) = &experiment.hypothesis {
            match self.hypothesis("hypothesis_after", &h.probes).await {
                None => self.end_as(JournalStatus::Interrupted, "cancelled after the method"),
                Some(after) => {
                    let met = after.steady_state_met;
                    self.journal.steady_states.after = Some(after);
                    if !met {
                        self.journal.deviated = true;
                        self.end_as(
                            JournalStatus::Failed,
                            "the steady state deviated under the faults",
                        );
                    }
                }
            }
        }
        self.rollbacks(experiment).await;
    }

    /// Verifies the hypothesis in `phase`, between its `started` and its `met` or `missed`
    /// step; `None` if cancelled meanwhile.
    async fn hypothesis(&mut self, phase: &str, probes: &[Activity]) -> Option<SteadyState> {
        self.step(phase, None, "started", None);
        let state = self.verify(phase, probes).await?;
        let verdict = if state.steady_state_met {
            "met"
        } else {
            "missed"
        };
        self.step(phase, None, verdict, None);
        Some(state)
    }

    /// Lists what would be applied and how it would be undone; applies nothing.
    pub(super) async fn dry_run(&mut self, experiment: &Experiment) {
        for activity in &experiment.method {
            let Provider::Fault(action) = &activity.provider else {
                continue;
            };
            let undo = match self.run.driver.plan(&action.fault).await {
                Ok(undo) => to_value(&undo),
                Err(e) => json!({"error": e.to_string()}),
            };
            self.step("dry_run", Some(&activity.name), "planned", None);
            self.journal.plan.push(PlannedFault {
                activity: activity.name.clone(),
                fault: to_value(&action.fault),
                duration: action.duration.as_secs_f64(),
                undo,
            });
        }
        self.journal.reason = Some("dry run: nothing was applied".into());
    }

    /// Runs the method; `false` when it stopped early (an action failed, or cancelled).
    pub(super) async fn method(&mut self, experiment: &Experiment) -> bool {
        self.method_started = true;
        for activity in &experiment.method {
            if self.run.cancel.is_cancelled() {
                self.end_as(JournalStatus::Interrupted, "cancelled during the method");
                return false;
            }
            if !self.pause(activity.pauses.before).await {
                self.end_as(JournalStatus::Interrupted, "cancelled during the method");
                return false;
            }
            self.step("method", Some(&activity.name), "started", None);
            let ok = match &activity.provider {
                Provider::Fault(action) => self.apply(activity, action).await,
                _ => match self.probe_activity(activity, "method").await {
                    None => {
                        self.end_as(JournalStatus::Interrupted, "cancelled during the method");
                        return false;
                    }
                    Some(run) => {
                        let ok = run.status == ActivityStatus::Succeeded
                            || activity.kind == ActivityType::Probe;
                        self.journal.run.push(run);
                        ok
                    }
                },
            };
            if !ok {
                self.end_as(
                    JournalStatus::Aborted,
                    format!(
                        "action {:?} failed; the rest of the method was skipped",
                        activity.name
                    ),
                );
                return false;
            }
            if !self.pause(activity.pauses.after).await {
                self.end_as(JournalStatus::Interrupted, "cancelled during the method");
                return false;
            }
        }
        true
    }

    /// Sleeps `duration`, undoing faults whose deadline passes; `false` if cancelled.
    pub(super) async fn pause(&mut self, duration: Duration) -> bool {
        if duration.is_zero() {
            return true;
        }
        let clock = self.run.clock;
        matches!(self.bounded(clock.sleep(duration)).await, Bounded::Done(()))
    }

    /// Awaits `work` while undoing every fault whose deadline passes meanwhile; gives up
    /// (dropping `work`) on a cancel.
    pub(super) async fn bounded<F: Future>(&mut self, work: F) -> Bounded<F::Output> {
        let clock = self.run.clock;
        let cancel = self.run.cancel.clone();
        let mut work = std::pin::pin!(work);
        loop {
            let next = self
                .applied
                .iter()
                .filter(|a| !a.undone)
                .map(|a| a.due)
                .min();
            let wait = next.map(|due| due.saturating_duration_since(clock.monotonic()));
            enum Event<T> {
                Done(T),
                Cancelled,
                Deadline,
            }
            let event = tokio::select! {
                biased;
                _ = cancel.cancelled() => Event::Cancelled,
                out = &mut work => Event::Done(out),
                _ = sleep_for(clock, wait) => Event::Deadline,
            };
            match event {
                Event::Done(out) => return Bounded::Done(out),
                Event::Cancelled => return Bounded::Cancelled,
                Event::Deadline => self.undo_expired().await,
            }
        }
    }

    pub(super) async fn undo_expired(&mut self) {
        let now = self.run.clock.monotonic();
        let due: Vec<usize> = (0..self.applied.len())
            .rev()
            .filter(|&i| !self.applied[i].undone && self.applied[i].due <= now)
            .collect();
        for i in due {
            self.undo(i, "deadline").await;
        }
    }
}

async fn sleep_for<E: Clock>(clock: &E, wait: Option<Duration>) {
    match wait {
        Some(wait) => clock.sleep(wait).await,
        None => std::future::pending().await,
    }
}

pub(super) fn seconds(start: u64, end: u64) -> f64 {
    end.saturating_sub(start) as f64 / 1000.0
}

pub(super) fn to_value<S: serde::Serialize>(value: &S) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The run's target and what its faults touch on the agent's host.
fn targets(target: &str, experiment: &Experiment) -> Vec<String> {
    let mut out = vec![target.to_string()];
    for (_, action) in experiment.faults() {
        let touched = match action.fault.touches() {
            Touch::TargetPort => continue,
            Touch::Process(name) => format!("process {name}"),
            Touch::Directory(d) => format!("directory {d}"),
            Touch::CpuWorkers(n) => format!("cpu {n} workers"),
            Touch::MemoryMb(mb) => format!("memory {mb} MB"),
            Touch::DiskMb(mb) => format!("disk {mb} MB"),
            Touch::Interface(i) => format!("interface {i}"),
        };
        if !out.contains(&touched) {
            out.push(touched);
        }
    }
    out
}
