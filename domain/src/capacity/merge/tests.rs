use serde_json::json;

use super::*;
use crate::histogram::{decode, encode, latency_histogram};
use crate::load::Counts;
use crate::quantile::Percentile;
use crate::run::RunStatus;

/// One share's point: `n` answers of `micros` each, `achieved`/s.
fn part(step: u32, stage: Stage, offered: f64, achieved: f64, n: u64, micros: u64) -> SweepPoint {
    let mut latency = latency_histogram().expect("histogram");
    latency.record_n(micros, n).expect("record");
    SweepPoint {
        step,
        stage,
        offered,
        achieved,
        counts: Counts {
            requests: n,
            responses: [("2xx".to_string(), n)].into(),
            errors: Default::default(),
        },
        error_rate: 0.0,
        late: 1,
        dropped: 0,
        p50: Percentile::Insufficient {
            insufficient: "a share's".to_string(),
            samples: n,
        },
        p99: Percentile::Insufficient {
            insufficient: "a share's".to_string(),
            samples: n,
        },
        p99_us: Some(micros),
        // A share's own verdict on its part: never what the whole is judged on.
        meets_slo: true,
        broke: Vec::new(),
        histogram: encode(&latency).expect("encode"),
    }
}

const SLO: Slo = Slo {
    p99_us: 200_000.0,
    error_rate: 0.01,
};

#[test]
fn a_steps_parts_add_into_one_point_judged_as_the_whole() {
    let fast = part(2, Stage::Sweep, 100.0, 50.0, 100, 1_000);
    let slow = part(2, Stage::Sweep, 100.0, 49.0, 100, 300_000);
    let whole = SweepPoint::merge(&[fast.clone(), slow], &SLO).expect("merged");
    assert_eq!(
        (whole.step, whole.stage, whole.offered),
        (2, Stage::Sweep, 100.0)
    );
    assert_eq!(whole.counts.requests, 200);
    assert_eq!(whole.late, 2);
    assert!((whole.achieved - 99.0).abs() < 1e-9);
    let histogram = decode(&whole.histogram).expect("histogram");
    assert_eq!(histogram.len(), 200, "every sample once");
    assert!(whole.p99_us.is_some_and(|p| p >= 299_000), "{whole:?}");
    assert!(!whole.meets_slo);
    assert_eq!(whole.broke.len(), 1, "{:?}", whole.broke);
    assert!(whole.broke[0].starts_with("p99 "), "{:?}", whole.broke);
    assert!(
        matches!(whole.p50, Percentile::Estimate { .. }),
        "read again from the merged histogram, not a share's: {:?}",
        whole.p50
    );

    // Two fast halves that together fall short of the whole rate.
    let short = [
        part(1, Stage::Sweep, 100.0, 40.0, 100, 1_000),
        part(1, Stage::Sweep, 100.0, 40.0, 100, 1_000),
    ];
    let whole = SweepPoint::merge(&short, &SLO).expect("merged");
    assert_eq!(
        whole.broke,
        ["achieved 80/s under 95% of 100/s offered"],
        "judged against the whole rate"
    );

    let both_fine = [fast.clone(), part(2, Stage::Sweep, 100.0, 49.5, 100, 2_000)];
    assert!(
        SweepPoint::merge(&both_fine, &SLO)
            .expect("merged")
            .meets_slo
    );

    let other_step = part(3, Stage::Sweep, 100.0, 50.0, 100, 1_000);
    assert!(matches!(
        SweepPoint::merge(&[fast.clone(), other_step], &SLO),
        Err(MergeError::Mismatch(_))
    ));
    assert!(matches!(
        SweepPoint::merge(&[], &SLO),
        Err(MergeError::Empty)
    ));
}

fn share_result(points: Vec<SweepPoint>) -> Value {
    serde_json::to_value(CapacityResult {
        slo: SLO,
        floor: None,
        max_rate_meeting_slo: None,
        stopped_because: "a share's".to_string(),
        knee: knee_of(&points),
        points,
        step_seconds: 1.0,
        discard_seconds: 0.25,
        notes: Vec::new(),
    })
    .expect("json")
}

#[test]
fn the_shares_sweeps_merge_into_the_whole_runs_with_its_verdict() {
    let plan = CapacitySpec::from_json(&json!({"operations": [{"path": "/"}],
        "rates": [100, 150, 225], "step": "1s", "discard": "250ms",
        "slo": {"p99": "200ms"}, "bisect": 1}))
    .and_then(|s| s.plan())
    .expect("plan");
    // The steps the controller's verdicts led both shares through: 225/s broke (the
    // whole did not keep up), so one bisection round at 187.5/s, which met the SLO.
    let steps = [
        (1, Stage::Sweep, 100.0, 50.0),
        (2, Stage::Sweep, 150.0, 75.0),
        (3, Stage::Sweep, 225.0, 90.0),
        (4, Stage::Bisect, 187.5, 93.5),
    ];
    let sweep = |micros: u64| {
        steps
            .iter()
            .map(|(step, stage, offered, achieved)| {
                part(*step, *stage, *offered, *achieved, 50, micros)
            })
            .collect::<Vec<_>>()
    };
    let parts = [share_result(sweep(1_000)), share_result(sweep(5_000))];
    let merged = merge_results(&plan, &parts).expect("merged");
    assert_eq!(merged.status, RunStatus::Passed, "{:?}", merged.reason);
    let result: CapacityResult = serde_json::from_value(merged.result).expect("result");
    assert_eq!(result.max_rate_meeting_slo, Some(187.5));
    assert_eq!(result.points.len(), 4);
    assert!(result.points.iter().all(|p| p.counts.requests == 100));
    assert_eq!(
        result
            .points
            .iter()
            .map(|p| p.meets_slo)
            .collect::<Vec<_>>(),
        [true, true, false, true]
    );
    assert!(
        result.stopped_because.contains("bisected 1 times"),
        "{}",
        result.stopped_because
    );
    assert!(
        result
            .notes
            .iter()
            .any(|n| n.starts_with("swept by 2 agents")),
        "{:?}",
        result.notes
    );

    // A share that took another step than the whole's sweep is not one of its shares.
    let mut astray = sweep(1_000);
    astray[3].offered = 200.0;
    let parts = [share_result(sweep(1_000)), share_result(astray)];
    assert!(matches!(
        merge_results(&plan, &parts),
        Err(MergeError::Mismatch(_))
    ));
}
