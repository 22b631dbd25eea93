//! Frames: append-only, numbered per run, stored exactly once whatever the agent resends.

use sqlx::{AssertSqlSafe, Row};

use iohr_domain::load::Share;

pub use super::frame_row::StoredFrame;
use super::frame_row::insert_frame;
use super::run_row::LeaseGuard;
use super::tx::Tx;
use super::{Result, Store, StoreError, now_ms};

/// What storing an agent's frames did ([`Tx::append_agent_frames`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentAppend {
    /// The run's stream was contiguous through `before`, and now through `through`.
    pub before: u64,
    pub through: u64,
    /// The frames that were not stored before (duplicates are dropped).
    pub new: Vec<StoredFrame>,
    /// The split run and the share this run is of, when it is one.
    pub share_of: Option<(String, Share)>,
}

impl Tx {
    /// Stores an agent's frames (number, kind, payload JSON), fenced by the lease: `None`
    /// (nothing stored) when `guard` is not the run's current accepted lease.
    pub async fn append_agent_frames(
        &mut self,
        run_id: &str,
        guard: &LeaseGuard,
        frames: &[(u64, String, serde_json::Value)],
    ) -> Result<Option<AgentAppend>> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT status, lease_id, lease_epoch, lease_state, frames_through, parent_id,
                 share_index, share_count FROM runs WHERE id = $1{}",
            self.store.for_update(None)
        )))
        .bind(run_id)
        .fetch_optional(&mut *self.tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let status: String = row.try_get("status")?;
        let lease_id: Option<String> = row.try_get("lease_id")?;
        let epoch: i64 = row.try_get("lease_epoch")?;
        let state: Option<String> = row.try_get("lease_state")?;
        let current = status == "running"
            && state.as_deref() == Some("accepted")
            && lease_id.as_deref() == Some(guard.lease_id.as_str())
            && epoch == guard.epoch as i64;
        if !current {
            return Ok(None);
        }
        let before = row.try_get::<i64, _>("frames_through")?.max(0) as u64;
        let mut through = before;
        let now = now_ms();
        let mut new = Vec::new();
        for (number, kind, payload) in frames {
            if *number == 0 || *number <= through {
                continue;
            }
            let frame = StoredFrame {
                run_id: run_id.to_string(),
                number: *number,
                kind: kind.clone(),
                payload: payload.clone(),
                at: now,
            };
            if insert_frame(&mut self.tx, &frame).await? {
                new.push(frame);
            }
        }
        let above = sqlx::query(
            "SELECT number FROM frames WHERE run_id = $1 AND number > $2 ORDER BY number",
        )
        .bind(run_id)
        .bind(through as i64)
        .fetch_all(&mut *self.tx)
        .await?;
        for row in above {
            let number = row.try_get::<i64, _>("number")?.max(0) as u64;
            if number != through + 1 {
                break;
            }
            through = number;
        }
        sqlx::query("UPDATE runs SET frames_through = $1 WHERE id = $2")
            .bind(through as i64)
            .bind(run_id)
            .execute(&mut *self.tx)
            .await?;
        if let (Some(first), Some(last)) = (
            new.iter().map(|f| f.number).min(),
            new.iter().map(|f| f.number).max(),
        ) {
            self.store
                .notify_frames(&mut *self.tx, run_id, first, last)
                .await?;
        }
        Ok(Some(AgentAppend {
            before,
            through,
            new,
            share_of: super::run_row::share_of_row(&row)?,
        }))
    }
}

impl Store {
    /// Frames after `after`, in order, at most `limit`.
    pub async fn frames_after(
        &self,
        run_id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StoredFrame>> {
        let rows = sqlx::query(
            "SELECT * FROM frames WHERE run_id = $1 AND number > $2 ORDER BY number LIMIT $3",
        )
        .bind(run_id)
        // A number past i64 (a client's `?after=` or `Last-Event-ID`) is past every frame.
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let payload: String = row.try_get("payload")?;
                Ok(StoredFrame {
                    run_id: row.try_get("run_id")?,
                    number: row.try_get::<i64, _>("number")?.max(0) as u64,
                    kind: row.try_get("kind")?,
                    payload: serde_json::from_str(&payload)
                        .map_err(|e| StoreError::Corrupt(format!("frame payload: {e}")))?,
                    at: row.try_get("at")?,
                })
            })
            .collect()
    }
}
