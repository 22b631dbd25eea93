//! Capacity results compared: p50, p99 and the error rate at every offered rate both
//! sweeps measured, and the knee recomputed over the range of rates both share,
//! normalised alike.

use serde_json::Value;

use crate::capacity::{
    CapacityResult, CurvePoint, Knee, SweepPoint, curve, knee, log_p99_range, ranked_points,
    rate_text,
};

use super::errors::error_rate_difference;
use super::latency::{histogram, latency_difference};
use super::{COMPARED, Comparison, Difference};

pub(crate) fn compare_capacity_values(before: Value, after: Value, out: &mut Comparison) {
    match (
        serde_json::from_value::<CapacityResult>(before),
        serde_json::from_value::<CapacityResult>(after),
    ) {
        (Ok(b), Ok(a)) => compare_capacity(&b, &a, out),
        _ => out
            .notes
            .push("a capacity result could not be read: nothing to compare".to_string()),
    }
}

/// Two offered rates are one sweep point: grids are kept to two decimals.
fn same_rate(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.005
}

fn compare_capacity(before: &CapacityResult, after: &CapacityResult, out: &mut Comparison) {
    let samples = |r: &CapacityResult| r.points.iter().map(|p| p.counts.requests).sum::<u64>();
    out.samples = Some((samples(before), samples(after)));
    let mut points: Vec<&SweepPoint> = after.points.iter().collect();
    points.sort_by(|a, b| a.offered.total_cmp(&b.offered));
    let mut matched = 0;
    for a in points {
        let Some(b) = before
            .points
            .iter()
            .find(|b| same_rate(b.offered, a.offered))
        else {
            continue;
        };
        let rate = rate_text(a.offered);
        let (Some(hb), Some(ha)) = (histogram(&b.histogram), histogram(&a.histogram)) else {
            out.notes
                .push(format!("{rate}: a histogram could not be read"));
            continue;
        };
        matched += 1;
        for (label, q) in COMPARED {
            latency_difference(out, &format!("{label} @ {rate}"), &hb, &ha, q, None);
        }
        error_rate_difference(out, &format!("error rate @ {rate}"), &b.counts, &a.counts);
    }
    let alone = before.points.len() + after.points.len() - 2 * matched;
    if alone > 0 {
        out.notes.push(format!(
            "{matched} offered rates measured by both sweeps compared; {alone} points of one sweep only (bisection follows each run's results)"
        ));
    }
    compare_knees(before, after, out);
    let max = |r: &CapacityResult| r.max_rate_meeting_slo.map_or("none".to_string(), rate_text);
    out.notes.push(format!(
        "max rate meeting the SLO: {} -> {}",
        max(before),
        max(after)
    ));
}

fn rate_range(points: &[SweepPoint]) -> Option<(f64, f64)> {
    let low = points.iter().map(|p| p.offered).reduce(f64::min)?;
    let high = points.iter().map(|p| p.offered).reduce(f64::max)?;
    Some((low, high))
}

/// The knee of each run over the rates both sweeps cover, with the log p99 range pooled
/// over both, so that neither run's own range moves its knee; a difference counts when
/// the intervals are apart and the change passes the noise floor.
fn compare_knees(before: &CapacityResult, after: &CapacityResult, out: &mut Comparison) {
    let (Some(rb), Some(ra)) = (rate_range(&before.points), rate_range(&after.points)) else {
        out.unchanged
            .push("knee (a sweep has no points)".to_string());
        return;
    };
    let shared = (rb.0.max(ra.0), rb.1.min(ra.1));
    if shared.0 >= shared.1 {
        out.unchanged
            .push("knee (the sweeps share no range of rates)".to_string());
        return;
    }
    let (ranked_b, ranked_a) = (ranked_points(&before.points), ranked_points(&after.points));
    let (cb, ca) = (curve(&ranked_b), curve(&ranked_a));
    let both: Vec<CurvePoint> = curve(&ranked_b)
        .into_iter()
        .chain(curve(&ranked_a))
        .collect();
    let Some(logs) = log_p99_range(&both, shared) else {
        out.unchanged
            .push("knee (no responses in the shared range)".to_string());
        return;
    };
    let (kb, ka) = (knee(&cb, shared, logs), knee(&ca, shared, logs));
    let resolved = |k: &Knee| match (k.resolved, k.rate, k.low, k.high) {
        (true, Some(rate), Some(low), Some(high)) => Some((rate, low, high)),
        _ => None,
    };
    let span = format!("{} to {}", rate_text(shared.0), rate_text(shared.1));
    let (Some((bv, bl, bh)), Some((av, al, ah))) = (resolved(&kb), resolved(&ka)) else {
        let why = [("before", &kb), ("after", &ka)]
            .iter()
            .filter(|(_, k)| !k.resolved)
            .map(|(side, k)| format!("{side}: {}", k.reason.as_deref().unwrap_or("not resolved")))
            .collect::<Vec<_>>()
            .join("; ");
        out.unchanged
            .push(format!("knee over {span} (not resolved: {why})"));
        return;
    };
    let change = (av - bv) / bv.max(f64::MIN_POSITIVE);
    let apart = ah < bl || al > bh;
    if apart && change.abs() > out.noise_floor {
        out.differences.push(Difference {
            measure: "knee".to_string(),
            // A knee at a lower rate: latency breaks under less load.
            worse: change < 0.0,
            line: format!(
                "knee over {span}: {} [{}, {}] -> {} [{}, {}] ({:+.0}%)",
                rate_text(bv),
                rate_text(bl),
                rate_text(bh),
                rate_text(av),
                rate_text(al),
                rate_text(ah),
                change * 100.0
            ),
            trace_ids: Vec::new(),
        });
    } else {
        out.unchanged.push(format!("knee over {span}"));
    }
}
