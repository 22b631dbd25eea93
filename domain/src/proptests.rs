//! Property tests of every spec parser and plan (checks, load, scenario, replay, capacity,
//! the faults experiment, tolerances and their JSON paths): arbitrary JSON, arbitrary
//! text, and the examples in `examples/` with one or more of their values replaced by an
//! extreme one (random JSON rarely gets past a spec's first field). Each parser must not
//! panic, a refusal must name the field it is about, and an accepted plan must stay inside
//! the documented caps. The seed is fixed and the cases bounded, so a run is the same
//! every time and takes a few seconds.

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::RngSeed;
use serde_json::{Map, Value, json};

use crate::capacity::CapacitySpec;
use crate::checks::ChecksSpec;
use crate::faults::tolerance::Judgement;
use crate::faults::{Experiment, Tolerance};
use crate::load::{LoadPlan, LoadSpec, MAX_DURATION, Threshold, WarmupPlan, parse_duration};
use crate::replay::ReplaySpec;
use crate::request::SpecError;
use crate::scenario_kind::{ScenarioSpec, layout, parse_ops_file, plan, spec_with_ops};

/// A fixed seed and `cases` cases, with no failure files written beside the sources.
pub(crate) fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x1012_0bad_5eed),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Numbers at the edges: the largest integers, huge and tiny floats, negatives, the caps
/// and one past them.
fn odd_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            json!(u64::MAX),
            json!(i64::MIN),
            json!(i64::MAX),
            json!(u32::MAX),
            json!(u64::from(u32::MAX) + 1),
            json!(-1),
            json!(0),
            json!(1),
            json!(0.5),
            json!(1e300),
            json!(-1e300),
            json!(f64::MAX),
            json!(f64::MIN_POSITIVE),
            json!(5e-324),
            json!(9_007_199_254_740_993u64),
            json!(86_400_001),
            json!(3_600_001),
            json!(1_000_001),
        ]),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("a JSON number", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
    ]
}

/// Strings that parsers read as numbers, durations, thresholds, ops or JSON paths.
fn odd_string() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "",
            "NaN",
            "inf",
            "-inf",
            "1e300",
            "-1",
            "18446744073709551615",
            "500000000000years",
            "584942417356years",
            "99999999999999999999ms",
            "0s",
            "1ns",
            "10s",
            "24h",
            "25h",
            "p99 < 1e300ms",
            "p(100) < 1ms",
            "p99.99999 <= 500000000000years",
            "error_rate < NaN%",
            "mean > -1",
            "$",
            "$.a[-9223372036854775808]",
            "$[18446744073709551615]",
            "$[*].x['y'][\"z\"]",
            "$[",
            "$.",
            "GET /",
            "GET / 4294967296",
            "GET / 10000 {\"a\": 1e300}",
            "${env:X}",
            "open",
            "closed",
            "1.1",
            "2",
            "é\u{0}\r\n",
        ])
        .prop_map(str::to_string),
        "\\PC{0,16}",
    ]
}

/// Field names of every spec kind, so that random objects sometimes hit them.
const KEYS: &[&str] = &[
    "operations",
    "model",
    "rate",
    "stages",
    "connections",
    "duration",
    "warmup",
    "timeout",
    "http",
    "streams",
    "thresholds",
    "abort_on_fail",
    "method",
    "path",
    "headers",
    "body",
    "weight",
    "name",
    "target",
    "requests",
    "offset_ms",
    "op",
    "speed",
    "include_warmup",
    "checks",
    "invariants",
    "timeout_ms",
    "expect_status",
    "max_latency_ms",
    "expect_text",
    "rule",
    "value",
    "slug",
    "ops",
    "count",
    "concurrency",
    "prefix",
    "start_rate",
    "max_rate",
    "growth",
    "rates",
    "step",
    "discard",
    "cooldown",
    "slo",
    "p99",
    "error_rate",
    "bisect",
    "floor",
    "title",
    "description",
    "tags",
    "steady-state-hypothesis",
    "probes",
    "type",
    "provider",
    "tolerance",
    "pauses",
    "before",
    "after",
    "fault",
    "toxic",
    "latency_ms",
    "jitter_ms",
    "probe",
    "range",
    "pattern",
    "expect",
    "url",
    "expected_status",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(KEYS).prop_map(str::to_string),
        1 => "[a-z_]{1,8}",
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        3 => odd_number(),
        3 => odd_string().prop_map(Value::String),
    ]
}

