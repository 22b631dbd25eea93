//! The knee of latency against load: Kneedle on log p99 against the offered rate, with a
//! seeded bootstrap interval over the sweep points.

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
// A seeded stream that rand_chacha keeps across releases, and an exact binomial draw: the
// same points give the same knee after a dependency update.
use rand_chacha::ChaCha8Rng;
use rand_distr::{Binomial, Distribution};
use serde::{Deserialize, Serialize};

use crate::histogram::decode;
use crate::load::LEVEL;

use super::*;

/// Every knee's bootstrap starts from this seed: the same points give the same interval.
const SEED: u64 = 0x6b6e_6565_6c65;

/// The knee of latency against load, with its bootstrap interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// The offered rate at the knee (one of the sweep points), if the curve has one.
    pub rate: Option<f64>,
    /// The interval's ends (sweep points), at `level`.
    pub low: Option<f64>,
    pub high: Option<f64>,
    pub resolved: bool,
    /// Why it is not resolved, when it is not.
    pub reason: Option<String>,
    /// The offered rates the knee was sought over (normalised to [0, 1]).
    pub range: (f64, f64),
    pub level: f64,
    pub replicates: usize,
    /// Replicates that found a knee.
    pub found: usize,
}

impl Knee {
    fn unresolved(range: (f64, f64), reason: String) -> Knee {
        Knee {
            rate: None,
            low: None,
            high: None,
            resolved: false,
            reason: Some(reason),
            range,
            level: LEVEL,
            replicates: 0,
            found: 0,
        }
    }

    /// `knee 506/s [450/s, 534/s]` or `knee not resolved (why)`.
    pub fn line(&self) -> String {
        match (self.rate, self.low, self.high) {
            (Some(rate), Some(low), Some(high)) if self.resolved => format!(
                "knee {} [{}, {}]",
                rate_text(rate),
                rate_text(low),
                rate_text(high)
            ),
            _ => format!(
                "knee not resolved ({})",
                self.reason.as_deref().unwrap_or("no knee")
            ),
        }
    }
}

/// A point's latencies by rank: its p99 and the binomial rank draws of the bootstrap.
#[derive(Debug, Clone)]
pub struct Ranked {
    /// (samples up to and including this bucket, the bucket's highest value).
    cumulative: Vec<(u64, u64)>,
    total: u64,
}

