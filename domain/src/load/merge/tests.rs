//! Merging shares is exact: the merged histogram is the one of every sample recorded
//! together, and the counts are the sums (a property test, fixed seed, bounded cases);
//! thresholds are judged again on the whole.

use proptest::prelude::*;

use super::*;
use crate::RunStatus;
use crate::histogram::MAX_MICROS;

/// One share's samples (µs) and its failures by kind.
#[derive(Debug, Clone)]
struct Part {
    samples: Vec<u64>,
    failed: u64,
    late: u64,
}

fn histogram_of(samples: &[u64]) -> Histogram<u64> {
    let mut h = latency_histogram().expect("histogram");
    for s in samples {
        h.record(*s).expect("record");
    }
    h
}

fn counts(part: &Part) -> Counts {
    let mut c = Counts {
        requests: part.samples.len() as u64 + part.failed,
        ..Counts::default()
    };
    c.responses.insert("2xx".into(), part.samples.len() as u64);
    if part.failed > 0 {
        c.errors.insert("timeout".into(), part.failed);
    }
    c
}

fn second_of(part: &Part) -> LoadSecond {
    let encoded = encode(&histogram_of(&part.samples)).expect("encode");
    let mut operations = BTreeMap::new();
    operations.insert(
        "GET /".to_string(),
        OperationSecond {
            counts: counts(part),
            histogram: Some(encoded.clone()),
        },
    );
    LoadSecond {
        second: 4,
        phase: "measure".into(),
        counts: counts(part),
        intended: part.samples.len() as u64 + part.failed,
        sent: part.samples.len() as u64 + part.failed,
        late: part.late,
        late_held: part.late / 2,
        late_behind: part.late / 4,
        dropped: 1,
        histogram: Some(encoded.clone()),
        uncorrected_histogram: Some(encoded),
        operations,
        exemplars: exemplars_of(part),
    }
}

/// A share's second's exemplars: its three slowest samples.
fn exemplars_of(part: &Part) -> Exemplars {
    let mut slowest: Slowest<(), SLOWEST_PER_SECOND> = Slowest::default();
    part.samples.iter().for_each(|s| slowest.offer(*s, ()));
    Exemplars {
        slowest: slowest
            .iter()
            .map(|(latency_us, _)| Exemplar {
                trace_id: trace_id(1, latency_us),
                latency_us,
                operation: "GET /".into(),
                outcome: None,
            })
            .collect(),
        failed: Vec::new(),
    }
}

/// The three largest of `samples`, largest first.
fn top3(mut samples: Vec<u64>) -> Vec<u64> {
    samples.sort_unstable_by(|a, b| b.cmp(a));
    samples.truncate(3);
    samples
}

fn result_of(part: &Part, thresholds: &[&str]) -> LoadResult {
    let latency = histogram_of(&part.samples);
    let counts = counts(part);
    let thresholds: Vec<Threshold> = thresholds
        .iter()
        .map(|t| t.parse().expect("threshold"))
        .collect();
    let block = encode(&latency).expect("encode");
    let mut result = LoadResult {
        model: Model::Open,
        http: HttpVersion::Http1,
        connections: 4,
        intended_rate: Some(100.0),
        achieved_rate: 99.0,
        measured_seconds: 2.0,
        warmup: WarmupResult {
            plan: WarmupPlan::None,
            requests: 0,
            discarded: true,
        },
        error_rate: counts.error_rate(),
        intended: counts.requests,
        sent: counts.requests,
        late: part.late,
        dropped: 0,
        late_tolerance_ms: 10,
        latency: summarise_latency(&latency).expect("summary"),
        uncorrected_latency: summarise_latency(&latency).expect("summary"),
        operations: vec![OperationResult {
            name: "GET /".into(),
            method: "GET".into(),
            path: "/".into(),
            counts: counts.clone(),
            error_rate: counts.error_rate(),
            latency: summarise_latency(&latency).expect("summary"),
            blocks: vec![block.clone(), block.clone()],
        }],
        thresholds: judge_all(&thresholds, &latency, &counts),
        aborted: None,
        notes: Vec::new(),
        blocks: vec![block],
        block_seconds: 2,
        operation_block_seconds: 1,
        slow_seconds: vec![SlowSecond {
            second: 4,
            p99_us: latency.value_at_quantile(0.99),
            exemplars: exemplars_of(part),
        }],
        counts,
    };
    result.notes = result.standard_notes();
    result
}

