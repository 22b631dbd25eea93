//! A run's row as the store reads and writes it: the new run, the stored row (with its
//! lease, confirmation and share), how a run ends. Every other run module imports these
//! from here, so none of them needs another for its types.

use iohr_domain::faults::confirmation::Confirmation;
use iohr_domain::finding::RunFinding;
use iohr_domain::load::Share;
use iohr_domain::run::{ScenarioRef, ShareOf};
use iohr_domain::{Executor, RunKind, RunRecord, RunStatus, StartedBy, Units};
use sqlx::Row;

use super::{Result, StoreError, format_ms};

#[derive(Debug, Clone)]
pub struct NewRun {
    pub account_id: String,
    pub kind: RunKind,
    pub scenario_id: String,
    pub scenario_version: String,
    pub environment: String,
    pub target: String,
    pub executor: Executor,
    pub started_by: StartedBy,
    pub units_reserved: i64,
    /// Why it waits (no agent serves it), when known at creation.
    pub reason: Option<String>,
    /// A production faults run waits for a person to confirm this hash before this deadline
    /// (Unix ms); the dispatcher does not queue it until then.
    pub confirmation: Option<(String, i64)>,
    /// The faults a faults run applies (`network, http`), for its audit line.
    pub faults: Option<String>,
    /// The agents the run is split over (`"agents": N`); 1: the whole run on one agent.
    pub agents: u32,
    /// A split run's `abort_on_fail` thresholds, judged on its merged seconds
    /// (`runs/judge/seconds.rs`); empty for a whole run, whose agent judges them.
    pub abort_on: Vec<iohr_domain::load::Threshold>,
    /// The before-run a trigger started beside this run as its baseline, when it asked
    /// for a fresh one (`runs/baseline.rs`).
    pub baseline_run: Option<String>,
}

/// A production faults run's confirmation as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfirmState {
    pub hash: String,
    pub deadline: i64,
    pub confirmed_by: Option<String>,
    pub confirmed_at: Option<i64>,
}

impl ConfirmState {
    pub fn is_pending(&self) -> bool {
        self.confirmed_at.is_none()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: String,
    pub account_id: String,
    pub kind: RunKind,
    pub scenario_id: String,
    pub scenario_version: String,
    pub environment: String,
    pub target: String,
    pub executor: Executor,
    pub started_by: StartedBy,
    pub status: RunStatus,
    pub reason: Option<String>,
    pub result: Option<serde_json::Value>,
    /// What the run found as it ended: created, seen again or reopened.
    pub findings: Vec<RunFinding>,
    pub units_reserved: i64,
    pub units_spent: i64,
    pub agent_id: Option<String>,
    pub agent_name: Option<String>,
    pub lease: Option<LeaseGuard>,
    pub lease_state: Option<String>,
    /// The replica tracking the lease (0 without replicas): see `store/replicas.rs`.
    pub replica: i64,
    /// A cancel asked on a replica that does not track the lease, for the one that does.
    pub cancel_requested: Option<String>,
    pub frames_through: u64,
    pub confirmation: Option<ConfirmState>,
    /// A split run (`"agents": N`, N > 1): N. Its shares are runs of their own.
    pub agents: Option<u32>,
    /// One share of a split run: that run's id, and which share of how many.
    pub share_of: Option<(String, Share)>,
    /// The before-run started beside this run as its baseline (see [`NewRun`]).
    pub baseline_run: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
}

impl RunRow {
    pub fn to_record(&self) -> RunRecord {
        RunRecord {
            id: self.id.clone(),
            kind: self.kind,
            scenario: ScenarioRef {
                id: self.scenario_id.clone(),
                version: self.scenario_version.clone(),
            },
            environment: self.environment.clone(),
            target: self.target.clone(),
            executor: self.executor.clone(),
            agent: self.agent_name.clone(),
            started_by: self.started_by.clone(),
            status: self.status,
            reason: self.reason.clone(),
            result: self.result.clone(),
            findings: self.findings.clone(),
            units: Units {
                reserved: self.units_reserved.max(0) as u64,
                spent: self.units_spent.max(0) as u64,
            },
            confirmation: self.confirmation.as_ref().map(|c| Confirmation {
                hash: c.hash.clone(),
                deadline: format_ms(c.deadline),
                confirmed_by: c.confirmed_by.clone(),
                confirmed_at: c.confirmed_at.map(format_ms),
            }),
            agents: self.agents,
            // Filled by the API, which reads them (`Store::shares_of`).
            shares: Vec::new(),
            share_of: self.share_of.as_ref().map(|(parent, share)| ShareOf {
                run: parent.clone(),
                index: share.index(),
                count: share.count(),
            }),
            created_at: format_ms(self.created_at),
            started_at: self.started_at.map(format_ms),
            ended_at: self.ended_at.map(format_ms),
        }
    }
}

/// The fence of a lease: a write naming another pair is stale and refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseGuard {
    pub lease_id: String,
    pub epoch: u64,
}

