use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use super::bootstrap::{Blocks, REPLICATES, bootstrap};
use super::latency::latency_difference;
use super::load::IntervalsUsed;
use super::*;
use crate::histogram::latency_histogram;
use crate::load::LEVEL;
use crate::run::{RunKind, RunStatus};

const GOLDEN_BOOTSTRAP: [(u64, u64); 2] = [(2000, 2000), (8000, 16000)];
/// The first blocks the bootstrap draws from seed 42 among eight.
const GOLDEN_PICKS: [usize; 8] = [1, 5, 1, 7, 6, 3, 2, 5];

/// Latencies (µs) from a log-normal-ish distribution: exp of a normal, scaled.
fn sample(rng: &mut ChaCha8Rng, n: usize, scale: f64) -> Histogram<u64> {
    let mut h = latency_histogram().expect("histogram");
    for _ in 0..n {
        // Box-Muller.
        let (u1, u2): (f64, f64) = (rng.random_range(1e-12..1.0), rng.random());
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        let us = (scale * (0.5 * z).exp()).max(1.0) as u64;
        h.record(us).expect("record");
    }
    h
}

pub(super) fn empty() -> Comparison {
    Comparison {
        before: "a".into(),
        after: "b".into(),
        verdict: Verdict::Unchanged,
        differences: Vec::new(),
        unchanged: Vec::new(),
        notes: Vec::new(),
        level: LEVEL,
        noise_floor: NOISE_FLOOR,
        samples: None,
    }
}

#[test]
fn a_a_comparisons_rarely_differ_and_a_30_percent_shift_always_does() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (mut false_alarms, trials) = (0, 1000);
    for _ in 0..trials {
        let b = sample(&mut rng, 2000, 10_000.0);
        let a = sample(&mut rng, 2000, 10_000.0);
        let mut out = empty();
        latency_difference(&mut out, "p99 total", &b, &a, 0.99, None);
        latency_difference(&mut out, "p50 total", &b, &a, 0.5, None);
        if out.differences.iter().any(|d| d.worse) {
            false_alarms += 1;
        }
    }
    // Each interval misses at most 5%; non-overlap of two is far rarer.
    assert!(
        false_alarms <= trials / 20,
        "{false_alarms} of {trials} A/A comparisons said regressed"
    );
    for _ in 0..50 {
        let b = sample(&mut rng, 2000, 10_000.0);
        let a = sample(&mut rng, 2000, 13_000.0);
        let mut out = empty();
        latency_difference(&mut out, "p50 total", &b, &a, 0.5, None);
        assert!(
            out.differences.first().is_some_and(|d| d.worse),
            "a 30% slower service regresses: {out:?}"
        );
    }
}

#[test]
fn small_runs_say_how_many_samples_they_need() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (b, a) = (sample(&mut rng, 100, 1000.0), sample(&mut rng, 100, 5000.0));
    let mut out = empty();
    latency_difference(&mut out, "p99 total", &b, &a, 0.99, None);
    assert!(out.differences.is_empty());
    assert_eq!(
        out.unchanged,
        vec!["p99 total (insufficient samples (need 368))".to_string()]
    );
}

fn side<'a>(id: &'a str, version: &'a str, status: RunStatus, result: &'a Value) -> Side<'a> {
    Side {
        id,
        kind: RunKind::Checks,
        scenario_version: version,
        environment: "staging",
        target: "http://127.0.0.1:1",
        status,
        result: Some(result),
    }
}

