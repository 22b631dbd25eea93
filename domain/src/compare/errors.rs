//! Error rates compared: the share of requests that failed (no response, or a status of
//! 400 or more), with Wilson score intervals. A rate that rose beyond its interval is a
//! regression; one that fell, an improvement. Results keep no per-second failure counts,
//! so these intervals are binomial only (no block bootstrap).

use crate::load::Counts;

use super::{Comparison, Difference};

/// erf by Abramowitz and Stegun 7.1.26 (absolute error under 1.5e-7): enough for a z.
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let y = 1.0 - poly * (-x * x).exp();
    if x < 0.0 { -y } else { y }
}

/// The two-sided normal quantile for `level` (1.96 at 95%), by bisection.
fn z_for(level: f64) -> f64 {
    let (mut low, mut high) = (0.0f64, 10.0f64);
    for _ in 0..60 {
        let mid = (low + high) / 2.0;
        // P(|Z| <= mid) = erf(mid / sqrt 2).
        if erf(mid / std::f64::consts::SQRT_2) < level {
            low = mid;
        } else {
            high = mid;
        }
    }
    (low + high) / 2.0
}

/// The Wilson score interval of `failed` in `requests` at `level`: it stays inside 0..1
/// and is honest at rates near zero, where most runs' error rates are.
pub(super) fn wilson(failed: u64, requests: u64, level: f64) -> (f64, f64) {
    if requests == 0 {
        return (0.0, 1.0);
    }
    let (n, z) = (requests as f64, z_for(level));
    let p = failed.min(requests) as f64 / n;
    let centre = p + z * z / (2.0 * n);
    let reach = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    let scale = 1.0 + z * z / n;
    // At none (or all) failed the bound is exactly 0 (or 1); rounding would leave 1e-18.
    let low = if failed == 0 {
        0.0
    } else {
        ((centre - reach) / scale).max(0.0)
    };
    let high = if failed >= requests {
        1.0
    } else {
        ((centre + reach) / scale).min(1.0)
    };
    (low, high)
}

fn percent(share: f64) -> String {
    format!("{:.2}%", share * 100.0)
}

/// Whether the error rate of `measure` moved: intervals apart and, from a rate above
/// zero, by more than the noise floor. More is worse.
pub(super) fn error_rate_difference(
    out: &mut Comparison,
    measure: &str,
    before: &Counts,
    after: &Counts,
) {
    if before.requests == 0 || after.requests == 0 {
        out.unchanged
            .push(format!("{measure} (not judged: a run sent no requests)"));
        return;
    }
    let (bv, av) = (before.error_rate(), after.error_rate());
    let (bl, bh) = wilson(before.failed(), before.requests, out.level);
    let (al, ah) = wilson(after.failed(), after.requests, out.level);
    let apart = al > bh || ah < bl;
    let change = if bv > 0.0 {
        (av - bv) / bv
    } else {
        f64::INFINITY
    };
    if apart && change.abs() > out.noise_floor {
        out.differences.push(Difference {
            measure: measure.to_string(),
            worse: av > bv,
            line: format!(
                "{measure}: {} [{}, {}] ({} of {}) -> {} [{}, {}] ({} of {})",
                percent(bv),
                percent(bl),
                percent(bh),
                before.failed(),
                before.requests,
                percent(av),
                percent(al),
                percent(ah),
                after.failed(),
                after.requests,
            ),
            trace_ids: Vec::new(),
        });
    } else {
        out.unchanged.push(measure.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::LEVEL;

    fn counts(failed: u64, requests: u64) -> Counts {
        let mut c = Counts {
            requests,
            ..Counts::default()
        };
        c.responses.insert("2xx".into(), requests - failed);
        if failed > 0 {
            c.errors.insert("timeout".into(), failed);
        }
        c
    }

    fn judged(before: Counts, after: Counts) -> Comparison {
        let mut out = super::super::tests::empty();
        error_rate_difference(&mut out, "error rate", &before, &after);
        out
    }

    #[test]
    fn the_normal_quantile_and_known_wilson_intervals() {
        assert!((z_for(0.95) - 1.959_964).abs() < 1e-4, "{}", z_for(0.95));
        // 0 of 100 at 95%: [0, 3.7%] (the textbook value).
        let (low, high) = wilson(0, 100, LEVEL);
        assert_eq!(low, 0.0);
        assert!((high - 0.0370).abs() < 5e-4, "{high}");
        // 50 of 100: 0.5 +- 0.097.
        let (low, high) = wilson(50, 100, LEVEL);
        assert!((low - 0.4038).abs() < 5e-4 && (high - 0.5962).abs() < 5e-4);
        assert_eq!(wilson(0, 0, LEVEL), (0.0, 1.0));
    }

    #[test]
    fn a_rise_beyond_the_interval_regresses_and_chance_does_not() {
        let out = judged(counts(0, 5000), counts(0, 5000));
        assert!(out.differences.is_empty());
        assert_eq!(out.unchanged, vec!["error rate"]);
        // Two failures in 5,000 after none: within what chance gives.
        assert!(
            judged(counts(0, 5000), counts(2, 5000))
                .differences
                .is_empty()
        );
        let worse = judged(counts(0, 5000), counts(50, 5000));
        assert_eq!(worse.differences.len(), 1);
        assert!(worse.differences[0].worse);
        assert_eq!(
            worse.differences[0].line,
            "error rate: 0.00% [0.00%, 0.08%] (0 of 5000) -> 1.00% [0.76%, 1.32%] (50 of 5000)"
        );
        let better = judged(counts(50, 5000), counts(0, 5000));
        assert!(!better.differences[0].worse);
        assert!(
            judged(counts(0, 0), counts(0, 10)).unchanged[0].contains("not judged"),
            "no requests: nothing to judge"
        );
    }
}
