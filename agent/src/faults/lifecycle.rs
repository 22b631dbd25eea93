//! The lifecycle of a `faults` run, as the Chaos Toolkit runs an experiment, with the
//! rollbacks made unconditional:
//!
//! 1. the policy checks every fault of the experiment (a refusal applies nothing);
//! 2. the hypothesis is verified (`before`); if it fails the journal is `failed` and
//!    nothing is injected;
//! 3. each activity of the method runs: a fault is written to the ledger, then applied,
//!    and holds until its deadline; a failed action stops the method (`aborted`);
//! 4. the hypothesis is verified again (`after`); a miss sets `deviated` (status `failed`);
//! 5. always: every applied fault is undone, newest first (only those actually applied),
//!    also after an error, a cancel or a halt; a failing undo is retried with backoff, and
//!    one that still fails makes the journal `rollback_failed`. Then the experiment's own
//!    rollback actions run.
//!
//! A fault whose deadline passes while the method still runs is undone at its deadline.
//! Errors of probes, faults and rollbacks are written to the journal, never raised. Each
//! step is reported as a [`TimelineStep`] (a `timeline` frame). Time, randomness and
//! sleeping come from an [`Clock`]; the effects from a [`Driver`], so tests script both.

use std::future::Future;
use std::time::Duration;

use iohr_domain::faults::experiment::{Activity, ActivityType, FaultAction, Provider};
use iohr_domain::faults::journal::{
    ActivityRun, ActivityStatus, LedgerRecord, PlannedFault, SteadyState, TimelineStep,
};
use iohr_domain::faults::tolerance::{Judgement, MAX_PROBE_DEPTH, Tolerance};
use iohr_domain::faults::{Experiment, Fault, Journal, JournalStatus, Policy, ProbeOutput, Touch};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::ledger::{Ledger, LedgerEntry, new_id};
use super::probe::probe_budget;
use super::{FaultError, Undo};
use crate::kinds::{FrameSender, NewFrame, to_json};
use iohr_domain::FrameKind;

/// The clock, the randomness and the sleeping of a lifecycle.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send;
    /// Uniform in `[0, 1)`.
    fn random(&self) -> f64;
}

/// The wall clock, tokio's sleep and the thread's random generator.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(duration)
    }

    fn random(&self) -> f64 {
        rand::random::<f64>()
    }
}

/// When a fault must be gone: at `at_ms` (epoch milliseconds), `remaining` from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub at_ms: u64,
    pub remaining: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProbeError(pub String);

/// The effects of a lifecycle: faults applied and undone, probes sent.
pub trait Driver: Send + Sync {
    /// How `fault` would be undone, without touching anything: written to the ledger
    /// before [`Driver::apply`], and listed by a dry run. An error (the process is not
    /// there) means the fault cannot be applied.
    fn plan(&self, fault: &Fault) -> impl Future<Output = Result<Undo, FaultError>> + Send;
    /// Applies `fault` until `deadline` at the latest (enforced by the lifecycle, and by
    /// the fault itself where it can). On an error nothing of it is left applied.
    fn apply(
        &self,
        fault: &Fault,
        deadline: Deadline,
    ) -> impl Future<Output = Result<Undo, FaultError>> + Send;
    /// Undoes an applied fault; may be called again after a failure (undos are idempotent).
    fn undo(&self, undo: &Undo) -> impl Future<Output = Result<(), FaultError>> + Send;
    /// Runs an HTTP or load provider (a probe, or an HTTP action).
    fn probe(
        &self,
        provider: &Provider,
    ) -> impl Future<Output = Result<ProbeOutput, ProbeError>> + Send;
}

/// How a failed undo is retried: `attempts` in all, waits doubling from `first_wait` up
/// to `max_wait` (each a uniform draw from its upper half), each try bounded by `timeout`.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub attempts: u32,
    pub first_wait: Duration,
    pub max_wait: Duration,
    pub timeout: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            attempts: 5,
            first_wait: Duration::from_millis(100),
            max_wait: Duration::from_secs(2),
            timeout: Duration::from_secs(10),
        }
    }
}