#[test]
fn a_check_that_turns_to_fail_regresses_and_mismatches_are_refused() {
    let verdict = |passed: bool| {
        serde_json::json!({"passed": passed, "total": 1, "failed": u8::from(!passed),
            "checks": [{"name": "health", "method": "GET", "path": "/health", "passed": passed,
                        "status": if passed { 200 } else { 500 }, "latency_ms": 1.0,
                        "failures": if passed { vec![] } else { vec!["status 500, expected 200"] }}],
            "invariants": [{"name": "no 5xx", "passed": passed}]})
    };
    let (good, bad) = (verdict(true), verdict(false));
    let before = side("r1", "sha256:1", RunStatus::Passed, &good);
    let after = side("r2", "sha256:1", RunStatus::Failed, &bad);
    let out = compare(&before, &after, NOISE_FLOOR).expect("comparable");
    assert_eq!(out.verdict, Verdict::Regressed);
    assert_eq!(
        out.lines(),
        vec![
            "regressed".to_string(),
            "check health: passed -> failed (status 500, expected 200)".to_string(),
            "invariant no 5xx: broke".to_string(),
        ]
    );
    let healed = compare(&after, &before, NOISE_FLOOR).expect("comparable");
    assert_eq!(healed.verdict, Verdict::Improved);

    let other = side("r3", "sha256:2", RunStatus::Passed, &good);
    assert!(matches!(
        compare(&before, &other, NOISE_FLOOR),
        Err(Refusal::Different {
            what: "scenario version",
            ..
        })
    ));
    // A run stored before targets were normalised compares with one stored after.
    let slash = Side {
        target: "HTTP://127.0.0.1:1/",
        ..side("r6", "sha256:1", RunStatus::Passed, &good)
    };
    assert!(compare(&before, &slash, NOISE_FLOOR).is_ok());
    let elsewhere = Side {
        target: "http://127.0.0.1:2",
        ..side("r7", "sha256:1", RunStatus::Passed, &good)
    };
    assert!(matches!(
        compare(&before, &elsewhere, NOISE_FLOOR),
        Err(Refusal::Different { what: "target", .. })
    ));
    let running = side("r4", "sha256:1", RunStatus::Running, &good);
    assert!(matches!(
        compare(&before, &running, NOISE_FLOOR),
        Err(Refusal::NotFinished { .. })
    ));
    let errored = side("r5", "sha256:1", RunStatus::Error, &good);
    let out = compare(&before, &errored, NOISE_FLOOR).expect("an error run compares");
    assert_eq!(out.verdict, Verdict::Unchanged);
    assert!(out.notes[0].contains("ended error"), "{:?}", out.notes);
}

