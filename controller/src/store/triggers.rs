//! Triggers and their delivery logs. A delivery's row (`trigger_deliveries`, keyed by the
//! trigger and the forge's delivery id) is claimed before its runs are started, so a
//! delivery sent again starts nothing; the log keeps the outcome and why, never a body.
//! The secret is sealed with the data dir's key (`sealed.rs`), never stored in clear.

use sqlx::Row;

use super::audit::{AuditLine, insert_audit};
use super::sealed::SealError;
use super::{Result, Store, StoreError, new_id};

/// The most triggers one account may have.
pub const MAX_TRIGGERS: i64 = 100;
/// The deliveries kept per trigger (the newest).
pub const MAX_TRIGGER_DELIVERIES: i64 = 1000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTrigger {
    pub account_id: String,
    pub name: String,
    pub source: String,
    /// In clear here; sealed when stored.
    pub secret: String,
    pub kind: String,
    pub scenario_id: String,
    pub scenario_version: String,
    pub environment: String,
    pub target: String,
    pub executor: String,
    pub confirm_within: Option<String>,
    pub agents: Option<u32>,
    pub base_target: Option<String>,
    pub window_ms: i64,
    pub fresh_baseline: bool,
    pub enabled: bool,
    pub created_by: String,
}

/// A trigger as stored, its secret still sealed ([`Store::trigger_secret`] opens it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerRow {
    pub id: String,
    pub account_id: String,
    pub name: String,
    pub source: String,
    pub kind: String,
    pub scenario_id: String,
    pub scenario_version: String,
    pub environment: String,
    pub target: String,
    pub executor: String,
    pub confirm_within: Option<String>,
    pub agents: Option<u32>,
    pub base_target: Option<String>,
    pub window_ms: i64,
    pub fresh_baseline: bool,
    pub enabled: bool,
    pub created_by: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub last_delivery_at: Option<i64>,
    pub last_run_id: Option<String>,
    sealed_secret: String,
}

/// One delivery as its log shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerDelivery {
    pub delivery_id: String,
    pub at: i64,
    pub event: String,
    pub outcome: String,
    pub reason: Option<String>,
    pub run_id: Option<String>,
    pub baseline_run_id: Option<String>,
}

/// What claiming a delivery came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// First seen (or refused before, tried again): start its runs.
    New,
    /// Seen before: its stored outcome.
    Seen(TriggerDelivery),
}

/// The associated data a trigger's secret is sealed with.
fn sealed_as(id: &str) -> String {
    format!("trigger-secret:{id}")
}

fn trigger_from_row(row: &sqlx::any::AnyRow) -> Result<TriggerRow> {
    Ok(TriggerRow {
        id: row.try_get("id")?,
        account_id: row.try_get("account_id")?,
        name: row.try_get("name")?,
        source: row.try_get("source")?,
        kind: row.try_get("kind")?,
        scenario_id: row.try_get("scenario_id")?,
        scenario_version: row.try_get("scenario_version")?,
        environment: row.try_get("environment")?,
        target: row.try_get("target")?,
        executor: row.try_get("executor")?,
        confirm_within: row.try_get("confirm_within")?,
        agents: row
            .try_get::<Option<i64>, _>("agents")?
            .and_then(|n| u32::try_from(n).ok()),
        base_target: row.try_get("base_target")?,
        window_ms: row.try_get("window_ms")?,
        fresh_baseline: row.try_get::<i64, _>("fresh_baseline")? != 0,
        enabled: row.try_get::<i64, _>("enabled")? != 0,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        last_delivery_at: row.try_get("last_delivery_at")?,
        last_run_id: row.try_get("last_run_id")?,
        sealed_secret: row.try_get("secret")?,
    })
}

fn delivery_from_row(row: &sqlx::any::AnyRow) -> Result<TriggerDelivery> {
    Ok(TriggerDelivery {
        delivery_id: row.try_get("delivery_id")?,
        at: row.try_get("at")?,
        event: row.try_get("event")?,
        outcome: row.try_get("outcome")?,
        reason: row.try_get("reason")?,
        run_id: row.try_get("run_id")?,
        baseline_run_id: row.try_get("baseline_run_id")?,
    })
}

