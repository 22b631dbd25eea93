//! Counts for the metrics scrape: few rows (a kind and status each, an account each),
//! read with an index-friendly GROUP BY, never a run id.

use sqlx::Row;

use super::{Result, Store};

impl Store {
    /// Runs per (kind, status); a split run counts once, not with its shares.
    pub async fn run_counts(&self) -> Result<Vec<(String, String, i64)>> {
        let rows = sqlx::query(
            "SELECT kind, status, COUNT(*) AS n FROM runs WHERE parent_id IS NULL
             GROUP BY kind, status",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("kind")?, r.try_get("status")?, r.try_get("n")?)))
            .collect()
    }

    /// Queued runs per account name, every account (0 when none waits); a split run
    /// counts once, as the plan counts it.
    pub async fn queued_by_account(&self) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT a.name AS name, COUNT(r.id) AS n FROM accounts a
             LEFT JOIN runs r ON r.account_id = a.id AND r.status = 'queued'
                 AND r.parent_id IS NULL
             GROUP BY a.name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("name")?, r.try_get("n")?)))
            .collect()
    }
}
