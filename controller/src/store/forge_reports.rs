//! What the forge reporter (`crate::forge`) must still say, per change, and what it did.
//!
//! A report row per account, forge and change: `wanted` moves whenever something about
//! the change's runs changed (a run queued, one ended, a before-run beside it ended),
//! `done` when the forge has heard of it. The retry schedule (`attempts`,
//! `next_attempt_at`) is stored, so a restart keeps it. The log keeps the newest
//! [`MAX_REPORT_LOG_PER_ACCOUNT`] lines of an account: no body, token or answer.

use sqlx::Row;

use super::{Result, Store, format_ms, new_id, now_ms};

/// Report log lines kept per account; older ones go as new ones come.
pub const MAX_REPORT_LOG_PER_ACCOUNT: i64 = 500;

/// One change's report: which account, forge and change.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReportKey {
    pub account_id: String,
    pub forge: String,
    pub change_ref: String,
}

/// A report the forge has not heard of yet, due now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueReport {
    pub key: ReportKey,
    /// The `wanted` this attempt answers; `done` becomes it on success.
    pub wanted: i64,
    pub comment_id: Option<String>,
    /// Failed attempts since the last success or change.
    pub attempts: i64,
}

/// A line of the report log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportLogLine {
    pub at: i64,
    pub forge: String,
    pub change_ref: String,
    pub run_id: Option<String>,
    pub commit: Option<String>,
    /// The status sent (`pending`, `success`, ...), when one was.
    pub state: Option<String>,
    /// `reported`, `failed`, `gave_up` or `no_credentials`.
    pub outcome: String,
    /// A failure's class (`http_status`, `timeout`, ...), never the forge's answer.
    pub detail: Option<String>,
    pub status_code: Option<i64>,
    pub attempt: i64,
}

impl ReportLogLine {
    pub fn to_api(&self) -> serde_json::Value {
        serde_json::json!({
            "at": format_ms(self.at),
            "forge": self.forge,
            "change": self.change_ref,
            "run_id": self.run_id,
            "commit": self.commit,
            "state": self.state,
            "outcome": self.outcome,
            "detail": self.detail,
            "status_code": self.status_code,
            "attempt": self.attempt,
        })
    }
}

