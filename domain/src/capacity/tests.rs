use hdrhistogram::Histogram;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::knee::binomial;
use super::*;
use crate::histogram::latency_histogram;
use crate::load::{Counts, LEVEL, Model, WarmupPlan};
use crate::request::SpecError;
use serde_json::json;

fn plan(value: serde_json::Value) -> Result<CapacityPlan, SpecError> {
    CapacitySpec::from_json(&value)?.plan()
}

fn base() -> serde_json::Value {
    json!({"operations": [{"path": "/"}], "start_rate": 100, "max_rate": 1000,
           "step": "10s", "discard": "2s", "slo": {"p99": "200ms", "error_rate": "1%"}})
}

#[test]
fn a_geometric_spec_reads_into_a_grid_and_step_plans() {
    let p = plan(base()).expect("valid");
    assert_eq!(
        p.grid,
        vec![100.0, 150.0, 225.0, 337.5, 506.25, 759.38, 1000.0]
    );
    assert_eq!(p.bisect, DEFAULT_BISECT);
    assert_eq!(p.slo.p99_us, 200_000.0);
    assert!((p.slo.error_rate - 0.01).abs() < 1e-12);
    let step = p.step_plan(337.5);
    assert_eq!(step.model, Model::Open);
    assert_eq!(step.start_rate, 337.5);
    assert_eq!(step.stages, vec![(Duration::from_secs(8), 337.5)]);
    assert_eq!(step.warmup, WarmupPlan::Duration(Duration::from_secs(2)));
    assert_eq!(step.timeout, Duration::from_secs(10));
    assert_eq!(p.connections(), 64);
    // Seven steps of 10 s and three bisection rounds at the top rate at most.
    assert_eq!(p.expected_requests(), 30_782 + 30_000);

    let explicit = plan(
        json!({"operations": [{"path": "/"}], "rates": [50, 100, 200],
        "step": "1s", "discard": "250ms", "slo": {"p99": "50"}, "bisect": 0, "floor": 80}),
    )
    .expect("valid");
    assert_eq!(explicit.grid, vec![50.0, 100.0, 200.0]);
    assert_eq!(explicit.slo.p99_us, 50_000.0);
    assert_eq!(explicit.floor, Some(80.0));
    let step = explicit.step_plan(100.0);
    assert_eq!(step.duration, Duration::from_millis(750));
    assert_eq!(
        step.timeout,
        Duration::from_secs(1),
        "the timeout defaults to the step"
    );
}

#[test]
fn bad_specs_say_which_field_to_fix() {
    let with = |patch: serde_json::Value| {
        let mut v = base();
        for (k, val) in patch.as_object().expect("object") {
            if val.is_null() {
                v.as_object_mut().expect("object").remove(k);
            } else {
                v[k] = val.clone();
            }
        }
        v
    };
    let cases = [
        (with(json!({"start_rate": null})), "spec.start_rate"),
        (with(json!({"max_rate": null})), "spec.max_rate"),
        (with(json!({"max_rate": 50})), "spec.max_rate"),
        (with(json!({"growth": 1.0})), "spec.growth"),
        (with(json!({"growth": 1.001})), "spec.growth"),
        (with(json!({"rates": [10, 20]})), "spec.rates"),
        (
            with(json!({"start_rate": null, "max_rate": null, "rates": [10, 5]})),
            "spec.rates[1]",
        ),
        (with(json!({"step": "soon"})), "spec.step"),
        (with(json!({"discard": "10s"})), "spec.discard"),
        (with(json!({"bisect": 11})), "spec.bisect"),
        (with(json!({"floor": -1})), "spec.floor"),
        (with(json!({"slo": {"p99": "fast"}})), "spec.slo.p99"),
        (
            with(json!({"slo": {"p99": "1s", "error_rate": "lots"}})),
            "spec.slo.error_rate",
        ),
        (
            with(json!({"slo": {"p99": "1s", "p50": "1ms"}})),
            "spec.slo.p50",
        ),
        (with(json!({"slo": {"p99": 5}})), "spec.slo.p99"),
        (
            with(json!({"operations": [{"path": "x"}]})),
            "spec.operations[0].path",
        ),
        (with(json!({"connections": 0})), "spec.connections"),
        (with(json!({"timeout": "2m"})), "spec.timeout"),
        (with(json!({"colour": "red"})), "spec.colour"),
    ];
    for (value, field) in cases {
        let err = plan(value.clone()).expect_err(&value.to_string());
        assert_eq!(err.field, field, "{value}: {err}");
    }
}

