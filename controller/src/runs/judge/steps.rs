//! The steps of a capacity run split over agents, judged on the whole. A share measures
//! its part of each step only, so the sweep's decisions (the next rate, bisecting, the
//! end) cannot be any one agent's: as each share's step-end frame is relayed onto the
//! split run, its point is kept (`store/steps.rs`), and once every share has sent the
//! step, the points are merged (counts summed, histograms added) and the step judged
//! against the SLO. The verdict is stored with the instant the shares start their next
//! step, which each share's agent asks for.

use iohr_domain::capacity::{CapacitySpec, Slo, SweepPoint};
use iohr_domain::load::Share;
use serde::Deserialize;

use crate::store::{Result, RunRow, StoreError, Tx};

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
