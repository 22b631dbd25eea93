//! Retention: what is older than its period goes, in batches, so a sweep never holds the
//! store for long (each statement deletes at most one batch; other writers run between
//! them). Per-second frames go before their runs: the record keeps its summary and says
//! since when its frames are gone (`frames_expired_at`).

use std::time::Duration;

use sqlx::AssertSqlSafe;

use super::{Result, Store};

/// How long each kind of record is kept (the defaults: runs 90 days, frames 30,
/// findings 90 days after they close, audit lines a year, delivery logs 30 days).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Periods {
    pub runs: Duration,
    pub frames: Duration,
    pub findings: Duration,
    pub audit: Duration,
    pub deliveries: Duration,
}

const DAY: Duration = Duration::from_secs(24 * 3600);

impl Default for Periods {
    fn default() -> Self {
        Periods {
            runs: DAY * 90,
            frames: DAY * 30,
            findings: DAY * 90,
            audit: DAY * 365,
            deliveries: DAY * 30,
        }
    }
}

/// What one sweep deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub frames: u64,
    pub runs: u64,
    pub findings: u64,
    pub audit: u64,
    pub deliveries: u64,
}

fn cutoff(now: i64, period: Duration) -> i64 {
    now - i64::try_from(period.as_millis())
        .unwrap_or(i64::MAX)
        .min(now)
}

impl Store {
    /// Deletes what `periods` no longer keep at `now` (Unix ms), `batch` rows per statement.
    pub async fn sweep(&self, periods: &Periods, now: i64, batch: i64) -> Result<Swept> {
        let mut swept = Swept::default();
        // Frames: the runs are marked first, so a reader never sees some frames of a run
        // gone without being told why.
        sqlx::query(
            "UPDATE runs SET frames_expired_at = $1
             WHERE ended_at IS NOT NULL AND ended_at < $2 AND frames_expired_at IS NULL",
        )
        .bind(now)
        .bind(cutoff(now, periods.frames))
        .execute(&self.pool)
        .await?;
        swept.frames = self
            .in_batches(
                "DELETE FROM frames WHERE (run_id, number) IN (
                     SELECT f.run_id, f.number FROM frames f JOIN runs r ON r.id = f.run_id
                     WHERE r.frames_expired_at IS NOT NULL AND r.frames_expired_at <= $1
                     LIMIT $2)",
                now,
                batch,
            )
            .await?;
        // Runs, with what hangs on them (their frames went above unless the run period is
        // the shorter one).
        let runs = cutoff(now, periods.runs);
        loop {
            let ids: Vec<String> = sqlx::query_scalar(
                "SELECT id FROM runs WHERE ended_at IS NOT NULL AND ended_at < $1 LIMIT $2",
            )
            .bind(runs)
            .bind(batch)
            .fetch_all(&self.pool)
            .await?;
            if ids.is_empty() {
                break;
            }
            let mut tx = self.write_tx().await?;
            for id in &ids {
                let split = super::SPLIT_MEASURE_TABLES.iter();
                for table in ["frames", "run_findings"].iter().chain(split) {
                    sqlx::query(AssertSqlSafe(format!(
                        "DELETE FROM {table} WHERE run_id = $1"
                    )))
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                }
                sqlx::query("DELETE FROM runs WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            swept.runs += ids.len() as u64;
        }
        // Findings closed long enough ago, and their sightings.
        let findings = cutoff(now, periods.findings);
        sqlx::query(
            "DELETE FROM run_findings WHERE finding_id IN (
                 SELECT id FROM findings WHERE closed_at IS NOT NULL AND closed_at < $1)",
        )
        .bind(findings)
        .execute(&self.pool)
        .await?;
        swept.findings = self
            .in_batches(
                "DELETE FROM findings WHERE id IN (SELECT id FROM findings
                     WHERE closed_at IS NOT NULL AND closed_at < $1 LIMIT $2)",
                findings,
                batch,
            )
            .await?;
        swept.audit = self
            .in_batches(
                "DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE at < $1 LIMIT $2)",
                cutoff(now, periods.audit),
                batch,
            )
            .await?;
        // A pending delivery is still being tried: only finished ones expire.
        swept.deliveries = self
            .in_batches(
                "DELETE FROM webhook_deliveries WHERE (webhook_id, event_seq) IN (
                     SELECT webhook_id, event_seq FROM webhook_deliveries
                     WHERE created_at < $1 AND status <> 'pending' LIMIT $2)",
                cutoff(now, periods.deliveries),
                batch,
            )
            .await?;
        Ok(swept)
    }

    /// Runs `sql` (binding `$1` to `cutoff` and `$2` to `batch`) until it deletes
    /// nothing; the rows it deleted.
    async fn in_batches(&self, sql: &'static str, cutoff: i64, batch: i64) -> Result<u64> {
        let mut total = 0;
        loop {
            let query = sqlx::query(sql).bind(cutoff).bind(batch);
            let deleted = query.execute(&self.pool).await?.rows_affected();
            if deleted == 0 {
                return Ok(total);
            }
            total += deleted;
        }
    }

    /// When the run's frames were deleted by retention, if they were.
    pub async fn frames_expired_at(&self, run_id: &str) -> Result<Option<i64>> {
        let at: Option<Option<i64>> =
            sqlx::query_scalar("SELECT frames_expired_at FROM runs WHERE id = $1")
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(at.flatten())
    }
}

#[cfg(test)]
mod tests;