/// Runs a sweep against a target that meets the SLO up to `capacity`: the rates tried.
fn simulate(grid: Vec<f64>, bisect: u32, capacity: f64) -> (Vec<Step>, Sweep) {
    let mut sweep = Sweep::new(grid, bisect);
    let mut steps = Vec::new();
    while let Some(step) = sweep.next() {
        assert!(steps.len() < 100, "a sweep ends");
        steps.push(step);
        sweep.record(step, step.rate <= capacity, "p99 too high");
    }
    (steps, sweep)
}

#[test]
fn the_sweep_stops_at_the_first_bad_step_and_bisects() {
    let grid = vec![100.0, 150.0, 225.0, 337.5, 506.25, 759.38, 1000.0];
    let (steps, sweep) = simulate(grid.clone(), 3, 400.0);
    let rates: Vec<f64> = steps.iter().map(|s| s.rate).collect();
    assert_eq!(
        rates,
        vec![100.0, 150.0, 225.0, 337.5, 506.25, 421.88, 379.69, 400.79]
    );
    assert!(steps[..5].iter().all(|s| s.stage == Stage::Sweep));
    assert!(steps[5..].iter().all(|s| s.stage == Stage::Bisect));
    assert_eq!(sweep.max_rate_meeting_slo(), Some(379.69));
    assert_eq!(
        sweep.stopped_because(),
        "506.25/s broke the SLO: p99 too high; bisected 3 times: 379.69/s meets it, 400.79/s does not"
    );

    // Every bisection round halves the bracket: the answer is within one step's width
    // over 2^rounds of the capacity.
    for capacity in [120.0, 300.0, 555.0, 999.0] {
        let (_, sweep) = simulate(grid.clone(), 4, capacity);
        let found = sweep.max_rate_meeting_slo().expect("a rate met it");
        assert!(found <= capacity, "{found} > {capacity}");
        let width = grid.iter().find(|r| **r > capacity).expect("above") / 1.5 * 0.5;
        assert!(
            capacity - found <= width / 16.0 + 0.01,
            "{capacity}: {found}"
        );
    }

    let (steps, sweep) = simulate(grid.clone(), 3, 50.0);
    assert_eq!(steps.len(), 1, "a first bad step ends the sweep");
    assert_eq!(sweep.max_rate_meeting_slo(), None);
    assert!(sweep.stopped_because().ends_with("start lower"));

    let (steps, sweep) = simulate(grid.clone(), 3, 5000.0);
    assert_eq!(steps.len(), grid.len());
    assert_eq!(sweep.max_rate_meeting_slo(), Some(1000.0));
    assert!(sweep.stopped_because().contains("within the SLO"));

    let (steps, sweep) = simulate(grid, 0, 400.0);
    assert_eq!(steps.len(), 5, "no bisection asked");
    assert_eq!(sweep.max_rate_meeting_slo(), Some(337.5));
}

#[test]
fn kneedle_finds_the_bend_of_a_hockey_stick_and_none_in_a_line() {
    let x: Vec<f64> = (0..10).map(|i| i as f64 / 9.0).collect();
    // Flat, then up steeply after the sixth point (index 5).
    let y: Vec<f64> = (0..10)
        .map(|i| if i <= 5 { 0.0 } else { (i - 5) as f64 / 4.0 })
        .collect();
    assert_eq!(kneedle(&x, &y, 1.0), Some(5));
    assert_eq!(kneedle(&x, &x, 1.0), None, "a straight line has no knee");
    let concave: Vec<f64> = x.iter().map(|v| v.sqrt()).collect();
    assert_eq!(kneedle(&x, &concave, 1.0), None, "nor a concave curve");
    assert_eq!(kneedle(&x[..2], &y[..2], 1.0), None);
    // A smooth convex curve bends near where its slope passes the diagonal's.
    let convex: Vec<f64> = x.iter().map(|v| v.powi(4)).collect();
    let at = kneedle(&x, &convex, 1.0).expect("a knee");
    assert!((5..=7).contains(&at), "{at}");
}

