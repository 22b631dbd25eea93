//! One serving controller per store: the queues and leases live in one process's memory
//! (see docs/architecture.md), so a second `serve` on the same store is refused instead
//! of silently expiring the first one's leases.

use std::path::Path;
use std::time::Duration;

use sqlx::Row;

use super::{Backend, Result, Store, StoreError};

/// Held while serving; dropping it releases the claim.
pub enum Claim {
    /// An exclusive lock on `controller.lock` in the data dir (SQLite).
    File(std::fs::File),
    /// A session advisory lock on a connection kept for the purpose (PostgreSQL).
    Advisory(sqlx::pool::PoolConnection<sqlx::Any>),
}

/// The advisory lock key: any fixed number, the same for every controller.
const ADVISORY_KEY: i64 = 0x1048_5252_656c;

/// How long to keep trying: a controller that was just killed may still hold its lock
/// until PostgreSQL notices its connection is gone.
const PATIENCE: Duration = Duration::from_secs(5);

impl Store {
    /// Claims the store for this controller process, or says who holds it.
    pub async fn claim(&self, data_dir: &Path) -> Result<Claim> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(claim) = self.try_claim(data_dir).await? {
                return Ok(claim);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StoreError::Conflict(
                    "another controller is serving this store; one controller per store"
                        .to_string(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn try_claim(&self, data_dir: &Path) -> Result<Option<Claim>> {
        match self.backend {
            Backend::Sqlite => {
                let path = data_dir.join("controller.lock");
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&path)
                    .map_err(|e| StoreError::Corrupt(format!("{}: {e}", path.display())))?;
                Ok(file.try_lock().is_ok().then_some(Claim::File(file)))
            }
            Backend::Postgres => {
                let mut conn = self.pool.acquire().await?;
                let locked: bool = sqlx::query("SELECT pg_try_advisory_lock($1) AS locked")
                    .bind(ADVISORY_KEY)
                    .fetch_one(&mut *conn)
                    .await?
                    .try_get("locked")?;
                Ok(locked.then_some(Claim::Advisory(conn)))
            }
        }
    }
}