/// Nested JSON: up to 4 levels, lists and objects of up to 6 members.
fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// What the examples are, by kind.
const EXAMPLES: [(&str, &str); 8] = [
    ("capacity", include_str!("../../examples/capacity.json")),
    ("checks", include_str!("../../examples/checks-api.json")),
    ("checks", include_str!("../../examples/checks.json")),
    ("faults", include_str!("../../examples/faults.json")),
    ("load", include_str!("../../examples/load-closed.json")),
    ("load", include_str!("../../examples/load-open.json")),
    ("replay", include_str!("../../examples/replay.json")),
    ("scenario", include_str!("../../examples/scenario.json")),
];

fn example(i: usize) -> (&'static str, Value) {
    let (kind, text) = EXAMPLES[i % EXAMPLES.len()];
    (kind, serde_json::from_str(text).expect("examples are JSON"))
}

/// Every place in `value` (itself included), as a list of steps.
fn places(value: &Value, at: &mut Vec<Vec<Step>>, path: Vec<Step>) {
    match value {
        Value::Object(m) => {
            for (k, v) in m {
                let mut p = path.clone();
                p.push(Step::Key(k.clone()));
                places(v, at, p);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let mut p = path.clone();
                p.push(Step::Index(i));
                places(v, at, p);
            }
        }
        _ => {}
    }
    at.push(path);
}

#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

fn place_mut<'v>(value: &'v mut Value, path: &[Step]) -> Option<&'v mut Value> {
    let mut here = value;
    for step in path {
        here = match step {
            Step::Key(k) => here.get_mut(k)?,
            Step::Index(i) => here.get_mut(*i)?,
        };
    }
    Some(here)
}

/// `value` with the place picked by each index replaced by its new value, one by one.
fn mutate(mut value: Value, edits: &[(Index, Value)]) -> Value {
    for (index, new) in edits {
        let mut at = Vec::new();
        places(&value, &mut at, Vec::new());
        let path = index.get(&at).clone();
        if let Some(place) = place_mut(&mut value, &path) {
            *place = new.clone();
        }
    }
    value
}

/// The refusal names a field under `root` (`spec`, `spec.warmup`, `spec.requests[3]`) and
/// its message starts with it.
fn names_field_under(err: &SpecError, root: &str) {
    let under = err.field == root
        || err.field.starts_with(&format!("{root}."))
        || err.field.starts_with(&format!("{root}["));
    assert!(under, "{err:?} names no field under {root}");
    assert!(
        err.to_string().starts_with(&format!("{}: ", err.field)),
        "{err}"
    );
    assert!(!err.message.is_empty(), "{err:?} says nothing");
}

/// An experiment's refusal names the experiment, or a field of it that the JSON has.
fn names_experiment_field(err: &SpecError, value: &Value) {
    let first = err
        .field
        .split(['.', '['])
        .next()
        .unwrap_or_default()
        .to_string();
    // Its own fields (a missing one is named too) or one the JSON has (an unknown one).
    let own = [
        "experiment",
        "title",
        "description",
        "tags",
        "steady-state-hypothesis",
        "method",
        "rollbacks",
    ];
    let known = own.contains(&first.as_str()) || value.get(&first).is_some();
    assert!(known, "{err:?} names no field of {value}");
    assert!(
        err.to_string().starts_with(&format!("{}: ", err.field)),
        "{err}"
    );
}