/// A histogram of `n` latencies around `micros` (±10%, deterministic).
fn latencies(n: u64, micros: u64) -> Histogram<u64> {
    let mut h = latency_histogram().expect("histogram");
    for i in 0..n {
        let spread = micros / 10;
        h.record(micros - spread + (i * 7919) % (2 * spread + 1))
            .expect("record");
    }
    h
}

/// p99 flat at 10 ms up to `capacity`, then growing with the overload.
fn hockey_stick(rates: &[f64], capacity: f64) -> Vec<(f64, Ranked)> {
    rates
        .iter()
        .map(|r| {
            let p99 = if *r <= capacity {
                10_000.0
            } else {
                10_000.0 + 2_000_000.0 * (r - capacity) / capacity
            };
            (*r, Ranked::new(&latencies(2000, p99 as u64)))
        })
        .collect()
}

fn knee_over(points: &[(f64, Ranked)]) -> Knee {
    let curve = curve(points);
    let range = (points[0].0, points[points.len() - 1].0);
    let logs = log_p99_range(&curve, range).expect("points");
    knee(&curve, range, logs)
}

#[test]
fn the_knee_of_a_sweep_is_near_its_capacity_with_a_repeatable_interval() {
    let rates = [100.0, 150.0, 225.0, 337.5, 379.69, 400.78, 421.88, 506.25];
    let points = hockey_stick(&rates, 400.0);
    let knee = knee_over(&points);
    assert_eq!(knee.rate, Some(379.69), "{knee:?}");
    assert!(knee.resolved, "{knee:?}");
    let (low, high) = (knee.low.expect("low"), knee.high.expect("high"));
    assert!(
        low <= 379.69 && (379.69..506.25).contains(&high),
        "{knee:?}"
    );
    assert_eq!(knee.found, REPLICATES);
    assert_eq!(knee_over(&points), knee, "the bootstrap is seeded");
    assert!(
        knee.line().starts_with("knee 379.69/s ["),
        "{}",
        knee.line()
    );

    // A sweep that never overloads has no knee.
    let flat = hockey_stick(&rates, 10_000.0);
    let none = knee_over(&flat);
    assert!(!none.resolved && none.rate.is_none(), "{none:?}");

    // A bend at the sweep's last points is not resolved: the knee may lie beyond it.
    let late = hockey_stick(&rates, 410.0);
    let cut: Vec<(f64, Ranked)> = late.into_iter().take(7).collect();
    let edge = knee_over(&cut);
    assert!(!edge.resolved, "{edge:?}");
    assert!(
        edge.reason
            .as_deref()
            .unwrap_or("")
            .contains("touches an end"),
        "{edge:?}"
    );
}

#[test]
fn the_seeded_knee_and_binomial_draws_are_pinned_across_releases() {
    let rates = [100.0, 150.0, 225.0, 337.5, 379.69, 400.78, 421.88, 506.25];
    let points = hockey_stick(&rates, 400.0);
    let knee = knee_over(&points);
    assert_eq!(
        knee_over(&points),
        knee,
        "the same points give the same knee"
    );
    // Pinned: a rand_chacha or rand_distr change that moves the stream fails here.
    assert_eq!((knee.low, knee.high, knee.found), GOLDEN_KNEE, "{knee:?}");
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let draws: Vec<u64> = (0..5).map(|_| binomial(1000, 0.99, &mut rng)).collect();
    assert_eq!(draws, GOLDEN_DRAWS);
}

const GOLDEN_KNEE: (Option<f64>, Option<f64>, usize) = (Some(379.69), Some(379.69), 1000);
const GOLDEN_DRAWS: [u64; 5] = [993, 992, 987, 982, 987];

#[test]
fn binomial_draws_have_the_right_mean_and_stay_in_range() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for (n, p) in [
        (50u64, 0.99),
        (1000, 0.99),
        (100_000, 0.99),
        (7, 0.5),
        (1, 0.99),
    ] {
        let draws: Vec<u64> = (0..4000).map(|_| binomial(n, p, &mut rng)).collect();
        assert!(draws.iter().all(|d| *d <= n));
        let mean = draws.iter().sum::<u64>() as f64 / draws.len() as f64;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (mean - n as f64 * p).abs() <= 4.0 * sd / (draws.len() as f64).sqrt() + 0.01,
            "n {n} p {p}: mean {mean}"
        );
    }
}

