//! A split run's settlement. Its shares end as any run does; the ending of its last one
//! ends it too, in the same transaction: its seconds not every share sent merged from
//! the parts that came (`judge/seconds.rs`), the shares' results merged through its
//! kind's contract and judged again as a whole, its ending written as any run's
//! (`ending.rs`).
//!
//! Locks: a share's row, then its parent's (PostgreSQL `FOR UPDATE`), in that order
//! everywhere, so two shares ending at once wait for each other at the parent and the
//! second sees the first one's ending: the parent ends exactly once.

use iohr_domain::kind::merge_shares;
use iohr_domain::load::AgentLoss;
use iohr_domain::{RunKind, RunStatus};

use crate::store::{Ending, Result, RunRow, Store, StoreError, StoredFrame, Tx};

/// A share ended (in `tx`): when it was the parent's last, the parent ends too, its
/// result the shares' merged. Returns the parent's frames that ending wrote.
pub(super) async fn settle_parent(tx: &mut Tx, parent: &str) -> Result<Vec<StoredFrame>> {
    let run = locked(tx, parent).await?;
    if run.status.is_finished() {
        return Ok(Vec::new());
    }
    let shares = tx.shares_of(parent).await?;
    if shares.iter().any(|s| !s.status.is_finished()) {
        return Ok(Vec::new());
    }
    let (rest, aborted) = super::judge::seconds::take(tx, parent).await?;
    let now = crate::store::now_ms();
    let rest = rest
        .into_iter()
        .map(|second| super::judge::seconds::whole_second(second, now))
        .collect();
    let mut frames = super::relay::append_to_parent(tx, &run, rest).await?;
    let spec = spec_of(tx.spec_text(&run).await?)?;
    let ending = parent_ending(
        (run.kind, spec.as_ref()),
        &shares,
        (run.reason.as_deref(), aborted.as_deref()),
    );
    tracing::info!(run = %parent, status = %ending.status, shares = shares.len(), "split run ended");
    frames.extend(super::ending::write_ending(tx, &run, &ending).await?);
    Ok(frames)
}

/// The split run's row, locked for the rest of the transaction.
pub(super) async fn locked(tx: &mut Tx, parent: &str) -> Result<RunRow> {
    tx.lock_run(parent)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("run {parent}")))
}

/// A stored spec's text read.
fn spec_of(text: Option<String>) -> Result<Option<serde_json::Value>> {
    text.as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("scenario spec: {e}")))
}

/// What losing a share's agent does to the split run of `run` (a share or the run).
pub async fn on_agent_lost(store: &Store, run: &RunRow) -> Result<AgentLoss> {
    Ok(loss_of(
        run.kind,
        spec_of(store.spec_text(run).await?)?.as_ref(),
    ))
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

#[cfg(test)]
mod tests;
