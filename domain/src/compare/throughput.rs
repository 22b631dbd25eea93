//! Throughput compared: requests completed per second, with an interval from the same
//! block bootstrap over a run's seconds that widens its latency intervals. In a closed
//! model the target sets the pace, so a target that slows or stalls shows as fewer
//! requests, not as slower ones: lost throughput is a regression there even when every
//! percentile holds. In an open model the schedule sets the pace, and throughput says
//! something only where a run fell short of its intended rate. A one-off stall, which
//! the bootstrap resamples away, is read as a short second (excursion.rs).

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::histogram::decode;
use crate::load::{LoadResult, Model};

use super::bootstrap::{MIN_BLOCKS, REPLICATES};
use super::excursion::{median, short_seconds};
use super::{Comparison, Difference};

/// `89,925/s`: whole requests with thousands separated at a hundred a second and above,
/// one decimal below.
pub(super) fn rate(per_second: f64) -> String {
    if per_second < 100.0 {
        return format!("{per_second:.1}/s");
    }
    let digits = format!("{:.0}", per_second);
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{out}/s")
}

/// Requests completed in each whole block of the measure: every request a block records
/// (answered or failed) is in its histogram. The block after the measure's last whole
/// one (the answers still in flight at its end) is left out; `None` when a block does
/// not read.
fn block_counts(result: &LoadResult) -> Option<Vec<u64>> {
    let seconds = result.block_seconds.max(1);
    let whole = (result.measured_seconds / seconds as f64).floor() as usize;
    result
        .blocks
        .iter()
        .take(whole)
        .map(|text| decode(text).ok().map(|h| h.len()))
        .collect()
}

/// The interval of the mean rate over resamples of whole blocks, at `level`.
pub(super) fn rate_interval(
    counts: &[u64],
    block_seconds: u64,
    level: f64,
    rng: &mut ChaCha8Rng,
) -> (f64, f64) {
    let k = counts.len();
    if k == 0 {
        return (0.0, 0.0);
    }
    let span = (k as u64 * block_seconds.max(1)) as f64;
    let mut means: Vec<f64> = (0..REPLICATES)
        .map(|_| {
            let total: u64 = (0..k).map(|_| counts[rng.random_range(0..k)]).sum();
            total as f64 / span
        })
        .collect();
    means.sort_unstable_by(f64::total_cmp);
    let tail = (1.0 - level) / 2.0;
    let pick = |share: f64| means[((share * means.len() as f64) as usize).min(means.len() - 1)];
    (pick(tail), pick(1.0 - tail))
}

/// `after: 1 second at 12/s, under half of before's median second (1,280/s)`, when `run`
/// has seconds short of `other`'s range.
fn short_of(run: &str, short: &[(usize, f64)], other_rates: &[f64], other: &str) -> Option<String> {
    let lowest = short.iter().map(|(_, r)| *r).min_by(f64::total_cmp)?;
    let seconds = match short.len() {
        1 => "1 second".to_string(),
        n => format!("{n} seconds, the lowest"),
    };
    Some(format!(
        "{run}: {seconds} at {}, under half of {other}'s median second ({})",
        rate(lowest),
        rate(median(other_rates).unwrap_or_default())
    ))
}

/// Why throughput is not judged for these two runs, if it is not.
fn not_judged(before: &LoadResult, after: &LoadResult, noise_floor: f64) -> Option<String> {
    // An open model's throughput is its schedule's while the target keeps up with it.
    let short = |r: &LoadResult| {
        r.intended_rate
            .is_some_and(|intended| r.achieved_rate < intended * (1.0 - noise_floor))
    };
    if before.model == Model::Open && after.model == Model::Open && !short(before) && !short(after)
    {
        return Some("open model at its intended rate: not judged".to_string());
    }
    None
}

