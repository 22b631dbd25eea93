//! Audit lines: one per start, cancel, confirmation, lapse, finding close and halt (and
//! schedule and webhook changes): who, which run or schedule, which targets and faults,
//! and the outcome. Never a request body or a credential.

// Dynamic SQL here is assembled from constants only; every value is bound.
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::page::Keyset;
use super::{Result, Store, StoreError, new_id, now_ms};

/// One audit line. Build it with `AuditLine { actor, action, outcome, ..Default::default() }`
/// and the subjects that apply; `at: 0` means "now" when it is written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditLine {
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub run_id: Option<String>,
    pub schedule_id: Option<String>,
    pub targets: Option<String>,
    /// The fault types a line is about (a faults run's start, confirmation, halt).
    pub faults: Option<String>,
    pub outcome: String,
}

/// Writes one audit line on a connection (alone, or inside the transaction of the change
/// it records).
pub(super) async fn insert_audit(
    conn: &mut sqlx::AnyConnection,
    account_id: &str,
    line: &AuditLine,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO audit
             (id, at, account_id, actor, action, run_id, schedule_id, targets, faults, outcome)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(new_id())
    .bind(if line.at == 0 { now_ms() } else { line.at })
    .bind(account_id)
    .bind(&line.actor)
    .bind(&line.action)
    .bind(&line.run_id)
    .bind(&line.schedule_id)
    .bind(&line.targets)
    .bind(&line.faults)
    .bind(&line.outcome)
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes an account's row with `delete` (a constant statement binding the account to
/// `$1` and the row's key to `$2`) and writes `line` with it, in one transaction;
/// `false`, and nothing written, when there was no such row. A sealed value's delete
/// (account secrets, forge credentials).
pub(super) async fn delete_audited(
    store: &Store,
    delete: &'static str,
    account_id: &str,
    key: &str,
    line: AuditLine,
) -> Result<bool> {
    let mut tx = store.write_tx().await?;
    let deleted = sqlx::query(delete)
        .bind(account_id)
        .bind(key)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if deleted == 0 {
        return Ok(false);
    }
    insert_audit(&mut tx, account_id, &line).await?;
    tx.commit().await?;
    Ok(true)
}

/// Deletes the account's row `id` of `table` with its log (the rows of `log_table` whose
/// `log_key` names it: a schedule's fires, a trigger's deliveries; the runs it started
/// stay) and writes `line`, in one transaction; `NotFound("{what} {id}")`, nothing
/// written, when the account has no such row. Names are constants; values are bound.
pub(super) async fn delete_with_log(
    store: &Store,
    (table, what): (&'static str, &str),
    (log_table, log_key): (&'static str, &'static str),
    account_id: &str,
    id: &str,
    line: AuditLine,
) -> Result<()> {
    let mut tx = store.write_tx().await?;
    sqlx::query(AssertSqlSafe(format!(
        "DELETE FROM {log_table} WHERE {log_key} IN
             (SELECT id FROM {table} WHERE id = $1 AND account_id = $2)"
    )))
    .bind(id)
    .bind(account_id)
    .execute(&mut *tx)
    .await?;
    let done = sqlx::query(AssertSqlSafe(format!(
        "DELETE FROM {table} WHERE id = $1 AND account_id = $2"
    )))
    .bind(id)
    .bind(account_id)
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound(format!("{what} {id}")));
    }
    insert_audit(&mut tx, account_id, &line).await?;
    tx.commit().await?;
    Ok(())
}

/// An account's row of sealed values (account secrets, forge credentials, an OTLP export)
/// for [`put_audited`]. Table and column names are constants; values are bound.
#[derive(Clone, Copy)]
pub(super) struct AuditedPut<'a> {
    pub table: &'static str,
    /// The row's key beside the account (column, value); `None` where an account has one
    /// row.
    pub key: Option<(&'static str, &'a str)>,
    /// The columns written and their values, the secret ones sealed already.
    pub values: &'a [(&'static str, &'a str)],
    pub actor: &'a str,
}

/// Writes (or replaces) `put`'s row with the audit line `line(created)` gives, in one
/// transaction, and reads the row back with `from_row`: `(created, row)`. The row's
/// `created_*` columns are kept across a replacement, `updated_*` are set.
pub(super) async fn put_audited<T>(
    store: &Store,
    account_id: &str,
    put: AuditedPut<'_>,
    line: impl FnOnce(bool) -> AuditLine,
    from_row: impl Fn(&AnyRow) -> Result<T>,
) -> Result<(bool, T)> {
    put_audited_bounded(store, account_id, put, None, line, from_row)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("{} refused a row with no bound", put.table)))
}

