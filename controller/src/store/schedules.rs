//! Schedules and their fires. A fire's row (`schedule_fires`, keyed by schedule id and due
//! time) is written in the transaction that stores what the fire did (a run, a skip, a
//! refusal), so a fire happens at most once whatever restarts or ticks overlap.

use sqlx::Row;

use super::audit::{AuditLine, insert_audit};
use super::{Result, Store, StoreError, new_id};

/// The most schedules one account may have.
pub const MAX_SCHEDULES: i64 = 100;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSchedule {
    pub account_id: String,
    pub name: String,
    pub kind: String,
    pub scenario_id: String,
    pub scenario_version: String,
    pub environment: String,
    pub target: String,
    pub executor: String,
    pub change: Option<String>,
    pub confirm_within: Option<String>,
    /// Its runs split over this many agents (`None`: whole runs).
    pub agents: Option<u32>,
    pub cron: String,
    pub enabled: bool,
    pub created_by: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRow {
    pub id: String,
    pub account_id: String,
    pub name: String,
    pub kind: String,
    pub scenario_id: String,
    pub scenario_version: String,
    pub environment: String,
    pub target: String,
    pub executor: String,
    pub change: Option<String>,
    pub confirm_within: Option<String>,
    pub agents: Option<u32>,
    pub cron: String,
    pub enabled: bool,
    pub created_by: String,
    pub created_at: i64,
    pub updated_at: i64,
    /// No due time at or before this fires.
    pub fired_through: i64,
    pub skipped: i64,
    pub last_skipped_at: Option<i64>,
    pub last_run_id: Option<String>,
    pub last_fire_at: Option<i64>,
}

/// What a PATCH changes; `None` keeps the field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleChange {
    pub name: Option<String>,
    pub cron: Option<String>,
    pub enabled: Option<bool>,
}

/// One fire of a schedule: its deterministic id is the schedule's id and the due time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fire {
    pub schedule_id: String,
    pub due_at: i64,
    /// When the fire happened (the scheduler's clock).
    pub at: i64,
}

impl Fire {
    pub fn id(&self) -> String {
        format!("{}@{}", self.schedule_id, self.due_at)
    }
}

fn schedule_from_row(row: &sqlx::any::AnyRow) -> Result<ScheduleRow> {
    Ok(ScheduleRow {
        id: row.try_get("id")?,
        account_id: row.try_get("account_id")?,
        name: row.try_get("name")?,
        kind: row.try_get("kind")?,
        scenario_id: row.try_get("scenario_id")?,
        scenario_version: row.try_get("scenario_version")?,
        environment: row.try_get("environment")?,
        target: row.try_get("target")?,
        executor: row.try_get("executor")?,
        change: row.try_get("change_ref")?,
        confirm_within: row.try_get("confirm_within")?,
        agents: row
            .try_get::<Option<i64>, _>("agents")?
            .and_then(|n| u32::try_from(n).ok()),
        cron: row.try_get("cron")?,
        enabled: row.try_get::<i64, _>("enabled")? != 0,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        fired_through: row.try_get("fired_through")?,
        skipped: row.try_get("skipped")?,
        last_skipped_at: row.try_get("last_skipped_at")?,
        last_run_id: row.try_get("last_run_id")?,
        last_fire_at: row.try_get("last_fire_at")?,
    })
}

/// Claims a fire inside a transaction: `Conflict` when it was claimed before.
pub(super) async fn claim_fire(
    conn: &mut sqlx::AnyConnection,
    fire: &Fire,
    outcome: &str,
    run_id: Option<&str>,
) -> Result<()> {
    let done = sqlx::query(
        "INSERT INTO schedule_fires (id, schedule_id, due_at, outcome, run_id, at)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
    )
    .bind(fire.id())
    .bind(&fire.schedule_id)
    .bind(fire.due_at)
    .bind(outcome)
    .bind(run_id)
    .bind(fire.at)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::Conflict(format!(
            "fire {} happened already",
            fire.id()
        )));
    }
    Ok(())
}

/// After a fire started a run: the schedule's last run and fire, and what it fired through.
pub(super) async fn record_started(
    conn: &mut sqlx::AnyConnection,
    fire: &Fire,
    run_id: &str,
) -> Result<()> {
    sqlx::query(
        "UPDATE schedules SET last_run_id = $1, last_fire_at = $2,
             fired_through = CASE WHEN fired_through > $3 THEN fired_through ELSE $3 END
         WHERE id = $4",
    )
    .bind(run_id)
    .bind(fire.at)
    .bind(fire.due_at)
    .bind(&fire.schedule_id)
    .execute(conn)
    .await?;
    Ok(())
}

