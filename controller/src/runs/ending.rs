//! A run's ending: what it means, decided here and written by the store in one
//! transaction. Its status on its row; for a run people see (not a share of a split
//! run), the findings its result holds (derived through the domain's rules) and the
//! events that announce them and the ending; its last frames (`finding` frames, then
//! `finished`); and, for a share, its split run's settlement (`settle.rs`).

use iohr_domain::RunStatus;
use iohr_domain::finding::{RunFacts, RunFinding, Sighting, derive};

use crate::store::{
    Ending, FINDING_CREATED, LeaseGuard, RUN_FINISHED, Result, RunRow, Store, StoreError,
    StoredFrame, Tx, now_ms,
};

/// Ends a run and writes its `finished` frame, numbered after every stored frame.
/// With a guard, only while that lease is the run's current one and, with
/// `frames_through`, only once every frame up to it is stored. Returns the finished
/// frame, or `None` when the run had already ended or the guard is stale.
pub async fn finish_run(
    store: &Store,
    run_id: &str,
    guard: Option<&LeaseGuard>,
    frames_through: Option<u64>,
    ending: &Ending,
) -> Result<Option<StoredFrame>> {
    Ok(finish(store, run_id, guard, frames_through, ending, true)
        .await?
        .and_then(|frames| {
            frames
                .into_iter()
                .find(|f| f.run_id == run_id && f.kind == "finished")
        }))
}

/// [`finish_run`] returning every frame the ending wrote: the run's `finished`, and its
/// split run's last frames when it was that run's last share.
pub async fn end_by_controller(
    store: &Store,
    run_id: &str,
    guard: Option<&LeaseGuard>,
    ending: &Ending,
) -> Result<Option<Vec<StoredFrame>>> {
    finish(store, run_id, guard, None, ending, true).await
}

/// [`finish_run`], returning every frame the ending wrote: one `finding` frame per
/// finding of a run that ended `passed` or `failed` (the findings themselves are written
/// in the same transaction), then `finished`.
pub async fn finish_run_with_findings(
    store: &Store,
    run_id: &str,
    guard: Option<&LeaseGuard>,
    frames_through: Option<u64>,
    ending: &Ending,
) -> Result<Option<Vec<StoredFrame>>> {
    finish(store, run_id, guard, frames_through, ending, false).await
}

/// Both endings; `by_controller` fences a guarded ending by the replica too, since the
/// agent may have taken its lease to another replica (the agent's own ending is fenced
/// by its lease alone, wherever it is connected).
async fn finish(
    store: &Store,
    run_id: &str,
    guard: Option<&LeaseGuard>,
    frames_through: Option<u64>,
    ending: &Ending,
    by_controller: bool,
) -> Result<Option<Vec<StoredFrame>>> {
    let mut tx = store.begin().await?;
    let Some(run) = tx.lock_run(run_id).await? else {
        return Err(StoreError::NotFound(format!("run {run_id}")));
    };
    if run.status.is_finished() {
        return Ok(None);
    }
    if let Some(guard) = guard
        && (run.lease.as_ref() != Some(guard) || (by_controller && run.replica != tx.replica()))
    {
        return Ok(None);
    }
    if let Some(through) = frames_through
        && run.frames_through < through
    {
        return Err(StoreError::Conflict(format!(
            "frames after {} are missing (completion names {through})",
            run.frames_through
        )));
    }
    let mut frames = write_ending(&mut tx, &run, ending).await?;
    if let Some((parent, _)) = &run.share_of {
        frames.extend(super::settle::settle_parent(&mut tx, parent).await?);
    }
    if run.lease_state.is_some() {
        tx.notify_ended(&run).await?;
    }
    tx.commit().await?;
    if let Some(finished) = frames
        .iter()
        .find(|f| f.run_id == run.id && f.kind == "finished")
    {
        let reason = finished.payload["reason"].as_str();
        super::spans::record(store, &run, ending.status.as_str(), reason, finished.at);
    }
    if let Some((parent, _)) = &run.share_of
        && let Some(settled) = frames
            .iter()
            .find(|f| f.run_id == *parent && f.kind == "finished")
    {
        let reason = settled.payload["reason"].as_str();
        super::spans::record_parent(store, parent, reason, settled.at);
    }
    Ok(Some(frames))
}

