//! Deleting an account deletes all of it. Each table's rows go by explicit statements
//! (not only `ON DELETE CASCADE`, which SQLite honours only with its foreign-key pragma),
//! the largest (frames) in batches so no one statement holds the store for long; what
//! remains is one row of `account_deletions`: the account's id and name, when, by whom.

use sqlx::AssertSqlSafe;

use super::{Result, Store, new_id, now_ms};

/// Frames deleted per statement.
const FRAME_BATCH: i64 = 5_000;

/// Every table holding an account's rows, children first, with the condition that picks
/// that account's rows (`$1` is the account's id). `accounts` itself is last.
pub const ACCOUNT_TABLES: &[(&str, &str)] = &[
    (
        "frames",
        "run_id IN (SELECT id FROM runs WHERE account_id = $1)",
    ),
    (
        "run_findings",
        "run_id IN (SELECT id FROM runs WHERE account_id = $1)",
    ),
    (
        "split_measures",
        "run_id IN (SELECT id FROM runs WHERE account_id = $1)",
    ),
    (
        "split_seconds",
        "run_id IN (SELECT id FROM runs WHERE account_id = $1)",
    ),
    (
        "split_step_points",
        "run_id IN (SELECT id FROM runs WHERE account_id = $1)",
    ),
    (
        "split_steps",
        "run_id IN (SELECT id FROM runs WHERE account_id = $1)",
    ),
    (
        "agent_certs",
        "agent_id IN (SELECT id FROM agents WHERE account_id = $1)",
    ),
    (
        "schedule_fires",
        "schedule_id IN (SELECT id FROM schedules WHERE account_id = $1)",
    ),
    (
        "webhook_deliveries",
        "webhook_id IN (SELECT id FROM webhooks WHERE account_id = $1)",
    ),
    ("webhooks", "account_id = $1"),
    (
        "trigger_deliveries",
        "trigger_id IN (SELECT id FROM triggers WHERE account_id = $1)",
    ),
    ("triggers", "account_id = $1"),
    ("account_secrets", "account_id = $1"),
    ("forge_credentials", "account_id = $1"),
    ("forge_reports", "account_id = $1"),
    ("forge_report_log", "account_id = $1"),
    ("account_egress_allow", "account_id = $1"),
    ("otlp_exports", "account_id = $1"),
    ("event_cursors", "account_id = $1"),
    ("event_counters", "account_id = $1"),
    ("events", "account_id = $1"),
    ("schedules", "account_id = $1"),
    ("findings", "account_id = $1"),
    ("runs", "account_id = $1"),
    ("scenario_names", "account_id = $1"),
    ("scenarios", "account_id = $1"),
    ("audit", "account_id = $1"),
    ("agents", "account_id = $1"),
    ("console_sessions", "account_id = $1"),
    ("enrollment_tokens", "account_id = $1"),
    ("tokens", "account_id = $1"),
    ("environments", "account_id = $1"),
    ("accounts", "id = $1"),
];

/// What remains of a deleted account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountDeletion {
    pub account_id: String,
    pub name: String,
    pub deleted_at: i64,
    pub deleted_by: String,
}

impl Store {
    /// The account's rows in each of [`ACCOUNT_TABLES`].
    pub async fn account_rows(&self, account_id: &str) -> Result<Vec<(&'static str, i64)>> {
        let mut counts = Vec::new();
        for (table, condition) in ACCOUNT_TABLES {
            let count: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM {table} WHERE {condition}"
            )))
            .bind(account_id)
            .fetch_one(&self.pool)
            .await?;
            counts.push((*table, count));
        }
        Ok(counts)
    }

    /// Deletes the account and everything of it; records who did. The frames go first,
    /// in batches; the rest in one transaction, so a failure leaves the account whole
    /// (less frames of its runs) rather than half deleted.
    pub async fn delete_account(
        &self,
        account_id: &str,
        name: &str,
        by: &str,
    ) -> Result<AccountDeletion> {
        loop {
            let deleted = sqlx::query(
                "DELETE FROM frames WHERE (run_id, number) IN (
                     SELECT run_id, number FROM frames
                     WHERE run_id IN (SELECT id FROM runs WHERE account_id = $1)
                     LIMIT $2)",
            )
            .bind(account_id)
            .bind(FRAME_BATCH)
            .execute(&self.pool)
            .await?
            .rows_affected();
            if deleted == 0 {
                break;
            }
        }
        let mut tx = self.write_tx().await?;
        for (table, condition) in ACCOUNT_TABLES {
            sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE {condition}"
            )))
            .bind(account_id)
            .execute(&mut *tx)
            .await?;
        }
        let deletion = AccountDeletion {
            account_id: account_id.to_string(),
            name: name.to_string(),
            deleted_at: now_ms(),
            deleted_by: by.to_string(),
        };
        sqlx::query(
            "INSERT INTO account_deletions (id, account_id, name, deleted_at, deleted_by)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(new_id())
        .bind(&deletion.account_id)
        .bind(&deletion.name)
        .bind(deletion.deleted_at)
        .bind(&deletion.deleted_by)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(deletion)
    }

    /// Every deletion recorded, oldest first.
    pub async fn account_deletions(&self) -> Result<Vec<AccountDeletion>> {
        let rows: Vec<(String, String, i64, String)> = sqlx::query_as(
            "SELECT account_id, name, deleted_at, deleted_by FROM account_deletions
             ORDER BY deleted_at, id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(account_id, name, deleted_at, deleted_by)| AccountDeletion {
                    account_id,
                    name,
                    deleted_at,
                    deleted_by,
                },
            )
            .collect())
    }
}