/// [`put_audited`] where one account may hold `max_rows` rows: `Ok(None)`, nothing
/// written, when a new row would pass it.
pub(super) async fn put_audited_bounded<T>(
    store: &Store,
    account_id: &str,
    put: AuditedPut<'_>,
    max_rows: Option<i64>,
    line: impl FnOnce(bool) -> AuditLine,
    from_row: impl Fn(&AnyRow) -> Result<T>,
) -> Result<Option<(bool, T)>> {
    let AuditedPut {
        table,
        key,
        values,
        actor,
    } = put;
    let n = values.len();
    let set: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, (column, _))| format!("{column} = ${}", i + 1))
        .collect();
    let (key_column, key_value) = key.unzip();
    let key_clause = |at: usize| {
        key_column
            .map(|column| format!(" AND {column} = ${at}"))
            .unwrap_or_default()
    };
    let now = now_ms();
    let mut tx = store.write_tx().await?;
    store.lock_account(&mut tx, account_id).await?;
    let mut update = sqlx::query(AssertSqlSafe(format!(
        "UPDATE {table} SET {}, updated_by = ${}, updated_at = ${} WHERE account_id = ${}{}",
        set.join(", "),
        n + 1,
        n + 2,
        n + 3,
        key_clause(n + 4)
    )));
    for (_, value) in values {
        update = update.bind(*value);
    }
    update = update.bind(actor).bind(now).bind(account_id);
    if let Some(key_value) = key_value {
        update = update.bind(key_value);
    }
    let updated = update.execute(&mut *tx).await?.rows_affected();
    let created = updated == 0;
    if created {
        if let Some(max) = max_rows {
            let count: i64 = sqlx::query(AssertSqlSafe(format!(
                "SELECT COUNT(*) AS n FROM {table} WHERE account_id = $1"
            )))
            .bind(account_id)
            .fetch_one(&mut *tx)
            .await?
            .try_get("n")?;
            if count >= max {
                return Ok(None);
            }
        }
        // $1 the account, then the key if any, the values, the actor and the time.
        let first = if key.is_some() { 3 } else { 2 };
        let columns: Vec<&str> = key_column
            .into_iter()
            .chain(values.iter().map(|(column, _)| *column))
            .collect();
        let placeholders: Vec<String> = (2..first + n).map(|i| format!("${i}")).collect();
        let (by, at) = (first + n, first + n + 1);
        let mut insert = sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {table}
                 (account_id, {}, created_by, created_at, updated_by, updated_at)
             VALUES ($1, {}, ${by}, ${at}, ${by}, ${at})",
            columns.join(", "),
            placeholders.join(", ")
        )))
        .bind(account_id);
        if let Some(key_value) = key_value {
            insert = insert.bind(key_value);
        }
        for (_, value) in values {
            insert = insert.bind(*value);
        }
        insert.bind(actor).bind(now).execute(&mut *tx).await?;
    }
    let line = AuditLine {
        at: now,
        ..line(created)
    };
    insert_audit(&mut tx, account_id, &line).await?;
    let mut select = sqlx::query(AssertSqlSafe(format!(
        "SELECT * FROM {table} WHERE account_id = $1{}",
        key_clause(2)
    )))
    .bind(account_id);
    if let Some(key_value) = key_value {
        select = select.bind(key_value);
    }
    let row = select.fetch_one(&mut *tx).await?;
    let row = from_row(&row)?;
    tx.commit().await?;
    Ok(Some((created, row)))
}

impl Store {
    pub async fn audit(&self, account_id: &str, line: &AuditLine) -> Result<()> {
        let mut conn = self.pool.acquire().await?;
        insert_audit(&mut conn, account_id, line).await
    }

    /// Every audit line of the account, oldest first (the store tests' view).
    pub async fn audit_lines(&self, account_id: &str) -> Result<Vec<AuditLine>> {
        let rows = sqlx::query("SELECT * FROM audit WHERE account_id = $1 ORDER BY at, id")
            .bind(account_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|row| Ok(line_from_row(row)?.1)).collect()
    }

    /// One page of the account's audit lines, newest first, with their ids.
    pub async fn list_audit(
        &self,
        account_id: &str,
        filter: &AuditFilter,
    ) -> Result<(Vec<(String, AuditLine)>, Option<String>)> {
        let mut page = Keyset::new(
            "SELECT * FROM audit WHERE account_id = $1".to_string(),
            account_id,
        );
        page.and_int("at >=", filter.since);
        page.and_int("at <", filter.until);
        page.and("actor =", filter.actor.clone());
        page.and("action =", filter.action.clone());
        page.and("run_id =", filter.run.clone());
        page.and("schedule_id =", filter.schedule.clone());
        page.fetch(
            &self.pool,
            "id",
            filter.cursor.as_deref(),
            filter.limit,
            line_from_row,
            |(id, _): &(String, AuditLine)| id,
        )
        .await
    }
}

/// What `GET /audit` asks for: times in epoch ms (`since` inclusive, `until` exclusive),
/// the other filters exact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub actor: Option<String>,
    pub action: Option<String>,
    pub run: Option<String>,
    pub schedule: Option<String>,
    pub limit: u32,
    pub cursor: Option<String>,
}

fn line_from_row(row: &AnyRow) -> Result<(String, AuditLine)> {
    Ok((
        row.try_get("id")?,
        AuditLine {
            at: row.try_get("at")?,
            actor: row.try_get("actor")?,
            action: row.try_get("action")?,
            run_id: row.try_get("run_id")?,
            schedule_id: row.try_get("schedule_id")?,
            targets: row.try_get("targets")?,
            faults: row.try_get("faults")?,
            outcome: row.try_get("outcome")?,
        },
    ))
}