/// An accepted load plan stays inside the caps its engine relies on.
fn load_plan_in_caps(plan: &LoadPlan) {
    assert!(plan.duration <= MAX_DURATION * 2, "{:?}", plan.duration);
    assert!(
        plan.stages
            .iter()
            .all(|(d, r)| *d <= MAX_DURATION && r.is_finite() && *r >= 0.0)
    );
    match plan.warmup {
        WarmupPlan::Duration(d) => assert!(d <= MAX_DURATION),
        WarmupPlan::Requests(n) => {
            let rate = if plan.start_rate > 0.0 {
                plan.start_rate
            } else {
                plan.stages
                    .first()
                    .map_or(crate::load::MAX_RATE, |(_, r)| *r)
            };
            let seconds = if plan.stages.is_empty() && plan.recorded.is_none() {
                0.0
            } else {
                n as f64 / rate
            };
            assert!(seconds <= MAX_DURATION.as_secs_f64(), "{n} at {rate}/s");
        }
        WarmupPlan::None => {}
    }
    if let Some(recorded) = &plan.recorded {
        assert!(
            recorded
                .iter()
                .all(|(at, op)| *at <= MAX_DURATION && *op < plan.operations.len())
        );
    }
    let _ = plan.expected_requests();
}

/// Feeds `value` to the parser of `kind`, checking what it answers.
fn check_kind(kind: &str, value: &Value) {
    match kind {
        "checks" => {
            if let Err(e) = ChecksSpec::from_json(value) {
                names_field_under(&e, "spec");
            }
        }
        "load" => match LoadSpec::from_json(value).and_then(|s| s.plan()) {
            Ok(plan) => load_plan_in_caps(&plan),
            Err(e) => names_field_under(&e, "spec"),
        },
        "scenario" => match ScenarioSpec::from_json(value) {
            Ok(spec) => {
                assert!(spec.total_requests() <= crate::scenario_kind::MAX_TOTAL_REQUESTS);
                assert_eq!(plan(&spec).len() as u64, spec.total_requests());
                assert_eq!(layout(&spec).len(), spec.ops.len());
                let again = ScenarioSpec::from_json(&spec.to_json()).expect("canonical reads");
                assert_eq!(again, spec);
            }
            Err(e) => names_field_under(&e, "spec"),
        },
        "replay" => match ReplaySpec::from_json(value).and_then(|s| s.plan()) {
            Ok(plan) => load_plan_in_caps(&plan),
            Err(e) => names_field_under(&e, "spec"),
        },
        "capacity" => match CapacitySpec::from_json(value).and_then(|s| s.plan()) {
            Ok(capacity) => {
                assert!(!capacity.grid.is_empty());
                for rate in &capacity.grid {
                    load_plan_in_caps(&capacity.step_plan(*rate));
                }
                let _ = capacity.expected_requests();
            }
            Err(e) => names_field_under(&e, "spec"),
        },
        "faults" => match Experiment::from_json(value) {
            Ok(experiment) => {
                let _ = experiment.check_target("http://127.0.0.1:9");
                for (_, fault) in experiment.faults() {
                    assert!(fault.duration <= crate::faults::fault::MAX_FAULT_DURATION);
                }
                let _ = experiment.to_json();
            }
            Err(e) => names_experiment_field(&e, value),
        },
        other => unreachable!("no kind {other}"),
    }
}

const KINDS: [&str; 6] = ["checks", "load", "scenario", "replay", "capacity", "faults"];

/// A tolerance read from `value`, judged against `output`: a refusal names the field, a
/// judgement never panics.
fn check_tolerance(value: &Value, output: &Value) {
    match Tolerance::from_json("tolerance", value, 0) {
        Ok(tolerance) => {
            let _ = tolerance.to_json();
            match tolerance.judge(output) {
                Judgement::Met | Judgement::Missed(_) | Judgement::RunProbe(_) => {}
            }
        }
        Err(e) => names_field_under(&e, "tolerance"),
    }
}