#[test]
fn ranks_read_the_histogram_as_it_reads_itself() {
    let h = latencies(1000, 50_000);
    let ranked = Ranked::new(&h);
    assert_eq!(ranked.quantile(0.99), h.value_at_quantile(0.99));
    assert_eq!(ranked.quantile(0.5), h.value_at_quantile(0.5));
    assert_eq!(rate_text(337.5), "337.5/s");
    assert_eq!(rate_text(300.0), "300/s");
    assert_eq!(rate_text(759.375), "759.38/s");
}

/// A capacity result whose p99 bends at `capacity`, as a run would store it.
fn result(rates: &[f64], capacity: f64) -> serde_json::Value {
    let points: Vec<SweepPoint> = rates
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let p99 = if *r <= capacity {
                10_000.0
            } else {
                10_000.0 + 2_000_000.0 * (r - capacity) / capacity
            };
            let h = latencies(5000, p99 as u64);
            SweepPoint {
                step: i as u32 + 1,
                stage: Stage::Sweep,
                offered: *r,
                achieved: r.min(capacity),
                counts: Counts {
                    requests: 5000,
                    ..Counts::default()
                },
                error_rate: 0.0,
                late: 0,
                dropped: 0,
                p50: crate::quantile::percentile(&h, 0.5, LEVEL),
                p99: crate::quantile::percentile(&h, 0.99, LEVEL),
                p99_us: Some(h.value_at_quantile(0.99)),
                meets_slo: *r <= capacity,
                broke: Vec::new(),
                histogram: crate::histogram::encode(&h).expect("encode"),
            }
        })
        .collect();
    let knee = knee_of(&points);
    serde_json::to_value(CapacityResult {
        slo: Slo {
            p99_us: 100_000.0,
            error_rate: 0.01,
        },
        floor: None,
        max_rate_meeting_slo: Some(capacity),
        stopped_because: "test".to_string(),
        points,
        knee,
        step_seconds: 1.0,
        discard_seconds: 0.25,
        notes: Vec::new(),
    })
    .expect("json")
}

#[test]
fn compare_judges_each_shared_point_and_the_knee_over_the_shared_range() {
    use crate::compare::{NOISE_FLOOR, Side, Verdict, compare};
    use crate::run::{RunKind, RunStatus};
    let side = |id: &'static str, result: &'static serde_json::Value| Side {
        id,
        kind: RunKind::Capacity,
        scenario_version: "sha256:1",
        environment: "staging",
        target: "http://127.0.0.1:1",
        status: RunStatus::Passed,
        result: Some(result),
    };
    let grid = [
        100.0, 150.0, 225.0, 337.5, 379.69, 421.88, 506.25, 759.38, 1000.0,
    ];
    let before: &'static serde_json::Value = Box::leak(Box::new(result(&grid, 400.0)));
    // After: the capacity fell to 300/s; its sweep also bisected at a rate before never ran.
    let after: &'static serde_json::Value = Box::leak(Box::new(result(
        &[100.0, 150.0, 225.0, 281.25, 337.5, 506.25],
        300.0,
    )));
    let out = compare(&side("b", before), &side("a", after), NOISE_FLOOR).expect("comparable");
    assert_eq!(out.verdict, Verdict::Regressed, "{out:?}");
    let lines = out.lines();
    assert!(
        lines.iter().any(|l| l.starts_with("p99 @ 337.5/s: 10")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("knee over 100/s to 506.25/s: 379.69/s")
                && l.contains("-> 281.25/s")),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("@ 281.25/s:")),
        "a rate one sweep measured is not compared: {lines:?}"
    );
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("points of one sweep only")),
        "{:?}",
        out.notes
    );

    let same = compare(&side("b", before), &side("b2", before), NOISE_FLOOR).expect("same");
    assert_eq!(same.verdict, Verdict::Unchanged, "{same:?}");
    assert!(same.unchanged.iter().any(|u| u.starts_with("knee over")));
}

#[test]
fn the_example_is_a_valid_spec() {
    let example: serde_json::Value =
        serde_json::from_str(include_str!("../../../examples/capacity.json")).expect("JSON");
    let p = plan(example).expect("valid");
    assert_eq!(p.grid.first(), Some(&50.0));
    assert_eq!(p.grid.last(), Some(&2000.0));
    assert_eq!(p.floor, Some(100.0));
}
