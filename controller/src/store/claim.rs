//! One serving controller per store: the queues and leases live in one process's memory
//! (see docs/architecture.md), so a second `serve` on the same store is refused instead
//! of silently expiring the first one's leases.
//!
//! On PostgreSQL a second `serve --standby` waits instead: it takes the claim (a session
//! advisory lock) when the serving controller's connection goes, and serves from then on,
//! as a restarted controller would. The serving one checks its claim's connection every
//! second ([`Claim::hold`]) and stops when it is gone, since a standby may then take over.

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
/// How often a standby tries for the claim, and a serving controller checks it holds it.
const CLAIM_POLL: Duration = Duration::from_millis(500);
const CHECK_EVERY: Duration = Duration::from_secs(1);
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

impl Claim {
    /// Gives the claim up now: a PostgreSQL lock goes with its session, so the connection
    /// is closed rather than returned to the pool (where the lock would stay held).
    pub async fn release(self) {
        match self {
            Claim::File(file) => drop(file),
            Claim::Advisory(conn) => {
                let _ = conn.close().await;
            }
        }
    }

    /// Holds the claim until `stop`. A PostgreSQL claim is checked every second; true
    /// when its connection failed (and with it the lock), so that the controller stops
    /// before a standby serving beside it could do anything twice.
    pub async fn hold(self, stop: tokio_util::sync::CancellationToken) -> bool {
        let mut conn = match self {
            Claim::File(file) => {
                stop.cancelled().await;
                drop(file);
                return false;
            }
            Claim::Advisory(conn) => conn,
        };
        let mut tick = tokio::time::interval(CHECK_EVERY);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = tick.tick() => {}
            }
            let check = sqlx::query("SELECT 1").execute(&mut *conn);
            let lost = match tokio::time::timeout(CHECK_TIMEOUT, check).await {
                Ok(Ok(_)) => None,
                Ok(Err(error)) => Some(error.to_string()),
                Err(_) => Some(format!("no answer within {CHECK_TIMEOUT:?}")),
            };
            if let Some(error) = lost {
                tracing::error!(%error, "lost the store's claim (its connection failed); stopping, a standby may take over");
                return true;
            }
        }
    }
}

impl Store {
    /// Waits until this process holds the store's claim (PostgreSQL only: `serve
    /// --standby`, and a replica's turn at what runs once per store); None when
    /// `shutdown` came first. `role` names the caller in what it logs.
    pub async fn claim_when_free(
        &self,
        shutdown: &tokio_util::sync::CancellationToken,
        role: &str,
    ) -> Result<Option<Claim>> {
        if self.backend != Backend::Postgres {
            return Err(StoreError::Conflict(format!(
                "--{role} needs PostgreSQL: a SQLite store has one controller"
            )));
        }
        let mut said = false;
        loop {
            if let Some(claim) = self.try_claim(Path::new("")).await? {
                if said {
                    tracing::info!(role, "took over the store's claim");
                }
                return Ok(Some(claim));
            }
            if !said {
                tracing::info!(
                    "{role}: another controller is serving this store; taking its claim when it stops"
                );
                said = true;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                _ = tokio::time::sleep(CLAIM_POLL) => {}
            }
        }
    }

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
