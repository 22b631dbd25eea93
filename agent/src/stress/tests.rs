//! The sampler on this machine's real /proc, the meter's seconds on tokio's paused clock,
//! and the /proc parsers under property tests (fixed seed, bounded cases).

use std::time::Duration;

use iohr_domain::FrameKind;
use iohr_domain::stress::{Basis, Cause, StressSecond};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::proc::{is_socket, sockstat_field, tcp_sockets};
use super::*;

fn quiet(second: u64, cpu_agent_percent: f64) -> StressSecond {
    StressSecond {
        second,
        measure_second: None,
        cpu_host_percent: 10.0,
        cpu_agent_percent,
        cpus_allowed: 1.0,
        memory_used_bytes: 0,
        memory_total_bytes: 0,
        agent_memory_bytes: 0,
        load_average: [0.0; 3],
        agent_sockets: 0,
        host_tcp_sockets: 0,
        lag_ms: 1.0,
    }
}

#[tokio::test(start_paused = true)]
async fn warm_up_seconds_are_forgotten_and_measured_ones_numbered_as_the_engine_does() {
    let meter = Meter::new();
    let t0 = Instant::now();
    // A busy second before the measure: the run's second 1, forgotten once it starts.
    meter.judge(t0 + Duration::from_secs(1), &mut quiet(1, 95.0));
    assert_eq!(meter.verdict().map(|v| v.basis), Some(Basis::Run));
    let start = t0 + Duration::from_millis(1_300);
    meter.measure_started(start);
    assert_eq!(meter.verdict(), None);
    // Read 0.7 s into the measure: mostly its first second.
    let mut s = quiet(2, 95.0);
    meter.judge(t0 + Duration::from_secs(2), &mut s);
    assert_eq!(s.measure_second, Some(1));
    // 0.2 s in: mostly warm-up, not judged.
    meter.measure_started(t0); // a second start changes nothing
    let mut early = quiet(2, 95.0);
    meter.judge(start + Duration::from_millis(200), &mut early);
    assert_eq!(early.measure_second, None);
    meter.sends(3, 200, 100, 0);
    meter.measure_ended(start + Duration::from_secs(3));
    let mut after = quiet(6, 95.0);
    meter.judge(start + Duration::from_secs(4), &mut after);
    assert_eq!(after.measure_second, None, "past the measure's end");
    let v = meter.verdict().expect("saturated");
    assert_eq!((v.basis, v.seconds.clone()), (Basis::Measure, vec![1, 3]));
    let causes: Vec<Cause> = v.reasons.iter().map(|r| r.cause).collect();
    assert_eq!(causes, vec![Cause::Cpu, Cause::Late]);
}

/// Real reads of this process and host: frames once a second with figures in range.
#[tokio::test]
async fn the_sampler_sends_a_frame_a_second_with_real_figures() {
    let (frames, mut rx) = FrameSender::channel();
    let cancel = CancellationToken::new();
    let watch = watch(frames, &cancel);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let frame = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a frame within 5 s")
            .expect("the sampler runs");
        assert_eq!(frame.kind, FrameKind::Stress);
        let sample: StressSecond = serde_json::from_value(frame.data).expect("a stress frame");
        seen.push(sample);
    }
    drop(listener);
    assert_eq!(seen[0].second, 1);
    assert_eq!(seen[1].second, 2);
    for s in &seen {
        assert!((0.0..=100.0).contains(&s.cpu_host_percent), "{s:?}");
        assert!(s.cpu_agent_percent >= 0.0, "{s:?}");
        assert!(s.cpus_allowed > 0.0, "{s:?}");
        assert!(s.memory_total_bytes > s.memory_used_bytes, "{s:?}");
        assert!(s.agent_memory_bytes > 0, "{s:?}");
        assert!(s.agent_sockets >= 1, "the listener is a socket: {s:?}");
        assert!(s.host_tcp_sockets >= 1, "{s:?}");
        assert!(s.lag_ms >= 0.0 && s.lag_ms < 1000.0, "{s:?}");
    }
    assert_eq!(
        watch.finish().await.saturated,
        None,
        "an idle test process is not saturated"
    );
    assert!(rx.recv().await.is_none(), "no frame after the finish");
}

