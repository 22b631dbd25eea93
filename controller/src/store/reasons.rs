//! The reasons of queued runs, rewritten together as the agents that could take them come
//! and go (see `queue/dispatcher/waiting.rs`).

use sqlx::AssertSqlSafe;

use super::{Result, Store};

impl Store {
    /// Sets one `reason` on these runs where they are still queued and unleased (a run
    /// offered or ended meanwhile keeps its own). One statement per 500 runs: both
    /// databases limit the parameters of a statement.
    pub async fn set_waiting_reason(&self, reason: Option<&str>, run_ids: &[String]) -> Result<()> {
        for chunk in run_ids.chunks(500) {
            let placeholders: Vec<String> =
                (2..=chunk.len() + 1).map(|i| format!("${i}")).collect();
            let sql = format!(
                "UPDATE runs SET reason = $1
                 WHERE status = 'queued' AND lease_state IS NULL AND id IN ({})",
                placeholders.join(", ")
            );
            // Only placeholders are formatted into the SQL; the values are bound.
            let mut query = sqlx::query(AssertSqlSafe(sql)).bind(reason);
            for id in chunk {
                query = query.bind(id);
            }
            query.execute(&self.pool).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
