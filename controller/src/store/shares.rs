//! Split runs (`"agents": N` at POST). The run people see (the parent) is stored with
//! its N shares, each a run row of its own that the queue places, leases and ends as any
//! other; the parent itself is never leased. Here, in the transactions that change a
//! share: its frames relayed onto the parent's stream, the parent started with its first
//! share and ended, the shares' results merged, with its last.
//!
//! Locks: a share's row, then its parent's (PostgreSQL `FOR UPDATE`), in that order
//! everywhere, so two shares ending at once wait for each other at the parent and the
//! second sees the first one's ending: the parent ends exactly once.

use iohr_domain::kind::merge_shares;
use iohr_domain::load::{AgentLoss, LoadSecond, Share};
use iohr_domain::{RunKind, RunStatus};
use serde::Deserialize;
use sqlx::{Any, AssertSqlSafe, Row, Transaction};

use super::frame_row::{StoredFrame, insert_frame};
use super::run_row::{Ending, NewRun, RUN_COLUMNS, RunRow, run_from_row};
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

/// The parent's row, locked for the rest of the transaction.
async fn lock_parent(
    store: &Store,
    tx: &mut Transaction<'static, Any>,
    parent: &str,
) -> Result<RunRow> {
    let row = sqlx::query(AssertSqlSafe(format!(
        "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id WHERE r.id = $1{}",
        store.for_update(Some("r"))
    )))
    .bind(parent)
    .fetch_optional(&mut **tx)
    .await?;
    row.as_ref()
        .map(run_from_row)
        .transpose()?
        .ok_or_else(|| StoreError::NotFound(format!("run {parent}")))
}

/// What relaying a share's frames did to its split run.
#[derive(Debug, Default)]
pub(super) struct Relayed {
    /// The split run's new frames, for its live viewers.
    pub frames: Vec<StoredFrame>,
    /// Why the split run stops, when these frames' seconds made its merged measure cross
    /// an `abort_on_fail` threshold (`split_seconds.rs`).
    pub aborted: Option<String>,
}

/// Relays a share's frames `after + 1 ..= through` (now stored without a gap) onto its
/// parent's stream, numbered after the parent's, each payload naming its `share`; a
/// load or replay run's `load` frames are merged instead, one per second of the whole
/// (`split_seconds.rs`), and its `abort_on_fail` judged on them.
pub(super) async fn relay_frames(
    store: &Store,
    tx: &mut Transaction<'static, Any>,
    share_run: &str,
    (parent, share): (&str, Share),
    after: u64,
    through: u64,
) -> Result<Relayed> {
    if through <= after {
        return Ok(Relayed::default());
    }
    let run = lock_parent(store, tx, parent).await?;
    if run.status.is_finished() {
        return Ok(Relayed::default());
    }
    let rows = sqlx::query(
        "SELECT kind, payload, at FROM frames WHERE run_id = $1 AND number > $2
             AND number <= $3 ORDER BY number",
    )
    .bind(share_run)
    .bind(after as i64)
    .bind(through as i64)
    .fetch_all(&mut **tx)
    .await?;
    let mut frames = Vec::with_capacity(rows.len());
    for row in rows {
        let payload: String = row.try_get("payload")?;
        let payload: serde_json::Value = serde_json::from_str(&payload)
            .map_err(|e| StoreError::Corrupt(format!("frame payload: {e}")))?;
        frames.push((
            row.try_get::<String, _>("kind")?,
            payload,
            row.try_get::<i64, _>("at")?,
        ));
    }
    let seconds: Vec<LoadSecond> = frames
        .iter()
        .filter(|(kind, _, _)| kind == "load")
        .filter_map(|(_, payload, _)| LoadSecond::deserialize(payload).ok())
        .collect();
    // A batch without seconds (a `started`, `phase` or `stress` frame) merges nothing.
    let merged = if seconds.is_empty() {
        None
    } else {
        super::split_seconds::merge(tx, parent, share, &seconds).await?
    };
    let at = frames.last().map_or_else(super::now_ms, |(_, _, at)| *at);
    if iohr_domain::kind::judges_steps(run.kind) {
        // A sweep's step ends, judged on the whole as they come.
        super::steps::judge(tx, &run, share, &frames).await?;
    }
    let mut out: Vec<(String, serde_json::Value, i64)> = frames
        .into_iter()
        .filter(|(kind, _, _)| merged.is_none() || kind != "load")
        .map(|(kind, payload, at)| (kind, with_share(payload, share), at))
        .collect();
    let aborted = match merged {
        Some(merged) => {
            out.extend(
                merged
                    .seconds
                    .into_iter()
                    .map(|second| whole_second(second, at)),
            );
            merged.aborted
        }
        None => None,
    };
    Ok(Relayed {
        frames: append_to_parent(store, tx, &run, out).await?,
        aborted,
    })
}