#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    pub kind: Option<RunKind>,
    pub environment: Option<String>,
    /// An agent's name.
    pub agent: Option<String>,
    /// A scenario's id (every version of it).
    pub scenario: Option<String>,
    pub limit: u32,
    /// The id of the last run of the previous page (newest first).
    pub cursor: Option<String>,
}

pub(super) const RUN_COLUMNS: &str = "r.*, a.name AS agent_name";

/// A run the queue places (of `runs r`): every run but a split run, whose shares are
/// placed instead.
pub(super) const LEASABLE: &str = "(r.parent_id IS NOT NULL OR COALESCE(r.share_count, 1) <= 1)";

pub(super) fn run_from_row(row: &sqlx::any::AnyRow) -> Result<RunRow> {
    let corrupt =
        |what: &str, e: &dyn std::fmt::Display| StoreError::Corrupt(format!("{what}: {e}"));
    let kind: String = row.try_get("kind")?;
    let status: String = row.try_get("status")?;
    let executor: String = row.try_get("executor")?;
    let result: Option<String> = row.try_get("result")?;
    let lease_id: Option<String> = row.try_get("lease_id")?;
    let epoch: i64 = row.try_get("lease_epoch")?;
    let confirm_hash: Option<String> = row.try_get("confirm_hash")?;
    let confirmation = match confirm_hash {
        Some(hash) => Some(ConfirmState {
            hash,
            deadline: row
                .try_get::<Option<i64>, _>("confirm_deadline")?
                .unwrap_or(0),
            confirmed_by: row.try_get("confirmed_by")?,
            confirmed_at: row.try_get("confirmed_at")?,
        }),
        None => None,
    };
    let share_of = share_of_row(row)?;
    let agents = match &share_of {
        Some(_) => None,
        None => row
            .try_get::<Option<i64>, _>("share_count")?
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 1),
    };
    Ok(RunRow {
        id: row.try_get("id")?,
        account_id: row.try_get("account_id")?,
        kind: kind.parse().map_err(|e| corrupt("kind", &e))?,
        scenario_id: row.try_get("scenario_id")?,
        scenario_version: row.try_get("scenario_version")?,
        environment: row.try_get("environment")?,
        target: row.try_get("target")?,
        executor: executor.parse().map_err(|e| corrupt("executor", &e))?,
        started_by: StartedBy {
            kind: row.try_get("started_by_type")?,
            id: row.try_get("started_by_id")?,
            change: row.try_get("change_ref")?,
            commit: row.try_get("change_commit")?,
            base: row.try_get("change_base")?,
            forge: row
                .try_get::<Option<String>, _>("change_forge")?
                .map(|f| f.parse())
                .transpose()
                .map_err(|e| corrupt("change_forge", &e))?,
        },
        status: status.parse().map_err(|e| corrupt("status", &e))?,
        reason: row.try_get("reason")?,
        result: result
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|e| corrupt("result", &e))?,
        findings: serde_json::from_str(&row.try_get::<String, _>("findings")?)
            .map_err(|e| corrupt("findings", &e))?,
        units_reserved: row.try_get("units_reserved")?,
        units_spent: row.try_get("units_spent")?,
        agent_id: row.try_get("agent_id")?,
        agent_name: row.try_get("agent_name")?,
        lease: lease_id.map(|lease_id| LeaseGuard {
            lease_id,
            epoch: epoch.max(0) as u64,
        }),
        lease_state: row.try_get("lease_state")?,
        replica: row.try_get("replica")?,
        cancel_requested: row.try_get("cancel_requested")?,
        frames_through: row.try_get::<i64, _>("frames_through")?.max(0) as u64,
        confirmation,
        agents,
        share_of,
        baseline_run: row.try_get("baseline_run")?,
        created_at: row.try_get("created_at")?,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
    })
}

/// How a run ends.
#[derive(Debug, Clone)]
pub struct Ending {
    pub status: RunStatus,
    pub reason: Option<String>,
    pub result: Option<serde_json::Value>,
    pub units_spent: Option<i64>,
}

/// The split run a run is a share of, from its row's `parent_id`, `share_index` and
/// `share_count`.
pub(super) fn share_of_row(row: &sqlx::any::AnyRow) -> Result<Option<(String, Share)>> {
    let parent: Option<String> = row.try_get("parent_id")?;
    let index: Option<i64> = row.try_get("share_index")?;
    let count: Option<i64> = row.try_get("share_count")?;
    let (Some(parent), Some(index), Some(count)) = (parent, index, count) else {
        return Ok(None);
    };
    let share = u32::try_from(index)
        .ok()
        .zip(u32::try_from(count).ok())
        .and_then(|(i, n)| Share::new(i, n).ok())
        .ok_or_else(|| StoreError::Corrupt(format!("share {index} of {count}")))?;
    Ok(Some((parent, share)))
}