/// Whether the rate of completed requests moved: intervals apart and beyond the noise
/// floor. Fewer is worse.
pub(super) fn compare_throughput(
    before: &LoadResult,
    after: &LoadResult,
    out: &mut Comparison,
    rng: &mut ChaCha8Rng,
) {
    if let Some(why) = not_judged(before, after, out.noise_floor) {
        out.unchanged.push(format!("throughput ({why})"));
        return;
    }
    let (Some(bc), Some(ac)) = (block_counts(before), block_counts(after)) else {
        out.notes
            .push("throughput: a block could not be read".to_string());
        return;
    };
    if bc.len() < MIN_BLOCKS || ac.len() < MIN_BLOCKS {
        out.unchanged.push(format!(
            "throughput (not judged: a run keeps fewer than {MIN_BLOCKS} whole blocks of seconds)"
        ));
        return;
    }
    let (bv, av) = (before.achieved_rate, after.achieved_rate);
    // The interval holds the run's own rate (the bootstrap leaves out the last partial
    // block, which the achieved rate counts).
    let widen = |(low, high): (f64, f64), value: f64| (low.min(value), high.max(value));
    let (bl, bh) = widen(rate_interval(&bc, before.block_seconds, out.level, rng), bv);
    let (al, ah) = widen(rate_interval(&ac, after.block_seconds, out.level, rng), av);
    let apart = al > bh || ah < bl;
    let change = (av - bv) / bv.max(f64::MIN_POSITIVE);
    // A one-off stall: a second of the run that lost throughput far short of every
    // second the other run had (see excursion.rs); the bootstrap resamples it away.
    let rates = |counts: &[u64], seconds: u64| -> Vec<f64> {
        let seconds = seconds.max(1) as f64;
        counts.iter().map(|c| *c as f64 / seconds).collect()
    };
    let (br, ar) = (
        rates(&bc, before.block_seconds),
        rates(&ac, after.block_seconds),
    );
    let excursion = if change < 0.0 {
        short_of("after", &short_seconds(&br, &ar), &br, "before")
    } else {
        short_of("before", &short_seconds(&ar, &br), &ar, "after")
    };
    if (apart || excursion.is_some()) && change.abs() > out.noise_floor {
        out.differences.push(Difference {
            measure: "throughput".to_string(),
            worse: change < 0.0,
            line: format!(
                "throughput: {} [{}, {}] -> {} [{}, {}] ({:+.0}%{})",
                rate(bv),
                rate(bl),
                rate(bh),
                rate(av),
                rate(al),
                rate(ah),
                change * 100.0,
                excursion.map(|e| format!("; {e}")).unwrap_or_default()
            ),
            trace_ids: Vec::new(),
        });
    } else {
        out.unchanged.push("throughput".to_string());
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::load::LEVEL;

    #[test]
    fn rates_read_as_people_write_them() {
        assert_eq!(rate(89_925.4), "89,925/s");
        assert_eq!(rate(1_234_567.0), "1,234,567/s");
        assert_eq!(rate(800.0), "800/s");
        assert_eq!(rate(12.34), "12.3/s");
    }

    /// Per-second counts around `mean` with a spread of about 1%.
    fn seconds(rng: &mut ChaCha8Rng, n: usize, mean: f64) -> Vec<u64> {
        (0..n)
            .map(|_| (mean * (1.0 + rng.random_range(-0.015..0.015))) as u64)
            .collect()
    }

    #[test]
    fn steady_runs_overlap_and_a_stall_in_every_second_does_not() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut overlapping = 0;
        for _ in 0..200 {
            let (b, a) = (seconds(&mut rng, 6, 1000.0), seconds(&mut rng, 6, 1000.0));
            let (bl, bh) = rate_interval(&b, 1, LEVEL, &mut rng);
            let (al, ah) = rate_interval(&a, 1, LEVEL, &mut rng);
            assert!(bl <= bh && al <= ah);
            if !(al > bh || ah < bl) {
                overlapping += 1;
            }
        }
        assert!(overlapping >= 190, "{overlapping} of 200 A/A pairs overlap");
        // Half of every second lost: every resample is far below.
        let (b, a) = (seconds(&mut rng, 6, 1000.0), seconds(&mut rng, 6, 500.0));
        let (bl, _) = rate_interval(&b, 1, LEVEL, &mut rng);
        let (_, ah) = rate_interval(&a, 1, LEVEL, &mut rng);
        assert!(ah < bl, "{ah} < {bl}");
    }

    #[test]
    fn one_stalled_second_of_six_is_within_the_block_bootstrap() {
        // Why a one-off stall needs excursion.rs: resamples that miss the one stalled
        // second are a third of all (5/6 to the sixth), so the interval reaches the
        // steady run's rate. The seconds are exchangeable to the bootstrap.
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let steady = seconds(&mut rng, 6, 1000.0);
        let mut stalled = seconds(&mut rng, 6, 1000.0);
        stalled[3] = 0;
        let (bl, _) = rate_interval(&steady, 1, LEVEL, &mut rng);
        let (_, ah) = rate_interval(&stalled, 1, LEVEL, &mut rng);
        assert!(ah >= bl, "{ah} reaches {bl}");
    }

    #[test]
    fn block_seconds_scale_the_rate() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let (low, high) = rate_interval(&[600; 8], 60, LEVEL, &mut rng);
        assert_eq!((low, high), (10.0, 10.0));
        assert_eq!(rate_interval(&[], 1, LEVEL, &mut rng), (0.0, 0.0));
    }
}