fn part() -> impl Strategy<Value = Part> {
    (
        prop::collection::vec(
            prop_oneof![1u64..1_000, 1u64..100_000, 1u64..=MAX_MICROS],
            0..300,
        ),
        0u64..50,
        0u64..50,
    )
        .prop_map(|(samples, failed, late)| Part {
            samples,
            failed,
            late,
        })
}

proptest! {
    #![proptest_config(crate::proptests::config(64))]

    #[test]
    fn merged_seconds_are_every_sample_recorded_together(parts in prop::collection::vec(part(), 1..6)) {
        let all: Vec<u64> = parts.iter().flat_map(|p| p.samples.iter().copied()).collect();
        let together = histogram_of(&all);
        let seconds: Vec<LoadSecond> = parts.iter().map(second_of).collect();
        let merged = LoadSecond::merge(&seconds).expect("merge");
        let histogram = decode(merged.histogram.as_deref().expect("histogram")).expect("decode");
        prop_assert_eq!(&histogram, &together);
        let op = &merged.operations["GET /"];
        prop_assert_eq!(&decode(op.histogram.as_deref().expect("op")).expect("decode"), &together);
        let requests: u64 = parts.iter().map(|p| p.samples.len() as u64 + p.failed).sum();
        prop_assert_eq!(merged.counts.requests, requests);
        prop_assert_eq!(op.counts.requests, requests);
        prop_assert_eq!(merged.counts.failed(), parts.iter().map(|p| p.failed).sum::<u64>());
        prop_assert_eq!(merged.late, parts.iter().map(|p| p.late).sum::<u64>());
        prop_assert_eq!(merged.late_held, parts.iter().map(|p| p.late / 2).sum::<u64>());
        prop_assert_eq!(merged.dropped, parts.len() as u64);
        prop_assert_eq!(merged.sent, requests);
        // The whole second's exemplars are its slowest requests, whichever share sent them.
        let kept: Vec<u64> = merged.exemplars.slowest.iter().map(|e| e.latency_us).collect();
        prop_assert_eq!(kept, top3(all));
    }

    #[test]
    fn merged_results_are_every_sample_recorded_together(parts in prop::collection::vec(part(), 1..6)) {
        let all: Vec<u64> = parts.iter().flat_map(|p| p.samples.iter().copied()).collect();
        let together = histogram_of(&all);
        let results: Vec<LoadResult> = parts.iter().map(|p| result_of(p, &["p99 < 50ms"])).collect();
        let merged = LoadResult::merge(&results).expect("merge");
        prop_assert_eq!(&decode(&merged.latency.histogram).expect("decode"), &together);
        prop_assert_eq!(&merged.latency, &summarise_latency(&together).expect("summary"));
        let slow: Vec<u64> = merged.slow_seconds.iter().flat_map(|s| &s.exemplars.slowest).map(|e| e.latency_us).collect();
        prop_assert_eq!(slow, top3(all.clone()));
        prop_assert!(merged.slow_seconds.len() <= 1, "one second of every share is one second");
        let requests: u64 = parts.iter().map(|p| p.samples.len() as u64 + p.failed).sum();
        prop_assert_eq!(merged.counts.requests, requests);
        prop_assert_eq!(merged.operations[0].counts.requests, requests);
        prop_assert_eq!(merged.late, parts.iter().map(|p| p.late).sum::<u64>());
        prop_assert_eq!(merged.blocks.len(), 1);
        prop_assert_eq!(&decode(&merged.operations[0].blocks[1]).expect("decode"), &together);
        let whole = result_of(&Part { samples: all, failed: requests - together.len(), late: 0 }, &["p99 < 50ms"]);
        prop_assert_eq!(&merged.thresholds, &whole.thresholds, "judged on the whole");
    }
}