/// What a lifecycle runs against and with.
pub struct Run<'a, D, E, T> {
    pub run_id: String,
    pub driver: &'a D,
    pub clock: &'a E,
    pub ledger: &'a Ledger,
    pub policy: &'a Policy,
    /// The port the run's target listens on (what the policy's `target_ports` allow).
    pub target_port: u16,
    /// The run's target (its URL), written to the journal's targets.
    pub target: String,
    /// Every step, as it happens.
    pub timeline: T,
    /// A cancel or a halt: the method stops and the rollbacks run.
    pub cancel: CancellationToken,
    pub dry_run: bool,
    pub retry: Retry,
}

/// How much longer than its own timeout (or burst) a probe may take before the lifecycle
/// gives up on it.
pub const PROBE_SLACK: Duration = Duration::from_secs(5);

/// A timeline callback that sends each step as a `timeline` frame of the run. It never
/// waits for room in the agent's frame bound: a rollback must not wait on the link.
pub fn timeline_frames(frames: FrameSender) -> impl Fn(TimelineStep) + Send + Sync {
    move |step| {
        frames.send_now(NewFrame {
            kind: FrameKind::Timeline,
            data: to_json(&step),
        })
    }
}

/// One fault that was applied.
struct Applied {
    ledger_id: String,
    activity: String,
    fault: Fault,
    undo: Undo,
    deadline: u64,
    /// Its index in the journal's ledger.
    record: usize,
    undone: bool,
}

enum Bounded<T> {
    Done(T),
    Cancelled,
}

impl<'a, D: Driver, E: Clock, T: Fn(TimelineStep) + Send + Sync> Run<'a, D, E, T> {
    /// Runs the experiment to its journal. Never fails: every error is in the journal.
    pub async fn execute(self, experiment: &Experiment) -> Journal {
        let mut state = State {
            run: self,
            journal: Journal::new(&experiment.title, 0),
            applied: Vec::new(),
            method_started: false,
        };
        state.journal.start = state.run.clock.now_ms();
        state.execute(experiment).await;
        let end = state.run.clock.now_ms();
        state.journal.end = end;
        state.journal.duration = end.saturating_sub(state.journal.start) as f64 / 1000.0;
        let status = state.journal.status.as_str().to_string();
        let detail = state.journal.reason.clone();
        state.step("end", None, &status, detail);
        state.journal
    }
}

struct State<'a, D, E, T> {
    run: Run<'a, D, E, T>,
    journal: Journal,
    applied: Vec<Applied>,
    /// The experiment's rollback actions run only once the method has started.
    method_started: bool,
}

impl<'a, D: Driver, E: Clock, T: Fn(TimelineStep) + Send + Sync> State<'a, D, E, T> {
    fn step(&self, phase: &str, activity: Option<&str>, status: &str, detail: Option<String>) {
        (self.run.timeline)(TimelineStep {
            phase: phase.to_string(),
            activity: activity.map(str::to_string),
            status: status.to_string(),
            at: self.run.clock.now_ms(),
            detail,
        });
    }

    fn end_as(&mut self, status: JournalStatus, reason: impl Into<String>) {
        self.journal.status = status;
        self.journal.reason = Some(reason.into());
    }

