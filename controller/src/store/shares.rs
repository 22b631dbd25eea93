//! Split runs (`"agents": N` at POST). The run people see (the parent) is stored with
//! its N shares, each a run row of its own that the queue places, leases and ends as any
//! other; the parent itself is never leased. Here: the shares stored, read, and the
//! parent started with its first share. Relaying a share's frames and settling the
//! parent with its last are the run-lifecycle layer's (`runs/relay.rs`,
//! `runs/settle.rs`).

use iohr_domain::load::Share;
use sqlx::{Any, AssertSqlSafe, Transaction};

use super::run_row::{NewRun, RUN_COLUMNS, RunRow, run_from_row};
use super::{Result, Store, StoreError, new_id};

/// Stores the `count` shares of the parent `parent` (stored already, `queued`), with
/// what the parent has but its units: the parent reserves the whole run's.
pub(super) async fn insert_shares(
    tx: &mut Transaction<'static, Any>,
    parent: &str,
    run: &NewRun,
    now: i64,
) -> Result<Vec<String>> {
    let mut ids = Vec::new();
    for share in Share::all(run.agents).map_err(|e| StoreError::Conflict(e.to_string()))? {
        let id = new_id();
        sqlx::query(
            "INSERT INTO runs (id, account_id, kind, scenario_id, scenario_version, environment,
                 target, executor, started_by_type, started_by_id, change_ref, change_commit,
                 change_base, change_forge, status, reason,
                 units_reserved, created_at, parent_id, share_index, share_count)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 'queued',
                 $15, 0, $16, $17, $18, $19)",
        )
        .bind(&id)
        .bind(&run.account_id)
        .bind(run.kind.as_str())
        .bind(&run.scenario_id)
        .bind(&run.scenario_version)
        .bind(&run.environment)
        .bind(&run.target)
        .bind(run.executor.to_string())
        .bind(&run.started_by.kind)
        .bind(&run.started_by.id)
        .bind(&run.started_by.change)
        .bind(&run.started_by.commit)
        .bind(&run.started_by.base)
        .bind(run.started_by.forge.map(|f| f.as_str()))
        .bind(&run.reason)
        .bind(now)
        .bind(parent)
        .bind(i64::from(share.index()))
        .bind(i64::from(share.count()))
        .execute(&mut **tx)
        .await?;
        ids.push(id);
    }
    Ok(ids)
}

/// A split run's shares, in order, read with `executor` (the pool, or the transaction
/// that ends one).
pub(super) async fn shares_in<'e, E>(executor: E, parent: &str) -> Result<Vec<RunRow>>
where
    E: sqlx::Executor<'e, Database = Any>,
{
    let rows = sqlx::query(AssertSqlSafe(format!(
        "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id
         WHERE r.parent_id = $1 ORDER BY r.share_index"
    )))
    .bind(parent)
    .fetch_all(executor)
    .await?;
    rows.iter().map(run_from_row).collect()
}

impl Store {
    /// A run as the API shows it, a split run with its shares.
    pub async fn run_record(&self, run: &RunRow) -> Result<iohr_domain::RunRecord> {
        let mut record = run.to_record();
        if run.agents.is_some() {
            record.shares = self
                .shares_of(&run.id)
                .await?
                .into_iter()
                .map(|share| iohr_domain::run::ShareRun {
                    index: share.share_of.as_ref().map_or(0, |(_, s)| s.index()),
                    run: share.id,
                    status: share.status,
                    agent: share.agent_name,
                })
                .collect();
        }
        Ok(record)
    }

    /// The stored text of the spec `run` ran (its scenario version); `None` when that
    /// version is gone.
    pub async fn spec_text(&self, run: &RunRow) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT spec FROM scenarios WHERE account_id = $1 AND version = $2")
                .bind(&run.account_id)
                .bind(&run.scenario_version)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// A split run's shares, in order (none for any other run).
    pub async fn shares_of(&self, parent: &str) -> Result<Vec<RunRow>> {
        shares_in(&self.pool, parent).await
    }

    /// A share was accepted: its parent is running from then on (the first share's
    /// acceptance starts it; the others find it running).
    pub(super) async fn start_parent(&self, parent: &str, at: i64) -> Result<()> {
        sqlx::query(
            "UPDATE runs SET status = 'running', started_at = $1, reason = NULL
             WHERE id = $2 AND status = 'queued'",
        )
        .bind(at)
        .bind(parent)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
