//! The sampler on this machine's real /proc, the meter's seconds on tokio's paused clock,
//! and the /proc parsers under property tests (fixed seed, bounded cases).

use std::time::Duration;

use iohr_domain::FrameKind;
use iohr_domain::stress::{Basis, Cause, StressSecond};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::proc::{count_table_entries, is_socket};
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
    meter.sends(3, 200, 100);
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
        watch.finish().await,
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
    qualify(&mut healthy, None);
    assert_eq!(healthy, serde_json::json!({}));
}

#[test]
fn a_real_table_counts_its_entries() {
    let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 21345 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 21346 1 0000000000000000 20 4 30 10 -1\n";
    assert_eq!(count_table_entries(table), 2);
    assert_eq!(count_table_entries(""), 0);
    assert_eq!(
        count_table_entries(table.lines().next().unwrap_or_default()),
        0
    );
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

    /// Any text: no panic, and never more entries than lines.
    #[test]
    fn any_text_reads_without_panic(text in ".{0,2000}") {
        prop_assert!(count_table_entries(&text) <= text.lines().count() as u64);
        let _ = is_socket(&text);
    }

    /// A table of `n` entries, with junk lines between them, counts `n`.
    #[test]
    fn a_table_counts_its_slots_and_not_its_junk(
        slots in prop::collection::vec((0u32..100_000, "[0-9A-F:. ]{0,120}"), 0..200),
        junk in prop::collection::vec("[a-z :]{0,40}", 0..20),
    ) {
        let mut text = String::from("  sl  local_address rem_address   st\n");
        for (i, (slot, rest)) in slots.iter().enumerate() {
            text.push_str(&format!("{slot:>4}: {rest}\n"));
            if let Some(line) = junk.get(i) {
                // Junk never starts with a slot: letters first.
                text.push_str(&format!("x{line}\n"));
            }
        }
        prop_assert_eq!(count_table_entries(&text), slots.len() as u64);
    }

    #[test]
    fn socket_links_are_recognised(inode in 0u64.., other in "[a-z]{1,8}") {
        let socket_link = format!("socket:[{inode}]");
        prop_assert!(is_socket(&socket_link));
        let other_link = format!("{other}:[{inode}]");
        prop_assert_eq!(is_socket(&other_link), other == "socket");
    }
}
