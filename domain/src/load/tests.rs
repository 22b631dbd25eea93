use super::*;
use serde_json::json;

use crate::histogram::encode;
use crate::request::SpecError;

fn spec(value: serde_json::Value) -> Result<LoadPlan, SpecError> {
    LoadSpec::from_json(&value)?.plan()
}

#[test]
fn an_open_spec_reads_into_a_plan() {
    let plan = spec(json!({
        "operations": [{"path": "/"}, {"method": "POST", "path": "/orders", "body": {"sku": "A1"}, "weight": 3}],
        "model": "open", "rate": 200, "duration": "10s", "warmup": "2s",
        "thresholds": ["p99 < 300ms", "error_rate < 1%"]
    }))
    .expect("valid");
    assert_eq!(plan.stages, vec![(Duration::from_secs(10), 200.0)]);
    assert_eq!(plan.connections, DEFAULT_OPEN_CONNECTIONS);
    assert_eq!(plan.warmup, WarmupPlan::Duration(Duration::from_secs(2)));
    assert_eq!(plan.expected_requests(), Some(2000));
    assert_eq!(plan.thresholds[0].metric, Metric::Percentile(0.99));
    assert_eq!(plan.thresholds[0].limit, 300_000.0);
    assert_eq!(plan.thresholds[1].metric, Metric::ErrorRate);
    assert!((plan.thresholds[1].limit - 0.01).abs() < 1e-12);
}

#[test]
fn stages_sum_to_the_duration() {
    let plan = spec(json!({
        "operations": [{"path": "/"}], "model": "open",
        "stages": [{"duration": "5s", "target": 100}, {"duration": "5s", "target": 100}]
    }))
    .expect("valid");
    assert_eq!(plan.duration, Duration::from_secs(10));
    assert_eq!(plan.expected_requests(), Some(750));
}

#[test]
fn bad_specs_say_what_to_fix() {
    let cases = [
        (
            json!({"operations": [], "model": "closed", "connections": 4, "duration": "1s"}),
            "spec.operations",
        ),
        (
            json!({"operations": [{"path": "/"}], "model": "closed", "duration": "1s"}),
            "spec.connections",
        ),
        (
            json!({"operations": [{"path": "/"}], "model": "open", "duration": "1s"}),
            "spec.rate",
        ),
        (
            json!({"operations": [{"path": "/"}], "model": "open", "rate": 10}),
            "spec.duration",
        ),
        (
            json!({"operations": [{"path": "/"}], "model": "open", "rate": 10, "duration": "soon"}),
            "spec.duration",
        ),
        (
            json!({"operations": [{"path": "x"}], "model": "open", "rate": 10, "duration": "1s"}),
            "spec.operations[0].path",
        ),
        (
            json!({"operations": [{"path": "/", "headers": {"Authorization": "Bearer x"}}], "model": "open", "rate": 10, "duration": "1s"}),
            "spec.operations[0].headers.Authorization",
        ),
        (
            json!({"operations": [{"path": "/"}], "model": "closed", "connections": 2, "duration": "1s", "rate": 5}),
            "spec.rate",
        ),
        (
            json!({"operations": [{"path": "/"}], "model": "open", "rate": 10, "duration": "1s", "thresholds": ["p99 is small"]}),
            "spec.thresholds[0]",
        ),
        (
            json!({"operations": [{"path": "/"}], "model": "open", "rate": 10, "duration": "1s", "streams": 4}),
            "spec.streams",
        ),
        (
            json!({"operations": [{"path": "/"}], "model": "sideways", "duration": "1s"}),
            "spec.model",
        ),
        (
            json!({"operations": [{"path": "/"}], "model": "open", "rate": 10, "duration": "1s", "colour": "red"}),
            "spec.colour",
        ),
        (
            json!({"operations": [{"path": "/", "weight": "x"}], "model": "closed", "connections": 2, "duration": "1s"}),
            "spec.operations[0].weight",
        ),
    ];
    for (value, field) in cases {
        let err = spec(value.clone()).expect_err(&value.to_string());
        assert_eq!(err.field, field, "{value}: {err}");
    }
}

