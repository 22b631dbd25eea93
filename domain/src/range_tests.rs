//! Every duration, count and rate a spec gives is range-checked where it is read: an
//! extreme number is refused with its field named, never carried into a plan whose timers
//! or sums overflow.

use serde_json::{Value, json};

use crate::capacity::CapacitySpec;
use crate::checks::ChecksSpec;
use crate::faults::Experiment;
use crate::load::{LoadSpec, WarmupPlan};
use crate::replay::ReplaySpec;
use crate::request::SpecError;

fn load(value: Value) -> Result<crate::load::LoadPlan, SpecError> {
    LoadSpec::from_json(&value)?.plan()
}

fn replay(value: Value) -> Result<crate::load::LoadPlan, SpecError> {
    ReplaySpec::from_json(&value)?.plan()
}

/// The spec of issue 12: the agent's engine turned the count into a warm-up of 3.7e19 s.
#[test]
fn a_warmup_count_beyond_what_the_rate_sends_in_24h_is_refused() {
    let err = load(
        json!({"operations": [{"method": "GET", "path": "/"}], "model": "open",
        "rate": 0.5, "duration": "2s", "warmup": 18446744073709551615u64}),
    )
    .expect_err("u64::MAX warm-up requests at 0.5/s");
    assert_eq!(err.field, "spec.warmup", "{err}");
    assert!(err.message.contains("43200"), "the limit is named: {err}");

    // What 0.5/s sends in 24h is accepted; one more is not.
    let at = |n: u64| {
        load(
            json!({"operations": [{"path": "/"}], "model": "open", "rate": 0.5,
            "duration": "2s", "warmup": n}),
        )
    };
    assert_eq!(
        at(43_200).expect("the cap").warmup,
        WarmupPlan::Requests(43_200)
    );
    assert_eq!(at(43_201).expect_err("past the cap").field, "spec.warmup");

    // A ramp from zero warms up at its first stage's target, as the engine does.
    let ramp = |n: u64| {
        load(json!({"operations": [{"path": "/"}], "model": "open",
            "stages": [{"duration": "1s", "target": 1}], "warmup": n}))
    };
    assert!(ramp(86_400).is_ok());
    assert_eq!(ramp(86_401).expect_err("past the cap").field, "spec.warmup");

    // The closed model has no rate: the most the engine's rate cap sends in 24h.
    let closed = load(json!({"operations": [{"path": "/"}], "model": "closed",
        "connections": 1, "duration": "1s", "warmup": u64::MAX}))
    .expect_err("closed, u64::MAX");
    assert_eq!(closed.field, "spec.warmup");
}

/// Stage durations each fit a `Duration`; their sum did not, and summing them panicked.
#[test]
fn stages_that_sum_past_24h_are_refused_without_overflowing() {
    let huge = "500000000000years";
    let err = load(json!({"operations": [{"path": "/"}], "model": "open",
        "stages": [{"duration": huge, "target": 1}, {"duration": huge, "target": 1}]}))
    .expect_err("two huge stages");
    assert_eq!(err.field, "spec.stages[0].duration", "{err}");
    let err = load(json!({"operations": [{"path": "/"}], "model": "open",
        "stages": [{"duration": "23h", "target": 1}, {"duration": "2h", "target": 1}]}))
    .expect_err("25h of stages");
    assert_eq!(err.field, "spec.stages[1].duration", "{err}");
    let many: Vec<Value> = (0..101)
        .map(|_| json!({"duration": "1s", "target": 1}))
        .collect();
    let err = load(json!({"operations": [{"path": "/"}], "model": "open", "stages": many}))
        .expect_err("101 stages");
    assert_eq!(err.field, "spec.stages");
}

/// The replay of issue 12: `Duration::from_secs_f64(1e297)` panicked inside the
/// controller's POST handler.
#[test]
fn a_replay_offset_past_24h_is_refused() {
    let log = |offset: Value| {
        replay(json!({"requests": [
            {"offset_ms": 0, "method": "GET", "path": "/"},
            {"offset_ms": offset, "method": "GET", "path": "/"}
        ]}))
    };
    for offset in [json!(1e300), json!(f64::MAX), json!(86_400_001)] {
        let err = log(offset.clone()).expect_err(&offset.to_string());
        assert_eq!(err.field, "spec.requests[1].offset_ms", "{offset}: {err}");
    }
    let plan = log(json!(86_400_000)).expect("24h is the cap");
    assert!(plan.duration <= std::time::Duration::from_secs(2 * 86_400));

    // Slowed down, the span replayed is capped too, and the speed is what to change.
    let err = replay(json!({"speed": 0.001, "requests": [
        {"offset_ms": 0, "method": "GET", "path": "/"},
        {"offset_ms": 86_400_000, "method": "GET", "path": "/"}
    ]}))
    .expect_err("1000 days replayed");
    assert_eq!(err.field, "spec.speed", "{err}");
}