/// A merged second as the split run's `load` frame: the second, and how many shares'
/// parts it holds.
fn whole_second(
    (second, shares): (LoadSecond, usize),
    at: i64,
) -> (String, serde_json::Value, i64) {
    let mut payload = serde_json::to_value(&second).unwrap_or_default();
    if let serde_json::Value::Object(object) = &mut payload {
        object.insert("shares".to_string(), shares.into());
    }
    ("load".to_string(), payload, at)
}

/// `frames` (kind, payload, at) appended to the parent `run`'s stream, numbered after
/// its last, and told to its viewers on every replica.
async fn append_to_parent(
    store: &Store,
    tx: &mut Transaction<'static, Any>,
    run: &RunRow,
    frames: Vec<(String, serde_json::Value, i64)>,
) -> Result<Vec<StoredFrame>> {
    if frames.is_empty() {
        return Ok(Vec::new());
    }
    let mut next = run.frames_through;
    let mut stored = Vec::with_capacity(frames.len());
    for (kind, payload, at) in frames {
        next += 1;
        let frame = StoredFrame {
            run_id: run.id.clone(),
            number: next,
            kind,
            payload,
            at,
        };
        insert_frame(tx, &frame).await?;
        stored.push(frame);
    }
    sqlx::query("UPDATE runs SET frames_through = $1 WHERE id = $2")
        .bind(next as i64)
        .bind(&run.id)
        .execute(&mut **tx)
        .await?;
    store
        .notify_frames(&mut **tx, &run.id, run.frames_through + 1, next)
        .await?;
    Ok(stored)
}

/// A share's frame as its parent relays it: the payload with `share` (its index) added.
fn with_share(payload: serde_json::Value, share: Share) -> serde_json::Value {
    match payload {
        serde_json::Value::Object(mut object) => {
            object.insert("share".to_string(), share.index().into());
            serde_json::Value::Object(object)
        }
        other => serde_json::json!({"share": share.index(), "value": other}),
    }
}

/// A share ended (in `tx`): when it was the parent's last, the parent ends too, its
/// result the shares' merged. Returns the parent's frames that ending wrote.
pub(super) async fn settle_parent(
    store: &Store,
    tx: &mut Transaction<'static, Any>,
    parent: &str,
) -> Result<Vec<StoredFrame>> {
    let run = lock_parent(store, tx, parent).await?;
    if run.status.is_finished() {
        return Ok(Vec::new());
    }
    let shares = shares_in(&mut **tx, parent).await?;
    if shares.iter().any(|s| !s.status.is_finished()) {
        return Ok(Vec::new());
    }
    let (rest, aborted) = super::split_seconds::take(tx, parent).await?;
    let now = super::now_ms();
    let rest = rest
        .into_iter()
        .map(|second| whole_second(second, now))
        .collect();
    let mut frames = append_to_parent(store, tx, &run, rest).await?;
    let spec = spec_in(&mut **tx, &run).await?;
    let ending = parent_ending(
        (run.kind, spec.as_ref()),
        &shares,
        (run.reason.as_deref(), aborted.as_deref()),
    );
    tracing::info!(run = %parent, status = %ending.status, shares = shares.len(), "split run ended");
    frames.extend(store.write_ending(tx, &run, &ending).await?);
    Ok(frames)
}

/// A split run's shares, in order, read with `executor` (the pool, or the transaction
/// that ends one).
async fn shares_in<'e, E>(executor: E, parent: &str) -> Result<Vec<RunRow>>
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

/// Whether a share ended because its agent was lost (the dispatcher's `agent lost`
/// endings), as opposed to an error of its own.
pub fn lost_agent(share: &RunRow) -> bool {
    share.status == RunStatus::Error
        && share
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("agent lost"))
}

/// The spec of the split run `run` is a share of (or is), read with `executor`; `None`
/// when its version is gone.
async fn spec_in<'e, E>(executor: E, run: &RunRow) -> Result<Option<serde_json::Value>>
where
    E: sqlx::Executor<'e, Database = Any>,
{
    let spec: Option<String> =
        sqlx::query_scalar("SELECT spec FROM scenarios WHERE account_id = $1 AND version = $2")
            .bind(&run.account_id)
            .bind(&run.scenario_version)
            .fetch_optional(executor)
            .await?;
    spec.as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("scenario spec: {e}")))
}

