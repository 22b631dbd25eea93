//! Schedules: the account's schedules as records (with their next fire times), a schedule
//! made from a run's request and a cron expression (checked as a POSTed run, the
//! expression held to its kind's floor), changed (renamed, a new expression, paused or
//! resumed) or deleted, each with its audit line.

pub mod cron;
pub mod floors;

use iohr_domain::RunKind;
use iohr_domain::run::ScenarioRef;
use serde::{Deserialize, Serialize};

use crate::Shared;
use crate::runs::StartError;
use crate::runs::start::{self as run_start, MAX_NAME, RunRequest, parse_kind};
use crate::store::{
    Account, MAX_SCHEDULES, NewSchedule, Result, ScheduleChange, ScheduleRow, Store, StoreError,
    now_ms,
};
use cron::{Expression, format_utc};

/// Why a schedule was not made or changed.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("name must be 1 to {MAX_NAME} characters")]
    InvalidName,
    #[error("{0}")]
    InvalidCron(String),
    /// The expression fires more often than the plan lets this kind (the message names
    /// the floor and how to lower it).
    #[error("{0}")]
    TooFrequent(String),
    #[error("an account has at most {MAX_SCHEDULES} schedules; delete one first")]
    TooMany,
    /// The run's request is refused as a POSTed run's would be.
    #[error(transparent)]
    Refused(#[from] StartError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A new schedule: its name, expression, whether it starts enabled, and the run each fire
/// starts.
pub struct ScheduleRequest {
    pub name: String,
    pub cron: String,
    pub enabled: Option<bool>,
    pub run: RunRequest,
}

/// A schedule's (and a trigger's) name: 1 to [`MAX_NAME`] characters, not blank.
pub(crate) fn check_name(name: &str) -> std::result::Result<(), ScheduleError> {
    if name.trim().is_empty() || name.len() > MAX_NAME {
        return Err(ScheduleError::InvalidName);
    }
    Ok(())
}

/// Parses an expression and holds it to the floor of its kind under the account's plan.
async fn check_cron(
    store: &Store,
    account_id: &str,
    kind: RunKind,
    text: &str,
) -> std::result::Result<Expression, ScheduleError> {
    let expression =
        Expression::parse(text).map_err(|e| ScheduleError::InvalidCron(e.to_string()))?;
    let stored = store.schedule_floors(account_id).await?;
    let floor = floors::floor(kind, stored.as_deref());
    if let Some(gap) = expression.min_gap_ms(now_ms())
        && gap < floor.as_millis() as i64
    {
        return Err(ScheduleError::TooFrequent(format!(
            "cron {:?} fires every {} at times; this plan lets a {kind} schedule fire at most every {} \
             (the controller's operator can lower it: iohr-controller account set-plan --name ACCOUNT --schedule-floor {kind}=DURATION)",
            expression.as_str(),
            humantime::format_duration(std::time::Duration::from_millis(gap.max(0) as u64)),
            humantime::format_duration(floor),
        )));
    }
    Ok(expression)
}

/// Makes a schedule of the account: the name, the expression against its kind's floor,
/// the account's count, and the run as a POSTed run's (the queue's room is checked at
/// each fire). Nothing is stored when any is refused.
pub async fn create(
    shared: &Shared,
    account: &Account,
    request: ScheduleRequest,
    actor: String,
) -> std::result::Result<ScheduleRecord, ScheduleError> {
    check_name(&request.name)?;
    let kind = parse_kind(&request.run.kind)?;
    let expression = check_cron(&shared.store, &account.id, kind, &request.cron).await?;
    // Counted before the scenario is stored (nothing half-stored), and again in the
    // insert's transaction.
    if shared.store.schedules(&account.id).await?.len() as i64 >= MAX_SCHEDULES {
        return Err(ScheduleError::TooMany);
    }
    let run = request.run;
    let checked = run_start::check(shared, account, &run, false).await?;
    let new = NewSchedule {
        account_id: account.id.clone(),
        name: request.name,
        kind: checked.kind.as_str().to_string(),
        scenario_id: checked.scenario.id,
        scenario_version: checked.scenario.version,
        environment: run.environment,
        target: checked.target,
        executor: checked.executor.to_string(),
        change: run.change,
        confirm_within: run.confirm_within,
        agents: (checked.agents > 1).then_some(checked.agents),
        cron: expression.as_str().to_string(),
        enabled: request.enabled.unwrap_or(true),
        created_by: actor,
    };
    let now = now_ms();
    let row = match shared.store.insert_schedule(&new, now).await {
        Err(StoreError::Conflict(_)) => return Err(ScheduleError::TooMany),
        other => other?,
    };
    tracing::info!(schedule = %row.id, account = %account.name, cron = %row.cron, "schedule created");
    Ok(record(&row, now))
}

/// Checks and stores a change asked of one schedule: the name's length, a new expression
/// against the floor of the schedule's kind.
pub async fn patch(
    store: &Store,
    account_id: &str,
    id: &str,
    change: ScheduleChange,
    actor: &str,
) -> std::result::Result<ScheduleRecord, ScheduleError> {
    let row = row(store, account_id, id).await?;
    if let Some(name) = &change.name {
        check_name(name)?;
    }
    let cron = match &change.cron {
        Some(text) => {
            let kind = parse_kind(&row.kind)?;
            let expression = check_cron(store, account_id, kind, text).await?;
            Some(expression.as_str().to_string())
        }
        None => None,
    };
    let change = ScheduleChange { cron, ..change };
    Ok(update(store, account_id, id, &change, actor).await?)
}

/// Deletes one schedule of the account; the runs it started stay.
pub async fn delete(store: &Store, account_id: &str, id: &str, actor: &str) -> Result<()> {
    store.delete_schedule(account_id, id, actor, now_ms()).await
}

/// Next fire times a schedule's record shows.
const NEXT_FIRES: usize = 3;

/// A schedule as the API shows it. Times are RFC 3339 UTC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScheduleRecord {
    pub id: String,
    pub name: String,
    pub cron: String,
    pub enabled: bool,
    #[schema(value_type = RunKind)]
    pub kind: String,
    pub scenario: ScenarioRef,
    pub environment: String,
    pub target: String,
    pub executor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_within: Option<String>,
    /// Each fire's run split over this many agents (absent: whole runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<u32>,
    pub created_by: String,
    pub created_at: String,
    /// Fires skipped because the previous run was unfinished.
    pub skipped: i64,
    pub last_skipped_at: Option<String>,
    pub last_run: Option<String>,
    pub last_fire_at: Option<String>,
    /// The next fire times (none while paused).
    pub next_fires: Vec<String>,
}

