//! Whether one percentile moved between two histograms: the measure load and capacity
//! comparisons share.

use hdrhistogram::Histogram;

use crate::histogram::decode;
use crate::quantile::{Percentile, percentile};

use super::excursion::beyond_slowest;
use super::{Comparison, Difference, TIMING_RESOLUTION_US};

pub(super) fn histogram(text: &str) -> Option<Histogram<u64>> {
    decode(text).ok()
}

pub(super) fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

/// Whether the q-quantile moved: intervals apart and beyond the noise floor.
pub(super) fn latency_difference(
    out: &mut Comparison,
    measure: &str,
    before: &Histogram<u64>,
    after: &Histogram<u64>,
    q: f64,
    widen: Option<((u64, u64), (u64, u64))>,
) {
    let (b, a) = (
        percentile(before, q, out.level),
        percentile(after, q, out.level),
    );
    let (
        Percentile::Estimate {
            value: bv,
            low: bl,
            high: bh,
            ..
        },
        Percentile::Estimate {
            value: av,
            low: al,
            high: ah,
            ..
        },
    ) = (&b, &a)
    else {
        let need = [b, a]
            .into_iter()
            .find_map(|p| match p {
                Percentile::Insufficient { insufficient, .. } => Some(insufficient),
                Percentile::Estimate { .. } => None,
            })
            .unwrap_or_default();
        out.unchanged.push(format!("{measure} ({need})"));
        return;
    };
    let ((bl, bh), (al, ah)) = match widen {
        Some(((bbl, bbh), (abl, abh))) => (
            ((*bl).min(bbl), (*bh).max(bbh)),
            ((*al).min(abl), (*ah).max(abh)),
        ),
        None => ((*bl, *bh), (*al, *ah)),
    };
    let apart = al > bh || ah < bl;
    let change = (*av as f64 - *bv as f64) / (*bv).max(1) as f64;
    let beyond_resolution = av.abs_diff(*bv) > TIMING_RESOLUTION_US;
    // A one-off stall in one run: its percentile past anything the other run measured
    // (see excursion.rs), which the block bootstrap resamples away.
    let excursion = if change > 0.0 {
        beyond_slowest(*av, before.max())
            .then(|| format!("before's slowest request ({})", ms(before.max())))
    } else {
        beyond_slowest(*bv, after.max())
            .then(|| format!("after's slowest request ({})", ms(after.max())))
    };
    if (apart || excursion.is_some()) && change.abs() > out.noise_floor && beyond_resolution {
        out.differences.push(Difference {
            measure: measure.to_string(),
            worse: change > 0.0,
            line: format!(
                "{measure}: {} [{}, {}] -> {} [{}, {}] ({:+.0}%{})",
                ms(*bv),
                ms(bl),
                ms(bh),
                ms(*av),
                ms(al),
                ms(ah),
                change * 100.0,
                excursion
                    .map(|e| format!("; over twice {e}"))
                    .unwrap_or_default()
            ),
            trace_ids: Vec::new(),
        });
    } else {
        out.unchanged.push(measure.to_string());
    }
}
