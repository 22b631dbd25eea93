//! The steps of a capacity run split over agents, judged on the whole. A share measures
//! its part of each step only, so the sweep's decisions (the next rate, bisecting, the
//! end) cannot be any one agent's: as each share's step-end frame is relayed onto the
//! split run, its point is kept here, and once every share has sent the step, the points
//! are merged (counts summed, histograms added) and the step judged against the SLO. The
//! verdict is stored with the instant the shares start their next step; each share's
//! agent asks for it (`StepAsk`) on whichever replica it is connected to, so no notice
//! between replicas has to arrive for the sweep to go on.
//!
//! The rows are written in the relaying transaction, which holds the split run's row:
//! two shares ending a step at once on two replicas judge it once.
//!
//! Step 0 is the start, for a split run of any kind: every share asks for it before its
//! clock starts, and it is answered once every share holds its lease, with one instant
//! for all. A share whose offer lapsed and went to another agent thus starts with the
//! others, who wait for it, rather than after them.

use iohr_domain::capacity::{CapacitySpec, SweepPoint};
use iohr_domain::load::Share;
use serde::Deserialize;
use sqlx::{Any, Row, Transaction};

use super::run_row::{LeaseGuard, RunRow};
use super::{Result, Store, StoreError, now_ms};

/// How long after its verdict the shares start a sweep's next step: time for every
/// share's next ask (each 100 ms) to reach the verdict.
const NEXT_STEP_AFTER_MS: i64 = 300;

/// The step a split run's shares ask for before they start ([`Store::step_verdict`]).
pub use iohr_proto::START_STEP;

/// The verdict on one step of a split sweep, as the agents are told it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepVerdict {
    pub step: u32,
    pub meets_slo: bool,
    pub reason: String,
    /// How long from now the shares start the next step.
    pub start_after_ms: u32,
}

/// The step-end points among a relayed batch of `share`'s frames (kind, payload, at),
/// kept until every share has sent its own; the step is then judged on their merge.
pub(super) async fn judge(
    tx: &mut Transaction<'static, Any>,
    parent: &RunRow,
    share: Share,
    frames: &[(String, serde_json::Value, i64)],
) -> Result<()> {
    let points: Vec<SweepPoint> = frames
        .iter()
        .filter(|(kind, payload, _)| kind == "phase" && payload["event"] == "end")
        .filter_map(|(_, payload, _)| SweepPoint::deserialize(&payload["point"]).ok())
        .collect();
    for point in points {
        let text = serde_json::to_string(&point).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        sqlx::query(
            "INSERT INTO split_step_points (run_id, step, share_index, point)
             VALUES ($1, $2, $3, $4) ON CONFLICT (run_id, step, share_index) DO NOTHING",
        )
        .bind(&parent.id)
        .bind(i64::from(point.step))
        .bind(i64::from(share.index()))
        .bind(text)
        .execute(&mut **tx)
        .await?;
        let parts: Vec<String> = sqlx::query_scalar(
            "SELECT point FROM split_step_points WHERE run_id = $1 AND step = $2
             ORDER BY share_index",
        )
        .bind(&parent.id)
        .bind(i64::from(point.step))
        .fetch_all(&mut **tx)
        .await?;
        if parts.len() < share.count() as usize {
            continue;
        }
        let parts = parts
            .iter()
            .map(|text| serde_json::from_str::<SweepPoint>(text))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Corrupt(format!("split step point: {e}")))?;
        let slo = slo_of(tx, parent).await?;
        let whole = SweepPoint::merge(&parts, &slo)
            .map_err(|e| StoreError::Corrupt(format!("split step {}: {e}", point.step)))?;
        sqlx::query(
            "INSERT INTO split_steps (run_id, step, meets_slo, reason, starts_at)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, step) DO NOTHING",
        )
        .bind(&parent.id)
        .bind(i64::from(point.step))
        .bind(i64::from(whole.meets_slo))
        .bind(whole.broke.join("; "))
        .bind(now_ms() + NEXT_STEP_AFTER_MS)
        .execute(&mut **tx)
        .await?;
        sqlx::query("DELETE FROM split_step_points WHERE run_id = $1 AND step = $2")
            .bind(&parent.id)
            .bind(i64::from(point.step))
            .execute(&mut **tx)
            .await?;
        tracing::info!(run = %parent.id, step = point.step, meets_slo = whole.meets_slo,
            achieved = whole.achieved, "split sweep step judged on the whole");
    }
    Ok(())
}

/// The SLO of the split sweep `parent`, from its stored spec.
async fn slo_of(
    tx: &mut Transaction<'static, Any>,
    parent: &RunRow,
) -> Result<iohr_domain::capacity::Slo> {
    let spec: Option<String> =
        sqlx::query_scalar("SELECT spec FROM scenarios WHERE account_id = $1 AND version = $2")
            .bind(&parent.account_id)
            .bind(&parent.scenario_version)
            .fetch_optional(&mut **tx)
            .await?;
    let spec: serde_json::Value = spec
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("scenario spec: {e}")))?
        .ok_or_else(|| StoreError::NotFound(format!("scenario {}", parent.scenario_version)))?;
    CapacitySpec::from_json(&spec)
        .and_then(|s| s.plan())
        .map(|plan| plan.slo)
        .map_err(|e| StoreError::Corrupt(format!("capacity spec: {e}")))
}

impl Store {
    /// The verdict on `step` for the share `run_id`, asked by its agent under `guard`:
    /// `None` while some share has not ended the step yet, and for a lease that is not
    /// the run's current one (a stale agent learns nothing of the sweep).
    pub async fn step_verdict(
        &self,
        run_id: &str,
        guard: &LeaseGuard,
        step: u32,
    ) -> Result<Option<StepVerdict>> {
        if step == START_STEP {
            self.start_when_all_hold(run_id, guard).await?;
        }
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

impl Store {
    /// The start (step 0) of the split run whose share `run_id` is, once every share holds
    /// its lease: stored once (whichever replica's ask finds them all first), to start
    /// [`NEXT_STEP_AFTER_MS`] later.
    async fn start_when_all_hold(&self, run_id: &str, guard: &LeaseGuard) -> Result<()> {
        let parent: Option<Option<String>> = sqlx::query_scalar(
            "SELECT parent_id FROM runs WHERE id = $1 AND lease_id = $2 AND lease_epoch = $3",
        )
        .bind(run_id)
        .bind(&guard.lease_id)
        .bind(guard.epoch as i64)
        .fetch_optional(&self.pool)
        .await?;
        let Some(parent) = parent.flatten() else {
            return Ok(());
        };
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE parent_id = $1
                 AND NOT (status = 'running' AND lease_state = 'accepted')",
        )
        .bind(&parent)
        .fetch_one(&self.pool)
        .await?;
        if waiting > 0 {
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO split_steps (run_id, step, meets_slo, reason, starts_at)
             VALUES ($1, $2, 1, '', $3) ON CONFLICT (run_id, step) DO NOTHING",
        )
        .bind(&parent)
        .bind(i64::from(START_STEP))
        .bind(now_ms() + NEXT_STEP_AFTER_MS)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
