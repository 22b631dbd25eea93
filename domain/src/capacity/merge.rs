//! A sweep split over agents (`"agents": N`) judged as one. Each step's shares are merged
//! exactly (counts summed, HdrHistograms added, achieved rates summed) and the whole step
//! judged against the SLO: the controller does it as every share ends a step, and tells
//! the shares the verdict, so that all of them take the sweep's next step alike; and
//! again at the run's end, over the shares' results, to make the whole run's.

use serde_json::Value;

use crate::kind::MergedRun;
use crate::load::{
    MergeError, Share, counts_of, same, summarise_latency, total, whole_histogram, with_saturation,
};

use super::*;

impl SweepPoint {
    /// The shares' points of one step as the whole step's, judged against `slo` as the
    /// whole (its achieved rate against the whole offered rate).
    pub fn merge(parts: &[SweepPoint], slo: &Slo) -> Result<SweepPoint, MergeError> {
        let step = same("step", parts.iter().map(|p| p.step))?;
        let stage = same("stage", parts.iter().map(|p| p.stage))?;
        let offered = same("offered", parts.iter().map(|p| p.offered.to_bits()))?;
        let histogram = whole_histogram(parts.iter().map(|p| p.histogram.as_str()))?;
        let latency = summarise_latency(&histogram)?;
        let pick = |name: &str| latency.percentile(name);
        let counts = counts_of(parts.iter().map(|p| &p.counts));
        let point = SweepPoint {
            step,
            stage,
            offered: f64::from_bits(offered),
            achieved: parts.iter().map(|p| p.achieved).sum(),
            error_rate: counts.error_rate(),
            counts,
            late: total(parts.iter().map(|p| p.late)),
            dropped: total(parts.iter().map(|p| p.dropped)),
            p50: pick("p50"),
            p99: pick("p99"),
            p99_us: (!histogram.is_empty()).then(|| histogram.value_at_quantile(0.99)),
            meets_slo: false,
            broke: Vec::new(),
            histogram: latency.histogram,
        };
        Ok(point.judged(slo, Share::WHOLE))
    }
}

/// The results (JSON) of every share of a split sweep as the whole run's: the steps all
/// shares ran merged one by one ([`SweepPoint::merge`]), the sweep replayed over their
/// verdicts (the ones the controller gave the shares as they ran), the knee found over
/// the merged points, and the run's verdict drawn from them as one agent's would be.
pub fn merge_results(plan: &CapacityPlan, parts: &[Value]) -> Result<MergedRun, MergeError> {
    let results = parts
        .iter()
        .map(|v| CapacityResult::deserialize(v).map_err(|e| MergeError::Mismatch(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    let steps = results
        .iter()
        .map(|r| r.points.len())
        .min()
        .ok_or(MergeError::Empty)?;
    let mut sweep = Sweep::new(plan.grid.clone(), plan.bisect);
    let mut points = Vec::with_capacity(steps);
    for i in 0..steps {
        let shares: Vec<SweepPoint> = results.iter().map(|r| r.points[i].clone()).collect();
        let point = SweepPoint::merge(&shares, &plan.slo)?;
        let step = sweep
            .next()
            .filter(|s| s.rate == point.offered && s.stage == point.stage)
            .ok_or_else(|| {
                MergeError::Mismatch(format!(
                    "step {} at {} is not the sweep's next",
                    point.step,
                    rate_text(point.offered)
                ))
            })?;
        sweep.record(step, point.meets_slo, &point.broke.join("; "));
        points.push(point);
    }
    let stopped = results
        .iter()
        .any(|r| r.stopped_because == CANCELLED)
        .then(|| CANCELLED.to_string());
    let Concluded {
        status,
        reason,
        mut result,
    } = CapacityResult::conclude(plan, &sweep, points, stopped);
    if parts.len() > 1 {
        result.notes.push(format!(
            "swept by {} agents side by side, each step's histograms added and judged as one",
            parts.len()
        ));
    }
    let value = serde_json::to_value(&result).map_err(|e| MergeError::Mismatch(e.to_string()))?;
    Ok(MergedRun {
        result: with_saturation(value, parts)?,
        status,
        reason,
    })
}

#[cfg(test)]
mod tests;