impl Ranked {
    pub fn new(histogram: &Histogram<u64>) -> Ranked {
        let mut seen = 0;
        let cumulative = histogram
            .iter_recorded()
            .map(|b| {
                seen += b.count_at_value();
                (seen, histogram.highest_equivalent(b.value_iterated_to()))
            })
            .collect();
        Ranked {
            cumulative,
            total: seen,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The value of the sample at a 1-based rank.
    fn at_rank(&self, rank: u64) -> u64 {
        let i = self.cumulative.partition_point(|(seen, _)| *seen < rank);
        self.cumulative
            .get(i)
            .or(self.cumulative.last())
            .map_or(0, |(_, v)| *v)
    }

    /// The q-quantile, as the histogram reads it (the sample at rank ceil(q n)).
    pub fn quantile(&self, q: f64) -> u64 {
        self.at_rank(((q * self.total as f64).ceil() as u64).max(1))
    }

    /// The q-quantile of a bootstrap resample: the sample at rank 1 + Binomial(n, q).
    fn draw(&self, q: f64, rng: &mut ChaCha8Rng) -> u64 {
        let rank = (binomial(self.total, q, rng) + 1).min(self.total);
        self.at_rank(rank)
    }
}

/// An exact Binomial(n, p) draw (rand_distr's: BTPE for large n p, inversion below).
pub(super) fn binomial<R: Rng + ?Sized>(n: u64, p: f64, rng: &mut R) -> u64 {
    // p is a quantile in [0, 1]; any other would have no draw, and the rank its mean.
    match Binomial::new(n, p) {
        Ok(draw) => draw.sample(rng),
        Err(_) => (n as f64 * p.clamp(0.0, 1.0)).round() as u64,
    }
}

/// Kneedle (Satopää et al. 2011) on a convex increasing curve already normalised: the
/// index of the knee, or `None` when the curve does not bend. The difference curve is
/// x - y (how far the curve lies under the diagonal); the knee is its first local maximum
/// after which it falls below that maximum minus `sensitivity` times the mean x step.
pub fn kneedle(x: &[f64], y: &[f64], sensitivity: f64) -> Option<usize> {
    let n = x.len().min(y.len());
    if n < 3 {
        return None;
    }
    let d: Vec<f64> = x.iter().zip(y).map(|(x, y)| x - y).collect();
    let mean_step = (x[n - 1] - x[0]).abs() / (n - 1) as f64;
    let mut candidate: Option<(usize, f64)> = None;
    for i in 1..n {
        let local_max = i + 1 < n && d[i] >= d[i - 1] && d[i] >= d[i + 1] && d[i] > 0.0;
        if local_max {
            candidate = Some((i, d[i] - sensitivity * mean_step));
            continue;
        }
        if let Some((at, threshold)) = candidate
            && d[i] < threshold
        {
            return Some(at);
        }
    }
    None
}

/// One point of a latency curve: its offered rate and its latencies by rank.
pub struct CurvePoint<'a> {
    pub offered: f64,
    pub latency: &'a Ranked,
}

/// The log p99 range of the points whose offered rate is within `range`.
pub fn log_p99_range(points: &[CurvePoint], range: (f64, f64)) -> Option<(f64, f64)> {
    let logs: Vec<f64> = points
        .iter()
        .filter(|p| within(p.offered, range) && !p.latency.is_empty())
        .map(|p| (p.latency.quantile(0.99).max(1) as f64).ln())
        .collect();
    let low = logs.iter().copied().reduce(f64::min)?;
    let high = logs.iter().copied().reduce(f64::max)?;
    Some((low, high))
}

fn within(rate: f64, (low, high): (f64, f64)) -> bool {
    let slack = 1e-9 * high.abs().max(1.0);
    rate >= low - slack && rate <= high + slack
}

/// The knee of log p99 against the offered rate, over the points within `range`
/// (normalised to [0, 1] by `range` and by `log_range`, fixed for every replicate, so that
/// two runs normalised alike compare), with a bootstrap interval: each replicate redraws
/// every point's p99 from its histogram and finds the knee again.
pub fn knee(points: &[CurvePoint], range: (f64, f64), log_range: (f64, f64)) -> Knee {
    let mut used: Vec<&CurvePoint> = points
        .iter()
        .filter(|p| within(p.offered, range) && !p.latency.is_empty())
        .collect();
    used.sort_by(|a, b| a.offered.total_cmp(&b.offered));
    if used.len() < 3 {
        return Knee::unresolved(
            range,
            format!(
                "{} sweep points with responses in {} to {}: a knee needs at least 3",
                used.len(),
                rate_text(range.0),
                rate_text(range.1)
            ),
        );
    }
    let (x_span, y_span) = (range.1 - range.0, log_range.1 - log_range.0);
    if x_span <= 0.0 || y_span <= 1e-9 {
        return Knee::unresolved(range, "p99 does not change over the sweep".to_string());
    }
    let xs: Vec<f64> = used
        .iter()
        .map(|p| (p.offered - range.0) / x_span)
        .collect();
    let normalise = |us: u64| ((us.max(1) as f64).ln() - log_range.0) / y_span;
    let ys: Vec<f64> = used
        .iter()
        .map(|p| normalise(p.latency.quantile(0.99)))
        .collect();
    let Some(at) = kneedle(&xs, &ys, SENSITIVITY) else {
        return Knee::unresolved(
            range,
            "no knee: p99 does not bend upwards over the sweep".to_string(),
        );
    };
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let mut knees = Vec::with_capacity(REPLICATES);
    let mut ys = vec![0.0; used.len()];
    for _ in 0..REPLICATES {
        for (y, p) in ys.iter_mut().zip(&used) {
            *y = normalise(p.latency.draw(0.99, &mut rng));
        }
        if let Some(i) = kneedle(&xs, &ys, SENSITIVITY) {
            knees.push(used[i].offered);
        }
    }
    knees.sort_by(f64::total_cmp);
    let tail = (1.0 - LEVEL) / 2.0;
    let pick = |share: f64| {
        let i = ((share * knees.len() as f64) as usize).min(knees.len().saturating_sub(1));
        knees.get(i).copied()
    };
    let (low, high) = (pick(tail), pick(1.0 - tail));
    // Kneedle needs a point on either side of a knee: the lowest knee it can find is the
    // second point, the highest the last but one. An interval reaching either may hide a
    // knee outside the sweep.
    let (first, last) = (used[1].offered, used[used.len() - 2].offered);
    let kneeless = 1.0 - knees.len() as f64 / REPLICATES as f64;
    let reason = if kneeless > MAX_KNEELESS {
        Some(format!(
            "{:.0}% of the bootstrap replicates find no knee",
            kneeless * 100.0
        ))
    } else if low.is_some_and(|l| l <= first) || high.is_some_and(|h| h >= last) {
        Some(format!(
            "the interval touches an end of the sweep (a knee needs a point either side; {} to {} can tell): the knee may lie outside it",
            rate_text(first),
            rate_text(last)
        ))
    } else {
        None
    };
    Knee {
        rate: Some(used[at].offered),
        low,
        high,
        resolved: reason.is_none(),
        reason,
        range,
        level: LEVEL,
        replicates: REPLICATES,
        found: knees.len(),
    }
}

/// The points' histograms read for the knee: (offered rate, ranked latencies).
pub fn ranked_points(points: &[SweepPoint]) -> Vec<(f64, Ranked)> {
    points
        .iter()
        .filter_map(|p| Some((p.offered, Ranked::new(&decode(&p.histogram).ok()?))))
        .collect()
}

/// Ranked points as the knee reads them.
pub fn curve(ranked: &[(f64, Ranked)]) -> Vec<CurvePoint<'_>> {
    ranked
        .iter()
        .map(|(offered, latency)| CurvePoint {
            offered: *offered,
            latency,
        })
        .collect()
}

/// The knee of one run's points over their own range.
pub fn knee_of(points: &[SweepPoint]) -> Knee {
    let ranked = ranked_points(points);
    let curve = curve(&ranked);
    let low = points.iter().map(|p| p.offered).reduce(f64::min);
    let high = points.iter().map(|p| p.offered).reduce(f64::max);
    let (Some(low), Some(high)) = (low, high) else {
        return Knee::unresolved((0.0, 0.0), "no sweep points".to_string());
    };
    match log_p99_range(&curve, (low, high)) {
        Some(log_range) => knee(&curve, (low, high), log_range),
        None => Knee::unresolved((low, high), "no step got a response".to_string()),
    }
}