/// Writes a run's ending in `tx` (the run read and locked, not ended): its status,
/// findings, events and last frames (`finding` frames, then `finished`). A share of a
/// split run has no findings or events of its own: its parent's ending has them.
pub(super) async fn write_ending(
    tx: &mut Tx,
    run: &RunRow,
    ending: &Ending,
) -> Result<Vec<StoredFrame>> {
    let now = now_ms();
    // Without a reason of its own, an ending keeps the stored one (a cancel's reason,
    // written when it was asked for).
    let reason = ending.reason.clone().or(run.reason.clone());
    tx.set_ending(&run.id, ending, reason.as_deref(), now)
        .await?;
    let found = if run.share_of.is_none() {
        let found = findings_of_ending(tx, run, ending, now).await?;
        tx.insert_events(
            &run.account_id,
            &ending_events(run, ending.status, &found),
            now,
        )
        .await?;
        found
    } else {
        Vec::new()
    };
    let last = tx.last_frame(&run.id).await?;
    let frames = last_frames(&run.id, last, &found, ending.status, reason.as_deref(), now);
    tx.append_frames(&run.id, last, &frames, true).await?;
    Ok(frames)
}

/// Derives and records the findings of a run ending with a verdict ([`finds`]), and
/// lists them on the run.
async fn findings_of_ending(
    tx: &mut Tx,
    run: &RunRow,
    ending: &Ending,
    now: i64,
) -> Result<Vec<RunFinding>> {
    let Some(result) = finds(run, ending) else {
        return Ok(Vec::new());
    };
    // A spec that no longer reads derives what the result alone holds.
    let spec: Option<serde_json::Value> = tx
        .spec_text(run)
        .await?
        .and_then(|text| serde_json::from_str(&text).ok());
    let derived = derive(&RunFacts {
        account_id: &run.account_id,
        kind: run.kind,
        scenario_id: &run.scenario_id,
        environment: &run.environment,
        target: &run.target,
        spec: spec.as_ref(),
        result,
    });
    if derived.is_empty() {
        return Ok(Vec::new());
    }
    let found = tx.insert_findings(run, &derived, now).await?;
    tracing::info!(run = %run.id, findings = found.len(), "findings recorded");
    Ok(found)
}

/// The result an ending finds in, when it does: a run ending `passed` or `failed` with
/// a result. A run without a verdict (error, cancelled) finds nothing, what it measured
/// may be partial; but a run that ended `error` finds when its kind says its result
/// still holds findings then (a faults run whose rollback failed: the fault it left
/// applied is the alert).
pub(super) fn finds<'a>(run: &RunRow, ending: &'a Ending) -> Option<&'a serde_json::Value> {
    ending.result.as_ref().filter(|_| {
        matches!(ending.status, RunStatus::Passed | RunStatus::Failed)
            || (ending.status == RunStatus::Error && iohr_domain::kind::finds_on_error(run.kind))
    })
}

/// The events of a run's ending: one `finding.created` per finding the run created (not
/// those seen again or reopened), then `run.finished`.
pub(super) fn ending_events(
    run: &RunRow,
    status: RunStatus,
    found: &[RunFinding],
) -> Vec<(&'static str, serde_json::Value)> {
    found
        .iter()
        .filter(|f| f.seen == Sighting::New)
        .map(|finding| finding_created(run, finding))
        .chain([run_finished(run, status)])
        .collect()
}

/// The `finding.created` event of a finding `run` created: ids only, never a body.
fn finding_created(run: &RunRow, finding: &RunFinding) -> (&'static str, serde_json::Value) {
    let data = serde_json::json!({
        "finding_id": finding.id,
        "run_id": run.id,
        "signature": finding.signature,
    });
    (FINDING_CREATED, data)
}

/// The `run.finished` event of `run` ending `status`.
fn run_finished(run: &RunRow, status: RunStatus) -> (&'static str, serde_json::Value) {
    let data = serde_json::json!({
        "run_id": run.id,
        "kind": run.kind.as_str(),
        "status": status.as_str(),
        "environment": run.environment,
    });
    (RUN_FINISHED, data)
}

/// An ending's last frames, numbered after `last`: a `finding` frame per finding, then
/// `finished` with the status and reason.
pub(super) fn last_frames(
    run_id: &str,
    last: u64,
    found: &[RunFinding],
    status: RunStatus,
    reason: Option<&str>,
    now: i64,
) -> Vec<StoredFrame> {
    found
        .iter()
        .map(|finding| ("finding", serde_json::to_value(finding).unwrap_or_default()))
        .chain([(
            "finished",
            serde_json::json!({
                "status": status,
                "reason": reason,
            }),
        )])
        .enumerate()
        .map(|(i, (kind, payload))| StoredFrame {
            run_id: run_id.to_string(),
            number: last + 1 + i as u64,
            kind: kind.to_string(),
            payload,
            at: now,
        })
        .collect()
}

#[cfg(test)]
mod tests;