#[test]
fn a_verdict_goes_into_an_object_result_only() {
    let mut s = iohr_domain::stress::Saturation::new(Basis::Measure);
    s.stress(1, &quiet(1, 100.0));
    let mut result = serde_json::json!({"achieved_rate": 1.0});
    qualify(&mut result, s.verdict());
    assert_eq!(result["generator_saturated"]["count"], 1);
    let mut none = serde_json::Value::Null;
    qualify(&mut none, s.verdict());
    assert!(none.is_null());
    let mut healthy = serde_json::json!({});
    qualify(&mut healthy, Judgement::default());
    assert_eq!(healthy, serde_json::json!({}));
}

/// The open model's sends through the meter into the result: the held count, the bound
/// and the connections opened, the held seconds with their note; no generator verdict.
#[test]
fn sends_held_by_the_target_go_into_the_result_apart_from_the_verdict() {
    let meter = Meter::new();
    meter.connection_bound(8);
    meter.measure_started(Instant::now());
    meter.sends(1, 100, 2, 0);
    meter.sends(2, 100, 2, 78);
    meter.connections_opened(8);
    let judgement = Judgement {
        saturated: meter.verdict(),
        held: meter.target_held(),
        sends: meter.sent(),
    };
    assert_eq!(judgement.saturated, None);
    let mut result = serde_json::json!({"late": 82, "notes": ["the schedule was not kept"]});
    qualify(&mut result, judgement);
    assert_eq!(result["late_held"], 78);
    assert_eq!(result["late_behind"], 4);
    assert_eq!(
        (
            result["max_connections"].as_u64(),
            result["connections_opened"].as_u64()
        ),
        (Some(8), Some(8))
    );
    assert_eq!(
        result["target_held_connections"]["seconds"],
        serde_json::json!([2])
    );
    assert!(result.get("generator_saturated").is_none());
    let note = result["notes"][1].as_str().unwrap_or_default();
    assert!(
        note.starts_with(
            "the target held all 8 connections (its max_connections) in 1 s: 78 sends waited"
        ),
        "{note}"
    );
}

#[test]
fn real_counters_count_every_tcp_socket() {
    let v4 = "sockets: used 25\nTCP: inuse 11 orphan 0 tw 769 alloc 14 mem 0\nUDP: inuse 0 mem 0\n";
    let v6 = "TCP6: inuse 2\nUDP6: inuse 0\n";
    assert_eq!(tcp_sockets(v4, v6), 11 + 769 + 2);
    assert_eq!(sockstat_field(v4, "TCP", "alloc"), Some(14));
    assert_eq!(sockstat_field(v4, "UDP", "tw"), None);
    // `TCP6:` is not `TCP:`, and a missing file counts none.
    assert_eq!(sockstat_field(v6, "TCP", "inuse"), None);
    assert_eq!(tcp_sockets("", ""), 0);
    assert!(is_socket("socket:[21345]"));
    for link in [
        "pipe:[1]",
        "socket:[]",
        "socket:[12",
        "/dev/null",
        "socket:[1a]",
    ] {
        assert!(!is_socket(link), "{link}");
    }
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x5715_e55e),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// Any text: no panic.
    #[test]
    fn any_text_reads_without_panic(a in ".{0,2000}", b in "(TCP6?: [a-z0-9 ]{0,60}\n){0,4}") {
        let _ = tcp_sockets(&a, &b);
        let _ = tcp_sockets(&b, &a);
        let _ = is_socket(&a);
    }

    /// Counters written as the kernel writes them, among other lines, read back.
    #[test]
    fn counters_read_back(
        inuse in 0u64..1_000_000, tw in 0u64..1_000_000, inuse6 in 0u64..1_000_000,
        orphan in 0u64..1000, other in "[A-Z]{3,5}",
    ) {
        prop_assume!(other != "TCP" && other != "TCP6");
        let v4 = format!("sockets: used 9\n{other}: inuse 7 tw 5\nTCP: inuse {inuse} orphan {orphan} tw {tw} alloc 3 mem 0\n");
        let v6 = format!("{other}6: inuse 4\nTCP6: inuse {inuse6}\n");
        prop_assert_eq!(tcp_sockets(&v4, &v6), inuse + tw + inuse6);
        prop_assert_eq!(sockstat_field(&v4, "TCP", "orphan"), Some(orphan));
    }

    #[test]
    fn socket_links_are_recognised(inode in 0u64.., other in "[a-z]{1,8}") {
        let socket_link = format!("socket:[{inode}]");
        prop_assert!(is_socket(&socket_link));
        let other_link = format!("{other}:[{inode}]");
        prop_assert_eq!(is_socket(&other_link), other == "socket");
    }
}
