//! The block bootstrap that widens a load comparison's percentile intervals: whole blocks
//! (seconds) of a run resampled, since its seconds are correlated and its blocks far less.

use hdrhistogram::Histogram;
use rand::Rng;
// Seeded streams that rand_chacha keeps across releases: the same runs give the same
// answer after a dependency update (StdRng's stream may change).
use rand_chacha::ChaCha8Rng;

use crate::histogram::decode;

/// Fewer blocks than this are too few to resample.
pub(super) const MIN_BLOCKS: usize = 5;
/// Bootstrap replicates (each gives every compared percentile).
pub(super) const REPLICATES: usize = 400;
/// The bootstrap reads latencies on bins 0.5% wide: far finer than any difference past
/// the noise floor, and ten times fewer buckets to add up per resample.
const BIN_RATIO: f64 = 1.005;

fn bin_of(value: u64) -> i64 {
    ((value.max(1) as f64).ln() / BIN_RATIO.ln()).round() as i64
}

/// A run's blocks as sparse counts over the buckets both runs use.
pub(super) struct Blocks {
    /// Per block: (bucket index, count).
    pub(super) counts: Vec<Vec<(usize, u64)>>,
}

/// The distinct bucket values of both runs' blocks, in order, and each run's blocks
/// indexed into them.
fn read_blocks(before: &[String], after: &[String]) -> Option<(Vec<u64>, Blocks, Blocks)> {
    if before.len() < MIN_BLOCKS || after.len() < MIN_BLOCKS {
        return None;
    }
    let decode_all = |texts: &[String]| -> Option<Vec<Histogram<u64>>> {
        texts.iter().map(|t| decode(t).ok()).collect()
    };
    // Each block as (bin, count), bins ascending: buckets come in value order, so equal
    // bins are neighbours.
    let binned = |hs: Vec<Histogram<u64>>| -> Vec<Vec<(i64, u64)>> {
        hs.iter()
            .map(|h| {
                let mut out: Vec<(i64, u64)> = Vec::new();
                for v in h.iter_recorded() {
                    let bin = bin_of(v.value_iterated_to());
                    match out.last_mut() {
                        Some((last, count)) if *last == bin => *count += v.count_at_value(),
                        _ => out.push((bin, v.count_at_value())),
                    }
                }
                out
            })
            .collect()
    };
    let (b, a) = (binned(decode_all(before)?), binned(decode_all(after)?));
    let mut bins: Vec<i64> = b
        .iter()
        .chain(a.iter())
        .flat_map(|block| block.iter().map(|(bin, _)| *bin))
        .collect();
    bins.sort_unstable();
    bins.dedup();
    let index = |blocks: &[Vec<(i64, u64)>]| Blocks {
        counts: blocks
            .iter()
            .map(|block| {
                block
                    .iter()
                    .filter_map(|(bin, c)| Some((bins.binary_search(bin).ok()?, *c)))
                    .collect()
            })
            .collect(),
    };
    let (bb, ab) = (index(&b), index(&a));
    let values = bins
        .iter()
        .map(|bin| BIN_RATIO.powi(*bin as i32).round() as u64)
        .collect();
    Some((values, bb, ab))
}

/// The percentile intervals of each q-quantile over `REPLICATES` resamples of whole blocks
/// (a block bootstrap: the seconds of a run are correlated, its blocks far less).
pub(super) fn bootstrap(
    values: &[u64],
    blocks: &Blocks,
    qs: &[f64],
    level: f64,
    rng: &mut ChaCha8Rng,
) -> Vec<(u64, u64)> {
    let k = blocks.counts.len();
    let Some(last) = values.len().checked_sub(1) else {
        // No latency in any block: nothing to widen by.
        return vec![(0, 0); qs.len()];
    };
    // Each block's running count over every bin: a resample's count up to a bin is then
    // the sum over the blocks it drew, so each quantile is a binary search over the bins
    // rather than a walk over every bucket of every block drawn (compare reads one total
    // and up to 100 operations this way).
    let cumulative: Vec<Vec<u64>> = blocks
        .counts
        .iter()
        .map(|block| {
            let mut running = vec![0u64; values.len()];
            for (i, c) in block {
                running[*i] += c;
            }
            let mut seen = 0u64;
            for c in running.iter_mut() {
                seen += *c;
                *c = seen;
            }
            running
        })
        .collect();
    let mut drawn = vec![0u64; k];
    let mut picked: Vec<(usize, u64)> = Vec::with_capacity(k);
    let mut replicates = vec![Vec::with_capacity(REPLICATES); qs.len()];
    for _ in 0..REPLICATES {
        drawn.iter_mut().for_each(|m| *m = 0);
        for _ in 0..k {
            drawn[rng.random_range(0..k)] += 1;
        }
        picked.clear();
        picked.extend(
            drawn
                .iter()
                .enumerate()
                .filter(|(_, m)| **m > 0)
                .map(|(j, m)| (j, *m)),
        );
        let up_to =
            |bin: usize| -> u64 { picked.iter().map(|(j, m)| m * cumulative[*j][bin]).sum() };
        let total = up_to(last);
        if total == 0 {
            continue;
        }
        for (at, q) in qs.iter().enumerate() {
            let rank = ((q * total as f64).ceil() as u64).max(1);
            // The first bin whose running count reaches the rank.
            let (mut low, mut high) = (0, last);
            while low < high {
                let mid = (low + high) / 2;
                if up_to(mid) < rank {
                    low = mid + 1;
                } else {
                    high = mid;
                }
            }
            replicates[at].push(values[low]);
        }
    }
    let tail = (1.0 - level) / 2.0;
    replicates
        .iter_mut()
        .map(|r| {
            r.sort_unstable();
            let pick = |share: f64| {
                let i = ((share * r.len() as f64) as usize).min(r.len().saturating_sub(1));
                r.get(i).copied().unwrap_or_default()
            };
            (pick(tail), pick(1.0 - tail))
        })
        .collect()
}

/// Each run's block-bootstrap interval of each q-quantile, when both runs have enough
/// blocks that read.
pub(super) type Widening = (Vec<(u64, u64)>, Vec<(u64, u64)>);

pub(super) fn block_intervals(
    before: &[String],
    after: &[String],
    qs: &[f64],
    level: f64,
    rng: &mut ChaCha8Rng,
) -> Option<Widening> {
    let (values, b, a) = read_blocks(before, after)?;
    Some((
        bootstrap(&values, &b, qs, level, rng),
        bootstrap(&values, &a, qs, level, rng),
    ))
}