/// What losing a share's agent does to a split run of `kind` with `spec`.
fn loss_of(kind: RunKind, spec: Option<&serde_json::Value>) -> AgentLoss {
    spec.map_or(AgentLoss::Error, |spec| {
        iohr_domain::kind::on_agent_lost(kind, spec)
    })
}

fn share_name(share: &RunRow) -> String {
    let index = share.share_of.as_ref().map_or(0, |(_, s)| s.index());
    match &share.agent_name {
        Some(agent) => format!("share {index} (agent {agent})"),
        None => format!("share {index}"),
    }
}

/// How a split run ends once every share has: `error` when any share did (what the
/// others measured kept, merged; a share whose agent was lost does not count with
/// `on_agent_lost: continue` while another share ran on), `failed` when its merged
/// seconds crossed an `abort_on_fail` threshold (`aborted`: why; the shares were
/// cancelled for it), `cancelled` when any share was (`reason`: the split run's own),
/// else the verdict of the merged result, judged again as a whole (thresholds,
/// reachability).
pub(super) fn parent_ending(
    (kind, spec): (RunKind, Option<&serde_json::Value>),
    shares: &[RunRow],
    (reason, aborted): (Option<&str>, Option<&str>),
) -> Ending {
    let loss = loss_of(kind, spec);
    let units_spent = Some(shares.iter().map(|s| s.units_spent.max(0)).sum());
    let results: Vec<serde_json::Value> = shares.iter().filter_map(|s| s.result.clone()).collect();
    let merged = spec
        .filter(|_| !results.is_empty())
        .map(|spec| merge_shares(kind, spec, &results));
    let (mut result, mut verdict, merge_error) = match merged {
        Some(Ok(merged)) => (
            Some(merged.result),
            Some((merged.status, merged.reason)),
            None,
        ),
        Some(Err(error)) => (None, None, Some(error.to_string())),
        None => (None, None, None),
    };
    if let (Some(why), Some(serde_json::Value::Object(object))) = (aborted, result.as_mut()) {
        object.insert("aborted".to_string(), why.into());
    }
    let lost: Vec<&RunRow> = shares.iter().filter(|s| lost_agent(s)).collect();
    let ran_on = loss == AgentLoss::Continue && lost.len() < shares.len();
    if ran_on
        && let Some(notes) = result
            .as_mut()
            .and_then(|r| r.get_mut("notes"))
            .and_then(serde_json::Value::as_array_mut)
    {
        for share in &lost {
            notes.push(
                format!(
                    "{} was lost: the run went on without it (on_agent_lost: continue), its \
                     figures those of the {} other shares",
                    share_name(share),
                    shares.len() - lost.len()
                )
                .into(),
            );
        }
    }
    let failed_share = shares.iter().find(|s| {
        matches!(s.status, RunStatus::Error | RunStatus::Refused) && !(ran_on && lost_agent(s))
    });
    let (status, reason) = if let Some(share) = failed_share {
        let why = share
            .reason
            .clone()
            .unwrap_or_else(|| share.status.to_string());
        (
            RunStatus::Error,
            Some(format!(
                "{} ended {}: {why}",
                share_name(share),
                share.status
            )),
        )
    } else if let Some(why) = aborted {
        (RunStatus::Failed, Some(why.to_string()))
    } else if let Some(share) = shares.iter().find(|s| s.status == RunStatus::Cancelled) {
        // A cancel of the split run wrote the canceller's reason on it; a share's own may
        // be the cascade's ("share 1 ended cancelled: ...").
        let why = reason
            .map(str::to_string)
            .or_else(|| share.reason.clone())
            .unwrap_or_else(|| "cancelled".to_string());
        (RunStatus::Cancelled, Some(why))
    } else if let Some(error) = merge_error {
        (
            RunStatus::Error,
            Some(format!("the shares' results could not be merged: {error}")),
        )
    } else {
        verdict.take().unwrap_or_else(|| {
            (
                RunStatus::Error,
                Some("no share returned a result".to_string()),
            )
        })
    };
    Ending {
        status,
        reason,
        result,
        units_spent,
    }
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

    /// A split run's shares, in order (none for any other run).
    /// What losing a share's agent does to the split run of `run` (a share or the run).
    pub async fn on_agent_lost(&self, run: &RunRow) -> Result<AgentLoss> {
        Ok(loss_of(run.kind, spec_in(&self.pool, run).await?.as_ref()))
    }

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

#[cfg(test)]
mod tests;
