//! Admitting a new run under its account's plan, in the transaction that stores it: the
//! queue's bound (a run past it is not stored at all) and the month's unit budget (a run
//! reserving more than is left is stored `refused`, its reason giving the numbers).
//!
//! Both read what they count inside that transaction, after locking the account's row
//! (PostgreSQL's `FOR NO KEY UPDATE`) or taking the write lock (SQLite's `BEGIN
//! IMMEDIATE`), so two POSTs at once cannot both take the last place or the last units.

use std::time::UNIX_EPOCH;

use sqlx::{AssertSqlSafe, Row};

use super::{Backend, Result, Store, StoreError, format_ms};

/// What the plan says of a run about to be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    Queue,
    /// Stored ended `refused`, with this reason.
    Refuse(String),
}

/// The units an account has used in a calendar month: what its ended runs spent (those
/// that ended in the month) and what its live runs reserve. A split run's shares are
/// counted in it, not on their own (it reserves the whole run's and spends their sum).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonthUse {
    pub used: i64,
    /// The plan's units per month; 0: unlimited.
    pub budget: i64,
}

/// Unix ms of the start of the calendar month (UTC) holding `ms`, and of the next one.
pub fn month_bounds(ms: i64) -> (i64, i64) {
    let text = format_ms(ms);
    let year: i64 = text.get(0..4).and_then(|y| y.parse().ok()).unwrap_or(1970);
    let month: i64 = text.get(5..7).and_then(|m| m.parse().ok()).unwrap_or(1);
    let next = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    (first_of(year, month), first_of(next.0, next.1))
}

fn first_of(year: i64, month: i64) -> i64 {
    humantime::parse_rfc3339(&format!("{year:04}-{month:02}-01T00:00:00Z"))
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

const QUEUED: &str =
    "SELECT COUNT(*) AS queued FROM runs WHERE account_id = $1 AND status = 'queued'
         AND parent_id IS NULL";

const MONTH_USE: &str = "SELECT CAST(COALESCE(SUM(CASE WHEN status IN ('queued', 'running')
         THEN units_reserved ELSE units_spent END), 0) AS BIGINT) AS used
     FROM runs WHERE account_id = $1 AND parent_id IS NULL
         AND (status IN ('queued', 'running') OR ended_at >= $2)";

/// Checks a run reserving `reserved` units against its account's plan, inside `tx`.
pub(super) async fn admit(
    store: &Store,
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    account_id: &str,
    reserved: i64,
    now: i64,
) -> Result<Verdict> {
    // NO KEY UPDATE: creates of one account wait for each other, while other writers'
    // foreign-key checks on the account (audit lines, findings) do not wait for them.
    let lock = match store.backend() {
        Backend::Postgres => " FOR NO KEY UPDATE",
        Backend::Sqlite => "",
    };
    let plan = sqlx::query(AssertSqlSafe(format!(
        "SELECT max_queued, units_per_month FROM accounts WHERE id = $1{lock}"
    )))
    .bind(account_id)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or_else(|| StoreError::NotFound(format!("account {account_id}")))?;
    let max_queued: i64 = plan.try_get("max_queued")?;
    let budget: i64 = plan.try_get("units_per_month")?;
    let queued: i64 = sqlx::query(QUEUED)
        .bind(account_id)
        .fetch_one(&mut **tx)
        .await?
        .try_get("queued")?;
    if queued >= max_queued {
        return Err(StoreError::TooManyQueued { limit: max_queued });
    }
    if budget <= 0 {
        return Ok(Verdict::Queue);
    }
    let (month_start, next_month) = month_bounds(now);
    let used: i64 = sqlx::query(MONTH_USE)
        .bind(account_id)
        .bind(month_start)
        .fetch_one(&mut **tx)
        .await?
        .try_get("used")?;
    let left = budget.saturating_sub(used).max(0);
    // A run reserving nothing (a closed-model load run, whose count is unknown) still
    // needs some of the month left: it spends what it sends.
    if reserved > left || left == 0 {
        return Ok(Verdict::Refuse(format!(
            "refused by the plan's unit budget: the run reserves {reserved} units and {left} of this month's {budget} are left (the budget renews at {})",
            format_ms(next_month).replace(".000Z", "Z")
        )));
    }
    Ok(Verdict::Queue)
}

impl Store {
    /// How many runs of the account are queued (waiting for an agent or a confirmation).
    pub async fn queued_runs(&self, account_id: &str) -> Result<i64> {
        Ok(sqlx::query(QUEUED)
            .bind(account_id)
            .fetch_one(&self.pool)
            .await?
            .try_get("queued")?)
    }

    /// The units an account has used this calendar month (UTC) and its plan's budget.
    pub async fn month_use(&self, account_id: &str, now: i64) -> Result<MonthUse> {
        let budget: i64 = sqlx::query("SELECT units_per_month FROM accounts WHERE id = $1")
            .bind(account_id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("account {account_id}")))?
            .try_get("units_per_month")?;
        let used: i64 = sqlx::query(MONTH_USE)
            .bind(account_id)
            .bind(month_bounds(now).0)
            .fetch_one(&self.pool)
            .await?
            .try_get("used")?;
        Ok(MonthUse { used, budget })
    }
}

#[cfg(test)]
mod tests;
