//! Two scenario runs through `compare` itself: the kind is compared, an op 30% slower
//! regresses on its percentiles, an op that fails one request in ten regresses on its error
//! rate, and the same record twice is unchanged.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::compare::{Side, Verdict, compare};
use crate::run::{RunKind, RunStatus};
use crate::scenario_kind::ScenarioSpec;
use crate::scenario_kind::plan::plan;
use crate::scenario_kind::record::{RequestRecord, ScenarioRecord};

fn spec() -> ScenarioSpec {
    ScenarioSpec::from_json(&json!({
        "slug": "orders",
        "name": "orders",
        "ops": ["GET /api/users", "POST /api/orders {\"sku\": \"A1\"}"],
        "count": 400,
        "warmup": 2,
    }))
    .expect("valid")
}

/// A record of every planned request: `ms(op, seq)` long, failing where `fails` says.
fn record(ms: impl Fn(usize, u64) -> f64, fails: impl Fn(usize, u64) -> bool) -> Value {
    let spec = spec();
    let requests = plan(&spec)
        .into_iter()
        .map(|p| RequestRecord {
            seq: p.seq,
            op: p.op,
            method: spec.ops[p.op].method.clone(),
            path: spec.ops[p.op].path.clone(),
            warmup: p.warmup,
            offset_ms: p.seq as f64,
            status: Some(if fails(p.op, p.seq) { 500 } else { 200 }),
            error: None,
            duration_ms: ms(p.op, p.seq),
        })
        .collect();
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_786_960_000);
    let record =
        ScenarioRecord::build(&spec, "http://127.0.0.1:8080", at, at, requests).expect("record");
    serde_json::to_value(record).expect("json")
}

/// 10 to 16 ms, spread over the requests.
fn steady(_op: usize, seq: u64) -> f64 {
    10.0 + (seq % 7) as f64
}

fn side<'a>(id: &'a str, result: &'a Value) -> Side<'a> {
    Side {
        id,
        kind: RunKind::Scenario,
        scenario_version: "sha256:v1",
        environment: "staging",
        target: "http://127.0.0.1:8080",
        status: RunStatus::Passed,
        result: Some(result),
    }
}

#[test]
fn a_slower_op_regresses_and_the_same_record_is_unchanged() {
    let before = record(steady, |_, _| false);
    let same = compare(&side("a", &before), &side("b", &before), 0.02).expect("compared");
    assert_eq!(same.verdict, Verdict::Unchanged, "{:?}", same.differences);
    assert!(
        same.unchanged.contains(&"p99 GET /api/users".to_string()),
        "{:?}",
        same.unchanged
    );
    assert_eq!(same.samples, Some((800, 800)));

    // The orders op 30% slower; the users op as it was.
    let slower = record(
        |op, seq| steady(op, seq) * if op == 1 { 1.3 } else { 1.0 },
        |_, _| false,
    );
    let worse = compare(&side("a", &before), &side("b", &slower), 0.02).expect("compared");
    assert_eq!(worse.verdict, Verdict::Regressed);
    let measures: Vec<&str> = worse
        .differences
        .iter()
        .map(|d| d.measure.as_str())
        .collect();
    assert_eq!(measures, ["p50 POST /api/orders", "p99 POST /api/orders"]);
    assert!(
        worse.differences[0]
            .line
            .starts_with("p50 POST /api/orders: 13.01 ms [13.00 ms, 13.01 ms] -> 16.91 ms"),
        "{}",
        worse.differences[0].line
    );
}

#[test]
fn an_op_failing_one_request_in_ten_regresses_on_its_error_rate() {
    let before = record(steady, |_, _| false);
    let failing = record(steady, |op, seq| op == 0 && seq % 10 == 0);
    let worse = compare(&side("a", &before), &side("b", &failing), 0.02).expect("compared");
    assert_eq!(worse.verdict, Verdict::Regressed);
    let first = &worse.differences[0];
    assert_eq!(first.measure, "error rate GET /api/users");
    assert!(
        first
            .line
            .starts_with("error rate GET /api/users: 0.00% [0.00%, "),
        "{}",
        first.line
    );
    assert!(
        !worse
            .differences
            .iter()
            .any(|d| d.measure == "error rate POST /api/orders")
    );
}
