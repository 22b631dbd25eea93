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
//! Deadlines and bounds are waited for on the monotonic clock ([`Clock::monotonic`]); the
//! wall clock only stamps the journal and the ledger (whose deadline, wall-clock time, is
//! what a warden converts to its own clock: see [`super::due`]).
//! Errors of probes, faults and rollbacks are written to the journal, never raised. Each
//! step is reported as a [`TimelineStep`] (a `timeline` frame). Time, randomness and
//! sleeping come from an [`Clock`]; the effects from a [`Driver`], so tests script both.

use std::future::Future;
use std::time::Duration;

use iohr_domain::faults::experiment::Mask;
use iohr_domain::faults::experiment::Provider;
use iohr_domain::faults::journal::TimelineStep;
use iohr_domain::faults::{Experiment, Fault, Journal, JournalStatus, Policy, ProbeOutput};
use tokio_util::sync::CancellationToken;

use super::ledger::Ledger;
use super::{FaultError, Undo};
use crate::run_context::EnvVars;

/// The clock, the randomness and the sleeping of a lifecycle.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch: the journal's and the ledger's times, never a wait.
    fn now_ms(&self) -> u64;
    /// Now on the monotonic clock, which a step of the wall clock does not move: every
    /// deadline and bound of the lifecycle is held on it.
    fn monotonic(&self) -> tokio::time::Instant;
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send;
    /// Uniform in `[0, 1)`.
    fn random(&self) -> f64;
}

/// The wall clock, tokio's monotonic clock and sleep, and the thread's random generator.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    fn monotonic(&self) -> tokio::time::Instant {
        // CLOCK_MONOTONIC, tokio's timers' clock. It stops while the host is suspended;
        // there the faults that outlive the agent are bounded by their wardens, on the
        // boot clock.
        tokio::time::Instant::now()
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(duration)
    }

    fn random(&self) -> f64 {
        rand::random::<f64>()
    }
}

/// When a fault must be gone: `remaining` from now, which is `at_ms` (epoch milliseconds)
/// on the wall clock as it reads now: what a process started now is told, to convert back
/// to its own clock at once (it may differ from the ledger's deadline by a step of the wall
/// clock since).
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
    /// Where the experiment's `env` configuration and secrets are read.
    pub env: EnvVars,
}

/// The experiment read from the agent's environment through the operator's grant. The
/// domain's lookup knows only "no value": a variable the grant refused is named as refused
/// (with the flag that grants it) rather than as unset.
fn resolve_granted(
    experiment: &Experiment,
    env: &EnvVars,
    target: &str,
) -> Result<iohr_domain::faults::experiment::Resolved, iohr_domain::request::SpecError> {
    let refused = std::sync::Mutex::new(None);
    let lookup = |name: &str| match env.get(name) {
        Ok(value) => Some(value),
        Err(why) => {
            if why.is_refused()
                && let Ok(mut first) = refused.lock()
            {
                first.get_or_insert(why);
            }
            None
        }
    };
    let resolved = experiment.resolve(&lookup, target);
    let refused = refused.into_inner().ok().flatten();
    match (resolved, refused) {
        (Err(e), Some(why)) => Err(iohr_domain::request::spec_error(e.field, why.to_string())),
        (resolved, _) => resolved,
    }
}

/// How much longer than its own timeout (or burst) a probe may take before the lifecycle
/// gives up on it.
pub const PROBE_SLACK: Duration = Duration::from_secs(5);

impl<'a, D: Driver, E: Clock, T: Fn(TimelineStep) + Send + Sync> Run<'a, D, E, T> {
    /// Runs the experiment to its journal. Never fails: every error is in the journal.
    ///
    /// First the experiment's `env` configuration and secrets are read from the agent's
    /// environment and substituted, and every URL is checked against the target again: a
    /// refusal there is the journal's `refused`, with nothing run. The journal embeds the
    /// experiment as read (declarations, never values), and no secret's value appears in
    /// it or in a timeline step.
    pub async fn execute(self, experiment: &Experiment) -> Journal {
        let resolved = resolve_granted(experiment, &self.env, &self.target);
        let mask = match &resolved {
            Ok(r) => r.mask.clone(),
            Err(_) => Mask::default(),
        };
        let mut state = state::State {
            run: self,
            journal: Journal::new(&experiment.title, 0),
            applied: Vec::new(),
            method_started: false,
            mask,
        };
        state.journal.start = state.run.clock.now_ms();
        origin::stamp(&mut state.journal, experiment.to_json());
        match resolved {
            Ok(r) => state.execute(&r.experiment).await,
            Err(e) => {
                tracing::warn!(run = %state.run.run_id, field = %e.field, reason = %e.message, "faults refused: the experiment's configuration or secrets");
                state.end_as(
                    JournalStatus::Refused,
                    format!("refused before anything ran: {e}"),
                );
            }
        }
        let end = state.run.clock.now_ms();
        state.journal.end = end;
        state.journal.duration = end.saturating_sub(state.journal.start) as f64 / 1000.0;
        let status = state.journal.status.as_str().to_string();
        let detail = state.journal.reason.clone();
        state.step("end", None, &status, detail);
        origin::mask(&mut state.journal, &state.mask);
        state.journal
    }
}

mod apply;
mod origin;
mod probes;
mod recover;
mod retry;
mod rollback;
mod state;
mod timeline;

pub use origin::version;
pub use recover::recover;
pub use retry::Retry;
pub use timeline::timeline_frames;

#[cfg(test)]
mod tests;