/// The open model's bound on connections: defaulted generously, at least the
/// connections it starts with, refused outside its range or on the closed model, and
/// split over agents as the connections are.
#[test]
fn max_connections_is_bounded_and_belongs_to_the_open_model() {
    let open = |extra: serde_json::Value| {
        let mut value = json!({"operations": [{"path": "/"}], "model": "open", "rate": 10,
            "duration": "1s"});
        for (k, v) in extra.as_object().expect("object") {
            value[k] = v.clone();
        }
        spec(value)
    };
    let plan = open(json!({})).expect("default");
    assert_eq!(
        (plan.connections, plan.max_connections),
        (DEFAULT_OPEN_CONNECTIONS, DEFAULT_MAX_CONNECTIONS)
    );
    let many = open(json!({"connections": 4000})).expect("more than the default bound");
    assert_eq!(many.max_connections, 4000);
    let set = open(json!({"connections": 4, "max_connections": 16})).expect("set");
    assert_eq!((set.connections, set.max_connections), (4, 16));
    let fixed = open(json!({"connections": 4, "max_connections": 4})).expect("no growth");
    assert_eq!(fixed.max_connections, 4);
    for (bad, message) in [
        (
            json!({"connections": 8, "max_connections": 4}),
            "between connections (8) and 10000",
        ),
        (
            json!({"max_connections": 0}),
            "between connections (64) and 10000",
        ),
        (
            json!({"max_connections": 10001}),
            "between connections (64) and 10000",
        ),
        (json!({"max_connections": -1}), ""),
        (json!({"max_connections": "many"}), ""),
    ] {
        let err = open(bad.clone()).expect_err(&bad.to_string());
        assert_eq!(err.field, "spec.max_connections", "{bad}: {err}");
        assert!(err.message.contains(message), "{bad}: {err}");
    }
    let closed = spec(json!({"operations": [{"path": "/"}], "model": "closed",
        "connections": 4, "duration": "1s", "max_connections": 8}))
    .expect_err("closed");
    assert_eq!(closed.field, "spec.max_connections");
    let closed = spec(json!({"operations": [{"path": "/"}], "model": "closed",
        "connections": 4, "duration": "1s"}))
    .expect("closed");
    assert_eq!(closed.max_connections, 4);
    let shares: Vec<(u32, u32)> = Share::all(3)
        .expect("shares")
        .map(|share| {
            let part = set.clone().share(share).expect("share");
            (part.connections, part.max_connections)
        })
        .collect();
    assert_eq!(shares, vec![(2, 6), (1, 5), (1, 5)]);
}

#[test]
fn thresholds_read_like_k6() {
    let t: Threshold = "p(95) <= 1.5s".parse().expect("valid");
    assert_eq!(t.metric, Metric::Percentile(0.95));
    assert_eq!(t.op, Comparison::LessOrEqual);
    assert_eq!(t.limit, 1_500_000.0);
    let t: Threshold = "p99.9<250".parse().expect("valid");
    assert!(matches!(t.metric, Metric::Percentile(q) if (q - 0.999).abs() < 1e-12));
    assert_eq!(t.limit, 250_000.0);
    let t: Threshold = "error_rate < 0.05".parse().expect("valid");
    assert!((t.limit - 0.05).abs() < 1e-12);
    assert!(t.op.holds(0.04, t.limit) && !t.op.holds(0.05, t.limit));
    assert!("p100 < 1ms".parse::<Threshold>().is_err());
    assert!("latency < 1ms".parse::<Threshold>().is_err());
}

#[test]
fn counts_merge_and_give_the_error_rate() {
    let mut a = Counts {
        requests: 10,
        ..Counts::default()
    };
    a.responses.insert("2xx".into(), 8);
    a.responses.insert("5xx".into(), 1);
    a.errors.insert("timeout".into(), 1);
    let mut b = a.clone();
    b.add(&a);
    assert_eq!(b.requests, 20);
    assert_eq!(b.failed(), 4);
    assert!((b.error_rate() - 0.2).abs() < 1e-12);
    assert_eq!(status_class(204), "2xx");
    assert_eq!(status_class(503), "5xx");
}

/// The most a result holds: 100 operations of a one-hour run at 1,000 requests per
/// second, each block a spread of latencies as wide as a busy service's (log-normal,
/// about 20 ms, from 0.5 ms to 2 s).
#[test]
fn operation_blocks_of_a_full_result_stay_near_a_megabyte() {
    let group = operation_block_group(60, MAX_OPERATIONS);
    assert_eq!((group, 60u64.div_ceil(group)), (5, 12));
    assert_eq!(operation_block_group(60, 20), 1);
    assert_eq!(operation_block_group(10, MAX_OPERATIONS), 1);
    let mut x = 7u64;
    let mut uniform = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let per_block = 3600 * 1000 / MAX_OPERATIONS as u64 / 12;
    let mut encoded = 0usize;
    for _ in 0..MAX_OPERATIONS * 12 {
        let mut h = operation_block_histogram().expect("histogram");
        for _ in 0..per_block {
            let (u1, u2) = (uniform().max(1e-12), uniform());
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            h.record((20_000.0 * (0.8 * z).exp()).clamp(500.0, 2e6) as u64)
                .expect("record");
        }
        encoded += encode(&h).expect("encode").len();
    }
    assert!(encoded < 1 << 20, "{encoded} bytes of operation blocks");
}
