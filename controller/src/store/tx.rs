//! A write transaction the run-lifecycle layer opens (`Store::begin`) and the
//! persistence primitives it decides with: read and lock rows, write what the layer
//! decided (a run's ending, findings, events, frames), commit. Nothing here derives,
//! judges or asks a kind: the layer (`controller/src/runs/`) does.

use iohr_domain::finding::{Derived, RunFinding};
use sqlx::{Any, AssertSqlSafe, Row, Transaction};

use super::frame_row::{StoredFrame, insert_frame};
use super::run_row::{Ending, RUN_COLUMNS, RunRow, run_from_row};
use super::{Result, Store, StoreError, to_json};

/// An open write transaction ([`Store::write_tx`]) with its store (the backend's lock
/// clause, the replica's notices). Dropped without [`Tx::commit`], it rolls back.
pub struct Tx {
    pub(super) store: Store,
    pub(super) tx: Transaction<'static, Any>,
}

impl Store {
    /// A write transaction for the layer's decisions.
    pub async fn begin(&self) -> Result<Tx> {
        Ok(Tx {
            store: self.clone(),
            tx: self.write_tx().await?,
        })
    }
}

impl Tx {
    pub async fn commit(self) -> Result<()> {
        self.tx.commit().await?;
        Ok(())
    }

    /// This replica's number (`serve --replica`).
    pub fn replica(&self) -> i64 {
        self.store.replica
    }

    /// A run's row, locked for the rest of the transaction; `None` when there is none.
    pub async fn lock_run(&mut self, run_id: &str) -> Result<Option<RunRow>> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id WHERE r.id = $1{}",
            self.store.for_update(Some("r"))
        )))
        .bind(run_id)
        .fetch_optional(&mut *self.tx)
        .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    /// A split run's shares, in order.
    pub async fn shares_of(&mut self, parent: &str) -> Result<Vec<RunRow>> {
        super::shares::shares_in(&mut *self.tx, parent).await
    }

    /// The stored text of the spec `run` ran (its scenario version); `None` when that
    /// version is gone.
    pub async fn spec_text(&mut self, run: &RunRow) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT spec FROM scenarios WHERE account_id = $1 AND version = $2")
                .bind(&run.account_id)
                .bind(&run.scenario_version)
                .fetch_optional(&mut *self.tx)
                .await?,
        )
    }

    /// Writes a run's end on its row: `ending`'s status, result and units (a missing
    /// result or units keeps the stored ones), `reason` as given, its lease gone.
    pub async fn set_ending(
        &mut self,
        run_id: &str,
        ending: &Ending,
        reason: Option<&str>,
        now: i64,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE runs SET status = $1, reason = $2, result = COALESCE($3, result),
                 units_spent = COALESCE($4, units_spent), lease_state = NULL, ended_at = $5
             WHERE id = $6",
        )
        .bind(ending.status.as_str())
        .bind(reason)
        .bind(ending.result.as_ref().map(|v| v.to_string()))
        .bind(ending.units_spent)
        .bind(now)
        .bind(run_id)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Records the findings `run` derived (new, seen again or reopened) and lists them
    /// on the run.
    pub async fn insert_findings(
        &mut self,
        run: &RunRow,
        derived: &[Derived],
        now: i64,
    ) -> Result<Vec<RunFinding>> {
        let lock = self.store.for_update(None);
        let found =
            super::findings::record_findings(&mut self.tx, &lock, run, derived, now).await?;
        sqlx::query("UPDATE runs SET findings = $1 WHERE id = $2")
            .bind(to_json(&found))
            .bind(&run.id)
            .execute(&mut *self.tx)
            .await?;
        Ok(found)
    }

    /// Appends `events` (type, data) to the account's outbox, in order.
    pub async fn insert_events(
        &mut self,
        account_id: &str,
        events: &[(&str, serde_json::Value)],
        now: i64,
    ) -> Result<()> {
        for (event_type, data) in events {
            super::events::insert_event(&mut self.tx, account_id, event_type, data.clone(), now)
                .await?;
        }
        Ok(())
    }

    /// The highest frame number stored for a run (0 before its first).
    pub async fn last_frame(&mut self, run_id: &str) -> Result<u64> {
        let last: i64 =
            sqlx::query("SELECT COALESCE(MAX(number), 0) AS last FROM frames WHERE run_id = $1")
                .bind(run_id)
                .fetch_one(&mut *self.tx)
                .await?
                .try_get("last")?;
        Ok(last.max(0) as u64)
    }

    /// A run's frames `after + 1 ..= through` (kind, payload, at), in order.
    pub async fn frames_between(
        &mut self,
        run_id: &str,
        after: u64,
        through: u64,
    ) -> Result<Vec<(String, serde_json::Value, i64)>> {
        let rows = sqlx::query(
            "SELECT kind, payload, at FROM frames WHERE run_id = $1 AND number > $2
                 AND number <= $3 ORDER BY number",
        )
        .bind(run_id)
        .bind(after as i64)
        .bind(through as i64)
        .fetch_all(&mut *self.tx)
        .await?;
        let mut frames = Vec::with_capacity(rows.len());
        for row in rows {
            let payload: String = row.try_get("payload")?;
            let payload: serde_json::Value = serde_json::from_str(&payload)
                .map_err(|e| StoreError::Corrupt(format!("frame payload: {e}")))?;
            frames.push((
                row.try_get::<String, _>("kind")?,
                payload,
                row.try_get::<i64, _>("at")?,
            ));
        }
        Ok(frames)
    }

    /// Stores `frames` (numbered already, one run's, in order, after `after`) as the
    /// run's stream through the last of them, and tells its viewers on every replica.
    /// With `exclusive`, a number stored already is a conflict (nothing is written).
    pub async fn append_frames(
        &mut self,
        run_id: &str,
        after: u64,
        frames: &[StoredFrame],
        exclusive: bool,
    ) -> Result<()> {
        let Some(through) = frames.last().map(|f| f.number) else {
            return Ok(());
        };
        for frame in frames {
            if !insert_frame(&mut self.tx, frame).await? && exclusive {
                return Err(StoreError::Conflict(format!(
                    "frame {} of run {run_id} exists",
                    frame.number
                )));
            }
        }
        sqlx::query("UPDATE runs SET frames_through = $1 WHERE id = $2")
            .bind(through as i64)
            .bind(run_id)
            .execute(&mut *self.tx)
            .await?;
        self.store
            .notify_frames(&mut *self.tx, run_id, after + 1, through)
            .await
    }

    /// Tells every replica a run that held a lease ended (its account's counts change).
    pub async fn notify_ended(&mut self, run: &RunRow) -> Result<()> {
        let notice = format!("{} {}", self.store.replica, run.account_id);
        self.store
            .notify(&mut *self.tx, super::ENDED_CHANNEL, &notice)
            .await
    }
}
