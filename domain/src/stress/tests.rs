//! The saturation rule on synthetic seconds.

use super::*;

fn sample(second: u64, cpu_agent_percent: f64, cpus_allowed: f64, lag_ms: f64) -> StressSecond {
    StressSecond {
        second,
        measure_second: Some(second),
        cpu_host_percent: 50.0,
        cpu_agent_percent,
        cpus_allowed,
        memory_used_bytes: 1 << 30,
        memory_total_bytes: 4 << 30,
        agent_memory_bytes: 20 << 20,
        load_average: [0.5, 0.4, 0.3],
        agent_sockets: 12,
        host_tcp_sockets: 40,
        lag_ms,
    }
}

#[test]
fn a_healthy_run_has_no_verdict() {
    let mut s = Saturation::new(Basis::Measure);
    for second in 1..=60 {
        // 70% of two CPUs, a few ms of lag, 4 late sends of 100 (below the minimum).
        s.stress(second, &sample(second, 140.0, 2.0, 3.0));
        s.sends(second, 100, 4, 0);
    }
    assert_eq!(s.verdict(), None);
}

#[test]
fn cpu_near_the_share_counts_by_the_cpus_allowed() {
    let mut s = Saturation::new(Basis::Measure);
    // 19% of one CPU under a quota of 0.2 CPUs is 95% of its share.
    s.stress(3, &sample(3, 19.0, 0.2, 1.0));
    // 19% of two CPUs is nothing.
    s.stress(4, &sample(4, 19.0, 2.0, 1.0));
    // At the bound exactly counts.
    s.stress(5, &sample(5, 80.0, 1.0, 1.0));
    let v = s.verdict().expect("saturated");
    assert_eq!(v.seconds, vec![3, 5]);
    assert_eq!(v.count, 2);
    assert_eq!(v.basis, Basis::Measure);
    assert_eq!(v.reasons.len(), 1);
    assert_eq!(v.reasons[0].cause, Cause::Cpu);
    assert!((v.reasons[0].worst - 0.95).abs() < 1e-9, "{:?}", v.reasons);
    assert!(
        v.line()
            .starts_with("generator saturated for 2 s (agent CPU up to 95%"),
        "{}",
        v.line()
    );
}

#[test]
fn a_quota_under_a_hundredth_of_a_cpu_is_named_not_rounded_to_nothing() {
    let mut s = Saturation::new(Basis::Measure);
    s.stress(1, &sample(1, 0.5, 0.005, 1.0));
    let v = s.verdict().expect("saturated");
    assert!(
        v.reasons[0].text.contains("of the 0.005 CPUs it may use"),
        "{}",
        v.reasons[0].text
    );
    assert!(sample(1, 0.5, 0.005, 1.0).line().contains("of 0.005 cpus"));
}

#[test]
fn lag_past_the_bound_and_late_sends_past_their_share_count_once_per_second() {
    let mut s = Saturation::new(Basis::Measure);
    s.stress(1, &sample(1, 10.0, 2.0, LAG_BOUND_MS)); // at the bound: not past it
    s.stress(2, &sample(2, 10.0, 2.0, 250.0));
    s.sends(2, 100, 50, 0); // the same second, a second sign
    s.sends(3, 100, 11, 0);
    s.sends(4, 100, 10, 0); // 10% is not past 10%
    s.sends(5, 0, 0, 0);
    let v = s.verdict().expect("saturated");
    assert_eq!(v.seconds, vec![2, 3]);
    assert_eq!(v.count, 2);
    let causes: Vec<Cause> = v.reasons.iter().map(|r| r.cause).collect();
    assert_eq!(causes, vec![Cause::Lag, Cause::Late]);
    assert_eq!(v.reasons[0].worst, 250.0);
    assert_eq!(v.reasons[1].seconds, 2);
    assert!((v.reasons[1].worst - 0.5).abs() < 1e-9);
}

#[test]
fn the_list_is_bounded_and_the_count_goes_on() {
    let mut s = Saturation::new(Basis::Run);
    let n = MAX_LISTED_SECONDS as u64 + 100;
    for second in 1..=n {
        s.stress(second, &sample(second, 100.0, 1.0, 500.0));
        s.sends(second, 100, 90, 0);
    }
    let v = s.verdict().expect("saturated");
    assert_eq!(v.seconds.len(), MAX_LISTED_SECONDS);
    assert_eq!(v.count, n);
    assert_eq!(v.basis, Basis::Run);
}

#[test]
fn a_result_reads_its_verdict_back() {
    let mut s = Saturation::new(Basis::Measure);
    s.stress(7, &sample(7, 100.0, 1.0, 0.0));
    let v = s.verdict().expect("saturated");
    let result = serde_json::json!({"achieved_rate": 10.0, "generator_saturated": v});
    assert_eq!(GeneratorSaturated::of_result(&result), Some(v));
    assert_eq!(GeneratorSaturated::of_result(&serde_json::json!({})), None);
    assert_eq!(
        GeneratorSaturated::of_result(&serde_json::json!({"generator_saturated": null})),
        None
    );
}

#[test]
fn a_stress_frame_reads_as_one_line() {
    let line = sample(4, 50.0, 0.5, 12.0).line();
    assert_eq!(
        line,
        "stress    4s  agent cpu 100% of 0.5 cpus  host cpu 50%  lag 12 ms  load 0.50  sockets 12  mem 20 MiB"
    );
}

