//! The steps of a capacity run split over agents, as rows: each share's step-end point
//! (`split_step_points`) until every share has sent the step, and the verdict on the
//! step judged on their merge (`split_steps`, judged by the run-lifecycle layer,
//! `runs/judge/steps.rs`) with the instant the shares start their next step. Each share's
//! agent asks for it (`StepAsk`) on whichever replica it is connected to, so no notice
//! between replicas has to arrive for the sweep to go on.
//!
//! The rows are written in the relaying transaction, which holds the split run's row:
//! two shares ending a step at once on two replicas judge it once.
//!
//! Step 0 is the start, for a split run of any kind: every share asks for it before its
//! clock starts, and its verdict is stored once every share holds its lease (the layer
//! decides when: `runs/judge/steps.rs`).

use iohr_domain::capacity::SweepPoint;
use sqlx::Row;

use super::run_row::LeaseGuard;
use super::tx::Tx;
use super::{Result, Store, StoreError, now_ms};

/// The verdict on one step of a split sweep, as the agents are told it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepVerdict {
    pub step: u32,
    pub meets_slo: bool,
    pub reason: String,
    /// How long from now the shares start the next step.
    pub start_after_ms: u32,
}

impl Tx {
    /// Keeps share `share_index`'s point of a step (a point kept already stays), and
    /// returns every share's point of that step kept so far, in share order.
    pub async fn put_step_point(
        &mut self,
        parent: &str,
        share_index: u32,
        point: &SweepPoint,
    ) -> Result<Vec<SweepPoint>> {
        let text = serde_json::to_string(point).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        sqlx::query(
            "INSERT INTO split_step_points (run_id, step, share_index, point)
             VALUES ($1, $2, $3, $4) ON CONFLICT (run_id, step, share_index) DO NOTHING",
        )
        .bind(parent)
        .bind(i64::from(point.step))
        .bind(i64::from(share_index))
        .bind(text)
        .execute(&mut *self.tx)
        .await?;
        let parts: Vec<String> = sqlx::query_scalar(
            "SELECT point FROM split_step_points WHERE run_id = $1 AND step = $2
             ORDER BY share_index",
        )
        .bind(parent)
        .bind(i64::from(point.step))
        .fetch_all(&mut *self.tx)
        .await?;
        parts
            .iter()
            .map(|text| serde_json::from_str::<SweepPoint>(text))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Corrupt(format!("split step point: {e}")))
    }

    /// The verdict on a step (the first one stored stays), the shares to start the next
    /// one at `starts_at` (Unix ms); the step's points go.
    pub async fn put_step_verdict(
        &mut self,
        parent: &str,
        step: u32,
        meets_slo: bool,
        reason: &str,
        starts_at: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO split_steps (run_id, step, meets_slo, reason, starts_at)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, step) DO NOTHING",
        )
        .bind(parent)
        .bind(i64::from(step))
        .bind(i64::from(meets_slo))
        .bind(reason)
        .bind(starts_at)
        .execute(&mut *self.tx)
        .await?;
        sqlx::query("DELETE FROM split_step_points WHERE run_id = $1 AND step = $2")
            .bind(parent)
            .bind(i64::from(step))
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }
}

impl Store {
    /// The verdict on `step` for the share `run_id`, asked by its agent under `guard`:
    /// `None` while no verdict is stored, and for a lease that is not the run's current
    /// one (a stale agent learns nothing of the sweep).
    pub async fn step_verdict(
        &self,
        run_id: &str,
        guard: &LeaseGuard,
        step: u32,
    ) -> Result<Option<StepVerdict>> {
        let row = sqlx::query(
            "SELECT v.meets_slo, v.reason, v.starts_at FROM runs r
             JOIN split_steps v ON v.run_id = r.parent_id
             WHERE r.id = $1 AND r.lease_id = $2 AND r.lease_epoch = $3 AND v.step = $4",
        )
        .bind(run_id)
        .bind(&guard.lease_id)
        .bind(guard.epoch as i64)
        .bind(i64::from(step))
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let starts_at: i64 = row.try_get("starts_at")?;
        Ok(Some(StepVerdict {
            step,
            meets_slo: row.try_get::<i64, _>("meets_slo")? != 0,
            reason: row.try_get("reason")?,
            start_after_ms: u32::try_from((starts_at - now_ms()).max(0)).unwrap_or(0),
        }))
    }
}