/// A load result of the given operations, each as its blocks (histograms), with the
/// total's blocks merged from them; `operation_blocks` false writes it as results did
/// before operations kept blocks.
fn load_result(operations: &[(&str, Vec<Histogram<u64>>)], operation_blocks: bool) -> Value {
    use crate::histogram::encode;
    use crate::load::{
        Counts, HttpVersion, LoadResult, Model, OperationResult, WarmupPlan, WarmupResult,
        operation_block_histogram, summarise_latency,
    };
    let merge = |blocks: &[Histogram<u64>]| {
        let mut h = latency_histogram().expect("histogram");
        blocks.iter().for_each(|b| h.add(b).expect("merge"));
        h
    };
    let count = operations[0].1.len();
    let total_blocks: Vec<Histogram<u64>> = (0..count)
        .map(|i| {
            merge(
                &operations
                    .iter()
                    .map(|(_, b)| b[i].clone())
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let total = merge(&total_blocks);
    let summary = summarise_latency(&total).expect("summary");
    let result = LoadResult {
        model: Model::Open,
        http: HttpVersion::Http1,
        connections: 8,
        intended_rate: Some(400.0),
        achieved_rate: 400.0,
        measured_seconds: count as f64,
        warmup: WarmupResult {
            plan: WarmupPlan::None,
            requests: 0,
            discarded: true,
        },
        counts: Counts {
            requests: total.len(),
            responses: [("2xx".to_string(), total.len())].into(),
            errors: Default::default(),
        },
        error_rate: 0.0,
        intended: total.len(),
        sent: total.len(),
        late: 0,
        dropped: 0,
        late_tolerance_ms: 10,
        latency: summary.clone(),
        uncorrected_latency: summary,
        operations: operations
            .iter()
            .map(|(name, blocks)| OperationResult {
                name: name.to_string(),
                method: "GET".into(),
                path: "/".into(),
                counts: Counts::default(),
                error_rate: 0.0,
                latency: summarise_latency(&merge(blocks)).expect("summary"),
                // Kept at the agent's precision for operation blocks.
                blocks: if operation_blocks {
                    blocks
                        .iter()
                        .map(|b| {
                            let mut kept = operation_block_histogram().expect("histogram");
                            kept.add(b).expect("merge");
                            encode(&kept).expect("encode")
                        })
                        .collect()
                } else {
                    Vec::new()
                },
            })
            .collect(),
        thresholds: Vec::new(),
        aborted: None,
        notes: Vec::new(),
        blocks: total_blocks
            .iter()
            .map(|b| encode(b).expect("encode"))
            .collect(),
        block_seconds: 1,
        operation_block_seconds: u64::from(operation_blocks),
        slow_seconds: Vec::new(),
    };
    serde_json::to_value(result).expect("json")
}

fn load_side<'a>(id: &'a str, result: &'a Value) -> Side<'a> {
    Side {
        kind: RunKind::Load,
        ..side(id, "sha256:1", RunStatus::Passed, result)
    }
}

/// 60 one-second blocks of 200 latencies around `scale` µs; the block `slow` (if any)
/// is five times slower throughout, as a pause of the target would make it.
fn blocks(rng: &mut ChaCha8Rng, scale: f64, slow: Option<usize>) -> Vec<Histogram<u64>> {
    (0..60)
        .map(|i| {
            let factor = if slow == Some(i) { 5.0 } else { 1.0 };
            sample(rng, 200, scale * factor)
        })
        .collect()
}

#[test]
fn one_slow_block_of_an_operation_is_judged_with_its_block_bootstrap() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let before_ops = [
        ("GET /a", blocks(&mut rng, 10_000.0, None)),
        ("GET /b", blocks(&mut rng, 10_000.0, None)),
    ];
    let after_ops = [
        ("GET /a", blocks(&mut rng, 10_000.0, Some(30))),
        ("GET /b", blocks(&mut rng, 10_000.0, None)),
    ];
    // Written as before operations kept blocks: the operation's exact binomial
    // interval alone takes one slow second for a regression of its p99.
    let (b, a) = (
        load_result(&before_ops, false),
        load_result(&after_ops, false),
    );
    let old = compare(&load_side("r1", &b), &load_side("r2", &a), NOISE_FLOOR).expect("comparable");
    assert_eq!(old.verdict, Verdict::Regressed, "{:?}", old.lines());
    assert_eq!(
        old.differences
            .iter()
            .map(|d| d.measure.as_str())
            .collect::<Vec<_>>(),
        vec!["p99 GET /a"]
    );
    // The regressed operation's p99 names the candidate's slowest requests of that
    // operation, from its slowest seconds.
    let id = |n: u64| crate::load::trace_id(0xfeed, n);
    let mut traced = a.clone();
    traced["slow_seconds"] = serde_json::json!([
        {"second": 31, "p99_us": 50_000, "exemplars": {"slowest": [
            {"trace_id": id(1), "latency_us": 61_000, "operation": "GET /a"},
            {"trace_id": id(2), "latency_us": 60_000, "operation": "GET /b"},
            {"trace_id": id(3), "latency_us": 59_000, "operation": "GET /a"}]}},
        {"second": 7, "p99_us": 12_000, "exemplars": {"slowest": [
            {"trace_id": id(4), "latency_us": 13_000, "operation": "GET /a"}]}}
    ]);
    let named =
        compare(&load_side("r1", &b), &load_side("r2", &traced), NOISE_FLOOR).expect("comparable");
    let p99 = &named.differences[0];
    assert_eq!(p99.trace_ids, [id(1), id(3), id(4)]);
    assert!(
        p99.line.ends_with(&format!(
            "; slowest traces: {} (second 31, 61.00 ms), {} (second 31, 59.00 ms), {} (second 7, 13.00 ms)",
            id(1),
            id(3),
            id(4)
        )),
        "{}",
        p99.line
    );
    assert!(
        old.notes.iter().any(|n| n.starts_with("total intervals: ")
            && n.ends_with(
                "; 2 operations: exact binomial only (a run keeps fewer than 5 blocks of them)"
            )),
        "{:?}",
        old.notes
    );
    // With its blocks, the operation's interval covers how much one second weighs.
    let (b, a) = (
        load_result(&before_ops, true),
        load_result(&after_ops, true),
    );
    let new = compare(&load_side("r1", &b), &load_side("r2", &a), NOISE_FLOOR).expect("comparable");
    assert_eq!(new.verdict, Verdict::Unchanged, "{:?}", new.lines());
    assert!(new.unchanged.contains(&"p99 GET /a".to_string()));
    assert_eq!(
        new.notes[1..],
        vec![format!(
            "total and operation intervals (2 operations): exact binomial widened by a block bootstrap (60 and 60 blocks of 1 s, {REPLICATES} resamples)"
        )]
    );
    assert!(
        new.notes[0].starts_with("max total: ")
            && new.notes[0].ends_with(" (information, not judged)"),
        "{:?}",
        new.notes
    );
    // A shift of every second is still a regression.
    let slower = [
        ("GET /a", blocks(&mut rng, 13_000.0, None)),
        ("GET /b", blocks(&mut rng, 10_000.0, None)),
    ];
    let a = load_result(&slower, true);
    let out = compare(&load_side("r1", &b), &load_side("r3", &a), NOISE_FLOOR).expect("comparable");
    assert!(
        out.differences
            .iter()
            .any(|d| d.measure == "p50 GET /a" && d.worse),
        "{:?}",
        out.lines()
    );
}

#[test]
fn results_without_operation_blocks_still_read_and_compare() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let ops = |rng: &mut ChaCha8Rng| {
        [
            ("GET /a", blocks(rng, 10_000.0, None)),
            ("GET /b", blocks(rng, 20_000.0, None)),
        ]
    };
    let old = load_result(&ops(&mut rng), false);
    assert!(
        old["operations"][0].get("blocks").is_none(),
        "no empty field is written"
    );
    let new = load_result(&ops(&mut rng), true);
    assert_eq!(
        new["operations"][0]["blocks"].as_array().map(Vec::len),
        Some(60)
    );
    for (b, a) in [(&old, &new), (&new, &old)] {
        let out =
            compare(&load_side("r1", b), &load_side("r2", a), NOISE_FLOOR).expect("comparable");
        assert_eq!(out.verdict, Verdict::Unchanged, "{:?}", out.lines());
        assert_eq!(
            out.unchanged,
            vec![
                "p50 total",
                "p99 total",
                "p99.9 total",
                "p50 GET /a",
                "p99 GET /a",
                "p50 GET /b",
                "p99 GET /b",
                "throughput (open model at its intended rate: not judged)",
                "error rate"
            ],
            "p50 and p99 of the total and each operation, the total's tail, throughput and errors"
        );
        assert!(
            out.notes
                .iter()
                .any(|n| n.contains("2 operations: exact binomial only")),
            "{:?}",
            out.notes
        );
    }
}

/// Eight blocks over five latencies, fixed: the bootstrap's input for the golden test.
fn fixed_blocks() -> (Vec<u64>, Blocks) {
    let values = vec![1_000, 2_000, 4_000, 8_000, 16_000];
    let counts = (0..8u64)
        .map(|i| {
            vec![
                (0, 10 + i),
                (1, 5 + 2 * i),
                (2, 3),
                (3, i % 3),
                (4, u64::from(i == 5)),
            ]
        })
        .collect();
    (values, Blocks { counts })
}

#[test]
fn the_seeded_bootstrap_gives_one_answer_across_runs_and_releases() {
    let (values, blocks) = fixed_blocks();
    let run = || {
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        bootstrap(&values, &blocks, &[0.5, 0.99], LEVEL, &mut rng)
    };
    let first = run();
    assert_eq!(
        run(),
        first,
        "the same seed and blocks give the same intervals"
    );
    // Pinned: a rand_chacha or bootstrap change that moves the stream fails here.
    assert_eq!(first, GOLDEN_BOOTSTRAP);
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let picks: Vec<usize> = (0..8).map(|_| rng.random_range(0..8)).collect();
    assert_eq!(picks, GOLDEN_PICKS);
}

#[test]
fn the_note_names_the_blocks_of_the_total_and_of_the_operations() {
    let used = IntervalsUsed {
        total: Some((60, 60)),
        operations_widened: 100,
        operation_blocks: Some((12, 12)),
        operations_binomial: 0,
    };
    assert_eq!(
        used.note(60, 300).as_deref(),
        Some(
            "total intervals: exact binomial widened by a block bootstrap (60 and 60 blocks of 60 s, 400 resamples); operation intervals (100 operations): exact binomial widened by a block bootstrap (12 and 12 blocks of 300 s, 400 resamples)"
        )
    );
    assert_eq!(IntervalsUsed::default().note(1, 1), None);
}

#[test]
fn a_saturated_generator_on_either_side_refuses_a_verdict() {
    use crate::stress::{Basis, Saturation, StressSecond};
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let healthy = load_result(&[("GET /", blocks(&mut rng, 10_000.0, None))], true);
    // Thirty percent slower: a regression, were the measure to be trusted.
    let slower = load_result(&[("GET /", blocks(&mut rng, 13_000.0, None))], true);
    let out = compare(
        &load_side("r1", &healthy),
        &load_side("r2", &slower),
        NOISE_FLOOR,
    )
    .expect("comparable");
    assert_eq!(out.verdict, Verdict::Regressed, "{:?}", out.lines());
    let mut saturation = Saturation::new(Basis::Measure);
    let starved = StressSecond {
        second: 9,
        measure_second: Some(4),
        cpu_host_percent: 100.0,
        cpu_agent_percent: 19.5,
        cpus_allowed: 0.2,
        memory_used_bytes: 0,
        memory_total_bytes: 0,
        agent_memory_bytes: 0,
        load_average: [2.0, 1.0, 0.5],
        agent_sockets: 8,
        host_tcp_sockets: 20,
        lag_ms: 3.0,
    };
    saturation.stress(4, &starved);
    let mut saturated = slower.clone();
    saturated["generator_saturated"] =
        serde_json::to_value(saturation.verdict().expect("saturated")).expect("json");
    for (b, a, id) in [(&healthy, &saturated, "r2"), (&saturated, &healthy, "r1")] {
        let refusal =
            compare(&load_side("r1", b), &load_side("r2", a), NOISE_FLOOR).expect_err("refused");
        assert!(
            matches!(&refusal, Refusal::GeneratorSaturated { id: i, .. } if i == id),
            "{refusal:?}"
        );
        let text = refusal.to_string();
        assert!(
            text.starts_with(&format!(
                "the measurement is not trustworthy: run {id}'s generator saturated for 1 s (agent CPU up to 98% of the 0.2 CPUs it may use in 1 s, bound 80%)"
            )),
            "{text}"
        );
    }
    // A verdict of `null` (as a healthy run might be written by hand) is no verdict.
    let mut null = slower.clone();
    null["generator_saturated"] = Value::Null;
    let out = compare(
        &load_side("r1", &healthy),
        &load_side("r2", &null),
        NOISE_FLOOR,
    )
    .expect("comparable");
    assert_eq!(out.verdict, Verdict::Regressed);
}

/// A closed-model result of one operation's `blocks`: its rate is what they counted.
fn closed(blocks: Vec<Histogram<u64>>) -> Value {
    let seconds = blocks.len() as f64;
    let requests: u64 = blocks.iter().map(Histogram::len).sum();
    let mut result = load_result(&[("GET /", blocks)], true);
    result["model"] = Value::from("closed");
    result["intended_rate"] = Value::Null;
    result["achieved_rate"] = Value::from(requests as f64 / seconds);
    result
}

/// Eight seconds of about 2,000 answers around 100 ms, or (stalled) half as many with
/// 20 answers of each second held for two seconds, as a target that stops answering
/// for part of every second gives a closed model.
fn closed_seconds(rng: &mut ChaCha8Rng, stalled: bool) -> Vec<Histogram<u64>> {
    (0..8)
        .map(|_| {
            let n = rng.random_range(1980..2020);
            if !stalled {
                return sample(rng, n, 100_000.0);
            }
            let mut h = sample(rng, n / 2, 100_000.0);
            h.record_n(2_000_000, 20).expect("record");
            h
        })
        .collect()
}

#[test]
fn a_closed_model_that_loses_throughput_regresses_with_that_line_first() {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let steady = closed(closed_seconds(&mut rng, false));
    let again = closed(closed_seconds(&mut rng, false));
    let out = compare(
        &load_side("r1", &steady),
        &load_side("r2", &again),
        NOISE_FLOOR,
    )
    .expect("comparable");
    assert_eq!(out.verdict, Verdict::Unchanged, "{:?}", out.lines());
    assert!(out.unchanged.contains(&"throughput".to_string()));

    let stalled = closed(closed_seconds(&mut rng, true));
    let out = compare(
        &load_side("r1", &steady),
        &load_side("r3", &stalled),
        NOISE_FLOOR,
    )
    .expect("comparable");
    assert_eq!(out.verdict, Verdict::Regressed, "{:?}", out.lines());
    let measures: Vec<&str> = out.differences.iter().map(|d| d.measure.as_str()).collect();
    assert_eq!(measures[..2], ["throughput", "p99.9 total"], "{measures:?}");
    assert!(out.differences[..2].iter().all(|d| d.worse));
    let line = &out.differences[0].line;
    assert!(
        line.starts_with("throughput: 1,999/s [") && line.ends_with("(-49%)"),
        "{line}"
    );
    // The maximum informs, it does not decide.
    assert!(
        out.notes
            .iter()
            .any(|n| n.starts_with("max total: ") && n.contains("-> 2000.")),
        "{:?}",
        out.notes
    );
    // The other way round: throughput gained, an improvement.
    let out = compare(
        &load_side("r3", &stalled),
        &load_side("r1", &steady),
        NOISE_FLOOR,
    )
    .expect("comparable");
    assert_eq!(out.verdict, Verdict::Improved, "{:?}", out.lines());
    assert_eq!(out.differences[0].measure, "throughput");
}

#[test]
fn results_before_blocks_leave_throughput_unjudged_not_in_error() {
    let mut rng = ChaCha8Rng::seed_from_u64(22);
    let mut old = closed(closed_seconds(&mut rng, false));
    old["blocks"] = Value::Array(Vec::new());
    old["operations"][0]
        .as_object_mut()
        .expect("operation")
        .remove("blocks");
    let new = closed(closed_seconds(&mut rng, true));
    let out =
        compare(&load_side("r1", &old), &load_side("r2", &new), NOISE_FLOOR).expect("comparable");
    assert!(
        out.unchanged.contains(
            &"throughput (not judged: a run keeps fewer than 5 whole blocks of seconds)"
                .to_string()
        ),
        "{:?}",
        out.unchanged
    );
}

#[test]
fn a_rising_error_rate_regresses_a_load_run() {
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let healthy = closed(closed_seconds(&mut rng, false));
    let mut failing = closed(closed_seconds(&mut rng, false));
    let requests = failing["requests"].as_u64().expect("requests");
    failing["responses"] = serde_json::json!({"2xx": requests - 200, "5xx": 200});
    let out = compare(
        &load_side("r1", &healthy),
        &load_side("r2", &failing),
        NOISE_FLOOR,
    )
    .expect("comparable");
    assert_eq!(out.verdict, Verdict::Regressed, "{:?}", out.lines());
    assert_eq!(
        out.differences[0].measure,
        "error rate",
        "{:?}",
        out.lines()
    );
}

#[test]
fn an_open_model_short_of_its_rate_is_judged_on_throughput() {
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    let open = |blocks: Vec<Histogram<u64>>, intended: f64| {
        let mut result = closed(blocks);
        result["model"] = Value::from("open");
        result["intended_rate"] = Value::from(intended);
        result
    };
    // Both asked for 2,000/s; the second got half: the target could not keep up.
    let kept = open(closed_seconds(&mut rng, false), 2000.0);
    let short = open(closed_seconds(&mut rng, true), 2000.0);
    let out = compare(
        &load_side("r1", &kept),
        &load_side("r2", &short),
        NOISE_FLOOR,
    )
    .expect("comparable");
    assert_eq!(
        out.differences[0].measure,
        "throughput",
        "{:?}",
        out.lines()
    );
    // Both at their rate: the schedule's, not the target's, so not judged.
    let again = open(closed_seconds(&mut rng, false), 2000.0);
    let out = compare(
        &load_side("r1", &kept),
        &load_side("r3", &again),
        NOISE_FLOOR,
    )
    .expect("comparable");
    assert!(
        out.unchanged
            .contains(&"throughput (open model at its intended rate: not judged)".to_string()),
        "{:?}",
        out.unchanged
    );
}

/// Ten seconds of a closed model of 200 connections against a 100 ms service (about
/// 2,000 answers a second, 100 to 104 ms each); with `stall_at`, the target answers
/// nothing in that second and the 200 held requests are answered in the next, at 1.1 s.
fn ten_seconds(rng: &mut ChaCha8Rng, stall_at: Option<usize>) -> Vec<Histogram<u64>> {
    (0..10)
        .map(|i| {
            let mut h = latency_histogram().expect("histogram");
            if stall_at == Some(i) {
                return h;
            }
            let n = rng.random_range(1980..2020);
            for _ in 0..n {
                h.record(rng.random_range(100_000..104_000))
                    .expect("record");
            }
            if stall_at.map(|s| s + 1) == Some(i) {
                h.record_n(1_100_000, 200).expect("record");
            }
            h
        })
        .collect()
}

#[test]
fn one_stalled_second_in_ten_regresses_on_throughput_and_the_tail() {
    let mut rng = ChaCha8Rng::seed_from_u64(25);
    let steady = closed(ten_seconds(&mut rng, None));
    let stalled = closed(ten_seconds(&mut rng, Some(4)));
    let out = compare(
        &load_side("r1", &steady),
        &load_side("r2", &stalled),
        NOISE_FLOOR,
    )
    .expect("comparable");
    assert_eq!(out.verdict, Verdict::Regressed, "{:?}", out.lines());
    let measures: Vec<&str> = out.differences.iter().map(|d| d.measure.as_str()).collect();
    assert_eq!(measures[..2], ["throughput", "p99.9 total"], "{measures:?}");
    let throughput = &out.differences[0].line;
    assert!(
        throughput
            .contains("(-9%; after: 1 second at 0.0/s, under half of before's median second (1,9"),
        "{throughput}"
    );
    let tail = &out.differences[1].line;
    assert!(
        tail.contains("; over twice before's slowest request (10"),
        "{tail}"
    );
    assert!(
        out.differences[1].trace_ids.is_empty(),
        "a result without slow seconds names no trace"
    );
    // The other way round: the steady run improves on the stalled one, by the same reading.
    let out = compare(
        &load_side("r2", &stalled),
        &load_side("r1", &steady),
        NOISE_FLOOR,
    )
    .expect("comparable");
    assert_eq!(out.verdict, Verdict::Improved, "{:?}", out.lines());
    assert!(
        out.differences[0]
            .line
            .contains("before: 1 second at 0.0/s, under half of after's median second"),
        "{:?}",
        out.lines()
    );
}

#[test]
fn steady_closed_pairs_show_no_excursion() {
    let mut rng = ChaCha8Rng::seed_from_u64(26);
    let mut differing = 0;
    for i in 0..20 {
        let (b, a) = (
            closed(ten_seconds(&mut rng, None)),
            closed(ten_seconds(&mut rng, None)),
        );
        let (bi, ai) = (format!("b{i}"), format!("a{i}"));
        let out =
            compare(&load_side(&bi, &b), &load_side(&ai, &a), NOISE_FLOOR).expect("comparable");
        if out.verdict != Verdict::Unchanged {
            differing += 1;
        }
        assert!(
            out.differences.iter().all(|d| !d.line.contains("; ")),
            "{:?}",
            out.lines()
        );
    }
    assert!(differing <= 1, "{differing} of 20 A/A pairs differ");
}
