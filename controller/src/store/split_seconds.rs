//! A split run's merged measures while it runs, as rows: each share's part of a second
//! (`split_seconds`) until every share has sent it, and the split run's `split_measures`
//! row (the seconds merged so far per phase, its `abort_on_fail` thresholds, the merged
//! measure and why it stopped). The merging and judging are the run-lifecycle layer's
//! (`runs/judge/seconds.rs`); these rows let shares streaming to different replicas meet
//! whichever replica stores them, locked with the split run's row.

use iohr_domain::load::{LoadSecond, Threshold};
use sqlx::{Any, Row, Transaction};

use super::tx::Tx;
use super::{Result, StoreError};

/// A split run stored: its merged measure's row, with the thresholds to judge it on.
pub(super) async fn watch(
    tx: &mut Transaction<'static, Any>,
    parent: &str,
    thresholds: &[Threshold],
) -> Result<()> {
    let thresholds =
        serde_json::to_string(thresholds).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    sqlx::query("INSERT INTO split_measures (run_id, thresholds) VALUES ($1, $2)")
        .bind(parent)
        .bind(thresholds)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A split run's `split_measures` row as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitMeasure {
    pub thresholds: Vec<Threshold>,
    /// The last second merged of each phase.
    pub warmup_through: i64,
    pub through: i64,
    /// The merged measure so far (`MergedMeasure::to_text`), once one was written.
    pub measure: Option<String>,
    /// Why the merged seconds stopped the run, once they did.
    pub aborted: Option<String>,
}

impl Tx {
    /// The split run's merged measure's row; `None` when it has none.
    pub async fn split_measure(&mut self, parent: &str) -> Result<Option<SplitMeasure>> {
        let row = sqlx::query(
            "SELECT thresholds, warmup_through, through, measure, aborted
             FROM split_measures WHERE run_id = $1",
        )
        .bind(parent)
        .fetch_optional(&mut *self.tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let thresholds: Vec<Threshold> =
            serde_json::from_str(&row.try_get::<String, _>("thresholds")?)
                .map_err(|e| StoreError::Corrupt(format!("split thresholds: {e}")))?;
        Ok(Some(SplitMeasure {
            thresholds,
            warmup_through: row.try_get("warmup_through")?,
            through: row.try_get("through")?,
            measure: row.try_get("measure")?,
            aborted: row.try_get("aborted")?,
        }))
    }

    pub async fn set_split_measure(&mut self, parent: &str, state: &SplitMeasure) -> Result<()> {
        sqlx::query(
            "UPDATE split_measures SET warmup_through = $1, through = $2, measure = $3,
                 aborted = $4 WHERE run_id = $5",
        )
        .bind(state.warmup_through)
        .bind(state.through)
        .bind(&state.measure)
        .bind(&state.aborted)
        .bind(parent)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Keeps share `share_index`'s part of a second (a part kept already stays).
    pub async fn put_second_part(
        &mut self,
        parent: &str,
        share_index: u32,
        second: &LoadSecond,
    ) -> Result<()> {
        let payload =
            serde_json::to_string(second).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        sqlx::query(
            "INSERT INTO split_seconds (run_id, phase, second, share_index, payload)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (run_id, phase, second, share_index) DO NOTHING",
        )
        .bind(parent)
        .bind(&second.phase)
        .bind(second.second as i64)
        .bind(i64::from(share_index))
        .bind(payload)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// How many of a split run's shares ended `error`.
    pub async fn errored_shares(&mut self, parent: &str) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE parent_id = $1 AND status = 'error'",
        )
        .bind(parent)
        .fetch_one(&mut *self.tx)
        .await?)
    }

    /// The shares' parts of `phase` kept: of second `second`, or of every second (in
    /// order), each second's in share order.
    pub async fn second_parts(
        &mut self,
        parent: &str,
        phase: &str,
        second: Option<i64>,
    ) -> Result<Vec<LoadSecond>> {
        let query = match second {
            Some(second) => sqlx::query(
                "SELECT payload FROM split_seconds WHERE run_id = $1 AND phase = $2
                     AND second = $3 ORDER BY share_index",
            )
            .bind(parent)
            .bind(phase)
            .bind(second),
            None => sqlx::query(
                "SELECT payload FROM split_seconds WHERE run_id = $1 AND phase = $2
                     ORDER BY second, share_index",
            )
            .bind(parent)
            .bind(phase),
        };
        let rows = query.fetch_all(&mut *self.tx).await?;
        rows.iter()
            .map(|row| {
                serde_json::from_str(&row.try_get::<String, _>("payload")?)
                    .map_err(|e| StoreError::Corrupt(format!("split second: {e}")))
            })
            .collect()
    }

    /// A second's parts, merged: they go.
    pub async fn delete_second(&mut self, parent: &str, phase: &str, second: i64) -> Result<()> {
        sqlx::query("DELETE FROM split_seconds WHERE run_id = $1 AND phase = $2 AND second = $3")
            .bind(parent)
            .bind(phase)
            .bind(second)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// A split run ended: its merged measures' rows (seconds and steps) go.
    pub async fn drop_split_measures(&mut self, parent: &str) -> Result<()> {
        for table in super::SPLIT_MEASURE_TABLES {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE run_id = $1"
            )))
            .bind(parent)
            .execute(&mut *self.tx)
            .await?;
        }
        Ok(())
    }
}
