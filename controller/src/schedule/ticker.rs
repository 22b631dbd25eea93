//! The scheduler: each tick fires the schedules whose next due time has come.
//!
//! - A due time whose schedule's previous run is still queued (or waiting for its
//!   confirmation) or running is skipped and counted, never stacked.
//! - Fires missed while the controller was down are skipped: at start every schedule
//!   counts as fired through "now". Within a run of the controller, a tick late by more
//!   than one due time fires the latest one only.
//! - Each fire is claimed by its row in `schedule_fires` in the transaction that stores
//!   its run (or its skip), so it happens at most once across restarts and schedulers.

use std::time::Duration;

use iohr_domain::run::ScenarioRef;
use iohr_domain::{RunStatus, StartedBy};
use tokio_util::sync::CancellationToken;

use super::SharedClock;
use crate::Shared;
use crate::resources::schedules::cron::Expression;
use crate::runs::start::{self, RunRequest};
use crate::store::{Fire, ScheduleRow, StoreError};

/// The longest a scheduler sleeps between ticks: a new or changed schedule is seen
/// within this, and a fire starts at most this late.
const MAX_SLEEP: Duration = Duration::from_millis(500);

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TickReport {
    /// Runs started, by id.
    pub started: Vec<String>,
    pub skipped: usize,
    pub refused: usize,
    /// Fires another tick or scheduler took first.
    pub taken: usize,
}

#[derive(Clone)]
pub struct Scheduler {
    shared: Shared,
    clock: SharedClock,
}

impl Scheduler {
    pub fn new(shared: Shared, clock: SharedClock) -> Scheduler {
        Scheduler { shared, clock }
    }

    /// Skips what fell due while no scheduler ran: every enabled schedule counts as fired
    /// through now.
    pub async fn skip_missed(&self) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        for schedule in self.shared.store.enabled_schedules().await? {
            self.shared.store.skip_missed(&schedule.id, now).await?;
        }
        Ok(())
    }

    /// Starts the scheduler's task: it skips missed fires, then ticks until `shutdown`.
    pub fn spawn(self, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            if let Err(error) = self.skip_missed().await {
                tracing::warn!(%error, "skipping missed fires failed; the first tick retries");
            }
            loop {
                if let Err(error) = self.tick().await {
                    tracing::warn!(%error, "a scheduler tick failed; retrying");
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(MAX_SLEEP) => {}
                }
            }
        })
    }

    /// Fires every enabled schedule whose next due time is at or before now.
    pub async fn tick(&self) -> Result<TickReport, StoreError> {
        let now = self.clock.now_ms();
        let mut report = TickReport::default();
        for schedule in self.shared.store.enabled_schedules().await? {
            let expression = match Expression::parse(&schedule.cron) {
                Ok(expression) => expression,
                Err(error) => {
                    tracing::warn!(schedule = %schedule.id, %error, "a stored schedule's cron does not parse");
                    continue;
                }
            };
            // The latest due time not yet fired: earlier ones a late tick passed are
            // missed, not fired in a burst (found in one step, however late the tick).
            let due = expression
                .latest_at_or_before(now)
                .filter(|due| *due > schedule.fired_through);
            let Some(due_at) = due else { continue };
            let fire = Fire {
                schedule_id: schedule.id.clone(),
                due_at,
                at: now,
            };
            self.fire(&schedule, &fire, &mut report).await?;
        }
        Ok(report)
    }

    pub(super) async fn fire(
        &self,
        schedule: &ScheduleRow,
        fire: &Fire,
        report: &mut TickReport,
    ) -> Result<(), StoreError> {
        let store = &self.shared.store;
        let account = &schedule.account_id;
        if let Some(last) = &schedule.last_run_id {
            let unfinished = store
                .run(last)
                .await?
                .filter(|run| matches!(run.status, RunStatus::Queued | RunStatus::Running));
            if let Some(run) = unfinished {
                let why = format!("the previous run {} is still {}", run.id, run.status);
                return match store.record_skip(account, fire, &why).await {
                    Ok(()) => {
                        tracing::info!(schedule = %schedule.id, run = %run.id, "fire skipped: the previous run is unfinished");
                        report.skipped += 1;
                        Ok(())
                    }
                    Err(StoreError::Conflict(_)) => {
                        report.taken += 1;
                        Ok(())
                    }
                    Err(error) => Err(error),
                };
            }
        }
        match self.start(schedule, fire).await {
            Ok(run_id) => {
                tracing::info!(schedule = %schedule.id, run = %run_id, "schedule fired");
                report.started.push(run_id);
                Ok(())
            }
            Err(why) => match store.record_refused_fire(account, fire, &why).await {
                Ok(()) => {
                    tracing::info!(schedule = %schedule.id, %why, "fire refused");
                    report.refused += 1;
                    Ok(())
                }
                // Its run was stored by another scheduler, or a tick before.
                Err(StoreError::Conflict(_)) => {
                    report.taken += 1;
                    Ok(())
                }
                Err(error) => Err(error),
            },
        }
    }

    /// A fire's run, started by the run-lifecycle layer as a POST's is; the reason it
    /// could not be (the refusal's code and message), if not.
    async fn start(&self, schedule: &ScheduleRow, fire: &Fire) -> Result<String, String> {
        let shared = &self.shared;
        let account = shared
            .store
            .account(&schedule.account_id)
            .await
            .map_err(|e| e.to_string())?;
        let request = request_of(schedule);
        let started_by = StartedBy {
            kind: "schedule".into(),
            id: schedule.id.clone(),
            change: schedule.change.clone(),
            commit: None,
            base: None,
            forge: None,
        };
        let actor = format!("schedule:{}", schedule.id);
        let run = start::start(
            shared,
            &account,
            &request,
            started_by,
            &actor,
            fire.at,
            Some(fire),
        )
        .await
        .map_err(|e| e.reason())?;
        Ok(run.id)
    }
}

/// The run request a schedule stands for: a POST's, naming its stored scenario version.
pub fn request_of(schedule: &ScheduleRow) -> RunRequest {
    RunRequest {
        kind: schedule.kind.clone(),
        environment: schedule.environment.clone(),
        target: schedule.target.clone(),
        spec: None,
        scenario: Some(ScenarioRef {
            id: schedule.scenario_id.clone(),
            version: schedule.scenario_version.clone(),
        }),
        scenario_name: None,
        executor: Some(schedule.executor.clone()),
        change: schedule.change.clone(),
        confirm_within: schedule.confirm_within.clone(),
        agents: schedule.agents,
    }
}