/// A schedule's record at `now` (its next fires from then).
pub fn record(row: &ScheduleRow, now: i64) -> ScheduleRecord {
    let next_fires = match (row.enabled, Expression::parse(&row.cron)) {
        (true, Ok(expression)) => expression
            .next_n(now.max(row.fired_through), NEXT_FIRES)
            .into_iter()
            .map(format_utc)
            .collect(),
        _ => Vec::new(),
    };
    ScheduleRecord {
        id: row.id.clone(),
        name: row.name.clone(),
        cron: row.cron.clone(),
        enabled: row.enabled,
        kind: row.kind.clone(),
        scenario: ScenarioRef {
            id: row.scenario_id.clone(),
            version: row.scenario_version.clone(),
        },
        environment: row.environment.clone(),
        target: row.target.clone(),
        executor: row.executor.clone(),
        change: row.change.clone(),
        confirm_within: row.confirm_within.clone(),
        agents: row.agents,
        created_by: row.created_by.clone(),
        created_at: format_utc(row.created_at),
        skipped: row.skipped,
        last_skipped_at: row.last_skipped_at.map(format_utc),
        last_run: row.last_run_id.clone(),
        last_fire_at: row.last_fire_at.map(format_utc),
        next_fires,
    }
}

/// The account's schedules.
pub async fn list(store: &Store, account_id: &str) -> Result<Vec<ScheduleRecord>> {
    let now = now_ms();
    let rows = store.schedules(account_id).await?;
    Ok(rows.iter().map(|r| record(r, now)).collect())
}

/// One schedule of the account as stored; `NotFound` names it as `schedule {id}`.
pub async fn row(store: &Store, account_id: &str, id: &str) -> Result<ScheduleRow> {
    store
        .schedule(account_id, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("schedule {id}")))
}

/// Stores a checked change of one schedule; the audit line says a pause or a resume when
/// that is all it does.
pub async fn update(
    store: &Store,
    account_id: &str,
    id: &str,
    change: &ScheduleChange,
    actor: &str,
) -> Result<ScheduleRecord> {
    let action = match (&change.name, &change.cron, change.enabled) {
        (None, None, Some(false)) => "schedule.pause",
        (None, None, Some(true)) => "schedule.resume",
        _ => "schedule.update",
    };
    let now = now_ms();
    let row = store
        .update_schedule(account_id, id, change, actor, action, now)
        .await?;
    Ok(record(&row, now))
}

/// Pauses or resumes one schedule of the account.
pub async fn set_enabled(
    store: &Store,
    account_id: &str,
    id: &str,
    enabled: bool,
    actor: &str,
) -> Result<ScheduleRecord> {
    row(store, account_id, id).await?;
    let change = ScheduleChange {
        name: None,
        cron: None,
        enabled: Some(enabled),
    };
    update(store, account_id, id, &change, actor).await
}

#[cfg(test)]
mod tests;
