//! Applying one fault: its ledger entry first, then the fault, then held until its
//! deadline or the rollbacks.

use iohr_domain::faults::experiment::{Activity, FaultAction};
use iohr_domain::faults::journal::{ActivityRun, ActivityStatus, LedgerRecord, TimelineStep};
use serde_json::json;

use super::super::Undo;
use super::super::ledger::{LedgerEntry, new_id};
use super::state::{Applied, State, seconds, to_value};
use super::{Clock, Deadline, Driver};

/// When a held fault was applied and must be gone.
pub(super) struct When {
    /// Epoch milliseconds, as the journal and the ledger say them.
    pub(super) applied_at: u64,
    pub(super) deadline: u64,
    /// The deadline on the monotonic clock, which the lifecycle waits for.
    pub(super) due: tokio::time::Instant,
}

impl<'a, D: Driver, E: Clock, T: Fn(TimelineStep) + Send + Sync> State<'a, D, E, T> {
    /// Ledger entry first, then the fault; `false` if it could not be applied.
    pub(super) async fn apply(&mut self, activity: &Activity, action: &FaultAction) -> bool {
        let start = self.run.clock.now_ms();
        // The duration is held on the monotonic clock from here: a wall clock stepped
        // later moves neither the undo nor what the fault is told.
        let due = self.run.clock.monotonic() + action.duration;
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
        let clock = self.run.clock;
        let remaining = due.saturating_duration_since(clock.monotonic());
        let deadline = Deadline {
            at_ms: clock
                .now_ms()
                .saturating_add(u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX)),
            remaining,
        };
        let when = When {
            applied_at: start,
            deadline: deadline_at,
            due,
        };
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
            self.hold(activity, action, &ledger_id, planned, when);
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
                self.hold(activity, action, &ledger_id, undo, when);
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
    pub(super) fn hold(
        &mut self,
        activity: &Activity,
        action: &FaultAction,
        ledger_id: &str,
        undo: Undo,
        when: When,
    ) {
        let When {
            applied_at,
            deadline,
            due,
        } = when;
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
            due,
            record: self.journal.ledger.len() - 1,
            undone: false,
        });
    }

    pub(super) fn fault_failed(
        &mut self,
        mut run: ActivityRun,
        activity: &Activity,
        why: String,
    ) -> bool {
        let end = self.run.clock.now_ms();
        tracing::warn!(run = %self.run.run_id, activity = %activity.name, error = %why, "fault not applied");
        run.end = end;
        run.duration = seconds(run.start, end);
        run.exception = Some(why.clone());
        self.journal.run.push(run);
        self.step("method", Some(&activity.name), "failed", Some(why));
        false
    }
}
