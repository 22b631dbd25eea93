//! Production fault runs: a person's confirmation, and runs whose confirmation lapsed.

use sqlx::AssertSqlSafe;

use super::audit::{AuditLine, insert_audit};
use super::run_row::{RUN_COLUMNS, run_from_row};
use super::{Result, RunRow, Store, StoreError, now_ms};

/// Why a confirmation was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfirmRefusal {
    /// The run does not wait for a confirmation (not a production faults run, confirmed
    /// already, or no longer queued).
    NotAwaiting(String),
    /// The hash sent is not the run's: the person confirmed something else.
    HashMismatch { expected: String },
    /// The deadline has passed.
    Lapsed,
}

impl Store {
    /// Confirms a production faults run for `person`, bound to `hash`, and writes the audit
    /// line in the same transaction. Returns the confirmed run, or why not. `waiting` says
    /// why the run, now queued, will wait for an agent (if it will): stored with the
    /// confirmation, in place of the wait for a person.
    pub async fn confirm_run(
        &self,
        account_id: &str,
        run_id: &str,
        hash: &str,
        person: &str,
        waiting: impl FnOnce(&RunRow) -> Option<String>,
    ) -> Result<std::result::Result<RunRow, ConfirmRefusal>> {
        let mut tx = self.write_tx().await?;
        let select = format!(
            "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id
             WHERE r.id = $1 AND r.account_id = $2{}",
            self.for_update(Some("r"))
        );
        let row = sqlx::query(AssertSqlSafe(select.clone()))
            .bind(run_id)
            .bind(account_id)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(run) = row.as_ref().map(run_from_row).transpose()? else {
            return Err(StoreError::NotFound(format!("run {run_id}")));
        };
        let now = now_ms();
        let refusal = match &run.confirmation {
            None => Some(ConfirmRefusal::NotAwaiting(
                "this run does not need a confirmation".into(),
            )),
            Some(c) if !c.is_pending() => Some(ConfirmRefusal::NotAwaiting(format!(
                "already confirmed by {}",
                c.confirmed_by.as_deref().unwrap_or("someone")
            ))),
            Some(_) if run.status.is_finished() => Some(ConfirmRefusal::NotAwaiting(format!(
                "the run has ended ({})",
                run.status
            ))),
            Some(c) if c.deadline <= now => Some(ConfirmRefusal::Lapsed),
            Some(c) if c.hash != hash => Some(ConfirmRefusal::HashMismatch {
                expected: c.hash.clone(),
            }),
            Some(_) => None,
        };
        if let Some(refusal) = refusal {
            return Ok(Err(refusal));
        }
        let reason = waiting(&run);
        sqlx::query(
            "UPDATE runs SET confirmed_by = $1, confirmed_at = $2, reason = $3 WHERE id = $4",
        )
        .bind(person)
        .bind(now)
        .bind(reason.as_deref())
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        let line = AuditLine {
            at: now,
            actor: format!("person:{person}"),
            action: "run.confirm".to_string(),
            run_id: Some(run_id.to_string()),
            targets: Some(run.target.clone()),
            outcome: format!("confirmed {hash}"),
            ..Default::default()
        };
        insert_audit(&mut tx, account_id, &line).await?;
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id WHERE r.id = $1"
        )))
        .bind(run_id)
        .fetch_one(&mut *tx)
        .await?;
        let confirmed = run_from_row(&row)?;
        tx.commit().await?;
        Ok(Ok(confirmed))
    }

    /// Queued runs whose confirmation deadline has passed unconfirmed.
    pub async fn lapsed_confirmations(&self, now: i64) -> Result<Vec<RunRow>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id
             WHERE r.status = 'queued' AND r.confirm_hash IS NOT NULL
                 AND r.confirmed_at IS NULL AND r.confirm_deadline <= $1
             ORDER BY r.id"
        )))
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    /// The unfinished runs of `kind` in an account (what a halt stops).
    pub async fn unfinished_runs_of_kind(
        &self,
        account_id: &str,
        kind: &str,
    ) -> Result<Vec<RunRow>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id
             WHERE r.account_id = $1 AND r.kind = $2 AND r.status IN ('queued', 'running')
             ORDER BY r.id"
        )))
        .bind(account_id)
        .bind(kind)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }
}

#[cfg(test)]
mod tests;