/// The agents of one split run: the whole saturated in every second any of them did,
/// with each cause's worst agent's reason.
#[test]
fn the_verdicts_of_a_split_run_merge_into_the_whole() {
    let mut a = Saturation::new(Basis::Measure);
    a.stress(2, &sample(2, 90.0, 1.0, 0.0));
    a.stress(3, &sample(3, 95.0, 1.0, 0.0));
    let mut b = Saturation::new(Basis::Measure);
    b.stress(3, &sample(3, 99.0, 1.0, 150.0));
    b.sends(5, 100, 50, 0);
    let (a, b) = (a.verdict().expect("a"), b.verdict().expect("b"));
    let whole = GeneratorSaturated::merge(&[a.clone(), b.clone()]).expect("saturated");
    assert_eq!(whole.seconds, vec![2, 3, 5]);
    assert_eq!(whole.count, 3);
    let causes: Vec<(Cause, f64)> = whole.reasons.iter().map(|r| (r.cause, r.worst)).collect();
    assert_eq!(
        causes,
        vec![(Cause::Cpu, 0.99), (Cause::Lag, 150.0), (Cause::Late, 0.5)]
    );
    assert_eq!(GeneratorSaturated::merge(std::slice::from_ref(&a)), Some(a));
    assert_eq!(GeneratorSaturated::merge(&[]), None);
}

/// The run of issue 39: a target stopped for a second held every connection the run may
/// open, and most of that second's sends (and the next's backlog) waited for one. That is
/// the target's, not the generator's: no verdict, and the seconds listed apart.
#[test]
fn sends_late_on_held_connections_are_the_targets_not_the_generators() {
    let mut s = Saturation::new(Basis::Measure);
    s.connection_bound(256);
    for second in 1..=10 {
        s.stress(second, &sample(second, 40.0, 2.0, 2.0));
        let (behind, held) = match second {
            5 => (10, 12_990),
            6 => (2, 12_988),
            _ => (0, 0),
        };
        s.sends(second, 20_000, behind, held);
    }
    assert_eq!(s.verdict(), None, "the generator kept up");
    let held = s.target_held().expect("held seconds");
    assert_eq!((held.seconds.clone(), held.count), (vec![5, 6], 2));
    assert_eq!(held.late, 25_978);
    assert_eq!(held.max_connections, Some(256));
    assert!((held.worst - 0.6495).abs() < 1e-9, "{}", held.worst);
    assert!(
        held.text.starts_with(
            "the target held all 256 connections (its max_connections) in 2 s: 25978 sends waited for one (up to 65% of a second's)"
        ),
        "{}",
        held.text
    );
    let result = serde_json::json!({"target_held_connections": held});
    assert_eq!(TargetHeld::of_result(&result), Some(held));
}

/// Late sends while a connection was free are still the generator's, in a second that
/// also had held ones: only the held part is set aside.
#[test]
fn late_sends_with_a_connection_free_still_mark_the_generator() {
    let mut s = Saturation::new(Basis::Measure);
    // 5 the generator's, 25 held: 5% (not past 10%).
    s.sends(1, 100, 5, 25);
    // 30 the generator's, 10 held: 30%.
    s.sends(2, 100, 30, 10);
    s.sends(3, 100, 11, 0);
    let v = s.verdict().expect("saturated");
    assert_eq!(v.seconds, vec![2, 3]);
    assert_eq!(v.reasons.len(), 1);
    assert_eq!(v.reasons[0].cause, Cause::Late);
    assert!((v.reasons[0].worst - 0.3).abs() < 1e-9);
    assert!(
        v.reasons[0]
            .text
            .contains("over 100 ms late with a connection free")
    );
    let held = s.target_held().expect("held");
    assert_eq!(
        (held.seconds, held.late, held.max_connections),
        (vec![1, 2], 35, None)
    );
}

#[test]
fn held_seconds_of_a_split_run_merge_and_their_bounds_add() {
    let mut a = Saturation::new(Basis::Measure);
    a.connection_bound(8);
    a.sends(3, 100, 0, 60);
    let mut b = Saturation::new(Basis::Measure);
    b.connection_bound(8);
    b.sends(3, 100, 0, 70);
    b.sends(4, 100, 0, 20);
    let parts = [a.target_held().expect("a"), b.target_held().expect("b")];
    let whole = TargetHeld::merge(&parts).expect("held");
    assert_eq!(
        (whole.seconds.clone(), whole.count, whole.late),
        (vec![3, 4], 2, 150)
    );
    assert_eq!(whole.max_connections, Some(16));
    assert!((whole.worst - 0.7).abs() < 1e-9);
    assert!(
        whole.text.contains("all 16 connections of 2 agents"),
        "{}",
        whole.text
    );
    assert_eq!(TargetHeld::merge(&[]), None);
    let mut none = Saturation::new(Basis::Measure);
    none.sends(1, 100, 3, 0);
    assert_eq!(none.target_held(), None);
}

#[test]
fn compare_says_the_late_sends_by_cause() {
    // Written before the split: all late sends the generator's, as the rule then said.
    let before = serde_json::json!({"late": 169});
    let after = serde_json::json!({"late": 25_990, "late_held": 25_978, "late_behind": 2});
    assert_eq!(
        held::late_by_cause(Some(&before), Some(&after)).as_deref(),
        Some(
            "late sends by cause: 169 (target held 0, generator 169) -> 25990 (target held 25978, generator 2) (information, not judged)"
        )
    );
    let none = serde_json::json!({"late": 0, "late_held": 0});
    assert_eq!(held::late_by_cause(Some(&none), Some(&none)), None);
    assert_eq!(
        held::late_by_cause(Some(&serde_json::json!({"checks": []})), Some(&after)),
        None
    );
    assert_eq!(held::late_by_cause(None, Some(&after)), None);
}
