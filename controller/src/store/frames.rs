//! Frames: append-only, numbered per run, stored exactly once whatever the agent resends.

use sqlx::{AssertSqlSafe, Row};

pub use super::frame_row::StoredFrame;
use super::frame_row::insert_frame;
use super::run_row::LeaseGuard;
use super::{Result, Store, StoreError, now_ms};

/// What an append did.
#[derive(Debug, Clone, PartialEq)]
pub enum AppendOutcome {
    /// Stored; `contiguous_through` is what the controller acknowledges, `new` the frames
    /// that were not stored before (duplicates are dropped).
    Stored {
        contiguous_through: u64,
        new: Vec<StoredFrame>,
        /// A share's frames relayed onto its split run's stream (see `shares.rs`).
        relayed: Vec<StoredFrame>,
        /// The split run and why it stops: these frames' seconds made its merged
        /// measure cross an `abort_on_fail` threshold (see `split_seconds.rs`).
        split_aborted: Option<(String, String)>,
    },
    /// The lease is not the run's current accepted lease: nothing was stored.
    Stale,
}

impl Store {
    /// Appends an agent's frames (kind, payload JSON) in one transaction, fenced by the lease.
    pub async fn append_frames(
        &self,
        run_id: &str,
        guard: &LeaseGuard,
        frames: &[(u64, String, serde_json::Value)],
    ) -> Result<AppendOutcome> {
        let mut tx = self.write_tx().await?;
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT status, lease_id, lease_epoch, lease_state, frames_through, parent_id,
                 share_index, share_count FROM runs WHERE id = $1{}",
            self.for_update(None)
        )))
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(AppendOutcome::Stale);
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
            return Ok(AppendOutcome::Stale);
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
            if insert_frame(&mut tx, &frame).await? {
                new.push(frame);
            }
        }
        let above = sqlx::query(
            "SELECT number FROM frames WHERE run_id = $1 AND number > $2 ORDER BY number",
        )
        .bind(run_id)
        .bind(through as i64)
        .fetch_all(&mut *tx)
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
            .execute(&mut *tx)
            .await?;
        if let (Some(first), Some(last)) = (
            new.iter().map(|f| f.number).min(),
            new.iter().map(|f| f.number).max(),
        ) {
            self.notify_frames(&mut *tx, run_id, first, last).await?;
        }
        let (relayed, split_aborted) = match super::run_row::share_of_row(&row)? {
            Some((parent, share)) => {
                let relayed = super::shares::relay_frames(
                    self,
                    &mut tx,
                    run_id,
                    (&parent, share),
                    before,
                    through,
                )
                .await?;
                (relayed.frames, relayed.aborted.map(|why| (parent, why)))
            }
            None => (Vec::new(), None),
        };
        tx.commit().await?;
        Ok(AppendOutcome::Stored {
            contiguous_through: through,
            new,
            relayed,
            split_aborted,
        })
    }

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