#[test]
fn thresholds_and_the_verdict_are_judged_on_the_whole_not_on_any_share() {
    let fast = Part {
        samples: vec![1_000; 400],
        failed: 0,
        late: 0,
    };
    let slow = Part {
        samples: vec![100_000; 400],
        failed: 0,
        late: 3,
    };
    let rules = ["p99 < 50ms", "mean < 60ms"];
    let (a, b) = (result_of(&fast, &rules), result_of(&slow, &rules));
    assert_eq!(a.verdict(false).0, RunStatus::Passed);
    assert!(
        !b.thresholds[1].passed,
        "the slow share alone fails its mean"
    );
    let merged = LoadResult::merge(&[a.clone(), b]).expect("merge");
    let passed: Vec<bool> = merged.thresholds.iter().map(|t| t.passed).collect();
    // The whole's p99 is the slow share's; its mean, 50.5 ms, under 60 ms.
    assert_eq!(passed, vec![false, true]);
    let (status, reason) = merged.verdict(false);
    assert_eq!(status, RunStatus::Failed);
    assert!(
        reason
            .expect("reason")
            .starts_with("threshold p99 < 50ms failed")
    );
    assert_eq!(
        (merged.intended_rate, merged.achieved_rate),
        (Some(200.0), 198.0)
    );
    assert_eq!(merged.connections, 8);
    assert!(
        merged.notes[0].starts_with("the schedule was not kept: 3 of 800"),
        "{:?}",
        merged.notes
    );
    assert!(merged.notes.last().expect("note").contains("2 agents"));
    assert_eq!(
        LoadResult::merge(std::slice::from_ref(&a))
            .expect("one")
            .thresholds,
        a.thresholds
    );
}

/// A closed model's counted warm-up is split over the shares (5 over 3: 2, 2, 1), and
/// a share may have none left (1 over 2: 1, none): the whole's is their sum.
#[test]
fn a_split_warmup_count_adds_back_to_the_whole() {
    let part = Part {
        samples: vec![1_000; 10],
        failed: 0,
        late: 0,
    };
    let with = |plan: WarmupPlan| {
        let mut r = result_of(&part, &[]);
        r.model = Model::Closed;
        r.warmup.plan = plan;
        r
    };
    let split = [2, 2, 1].map(|n| with(WarmupPlan::Requests(n)));
    let merged = LoadResult::merge(&split).expect("merge");
    assert_eq!(merged.warmup.plan, WarmupPlan::Requests(5));
    let merged =
        LoadResult::merge(&[with(WarmupPlan::Requests(1)), with(WarmupPlan::None)]).expect("merge");
    assert_eq!(merged.warmup.plan, WarmupPlan::Requests(1));
    let timed = with(WarmupPlan::Duration(std::time::Duration::from_secs(1)));
    assert!(LoadResult::merge(&[with(WarmupPlan::Requests(1)), timed]).is_err());
}

#[test]
fn parts_of_different_runs_are_refused() {
    let part = Part {
        samples: vec![1_000; 10],
        failed: 0,
        late: 0,
    };
    let (a, b) = (result_of(&part, &["p99 < 5ms"]), result_of(&part, &[]));
    assert!(matches!(
        LoadResult::merge(&[a, b]),
        Err(MergeError::Mismatch(_))
    ));
    assert!(matches!(LoadResult::merge(&[]), Err(MergeError::Empty)));
    let mut late = second_of(&part);
    late.second = 5;
    assert!(matches!(
        LoadSecond::merge(&[second_of(&part), late]),
        Err(MergeError::Mismatch(_))
    ));
    let mut junk = second_of(&part);
    junk.histogram = Some("not a histogram".into());
    assert!(matches!(
        LoadSecond::merge(&[second_of(&part), junk]),
        Err(MergeError::Histogram(_))
    ));
}

