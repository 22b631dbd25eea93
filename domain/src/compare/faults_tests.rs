//! Two faults journals through `compare` itself: the same journal twice is unchanged, a
//! probe that misses its tolerance after the method regresses, a load probe whose burst got
//! slower regresses on its p99 with intervals, and a rollback that failed regresses.

use serde_json::{Value, json};

use crate::compare::{Side, Verdict, compare};
use crate::faults::journal::{ActivityRun, ActivityStatus, Journal, SteadyState};
use crate::histogram::{encode, latency_histogram};
use crate::run::{RunKind, RunStatus};

/// A load probe's output: `n` requests of `ms` to `ms + 6` ms, `failed` of them failed.
fn burst(ms: u64, n: u64, failed: u64) -> Value {
    let mut histogram = latency_histogram().expect("histogram");
    for i in 0..n {
        histogram.record((ms + i % 7) * 1000).expect("record");
    }
    json!({"p99_ms": ms + 6, "error_rate": failed as f64 / n as f64, "requests": n,
           "histogram": encode(&histogram).expect("encode")})
}

fn probe(name: &str, met: bool, output: Value) -> ActivityRun {
    ActivityRun {
        activity: json!({"type": "probe", "name": name}),
        status: ActivityStatus::Succeeded,
        start: 1000,
        end: 1005,
        duration: 0.005,
        output: Some(output),
        exception: (!met).then(|| "its tolerance was not met".to_string()),
        tolerance_met: Some(met),
        ledger_id: None,
        attempts: None,
    }
}

/// A journal whose hypothesis ran `home` (HTTP) and `burst` (load) before and after.
fn journal(after_home_met: bool, after_burst: Value, rollback_failed: bool) -> Value {
    let mut j = Journal::new("latency under a slow dependency", 1000);
    j.steady_states.before = Some(SteadyState {
        steady_state_met: true,
        probes: vec![
            probe("home", true, json!({"status": 200, "latency_ms": 3.0})),
            probe("burst", true, burst(10, 400, 0)),
        ],
    });
    j.steady_states.after = Some(SteadyState {
        steady_state_met: after_home_met,
        probes: vec![
            probe(
                "home",
                after_home_met,
                json!({"status": 200, "latency_ms": 4.0}),
            ),
            probe("burst", true, after_burst),
        ],
    });
    if rollback_failed {
        j.rollbacks.push(ActivityRun {
            status: ActivityStatus::Failed,
            ..probe("undo", true, Value::Null)
        });
    }
    serde_json::to_value(j).expect("json")
}

fn side<'a>(id: &'a str, result: &'a Value) -> Side<'a> {
    Side {
        id,
        kind: RunKind::Faults,
        scenario_version: "sha256:v1",
        environment: "staging",
        target: "http://127.0.0.1:8080",
        status: RunStatus::Passed,
        result: Some(result),
    }
}

#[test]
fn the_same_journal_twice_is_unchanged() {
    let j = journal(true, burst(10, 400, 0), false);
    let same = compare(&side("a", &j), &side("b", &j), 0.02).expect("compared");
    assert_eq!(same.verdict, Verdict::Unchanged, "{:?}", same.differences);
    for measure in [
        "probe home after the method",
        "p99 probe burst after the method",
        "error rate probe burst before the method",
        "rollbacks",
    ] {
        assert!(
            same.unchanged.iter().any(|u| u == measure),
            "{measure}: {:?}",
            same.unchanged
        );
    }
    assert_eq!(same.samples, Some((800, 800)));
    assert!(
        same.notes
            .iter()
            .any(|n| n == "probe home after the method: 4.00 ms -> 4.00 ms (one request each: information, not judged)"),
        "{:?}",
        same.notes
    );
}

#[test]
fn a_deviation_a_slower_burst_and_a_failed_rollback_regress() {
    let before = journal(true, burst(10, 400, 0), false);
    let after = journal(false, burst(20, 400, 40), true);
    let worse = compare(&side("a", &before), &side("b", &after), 0.02).expect("compared");
    assert_eq!(worse.verdict, Verdict::Regressed);
    let lines: Vec<&str> = worse.differences.iter().map(|d| d.line.as_str()).collect();
    assert!(
        lines
            .contains(&"probe home after the method: passed -> failed (its tolerance was not met)"),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(
            "p99 probe burst after the method: 16.01 ms [16.00 ms, 16.01 ms] -> 26.02 ms"
        )),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(
            "error rate probe burst after the method: 0.00% [0.00%, 0.95%] (0 of 400) -> 10.00%"
        )),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"rollbacks failed or faults left applied: 0 -> 1"),
        "{lines:?}"
    );
    // The way back is an improvement.
    let better = compare(&side("b", &after), &side("a", &before), 0.02).expect("compared");
    assert_eq!(
        better.verdict,
        Verdict::Improved,
        "{:?}",
        better.differences
    );
}
