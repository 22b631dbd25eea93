//! Schedules: the account's schedules as records (with their next fire times), and a
//! schedule changed (renamed, a new expression, paused or resumed) with its audit line.
//! What a change may hold is checked by the surface that took it (a name's length, an
//! expression against the kind's floor); the console only pauses and resumes.

use iohr_domain::RunKind;
use iohr_domain::run::ScenarioRef;
use serde::{Deserialize, Serialize};

use crate::schedule::cron::{Expression, format_utc};
use crate::store::{Result, ScheduleChange, ScheduleRow, Store, StoreError, now_ms};

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
