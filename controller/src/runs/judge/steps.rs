//! The steps of a capacity run split over agents, judged on the whole. A share measures
//! its part of each step only, so the sweep's decisions (the next rate, bisecting, the
//! end) cannot be any one agent's: as each share's step-end frame is relayed onto the
//! split run, its point is kept (`store/steps.rs`), and once every share has sent the
//! step, the points are merged (counts summed, histograms added) and the step judged
//! against the SLO. The verdict is stored with the instant the shares start their next
//! step, which each share's agent asks for ([`step_verdict`]).
//!
//! Step 0 is the start, for a split run of any kind: every share asks for it before its
//! clock starts, and it is answered once every share holds its lease, with one instant
//! for all. A share whose offer lapsed and went to another agent thus starts with the
//! others, who wait for it, rather than after them.

use iohr_domain::capacity::{CapacitySpec, Slo, SweepPoint};
use iohr_domain::load::Share;
use serde::Deserialize;

use iohr_domain::RunStatus;
pub use iohr_proto::START_STEP;

use crate::store::{LeaseGuard, Result, RunRow, StepVerdict, Store, StoreError, Tx, now_ms};

/// How long after its verdict the shares start a sweep's next step: time for every
/// share's next ask (each 100 ms) to reach the verdict.
const NEXT_STEP_AFTER_MS: i64 = 300;

/// The verdict on `step` for the share `run_id`, asked by its agent under `guard`:
/// `None` while some share has not ended the step yet (for [`START_STEP`]: while some
/// share does not hold its lease), and for a lease that is not the run's current one (a
/// stale agent learns nothing of the sweep).
pub async fn step_verdict(
    store: &Store,
    run_id: &str,
    guard: &LeaseGuard,
    step: u32,
) -> Result<Option<StepVerdict>> {
    if step == START_STEP {
        start_when_all_hold(store, run_id, guard).await?;
    }
    store.step_verdict(run_id, guard, step).await
}

/// The start (step 0) of the split run whose share `run_id` is, once every share holds
/// its lease: stored once (whichever replica's ask finds them all first), to start
/// [`NEXT_STEP_AFTER_MS`] later.
async fn start_when_all_hold(store: &Store, run_id: &str, guard: &LeaseGuard) -> Result<()> {
    let Some(share) = store.run(run_id).await? else {
        return Ok(());
    };
    let Some((parent, _)) = share
        .share_of
        .filter(|_| share.lease.as_ref() == Some(guard))
    else {
        return Ok(());
    };
    let held =
        |s: &RunRow| s.status == RunStatus::Running && s.lease_state.as_deref() == Some("accepted");
    if !store.shares_of(&parent).await?.iter().all(held) {
        return Ok(());
    }
    let mut tx = store.begin().await?;
    tx.put_step_verdict(&parent, START_STEP, true, "", now_ms() + NEXT_STEP_AFTER_MS)
        .await?;
    tx.commit().await
}

/// The step-end points among a relayed batch of `share`'s frames (kind, payload, at),
/// kept until every share has sent its own; the step is then judged on their merge.
pub(in crate::runs) async fn judge(
    tx: &mut Tx,
    parent: &RunRow,
    share: Share,
    frames: &[(String, serde_json::Value, i64)],
) -> Result<()> {
    for point in step_ends(frames) {
        let parts = tx.put_step_point(&parent.id, share.index(), &point).await?;
        if parts.len() < share.count() as usize {
            continue;
        }
        let slo = slo_of(tx.spec_text(parent).await?, parent)?;
        let whole = SweepPoint::merge(&parts, &slo)
            .map_err(|e| StoreError::Corrupt(format!("split step {}: {e}", point.step)))?;
        tx.put_step_verdict(
            &parent.id,
            point.step,
            whole.meets_slo,
            &whole.broke.join("; "),
            now_ms() + NEXT_STEP_AFTER_MS,
        )
        .await?;
        tracing::info!(run = %parent.id, step = point.step, meets_slo = whole.meets_slo,
            achieved = whole.achieved, "split sweep step judged on the whole");
    }
    Ok(())
}

/// The step-end points among frames (kind, payload, at): `phase` frames of an `end`.
fn step_ends(frames: &[(String, serde_json::Value, i64)]) -> Vec<SweepPoint> {
    frames
        .iter()
        .filter(|(kind, payload, _)| kind == "phase" && payload["event"] == "end")
        .filter_map(|(_, payload, _)| SweepPoint::deserialize(&payload["point"]).ok())
        .collect()
}

/// The SLO of the split sweep `parent`, from its stored spec's text.
fn slo_of(spec: Option<String>, parent: &RunRow) -> Result<Slo> {
    let spec: serde_json::Value = spec
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("scenario spec: {e}")))?
        .ok_or_else(|| StoreError::NotFound(format!("scenario {}", parent.scenario_version)))?;
    CapacitySpec::from_json(&spec)
        .and_then(|s| s.plan())
        .map(|plan| plan.slo)
        .map_err(|e| StoreError::Corrupt(format!("capacity spec: {e}")))
}

#[cfg(test)]
mod tests;