#[test]
fn check_latency_limits_are_at_most_the_longest_timeout() {
    let err =
        ChecksSpec::from_json(&json!({"checks": [{"path": "/", "max_latency_ms": u64::MAX}]}))
            .expect_err("u64::MAX ms");
    assert_eq!(err.field, "spec.checks[0].max_latency_ms");
    let err = ChecksSpec::from_json(&json!({"checks": [{"path": "/"}],
        "invariants": [{"rule": "no_5xx"}, {"rule": "max_latency_ms", "value": 60_001}]}))
    .expect_err("past 60 s");
    assert_eq!(err.field, "spec.invariants[1].value");
    assert!(
        ChecksSpec::from_json(&json!({"checks": [{"path": "/", "max_latency_ms": 60_000}],
        "invariants": [{"rule": "max_latency_ms", "value": 60_000}]}))
        .is_ok()
    );
}

fn experiment_with(provider: Value) -> Result<Experiment, SpecError> {
    Experiment::from_json(&json!({"title": "t", "description": "d",
        "method": [{"type": "action", "name": "a", "provider": provider}]}))
}

/// A toxic's wait is a timer the proxy sets per chunk or connection; none may outlast the
/// fault (1 h).
#[test]
fn fault_waits_are_at_most_the_longest_fault() {
    let cases = [
        (
            json!({"type": "iohr", "fault": "network", "toxic": {"type": "latency", "latency_ms": u64::MAX}}),
            "method[0].provider.toxic.latency_ms",
        ),
        (
            json!({"type": "iohr", "fault": "network", "toxic": {"type": "latency", "latency_ms": 1, "jitter_ms": 3_600_001}}),
            "method[0].provider.toxic.jitter_ms",
        ),
        (
            json!({"type": "iohr", "fault": "network", "toxic": {"type": "slow_close", "delay_ms": u64::MAX}}),
            "method[0].provider.toxic.delay_ms",
        ),
        (
            json!({"type": "iohr", "fault": "network", "toxic": {"type": "timeout", "timeout_ms": u64::MAX}}),
            "method[0].provider.toxic.timeout_ms",
        ),
        (
            json!({"type": "iohr", "fault": "network", "toxic": {"type": "reset_peer", "timeout_ms": u64::MAX}}),
            "method[0].provider.toxic.timeout_ms",
        ),
        (
            json!({"type": "iohr", "fault": "network", "toxic": {"type": "slicer", "average_size": 1, "delay_us": u64::MAX}}),
            "method[0].provider.toxic.delay_us",
        ),
        (
            json!({"type": "iohr", "fault": "http", "effect": {"type": "delay", "delay_ms": u64::MAX}}),
            "method[0].provider.effect.delay_ms",
        ),
        (
            json!({"type": "iohr", "fault": "netem", "delay_ms": u64::MAX}),
            "method[0].provider.delay_ms",
        ),
        (
            json!({"type": "iohr", "fault": "netem", "delay_ms": 1, "jitter_ms": u64::MAX}),
            "method[0].provider.jitter_ms",
        ),
    ];
    for (provider, field) in cases {
        let err = experiment_with(provider.clone()).expect_err(&provider.to_string());
        assert_eq!(err.field, field, "{provider}: {err}");
    }
    assert!(
        experiment_with(json!({"type": "iohr", "fault": "network",
        "toxic": {"type": "latency", "latency_ms": 3_600_000, "jitter_ms": 3_600_000}}))
        .is_ok()
    );
}

/// Pauses and probe timeouts are numbers of seconds: huge, negative and fractional ones.
#[test]
fn experiment_seconds_are_refused_past_their_caps() {
    let with_pause = |after: Value| {
        Experiment::from_json(&json!({"title": "t", "description": "d", "method": [
            {"type": "probe", "name": "p", "provider": {"type": "http", "path": "/"},
             "pauses": {"after": after}}]}))
    };
    for after in [json!(1e300), json!(-1), json!(3601), json!("soon")] {
        let err = with_pause(after.clone()).expect_err(&after.to_string());
        assert_eq!(err.field, "method[0].pauses.after", "{after}: {err}");
    }
    assert!(with_pause(json!(0.25)).is_ok());
}

#[test]
fn capacity_steps_and_pauses_are_capped() {
    let spec = |extra: Value| {
        let mut v = json!({"operations": [{"path": "/"}], "start_rate": 10, "max_rate": 20,
            "slo": {"p99": "200ms"}});
        if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
            m.extend(e);
        }
        CapacitySpec::from_json(&v).and_then(|s| s.plan())
    };
    for (extra, field) in [
        (json!({"step": "500000000000years"}), "spec.step"),
        (
            json!({"step": "10s", "discard": "500000000000years"}),
            "spec.discard",
        ),
        (
            json!({"step": "10s", "cooldown": "500000000000years"}),
            "spec.cooldown",
        ),
        (json!({"floor": 1e300}), "spec.floor"),
        (json!({"bisect": u32::MAX}), "spec.bisect"),
        (json!({"max_rate": 1e300}), "spec.max_rate"),
    ] {
        let err = spec(extra.clone()).expect_err(&extra.to_string());
        assert_eq!(err.field, field, "{extra}: {err}");
    }
}