impl Store {
    /// Stores a schedule and its audit line; past [`MAX_SCHEDULES`] nothing is stored.
    pub async fn insert_schedule(&self, new: &NewSchedule, now: i64) -> Result<ScheduleRow> {
        let id = new_id();
        let mut tx = self.write_tx().await?;
        self.lock_account(&mut tx, &new.account_id).await?;
        let count: i64 = sqlx::query("SELECT COUNT(*) AS n FROM schedules WHERE account_id = $1")
            .bind(&new.account_id)
            .fetch_one(&mut *tx)
            .await?
            .try_get("n")?;
        if count >= MAX_SCHEDULES {
            return Err(StoreError::Conflict(format!(
                "the account has {count} schedules, the most it may have ({MAX_SCHEDULES})"
            )));
        }
        sqlx::query(
            "INSERT INTO schedules (id, account_id, name, kind, scenario_id, scenario_version,
                 environment, target, executor, change_ref, confirm_within, cron, enabled,
                 created_by, created_at, updated_at, fired_through, agents)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15, $15,
                 $16)",
        )
        .bind(&id)
        .bind(&new.account_id)
        .bind(&new.name)
        .bind(&new.kind)
        .bind(&new.scenario_id)
        .bind(&new.scenario_version)
        .bind(&new.environment)
        .bind(&new.target)
        .bind(&new.executor)
        .bind(&new.change)
        .bind(&new.confirm_within)
        .bind(&new.cron)
        .bind(i64::from(new.enabled))
        .bind(&new.created_by)
        .bind(now)
        .bind(new.agents.map(i64::from))
        .execute(&mut *tx)
        .await?;
        let line = AuditLine {
            at: now,
            actor: new.created_by.clone(),
            action: "schedule.create".into(),
            schedule_id: Some(id.clone()),
            targets: Some(new.target.clone()),
            outcome: "created".into(),
            ..Default::default()
        };
        insert_audit(&mut tx, &new.account_id, &line).await?;
        tx.commit().await?;
        self.schedule(&new.account_id, &id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("schedule {id}")))
    }

    /// A schedule of this account; another account's is "not found".
    pub async fn schedule(&self, account_id: &str, id: &str) -> Result<Option<ScheduleRow>> {
        let row = sqlx::query("SELECT * FROM schedules WHERE id = $1 AND account_id = $2")
            .bind(id)
            .bind(account_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(schedule_from_row).transpose()
    }

    /// An account's schedules, oldest first (at most [`MAX_SCHEDULES`]).
    pub async fn schedules(&self, account_id: &str) -> Result<Vec<ScheduleRow>> {
        let rows = sqlx::query("SELECT * FROM schedules WHERE account_id = $1 ORDER BY id")
            .bind(account_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(schedule_from_row).collect()
    }

    /// Every enabled schedule of every account: what the scheduler looks at each tick.
    pub async fn enabled_schedules(&self) -> Result<Vec<ScheduleRow>> {
        let rows = sqlx::query("SELECT * FROM schedules WHERE enabled = 1 ORDER BY id")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(schedule_from_row).collect()
    }

    /// Changes a schedule and writes the audit line `action` (`schedule.update`,
    /// `schedule.pause`, `schedule.resume`). A resume or a new expression fires from `now`
    /// on: what fell due while paused is not fired.
    pub async fn update_schedule(
        &self,
        account_id: &str,
        id: &str,
        change: &ScheduleChange,
        actor: &str,
        action: &str,
        now: i64,
    ) -> Result<ScheduleRow> {
        let mut tx = self.write_tx().await?;
        let restart = change.enabled == Some(true) || change.cron.is_some();
        let done = sqlx::query(
            "UPDATE schedules SET name = COALESCE($1, name), cron = COALESCE($2, cron),
                 enabled = COALESCE($3, enabled), updated_at = $4,
                 fired_through = CASE WHEN $5 = 1 AND fired_through < $4 THEN $4
                     ELSE fired_through END
             WHERE id = $6 AND account_id = $7",
        )
        .bind(&change.name)
        .bind(&change.cron)
        .bind(change.enabled.map(i64::from))
        .bind(now)
        .bind(i64::from(restart))
        .bind(id)
        .bind(account_id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("schedule {id}")));
        }
        let line = AuditLine {
            at: now,
            actor: actor.to_string(),
            action: action.to_string(),
            schedule_id: Some(id.to_string()),
            outcome: "changed".into(),
            ..Default::default()
        };
        insert_audit(&mut tx, account_id, &line).await?;
        tx.commit().await?;
        self.schedule(account_id, id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("schedule {id}")))
    }

    /// Deletes a schedule (its fires with it; the runs it started stay) and writes the
    /// audit line.
    pub async fn delete_schedule(
        &self,
        account_id: &str,
        id: &str,
        actor: &str,
        now: i64,
    ) -> Result<()> {
        let line = AuditLine {
            at: now,
            actor: actor.to_string(),
            action: "schedule.delete".into(),
            schedule_id: Some(id.to_string()),
            outcome: "deleted".into(),
            ..Default::default()
        };
        super::audit::delete_with_log(
            self,
            ("schedules", "schedule"),
            ("schedule_fires", "schedule_id"),
            account_id,
            id,
            line,
        )
        .await
    }

    /// Missed fires are skipped: moves what a schedule has fired through up to `through`
    /// without firing (a controller that was down starts from now).
    pub async fn skip_missed(&self, id: &str, through: i64) -> Result<()> {
        sqlx::query("UPDATE schedules SET fired_through = $1 WHERE id = $2 AND fired_through < $1")
            .bind(through)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// A fire that fell due while the previous run was unfinished: counted, never stacked.
    /// `Conflict` when this fire happened already.
    pub async fn record_skip(&self, account_id: &str, fire: &Fire, why: &str) -> Result<()> {
        self.record_fire_without_run(account_id, fire, "skipped", why, true)
            .await
    }

    /// A fire whose run could not be made (its environment is gone, the queue is full...).
    pub async fn record_refused_fire(
        &self,
        account_id: &str,
        fire: &Fire,
        why: &str,
    ) -> Result<()> {
        self.record_fire_without_run(account_id, fire, "refused", why, false)
            .await
    }

    async fn record_fire_without_run(
        &self,
        account_id: &str,
        fire: &Fire,
        outcome: &str,
        why: &str,
        counted: bool,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        claim_fire(&mut tx, fire, outcome, None).await?;
        sqlx::query(
            "UPDATE schedules SET skipped = skipped + $1,
                 last_skipped_at = CASE WHEN $1 = 1 THEN $2 ELSE last_skipped_at END,
                 fired_through = CASE WHEN fired_through > $3 THEN fired_through ELSE $3 END
             WHERE id = $4",
        )
        .bind(i64::from(counted))
        .bind(fire.at)
        .bind(fire.due_at)
        .bind(&fire.schedule_id)
        .execute(&mut *tx)
        .await?;
        let line = AuditLine {
            at: fire.at,
            actor: format!("schedule:{}", fire.schedule_id),
            action: "schedule.fire".into(),
            schedule_id: Some(fire.schedule_id.clone()),
            outcome: format!("{outcome}: {why}"),
            ..Default::default()
        };
        insert_audit(&mut tx, account_id, &line).await?;
        tx.commit().await?;
        Ok(())
    }

    /// A schedule's stored fires, oldest first: due time, outcome and run.
    pub async fn fire_outcomes(
        &self,
        schedule_id: &str,
    ) -> Result<Vec<(i64, String, Option<String>)>> {
        let rows = sqlx::query(
            "SELECT due_at, outcome, run_id FROM schedule_fires WHERE schedule_id = $1
             ORDER BY due_at",
        )
        .bind(schedule_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("due_at")?,
                    row.try_get("outcome")?,
                    row.try_get("run_id")?,
                ))
            })
            .collect()
    }

    /// The schedule floors of an account's plan, as stored (JSON `{"kind": seconds}`).
    pub async fn schedule_floors(&self, account_id: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT schedule_floors FROM accounts WHERE id = $1")
            .bind(account_id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("account {account_id}")))?;
        Ok(row.try_get("schedule_floors")?)
    }

    pub async fn set_schedule_floors(&self, account_id: &str, floors: &str) -> Result<()> {
        sqlx::query("UPDATE accounts SET schedule_floors = $1 WHERE id = $2")
            .bind(floors)
            .bind(account_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