impl Store {
    /// Something about `key`'s runs changed: the forge must hear of it now (a fresh
    /// retry schedule). `seen_run` records a running run the scan has marked.
    pub async fn mark_forge_report(&self, key: &ReportKey, seen_run: Option<&str>) -> Result<()> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO forge_reports
                 (account_id, forge, change_ref, seen_run, wanted, done, comment_id, attempts,
                  next_attempt_at, updated_at)
             VALUES ($1, $2, $3, $4, 1, 0, NULL, 0, $5, $5)
             ON CONFLICT (account_id, forge, change_ref) DO UPDATE SET
                 seen_run = COALESCE($4, forge_reports.seen_run),
                 wanted = forge_reports.wanted + 1, attempts = 0, next_attempt_at = $5,
                 updated_at = $5",
        )
        .bind(&key.account_id)
        .bind(&key.forge)
        .bind(&key.change_ref)
        .bind(seen_run)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Queued and running runs of a forge's change that no report has seen yet: the
    /// reporter says `pending` for them. At most `limit`.
    pub async fn unseen_forge_runs(&self, limit: u32) -> Result<Vec<(ReportKey, String)>> {
        let rows = sqlx::query(
            "SELECT r.account_id, r.change_forge, r.change_ref, r.id FROM runs r
             WHERE r.status IN ('queued', 'running') AND r.change_forge IS NOT NULL
               AND r.change_ref IS NOT NULL AND r.parent_id IS NULL
               AND NOT EXISTS (SELECT 1 FROM forge_reports f
                   WHERE f.account_id = r.account_id AND f.forge = r.change_forge
                     AND f.change_ref = r.change_ref AND f.seen_run = r.id)
             ORDER BY r.created_at LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    ReportKey {
                        account_id: row.try_get("account_id")?,
                        forge: row.try_get("change_forge")?,
                        change_ref: row.try_get("change_ref")?,
                    },
                    row.try_get("id")?,
                ))
            })
            .collect()
    }

    /// The reports an ended run touches: its own change's, and the change of every run
    /// it stood beside as a fresh before-run.
    pub async fn forge_reports_of_run(
        &self,
        account_id: &str,
        run_id: &str,
    ) -> Result<Vec<ReportKey>> {
        let rows = sqlx::query(
            "SELECT change_forge, change_ref FROM runs
             WHERE account_id = $1 AND (id = $2 OR baseline_run = $2)
               AND change_forge IS NOT NULL AND change_ref IS NOT NULL AND parent_id IS NULL",
        )
        .bind(account_id)
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ReportKey {
                    account_id: account_id.to_string(),
                    forge: row.try_get("change_forge")?,
                    change_ref: row.try_get("change_ref")?,
                })
            })
            .collect()
    }

    /// The change's newest run, the one its report speaks of (a run another stands
    /// beside as its before-run is not one).
    pub async fn current_forge_run(&self, key: &ReportKey) -> Result<Option<String>> {
        let row = sqlx::query(
            "SELECT id FROM runs r
             WHERE r.account_id = $1 AND r.change_ref = $2 AND r.change_forge = $3
               AND r.parent_id IS NULL
               AND NOT EXISTS (SELECT 1 FROM runs a WHERE a.baseline_run = r.id)
             ORDER BY r.created_at DESC, r.id DESC LIMIT 1",
        )
        .bind(&key.account_id)
        .bind(&key.change_ref)
        .bind(&key.forge)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| row.try_get("id")).transpose()?)
    }

    /// Reports due at `now`, oldest first, at most `limit`.
    pub async fn due_forge_reports(&self, now: i64, limit: u32) -> Result<Vec<DueReport>> {
        let rows = sqlx::query(
            "SELECT account_id, forge, change_ref, wanted, comment_id, attempts
             FROM forge_reports WHERE next_attempt_at <= $1 AND done < wanted
             ORDER BY next_attempt_at LIMIT $2",
        )
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(DueReport {
                    key: ReportKey {
                        account_id: row.try_get("account_id")?,
                        forge: row.try_get("forge")?,
                        change_ref: row.try_get("change_ref")?,
                    },
                    wanted: row.try_get("wanted")?,
                    comment_id: row.try_get("comment_id")?,
                    attempts: row.try_get("attempts")?,
                })
            })
            .collect()
    }

    /// The forge heard of `wanted` (or it was given up): done unless marked again since.
    pub async fn forge_report_done(&self, key: &ReportKey, wanted: i64) -> Result<()> {
        sqlx::query(
            "UPDATE forge_reports SET done = $1, attempts = 0, updated_at = $2
             WHERE account_id = $3 AND forge = $4 AND change_ref = $5 AND done < $1",
        )
        .bind(wanted)
        .bind(now_ms())
        .bind(&key.account_id)
        .bind(&key.forge)
        .bind(&key.change_ref)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// An attempt failed: the next one at `retry_at`, unless marked again meanwhile
    /// (then it is due at once with a fresh schedule).
    pub async fn forge_report_failed(
        &self,
        key: &ReportKey,
        wanted: i64,
        retry_at: i64,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE forge_reports SET attempts = attempts + 1, next_attempt_at = $1,
                 updated_at = $2
             WHERE account_id = $3 AND forge = $4 AND change_ref = $5 AND wanted = $6",
        )
        .bind(retry_at)
        .bind(now_ms())
        .bind(&key.account_id)
        .bind(&key.forge)
        .bind(&key.change_ref)
        .bind(wanted)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Keeps the id of the change's comment (or forgets it, when the forge no longer
    /// has it), so later edits skip the listing.
    pub async fn set_forge_comment(&self, key: &ReportKey, comment_id: Option<&str>) -> Result<()> {
        sqlx::query(
            "UPDATE forge_reports SET comment_id = $1
             WHERE account_id = $2 AND forge = $3 AND change_ref = $4",
        )
        .bind(comment_id)
        .bind(&key.account_id)
        .bind(&key.forge)
        .bind(&key.change_ref)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Writes a log line; the account's lines past the bound go.
    pub async fn log_forge_report(&self, account_id: &str, line: &ReportLogLine) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "INSERT INTO forge_report_log
                 (id, account_id, at, forge, change_ref, run_id, commit_sha, state, outcome,
                  detail, status_code, attempt)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(new_id())
        .bind(account_id)
        .bind(line.at)
        .bind(&line.forge)
        .bind(&line.change_ref)
        .bind(&line.run_id)
        .bind(&line.commit)
        .bind(&line.state)
        .bind(&line.outcome)
        .bind(&line.detail)
        .bind(line.status_code)
        .bind(line.attempt)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM forge_report_log WHERE account_id = $1 AND id NOT IN (
                 SELECT id FROM forge_report_log WHERE account_id = $1
                 ORDER BY at DESC, id DESC LIMIT $2)",
        )
        .bind(account_id)
        .bind(MAX_REPORT_LOG_PER_ACCOUNT)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The account's report log, newest first, at most `limit` lines.
    pub async fn forge_report_log(
        &self,
        account_id: &str,
        limit: u32,
    ) -> Result<Vec<ReportLogLine>> {
        let rows = sqlx::query(
            "SELECT * FROM forge_report_log WHERE account_id = $1
             ORDER BY at DESC, id DESC LIMIT $2",
        )
        .bind(account_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ReportLogLine {
                    at: row.try_get("at")?,
                    forge: row.try_get("forge")?,
                    change_ref: row.try_get("change_ref")?,
                    run_id: row.try_get("run_id")?,
                    commit: row.try_get("commit_sha")?,
                    state: row.try_get("state")?,
                    outcome: row.try_get("outcome")?,
                    detail: row.try_get("detail")?,
                    status_code: row.try_get("status_code")?,
                    attempt: row.try_get("attempt")?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
