//! Excursions: a one-off event in one run, judged against the other run's own range.
//!
//! The block bootstrap asks whether a run's whole value would come back if its seconds
//! were drawn again. A target that stalls once (a GC pause, a lock, a slow dependency)
//! touches one second of ten: a third of the resamples miss that second, so the stalled
//! run's interval reaches the steady run's value and the bootstrap calls the pair alike.
//! Its seconds are exchangeable to the bootstrap; to a person reading a pull request a
//! second in which the target answered nothing is not. So a run is also read against the
//! other run's range, which the other run itself measured: a second below half of the
//! other's median second (and below its slowest second by twice the other's own spread),
//! or a percentile over twice the other's slowest request, is something the other run
//! never came near. On a steady baseline these fences are far past anything an A/A pair of
//! this machine shows (docs/benchmarks.md); a noisy baseline widens its own fence, so it
//! calls fewer excursions, never more.
//!
//! An excursion decides a measure only with its change past the noise floor, as the
//! intervals do: it replaces the intervals' "apart", nothing else.

/// A second with fewer requests than this share of the other run's median second.
pub(super) const SHORT_SECOND: f64 = 0.5;
/// A percentile more than this many times the other run's slowest request.
pub(super) const BEYOND_SLOWEST: f64 = 2.0;

/// The finite values, sorted.
fn sorted(values: &[f64]) -> Vec<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|r| r.is_finite()).collect();
    sorted.sort_unstable_by(f64::total_cmp);
    sorted
}

fn median_of_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// The median of the finite values, if any.
pub(super) fn median(values: &[f64]) -> Option<f64> {
    median_of_sorted(&sorted(values))
}

/// The seconds of `run` short of `reference`'s range, as (index, rate): below half of
/// the reference's median rate, and below its slowest second by more than twice that
/// second's distance from the median. Empty when the reference has no seconds.
pub(super) fn short_seconds(reference: &[f64], run: &[f64]) -> Vec<(usize, f64)> {
    let sorted = sorted(reference);
    let (Some(middle), Some(&slowest)) = (median_of_sorted(&sorted), sorted.first()) else {
        return Vec::new();
    };
    let fence = (middle * SHORT_SECOND).min(slowest - 2.0 * (middle - slowest));
    run.iter()
        .copied()
        .enumerate()
        .filter(|(_, rate)| *rate < fence)
        .collect()
}

/// Whether a percentile of one run (`value`, µs) lies beyond the other run's slowest
/// request (`slowest`, µs) `BEYOND_SLOWEST` times over.
pub(super) fn beyond_slowest(value: u64, slowest: u64) -> bool {
    value as f64 > slowest.max(1) as f64 * BEYOND_SLOWEST
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stalled_second_is_short_of_a_steady_run() {
        let steady = [1280.0, 1275.0, 1290.0, 1282.0, 1270.0, 1285.0, 1279.0];
        let mut stalled = steady;
        stalled[4] = 12.0;
        assert_eq!(short_seconds(&steady, &stalled), vec![(4, 12.0)]);
        // A stall across two seconds' boundary: the second that lost most is short.
        let mut split = steady;
        split[2] = 700.0;
        split[3] = 580.0;
        assert_eq!(short_seconds(&steady, &split), vec![(3, 580.0)]);
        // Nothing short of a run with a stall: its own slow second widens its fence.
        assert!(short_seconds(&stalled, &steady).is_empty());
    }

    #[test]
    fn a_noisy_reference_widens_its_own_fence() {
        let noisy = [1000.0, 1000.0, 1000.0, 700.0, 1000.0];
        // 700 is 300 from the median: the fence is 700 - 600 = 100.
        assert!(short_seconds(&noisy, &[1000.0, 400.0, 150.0]).is_empty());
        assert_eq!(short_seconds(&noisy, &[99.0]), vec![(0, 99.0)]);
        assert!(short_seconds(&[], &[0.0]).is_empty());
        assert!(short_seconds(&[f64::NAN], &[0.0]).is_empty());
    }

    #[test]
    fn beyond_slowest_is_strictly_twice_over() {
        assert!(!beyond_slowest(200_000, 100_000));
        assert!(beyond_slowest(200_001, 100_000));
        // A reference with no latency at all counts as 1 µs.
        assert!(beyond_slowest(3, 0));
    }
}