/// The JSON path subset: a path is refused with `tolerance.path` or read, and selecting it
/// in any document (a body given as text, too) never panics.
fn check_json_path(path: &str, document: &Value) {
    let value = json!({"type": "jsonpath", "path": path});
    match Tolerance::from_json("tolerance", &value, 0) {
        Ok(tolerance) => {
            let _ = tolerance.judge(document);
            let body = json!({"status": 200, "latency_ms": 1.0, "body": document.to_string()});
            let _ = tolerance.judge(&body);
        }
        Err(e) => assert_eq!(e.field, "tolerance.path", "{e}"),
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_json_is_refused_with_a_field_or_planned_within_caps(value in json_value()) {
        for kind in KINDS {
            check_kind(kind, &value);
        }
    }

    #[test]
    fn arbitrary_objects_with_spec_fields_are_refused_with_a_field(
        fields in prop::collection::btree_map(key(), json_value(), 1..10),
    ) {
        let value = Value::Object(fields.into_iter().collect());
        for kind in KINDS {
            check_kind(kind, &value);
        }
    }

    #[test]
    fn tolerances_and_json_paths_never_panic(
        tolerance in json_value(),
        output in json_value(),
        path in prop_oneof![odd_string(), "\\$[.\\[\\]*'\"a-z0-9 -]{0,24}"],
    ) {
        check_tolerance(&tolerance, &output);
        check_json_path(&path, &output);
        let http = json!({"status": 200, "latency_ms": 3.5, "body": output.to_string()});
        check_tolerance(&tolerance, &http);
    }

    #[test]
    fn arbitrary_text_never_panics_the_text_parsers(text in "\\PC{0,64}", bytes in prop::collection::vec(any::<u8>(), 0..128)) {
        let lossy = String::from_utf8_lossy(&bytes);
        for text in [text.as_str(), &*lossy] {
            if let Err(e) = Experiment::parse(text) {
                prop_assert!(!e.field.is_empty(), "{e}");
            }
            if let Err(e) = parse_ops_file(text) {
                prop_assert!(e.field.starts_with("ops file"), "{e}");
            }
            let ops = parse_ops_file("GET /\n").expect("one op");
            if let Err(e) = spec_with_ops(text, &ops) {
                names_field_under(&e, "spec");
            }
            if let Ok(threshold) = text.parse::<Threshold>() {
                prop_assert!(threshold.limit.is_finite() && threshold.limit >= 0.0);
            }
            if let Err(e) = parse_duration("spec.duration", text) {
                prop_assert_eq!(e.field, "spec.duration");
            }
            if let Ok(value) = serde_json::from_slice::<Value>(&bytes) {
                for kind in KINDS {
                    check_kind(kind, &value);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(config(1024))]

    /// One to three values of an example replaced by extreme ones: the parser gets deep
    /// into the spec before it meets them.
    #[test]
    fn examples_with_extreme_values_are_refused_with_a_field_or_planned_within_caps(
        which in any::<usize>(),
        edits in prop::collection::vec((any::<Index>(), prop_oneof![4 => leaf(), 1 => json_value()]), 1..4),
    ) {
        let (kind, value) = example(which);
        let mutated = mutate(value, &edits);
        check_kind(kind, &mutated);
    }
}

#[test]
fn every_example_is_accepted_as_it_is() {
    for i in 0..EXAMPLES.len() {
        let (kind, value) = example(i);
        let accepted = match kind {
            "checks" => ChecksSpec::from_json(&value).map(|_| ()),
            "load" => LoadSpec::from_json(&value)
                .and_then(|s| s.plan())
                .map(|_| ()),
            "scenario" => ScenarioSpec::from_json(&value).map(|_| ()),
            "replay" => ReplaySpec::from_json(&value)
                .and_then(|s| s.plan())
                .map(|_| ()),
            "capacity" => CapacitySpec::from_json(&value)
                .and_then(|s| s.plan())
                .map(|_| ()),
            _ => Experiment::from_json(&value).map(|_| ()),
        };
        assert!(accepted.is_ok(), "{kind} example {i}: {accepted:?}");
    }
}