#[test]
fn stored_results_merge_with_the_worst_generator_verdict_and_live_seconds_abort_on_the_whole() {
    let part = Part {
        samples: vec![2_000; 500],
        failed: 0,
        late: 0,
    };
    let mut saturated = serde_json::to_value(result_of(&part, &[])).expect("json");
    saturated["generator_saturated"] = serde_json::json!({"seconds": [2, 3], "count": 2,
        "basis": "measure", "reasons": [{"cause": "cpu", "seconds": 2, "worst": 0.99,
        "bound": 0.8, "text": "agent CPU up to 99%"}]});
    let plain = serde_json::to_value(result_of(&part, &[])).expect("json");
    let merged = merge_results(&[plain.clone(), saturated]).expect("merge");
    assert_eq!(merged["requests"], 1000);
    assert_eq!(
        merged["generator_saturated"]["seconds"],
        serde_json::json!([2, 3])
    );
    assert!(
        merge_results(&[plain.clone(), plain.clone()])
            .expect("merge")
            .get("generator_saturated")
            .is_none()
    );
    // Sends held by the target: added, their seconds merged, and said in a note; a share
    // written before the split (no `late_held`) counts none.
    let mut held = plain.clone();
    held["late_held"] = 40.into();
    held["late_behind"] = 1.into();
    held["max_connections"] = 8.into();
    held["target_held_connections"] = serde_json::json!({"seconds": [3], "count": 1,
        "basis": "measure", "late": 40, "worst": 0.4, "max_connections": 8, "text": "held"});
    let merged = merge_results(&[plain.clone(), held.clone(), held]).expect("merge");
    assert_eq!(merged["late_held"], 80);
    assert_eq!(
        (
            merged["late_behind"].as_u64(),
            merged["max_connections"].as_u64()
        ),
        (Some(2), Some(16))
    );
    assert_eq!(merged["target_held_connections"]["late"], 80);
    assert_eq!(merged["target_held_connections"]["max_connections"], 16);
    let notes = merged["notes"].as_array().expect("notes");
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().is_some_and(|n| n.starts_with(
                "the target held all 16 connections of 2 agents (max_connections) in 1 s: 80 sends"
            ))),
        "{notes:?}"
    );
    let merged = merge_results(&[plain.clone(), plain]).expect("merge");
    assert!(merged.get("late_held").is_none() && merged.get("target_held_connections").is_none());
    assert!(matches!(
        merge_results(&[serde_json::json!({"kind": "checks"})]),
        Err(MergeError::NotLoad(_))
    ));

    let rules: Vec<Threshold> = vec!["p99 < 10ms".parse().expect("threshold")];
    let mut measure = MergedMeasure::new().expect("measure");
    let fast = Part {
        samples: vec![1_000; 300],
        failed: 0,
        late: 0,
    };
    let slow = Part {
        samples: vec![50_000; 100],
        failed: 0,
        late: 0,
    };
    measure
        .add(&LoadSecond::merge(&[second_of(&fast), second_of(&fast)]).expect("merge"))
        .expect("add");
    assert!(measure.crossed(&rules).is_none());
    let mut warmup = second_of(&slow);
    warmup.phase = "warmup".into();
    measure.add(&warmup).expect("a warm-up second is left out");
    assert!(measure.crossed(&rules).is_none());
    // Kept as text between transactions, it judges as before.
    let text = measure.to_text().expect("text");
    let mut measure = MergedMeasure::from_text(&text).expect("read");
    assert_eq!(measure.to_text().expect("text"), text, "nothing lost");
    assert!(text.contains(r#""requests":600"#), "{text}");
    assert!(measure.crossed(&rules).is_none());
    assert!(MergedMeasure::from_text("{}").is_err());
    measure
        .add(&LoadSecond::merge(&[second_of(&slow), second_of(&slow)]).expect("merge"))
        .expect("add");
    let (crossed, observed) = measure.crossed(&rules).expect("crossed on the whole");
    assert_eq!(crossed.expression, "p99 < 10ms");
    assert!(observed.starts_with("50"), "{observed}");
}

/// The summary's first line: a rate per second over a second or more; under a second (a
/// short replay at speed), the requests and the time, never an extrapolated rate.
#[test]
fn a_result_under_a_second_says_requests_and_time_not_a_rate() {
    let part = Part {
        samples: vec![1000; 35],
        failed: 0,
        late: 0,
    };
    let mut result = result_of(&part, &[]);
    assert_eq!(
        result.summary()[0],
        "open model, 100.0/s intended, 99.0/s achieved over 2.0 s"
    );
    result.measured_seconds = 0.003;
    result.intended_rate = Some(13498.4);
    assert_eq!(
        result.summary()[0],
        "open model, 35 requests over 3 ms (under a second: no rate per second)"
    );
}
