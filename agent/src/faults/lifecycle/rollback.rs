//! The rollbacks: every applied fault undone, newest first, each undo retried with backoff;
//! then the experiment's own rollback actions.

use iohr_domain::faults::Experiment;
use iohr_domain::faults::JournalStatus;
use iohr_domain::faults::journal::{ActivityRun, ActivityStatus, TimelineStep};
use serde_json::json;

use super::probes::probe_within;
use super::recover::{Turn, take_turn};
use super::retry::retry_waits;
use super::state::{State, seconds, to_value};
use super::{Clock, Driver};

impl<'a, D: Driver, E: Clock, T: Fn(TimelineStep) + Send + Sync> State<'a, D, E, T> {
    /// Undoes applied fault `i`, retrying; on success closes its ledger entry.
    pub(super) async fn undo(&mut self, i: usize, by: &str) {
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
    pub(super) async fn rollbacks(&mut self, experiment: &Experiment) {
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
}