    async fn execute(&mut self, experiment: &Experiment) {
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
            self.step("hypothesis_before", None, "started", None);
            let Some(before) = self.verify("hypothesis_before", &h.probes).await else {
                self.end_as(JournalStatus::Interrupted, "cancelled before the method");
                return;
            };
            let met = before.steady_state_met;
            self.journal.steady_states.before = Some(before);
            self.step(
                "hypothesis_before",
                None,
                if met { "met" } else { "missed" },
                None,
            );
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
            self.step("hypothesis_after", None, "started", None);
            match self.verify("hypothesis_after", &h.probes).await {
                None => self.end_as(JournalStatus::Interrupted, "cancelled after the method"),
                Some(after) => {
                    let met = after.steady_state_met;
                    self.journal.steady_states.after = Some(after);
                    self.step(
                        "hypothesis_after",
                        None,
                        if met { "met" } else { "missed" },
                        None,
                    );
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

    /// Lists what would be applied and how it would be undone; applies nothing.
    async fn dry_run(&mut self, experiment: &Experiment) {
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
    async fn method(&mut self, experiment: &Experiment) -> bool {
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

    /// Ledger entry first, then the fault; `false` if it could not be applied.
    async fn apply(&mut self, activity: &Activity, action: &FaultAction) -> bool {
        let start = self.run.clock.now_ms();
        let driver = self.run.driver;
        let planned = driver.plan(&action.fault).await;
        let ledger_id = new_id(
            start,
            (self.run.clock.random() * f64::from(u32::MAX)) as u32,
        );
        let deadline_at = start + action.duration.as_millis() as u64;
        let mut run = ActivityRun {
            activity: activity.to_json(),
            status: ActivityStatus::Failed,
            start,
            end: start,
            duration: 0.0,
            output: None,
            exception: None,
            tolerance_met: None,
            ledger_id: None,
            attempts: None,
        };
        let planned = match planned {
            Ok(undo) => undo,
            Err(e) => {
                return self.fault_failed(run, activity, e.to_string());
            }
        };
        let entry = LedgerEntry {
            id: ledger_id.clone(),
            run_id: self.run.run_id.clone(),
            fault: action.fault.clone(),
            undo: planned.clone(),
            applied_at: start,
            deadline: deadline_at,
        };
        if let Err(e) = self.run.ledger.record(&entry) {
            // Never apply a fault the ledger does not hold.
            return self.fault_failed(run, activity, e.to_string());
        }
        run.ledger_id = Some(ledger_id.clone());
        let now = self.run.clock.now_ms();
        let deadline = Deadline {
            at_ms: deadline_at,
            remaining: Duration::from_millis(deadline_at.saturating_sub(now)),
        };
        let clock = self.run.clock;
        let applied = tokio::select! {
            out = driver.apply(&action.fault, deadline) => Some(out),
            _ = clock.sleep(self.run.retry.timeout) => None,
        };
        let Some(applied) = applied else {
            // It may be half applied: held as applied with its planned undo, so the
            // rollbacks undo it (undos are idempotent), and the method stops.
            let why = format!(
                "no answer within {} s; undone as a precaution",
                self.run.retry.timeout.as_secs_f64()
            );
            self.hold(activity, action, &ledger_id, planned, start, deadline_at);
            return self.fault_failed(run, activity, why);
        };
        match applied {
            Ok(undo) => {
                if undo != planned
                    && let Err(e) = self.run.ledger.set_undo(&ledger_id, &undo, deadline_at)
                {
                    // The planned undo stays on disk; the one in memory is used now.
                    tracing::warn!(ledger_id = %ledger_id, error = %e, "fault ledger: the learnt undo was not written");
                }
                let end = self.run.clock.now_ms();
                run.status = ActivityStatus::Succeeded;
                run.end = end;
                run.duration = seconds(start, end);
                run.output = Some(json!({"undo": to_value(&undo), "deadline": deadline_at}));
                self.journal.run.push(run);
                self.hold(activity, action, &ledger_id, undo, start, deadline_at);
                tracing::info!(run = %self.run.run_id, activity = %activity.name, fault = action.fault.name(), deadline = deadline_at, "fault applied");
                self.step("method", Some(&activity.name), "applied", None);
                true
            }
            Err(e) => {
                // Not applied: nothing to undo, the entry is closed.
                if let Err(close) = self.run.ledger.close(&ledger_id, self.run.clock.now_ms()) {
                    tracing::warn!(ledger_id = %ledger_id, error = %close, "fault ledger: close failed");
                }
                self.fault_failed(run, activity, e.to_string())
            }
        }
    }

    /// Holds an applied fault until its deadline or the rollbacks.
    fn hold(
        &mut self,
        activity: &Activity,
        action: &FaultAction,
        ledger_id: &str,
        undo: Undo,
        applied_at: u64,
        deadline: u64,
    ) {
        self.journal.ledger.push(LedgerRecord {
            id: ledger_id.to_string(),
            activity: activity.name.clone(),
            fault: to_value(&action.fault),
            undo: to_value(&undo),
            applied_at,
            deadline,
            undone_at: None,
            undone_by: None,
        });
        self.applied.push(Applied {
            ledger_id: ledger_id.to_string(),
            activity: activity.name.clone(),
            fault: action.fault.clone(),
            undo,
            deadline,
            record: self.journal.ledger.len() - 1,
            undone: false,
        });
    }

    fn fault_failed(&mut self, mut run: ActivityRun, activity: &Activity, why: String) -> bool {
        let end = self.run.clock.now_ms();
        tracing::warn!(run = %self.run.run_id, activity = %activity.name, error = %why, "fault not applied");
        run.end = end;
        run.duration = seconds(run.start, end);
        run.exception = Some(why.clone());
        self.journal.run.push(run);
        self.step("method", Some(&activity.name), "failed", Some(why));
        false
    }

    /// Sleeps `duration`, undoing faults whose deadline passes; `false` if cancelled.
    async fn pause(&mut self, duration: Duration) -> bool {
        if duration.is_zero() {
            return true;
        }
        let clock = self.run.clock;
        matches!(self.bounded(clock.sleep(duration)).await, Bounded::Done(()))
    }

    /// Awaits `work` while undoing every fault whose deadline passes meanwhile; gives up
    /// (dropping `work`) on a cancel.
    async fn bounded<F: Future>(&mut self, work: F) -> Bounded<F::Output> {
        let clock = self.run.clock;
        let cancel = self.run.cancel.clone();
        let mut work = std::pin::pin!(work);
        loop {
            let next = self
                .applied
                .iter()
                .filter(|a| !a.undone)
                .map(|a| a.deadline)
                .min();
            let wait = next.map(|at| Duration::from_millis(at.saturating_sub(clock.now_ms())));
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

    async fn undo_expired(&mut self) {
        let now = self.run.clock.now_ms();
        let due: Vec<usize> = (0..self.applied.len())
            .rev()
            .filter(|&i| !self.applied[i].undone && self.applied[i].deadline <= now)
            .collect();
        for i in due {
            self.undo(i, "deadline").await;
        }
    }

    /// Undoes applied fault `i`, retrying; on success closes its ledger entry.
    async fn undo(&mut self, i: usize, by: &str) {
        let clock = self.run.clock;
        let driver = self.run.driver;
        let retry = self.run.retry;
        let (name, undo, ledger_id) = {
            let a = &self.applied[i];
            (a.activity.clone(), a.undo.clone(), a.ledger_id.clone())
        };
        let start = clock.now_ms();
        self.step("rollback", Some(&name), "started", Some(by.to_string()));
        let mut attempts = 0;
        let mut waits = retry_waits(retry, clock);
        let mut last_error = None;
        // The fault's warden (or an operator) may have undone it, or be undoing it: then
        // this agent does not undo it too.
        let turn = take_turn(self.run.ledger, &ledger_id, clock, retry.timeout).await;
        let by = match &turn {
            Turn::Ours => by.to_string(),
            Turn::UndoneBy(who) => who.clone(),
            Turn::Busy(why) => {
                last_error = Some(why.clone());
                by.to_string()
            }
        };
        let by = by.as_str();
        while turn == Turn::Ours && attempts < retry.attempts.max(1) {
            attempts += 1;
            let outcome = tokio::select! {
                out = driver.undo(&undo) => out.map_err(|e| e.to_string()),
                _ = clock.sleep(retry.timeout) => Err(format!("no answer within {} s", retry.timeout.as_secs_f64())),
            };
            match outcome {
                Ok(()) => {
                    last_error = None;
                    break;
                }
                Err(e) => {
                    tracing::warn!(run = %self.run.run_id, activity = %name, attempt = attempts, error = %e, "undo failed");
                    last_error = Some(e.clone());
                    if attempts < retry.attempts {
                        let wait = waits.next().unwrap_or(retry.max_wait);
                        self.step(
                            "rollback",
                            Some(&name),
                            "retrying",
                            Some(format!("{e}; again in {} ms", wait.as_millis())),
                        );
                        clock.sleep(wait).await;
                    }
                }
            }
        }
        let end = clock.now_ms();
        let succeeded = last_error.is_none();
        let fault = to_value(&self.applied[i].fault);
        self.journal.rollbacks.push(ActivityRun {
            activity: json!({"name": name, "fault": fault, "undo": to_value(&undo), "by": by}),
            status: if succeeded {
                ActivityStatus::Succeeded
            } else {
                ActivityStatus::Failed
            },
            start,
            end,
            duration: seconds(start, end),
            output: None,
            exception: last_error.clone(),
            tolerance_met: None,
            ledger_id: Some(ledger_id.clone()),
            attempts: Some(attempts),
        });
        if succeeded {
            self.applied[i].undone = true;
            let record = self.applied[i].record;
            self.journal.ledger[record].undone_at = Some(end);
            self.journal.ledger[record].undone_by = Some(by.to_string());
            if let Err(e) = self.run.ledger.close(&ledger_id, end) {
                // Undone but still open on disk: a restart undoes it again (undos are
                // idempotent), which is the safe side.
                tracing::warn!(ledger_id = %ledger_id, error = %e, "fault ledger: close failed");
            }
            self.step("rollback", Some(&name), "undone", Some(by.to_string()));
        } else {
            if turn == Turn::Ours
                && let Err(e) = self.run.ledger.release(&ledger_id)
            {
                tracing::warn!(ledger_id = %ledger_id, error = %e, "fault ledger: releasing the claim failed");
            }
            self.step("rollback", Some(&name), "failed", last_error);
        }
    }

    /// Undoes every applied fault still held, newest first, then runs the rollback actions.
    async fn rollbacks(&mut self, experiment: &Experiment) {
        let mut failed = Vec::new();
        for i in (0..self.applied.len()).rev() {
            if self.applied[i].undone {
                continue;
            }
            self.undo(i, "rollback").await;
            if !self.applied[i].undone {
                failed.push(self.applied[i].activity.clone());
            }
        }
        let actions = if self.method_started {
            experiment.rollbacks.as_slice()
        } else {
            &[]
        };
        for activity in actions {
            self.step("rollback", Some(&activity.name), "started", None);
            let driver = self.run.driver;
            let run = self
                .probe_run(
                    activity,
                    probe_within(driver, self.run.clock, &activity.provider),
                )
                .await;
            self.journal.rollbacks.push(run);
        }
        if !failed.is_empty() {
            self.end_as(
                JournalStatus::RollbackFailed,
                format!(
                    "the undo of {} failed after retries; the fault may still be applied (its ledger entry stays open)",
                    failed.join(", ")
                ),
            );
        }
    }

    /// Verifies the hypothesis's probes; `None` if cancelled meanwhile.
    async fn verify(&mut self, phase: &str, probes: &[Activity]) -> Option<SteadyState> {
        let mut runs = Vec::with_capacity(probes.len());
        for probe in probes {
            let run = self.probe_activity(probe, phase).await?;
            runs.push(run);
        }
        Some(SteadyState {
            steady_state_met: runs.iter().all(|r| r.tolerance_met == Some(true)),
            probes: runs,
        })
    }

    /// Runs a probe (or an HTTP action) and judges its tolerance; `None` if cancelled.
    async fn probe_activity(&mut self, activity: &Activity, phase: &str) -> Option<ActivityRun> {
        let driver = self.run.driver;
        let start = self.run.clock.now_ms();
        let clock = self.run.clock;
        let outcome = match self
            .bounded(probe_within(driver, clock, &activity.provider))
            .await
        {
            Bounded::Cancelled => return None,
            Bounded::Done(outcome) => outcome,
        };
        let (mut run, output) = self.finish_probe(activity, start, outcome);
        if let Some(tolerance) = &activity.tolerance {
            let verdict = match output {
                Some(output) => self.judge(tolerance, output).await?,
                None => Err("the probe gave no output".to_string()),
            };
            run.tolerance_met = Some(verdict.is_ok());
            if let (Err(why), None) = (verdict, &run.exception) {
                run.exception = Some(format!("not within the tolerance: {why}"));
            }
        }
        let status = match (run.tolerance_met, run.status) {
            (Some(true), _) => "met",
            (Some(false), _) => "missed",
            (None, ActivityStatus::Succeeded) => "succeeded",
            (None, ActivityStatus::Failed) => "failed",
        };
        self.step(phase, Some(&activity.name), status, run.exception.clone());
        Some(run)
    }

    /// Judges `output`; a probe tolerance runs its probe, whose own tolerance decides (at
    /// most [`MAX_PROBE_DEPTH`] deep). `None` if cancelled meanwhile.
    async fn judge(&mut self, tolerance: &Tolerance, output: Value) -> Option<Result<(), String>> {
        let driver = self.run.driver;
        let mut tolerance = tolerance;
        let mut output = output;
        for _ in 0..=MAX_PROBE_DEPTH {
            let probe = match tolerance.judge(&output) {
                Judgement::Met => return Some(Ok(())),
                Judgement::Missed(why) => return Some(Err(why)),
                Judgement::RunProbe(probe) => probe,
            };
            let Some(next) = &probe.tolerance else {
                return Some(Err(format!("probe {:?} has no tolerance", probe.name)));
            };
            let clock = self.run.clock;
            output = match self
                .bounded(probe_within(driver, clock, &probe.provider))
                .await
            {
                Bounded::Cancelled => return None,
                Bounded::Done(Ok(out)) => out.for_tolerance(),
                Bounded::Done(Err(e)) => {
                    return Some(Err(format!("probe {:?} failed: {e}", probe.name)));
                }
            };
            tolerance = next;
        }
        Some(Err("probe tolerances nested too deep".into()))
    }

    /// Rollback actions run to their end: a cancel has already happened.
    async fn probe_run(
        &mut self,
        activity: &Activity,
        work: impl Future<Output = Result<ProbeOutput, ProbeError>>,
    ) -> ActivityRun {
        let start = self.run.clock.now_ms();
        let outcome = work.await;
        let (run, _) = self.finish_probe(activity, start, outcome);
        let status = match run.status {
            ActivityStatus::Succeeded => "succeeded",
            ActivityStatus::Failed => "failed",
        };
        self.step(
            "rollback",
            Some(&activity.name),
            status,
            run.exception.clone(),
        );
        run
    }

    /// The journal's record of a probe, and its output as tolerances see it (with the
    /// body, which the journal never keeps).
    fn finish_probe(
        &self,
        activity: &Activity,
        start: u64,
        outcome: Result<ProbeOutput, ProbeError>,
    ) -> (ActivityRun, Option<Value>) {
        let end = self.run.clock.now_ms();
        let mut run = ActivityRun {
            activity: activity.to_json(),
            status: ActivityStatus::Succeeded,
            start,
            end,
            duration: seconds(start, end),
            output: None,
            exception: None,
            tolerance_met: None,
            ledger_id: None,
            attempts: None,
        };
        match outcome {
            Ok(output) => {
                if let (Provider::Http(h), ProbeOutput::Http { status, .. }) =
                    (&activity.provider, &output)
                    && let Some(expected) = h.expected_status
                    && expected != *status
                {
                    run.status = ActivityStatus::Failed;
                    run.exception = Some(format!("expected status {expected}, got {status}"));
                }
                run.output = Some(output.for_journal());
                let judged = run_ok(&run).then(|| output.for_tolerance());
                (run, judged)
            }
            Err(e) => {
                run.status = ActivityStatus::Failed;
                run.exception = Some(e.0);
                (run, None)
            }
        }
    }
}

fn run_ok(run: &ActivityRun) -> bool {
    run.status == ActivityStatus::Succeeded
}

/// A probe bounded by its own budget plus [`PROBE_SLACK`], whatever the driver does.
async fn probe_within<D: Driver, E: Clock>(
    driver: &D,
    clock: &E,
    provider: &Provider,
) -> Result<ProbeOutput, ProbeError> {
    let budget = probe_budget(provider) + PROBE_SLACK;
    tokio::select! {
        out = driver.probe(provider) => out,
        _ = clock.sleep(budget) => Err(ProbeError(format!("no answer within {} s", budget.as_secs_f64()))),
    }
}

async fn sleep_for<E: Clock>(clock: &E, wait: Option<Duration>) {
    match wait {
        Some(wait) => clock.sleep(wait).await,
        None => std::future::pending().await,
    }
}

/// The waits between the tries of one undo: [`crate::backoff`]'s, drawn with a seed from
/// the injected clock so that tests on a paused clock repeat.
fn retry_waits<E: Clock>(retry: Retry, clock: &E) -> impl Iterator<Item = Duration> + Send {
    crate::backoff::waits(
        retry.first_wait,
        retry.max_wait,
        Some(crate::backoff::seed(clock.random())),
    )
}

fn seconds(start: u64, end: u64) -> f64 {
    end.saturating_sub(start) as f64 / 1000.0
}

fn to_value<S: serde::Serialize>(value: &S) -> Value {
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

mod recover;
pub use recover::recover;
use recover::{Turn, take_turn};

#[cfg(test)]
mod tests;
