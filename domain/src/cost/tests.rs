use std::time::Duration;

use serde_json::json;

use crate::capacity::CapacitySpec;
use crate::faults::Experiment;
use crate::load::LoadSpec;
use crate::replay::ReplaySpec;

fn load(spec: serde_json::Value) -> crate::load::LoadPlan {
    LoadSpec::from_json(&spec).unwrap().plan().unwrap()
}

#[test]
fn a_load_run_lasts_its_warmup_and_its_duration_or_its_stages() {
    let op = json!([{"method": "GET", "path": "/"}]);
    let flat = load(json!({"operations": op, "model": "open", "rate": 10, "duration": "10h"}));
    assert_eq!(flat.run_length(), Duration::from_secs(36_000));
    assert_eq!(flat.units_to_reserve(), Some(360_000));

    let warm = load(
        json!({"operations": op, "model": "open", "rate": 10, "duration": "1h",
        "warmup": "5m"}),
    );
    assert_eq!(warm.run_length(), Duration::from_secs(3900));
    assert_eq!(
        warm.units_to_reserve(),
        Some(36_000 + 3_000),
        "the warm-up is sent too"
    );

    // A count warms up at the start rate: 600 requests at 10/s are a minute.
    let counted = load(
        json!({"operations": op, "model": "open", "rate": 10, "duration": "1m",
        "warmup": 600}),
    );
    assert_eq!(counted.run_length(), Duration::from_secs(120));
    assert_eq!(counted.units_to_reserve(), Some(600 + 600));

    // A ramp from zero: its stages summed; its warm-up at the first stage's target.
    let ramp = load(json!({"operations": op, "model": "open", "stages": [
        {"duration": "30m", "target": 20}, {"duration": "45m", "target": 20}],
        "warmup": 1200}));
    assert_eq!(ramp.run_length(), Duration::from_secs(75 * 60 + 60));

    let closed = load(
        json!({"operations": op, "model": "closed", "connections": 4,
        "duration": "2h", "warmup": 1000}),
    );
    assert_eq!(
        closed.run_length(),
        Duration::from_secs(7200),
        "a count's length is unknown"
    );
    assert_eq!(closed.units_to_reserve(), None);
}

#[test]
fn a_replay_lasts_its_logs_span_over_its_speed() {
    let requests: Vec<_> = (0..5)
        .map(|i| json!({"offset_ms": i as f64 * 1_000_000.0, "method": "GET", "path": "/"}))
        .collect();
    let at = |speed: f64| {
        ReplaySpec::from_json(&json!({"requests": requests, "speed": speed}))
            .unwrap()
            .plan()
            .unwrap()
    };
    // 4,000 s of log over 4 gaps of 5 requests: the plan's span is 5,000 s at speed 1.
    assert_eq!(at(1.0).run_length(), Duration::from_secs(5000));
    assert_eq!(at(2.0).run_length(), Duration::from_secs(2500));
    assert_eq!(at(2.0).units_to_reserve(), Some(5));
}

#[test]
fn a_capacity_sweep_lasts_every_step_and_bisection_round_with_their_cooldowns() {
    let plan = CapacitySpec::from_json(&json!({
        "operations": [{"method": "GET", "path": "/"}],
        "rates": [10, 20, 40], "step": "10m", "cooldown": "1m", "bisect": 3,
        "slo": {"p99": "200ms"}}))
    .unwrap()
    .plan()
    .unwrap();
    assert_eq!(plan.run_length(), Duration::from_secs((3 + 3) * 11 * 60));
}

#[test]
fn a_faults_run_reserves_its_probes_twice_its_method_and_its_rollbacks() {
    let experiment = Experiment::from_json(&json!({
        "title": "t", "description": "d",
        "steady-state-hypothesis": {"title": "h", "probes": [
            {"type": "probe", "name": "ok", "tolerance": 200,
             "provider": {"type": "http", "path": "/"}},
            {"type": "probe", "name": "fast", "tolerance": {"type": "range", "range": [0, 50],
                "target": "p99_ms"},
             "provider": {"type": "iohr", "probe": "load", "rate": 20, "duration": "2s",
                "path": "/"}}]},
        "method": [
            {"type": "action", "name": "slow", "provider": {"type": "iohr", "fault": "network",
                "duration": "5s", "toxic": {"type": "latency", "latency_ms": 10}}},
            {"type": "probe", "name": "during", "provider": {"type": "http", "path": "/"},
             "tolerance": {"type": "probe", "name": "judge",
                "provider": {"type": "http", "path": "/health"}, "tolerance": 200}}],
        "rollbacks": [{"type": "action", "name": "flush",
            "provider": {"type": "http", "path": "/flush", "method": "POST"}}]
    }))
    .unwrap();
    // (1 + 40) twice, the method's probe and its probe tolerance, one rollback call.
    assert_eq!(experiment.expected_requests(), 2 * 41 + 2 + 1);
}