impl Store {
    /// Stores a trigger (its secret sealed) and its audit line; past [`MAX_TRIGGERS`]
    /// nothing is stored (`Conflict`). Without a key it is [`SealError::NoKey`].
    pub async fn insert_trigger(&self, new: &NewTrigger, now: i64) -> Result<TriggerRow> {
        let key = self.secrets.as_ref().ok_or(SealError::NoKey)?;
        let id = new_id();
        let sealed = key.seal(&sealed_as(&id), &new.secret)?;
        let mut tx = self.write_tx().await?;
        self.lock_account(&mut tx, &new.account_id).await?;
        let count: i64 = sqlx::query("SELECT COUNT(*) AS n FROM triggers WHERE account_id = $1")
            .bind(&new.account_id)
            .fetch_one(&mut *tx)
            .await?
            .try_get("n")?;
        if count >= MAX_TRIGGERS {
            return Err(StoreError::Conflict(format!(
                "the account has {count} triggers, the most it may have ({MAX_TRIGGERS})"
            )));
        }
        sqlx::query(
            "INSERT INTO triggers (id, account_id, name, source, secret, kind, scenario_id,
                 scenario_version, environment, target, executor, confirm_within, agents,
                 base_target, window_ms, fresh_baseline, enabled, created_by, created_at,
                 updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                 $17, $18, $19, $19)",
        )
        .bind(&id)
        .bind(&new.account_id)
        .bind(&new.name)
        .bind(&new.source)
        .bind(&sealed)
        .bind(&new.kind)
        .bind(&new.scenario_id)
        .bind(&new.scenario_version)
        .bind(&new.environment)
        .bind(&new.target)
        .bind(&new.executor)
        .bind(&new.confirm_within)
        .bind(new.agents.map(i64::from))
        .bind(&new.base_target)
        .bind(new.window_ms)
        .bind(i64::from(new.fresh_baseline))
        .bind(i64::from(new.enabled))
        .bind(&new.created_by)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let line = AuditLine {
            at: now,
            actor: new.created_by.clone(),
            action: "trigger.create".into(),
            targets: Some(new.target.clone()),
            outcome: format!("created trigger {id} ({})", new.source),
            ..Default::default()
        };
        insert_audit(&mut tx, &new.account_id, &line).await?;
        tx.commit().await?;
        self.trigger(&new.account_id, &id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("trigger {id}")))
    }

    /// A trigger of this account; another account's is "not found".
    pub async fn trigger(&self, account_id: &str, id: &str) -> Result<Option<TriggerRow>> {
        let row = sqlx::query("SELECT * FROM triggers WHERE id = $1 AND account_id = $2")
            .bind(id)
            .bind(account_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(trigger_from_row).transpose()
    }

    /// A trigger by its id alone: what a delivery names (it carries no token).
    pub async fn trigger_by_id(&self, id: &str) -> Result<Option<TriggerRow>> {
        let row = sqlx::query("SELECT * FROM triggers WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(trigger_from_row).transpose()
    }

    /// A trigger's secret, opened: only the delivery surface verifies with it.
    pub fn trigger_secret(&self, trigger: &TriggerRow) -> Result<String> {
        let key = self.secrets.as_ref().ok_or(SealError::NoKey)?;
        Ok(key.open(&sealed_as(&trigger.id), &trigger.sealed_secret)?)
    }

    /// An account's triggers, oldest first (at most [`MAX_TRIGGERS`]).
    pub async fn triggers(&self, account_id: &str) -> Result<Vec<TriggerRow>> {
        let rows = sqlx::query("SELECT * FROM triggers WHERE account_id = $1 ORDER BY id")
            .bind(account_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(trigger_from_row).collect()
    }

    /// Pauses or resumes a trigger, with its audit line (`trigger.pause`,
    /// `trigger.resume`).
    pub async fn set_trigger_enabled(
        &self,
        account_id: &str,
        id: &str,
        enabled: bool,
        actor: &str,
        now: i64,
    ) -> Result<TriggerRow> {
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(
            "UPDATE triggers SET enabled = $1, updated_at = $2 WHERE id = $3 AND account_id = $4",
        )
        .bind(i64::from(enabled))
        .bind(now)
        .bind(id)
        .bind(account_id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("trigger {id}")));
        }
        let (action, outcome) = if enabled {
            ("trigger.resume", "resumed")
        } else {
            ("trigger.pause", "paused")
        };
        let line = AuditLine {
            at: now,
            actor: actor.to_string(),
            action: action.into(),
            outcome: format!("{outcome} trigger {id}"),
            ..Default::default()
        };
        insert_audit(&mut tx, account_id, &line).await?;
        tx.commit().await?;
        self.trigger(account_id, id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("trigger {id}")))
    }

    /// Deletes a trigger and its delivery log (the runs it started stay), with the audit
    /// line.
    pub async fn delete_trigger(
        &self,
        account_id: &str,
        id: &str,
        actor: &str,
        now: i64,
    ) -> Result<()> {
        let line = AuditLine {
            at: now,
            actor: actor.to_string(),
            action: "trigger.delete".into(),
            outcome: format!("deleted trigger {id}"),
            ..Default::default()
        };
        super::audit::delete_with_log(
            self,
            ("triggers", "trigger"),
            ("trigger_deliveries", "trigger_id"),
            account_id,
            id,
            line,
        )
        .await
    }

    /// Claims a delivery: a new id is stored with `outcome` (`starting` before runs are
    /// started, `ignored` for an event not acted on) and the log trimmed to the newest
    /// [`MAX_TRIGGER_DELIVERIES`]. An id seen before is [`Claimed::Seen`], unless it was
    /// refused (a full queue...): then it is claimed again, so a redelivery can start it.
    pub async fn claim_delivery(
        &self,
        trigger_id: &str,
        delivery: &TriggerDelivery,
    ) -> Result<Claimed> {
        let mut tx = self.write_tx().await?;
        let inserted = sqlx::query(
            "INSERT INTO trigger_deliveries (trigger_id, delivery_id, at, event, outcome, reason)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(trigger_id)
        .bind(&delivery.delivery_id)
        .bind(delivery.at)
        .bind(&delivery.event)
        .bind(&delivery.outcome)
        .bind(&delivery.reason)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 0 {
            let again = sqlx::query(
                "UPDATE trigger_deliveries SET at = $1, outcome = $2, reason = $3
                 WHERE trigger_id = $4 AND delivery_id = $5 AND outcome = 'refused'",
            )
            .bind(delivery.at)
            .bind(&delivery.outcome)
            .bind(&delivery.reason)
            .bind(trigger_id)
            .bind(&delivery.delivery_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if again == 0 {
                let row = sqlx::query(
                    "SELECT * FROM trigger_deliveries WHERE trigger_id = $1 AND delivery_id = $2",
                )
                .bind(trigger_id)
                .bind(&delivery.delivery_id)
                .fetch_one(&mut *tx)
                .await?;
                let seen = delivery_from_row(&row)?;
                tx.commit().await?;
                return Ok(Claimed::Seen(seen));
            }
        }
        // The log's bound: what is older than its newest MAX_TRIGGER_DELIVERIES goes.
        sqlx::query(
            "DELETE FROM trigger_deliveries WHERE trigger_id = $1 AND at <
                 (SELECT at FROM trigger_deliveries WHERE trigger_id = $1
                  ORDER BY at DESC LIMIT 1 OFFSET $2)",
        )
        .bind(trigger_id)
        .bind(MAX_TRIGGER_DELIVERIES - 1)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE triggers SET last_delivery_at = $1 WHERE id = $2")
            .bind(delivery.at)
            .bind(trigger_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Claimed::New)
    }

    /// What a claimed delivery came to: `started` with its runs, or `refused` and why.
    pub async fn finish_delivery(
        &self,
        trigger_id: &str,
        delivery_id: &str,
        outcome: &str,
        reason: Option<&str>,
        run_id: Option<&str>,
        baseline_run_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "UPDATE trigger_deliveries SET outcome = $1, reason = $2, run_id = $3,
                 baseline_run_id = $4
             WHERE trigger_id = $5 AND delivery_id = $6",
        )
        .bind(outcome)
        .bind(reason)
        .bind(run_id)
        .bind(baseline_run_id)
        .bind(trigger_id)
        .bind(delivery_id)
        .execute(&mut *tx)
        .await?;
        if let Some(run_id) = run_id {
            sqlx::query("UPDATE triggers SET last_run_id = $1 WHERE id = $2")
                .bind(run_id)
                .bind(trigger_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// A trigger's delivery log, newest first (at most [`MAX_TRIGGER_DELIVERIES`]).
    pub async fn trigger_deliveries(&self, trigger_id: &str) -> Result<Vec<TriggerDelivery>> {
        let rows = sqlx::query(
            "SELECT * FROM trigger_deliveries WHERE trigger_id = $1
             ORDER BY at DESC, delivery_id DESC",
        )
        .bind(trigger_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(delivery_from_row).collect()
    }
}
