//! The query a run's baseline is found by (`runs/baseline.rs` holds the rule): the latest
//! `passed` run of an account that measured the same scenario version in the same
//! environment on one of the given targets, for the given change, ended since a time.
//! Served by the `runs_baseline` index (migration 0025).

use sqlx::AssertSqlSafe;

use super::run_row::{RUN_COLUMNS, run_from_row};
use super::{Result, RunRow, Store};

/// What a baseline must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaselineQuery<'a> {
    pub account_id: &'a str,
    pub scenario_id: &'a str,
    pub scenario_version: &'a str,
    pub environment: &'a str,
    /// The run's own target, and another it may be compared on (a trigger's base target).
    pub targets: [&'a str; 2],
    /// The change the baseline ran for (`owner/repo@main`).
    pub change: &'a str,
    /// Ended at or after this (Unix ms).
    pub ended_since: i64,
    /// Never the run itself (nor a share of a split run: its whole is the baseline).
    pub not_id: &'a str,
}

impl Store {
    /// The newest run meeting `query`, if any.
    pub async fn latest_passed(&self, query: &BaselineQuery<'_>) -> Result<Option<RunRow>> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id
             WHERE r.account_id = $1 AND r.scenario_id = $2 AND r.scenario_version = $3
               AND r.environment = $4 AND r.target IN ($5, $6) AND r.change_ref = $7
               AND r.status = 'passed' AND r.ended_at >= $8 AND r.id <> $9
               AND r.parent_id IS NULL
             ORDER BY r.ended_at DESC, r.id DESC LIMIT 1"
        )))
        .bind(query.account_id)
        .bind(query.scenario_id)
        .bind(query.scenario_version)
        .bind(query.environment)
        .bind(query.targets[0])
        .bind(query.targets[1])
        .bind(query.change)
        .bind(query.ended_since)
        .bind(query.not_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(run_from_row).transpose()
    }
}
