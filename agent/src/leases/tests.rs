use futures_util::poll;

use super::*;

fn numbers(out: &Outgoing) -> Vec<u64> {
    out.batches
        .iter()
        .flat_map(|b| b.frames.iter().map(|f| f.number))
        .collect()
}

#[test]
fn frames_stay_until_acknowledged_and_are_resent_on_a_new_stream() {
    let leases = Leases::default();
    leases.insert("l1", 1, "r1", RunKind::Checks);
    for i in 0..5 {
        leases.push_frame("l1", "check", format!("{{\"i\":{i}}}"));
    }
    assert_eq!(numbers(&leases.take_outgoing(3)), [1, 2, 3]);
    assert_eq!(numbers(&leases.take_outgoing(10)), [4, 5]);
    assert!(!leases.has_outgoing());
    leases.ack("l1", 2, 3);
    let report = leases.report_for_new_stream();
    assert_eq!(report[0].last_acked_frame, 2);
    assert_eq!(
        numbers(&leases.take_outgoing(10)),
        [3, 4, 5],
        "resent after the ack"
    );
}

#[test]
fn an_ack_below_its_batch_means_a_gap_and_resends_from_it() {
    let leases = Leases::default();
    leases.insert("l1", 1, "r1", RunKind::Checks);
    for _ in 0..4 {
        leases.push_frame("l1", "check", "{}".into());
    }
    assert_eq!(numbers(&leases.take_outgoing(10)), [1, 2, 3, 4]);
    leases.ack("l1", 4, 4);
    leases.push_frame("l1", "check", "{}".into());
    leases.push_frame("l1", "check", "{}".into());
    assert_eq!(numbers(&leases.take_outgoing(1)), [5]);
    assert_eq!(numbers(&leases.take_outgoing(1)), [6]);
    leases.ack("l1", 4, 5);
    assert_eq!(
        numbers(&leases.take_outgoing(10)),
        [5, 6],
        "frame 5 was not stored: from 5 again"
    );
    leases.ack("l1", 6, 6);
    assert!(!leases.has_outgoing());
}

#[test]
fn a_completion_follows_its_last_frame() {
    let leases = Leases::default();
    leases.insert("l1", 1, "r1", RunKind::Checks);
    leases.push_frame("l1", "started", "{}".into());
    leases.complete("l1", "passed", "", "{}".into(), 1);
    let out = leases.take_outgoing(10);
    assert_eq!(out.batches.len(), 1);
    assert_eq!(out.completions.len(), 1);
    assert_eq!(out.completions[0].last_frame, 1);
    assert!(
        leases.take_outgoing(10).completions.is_empty(),
        "sent once per stream"
    );
    leases.rewind("l1");
    assert!(
        leases.take_outgoing(10).completions.is_empty(),
        "not at once after a refusal"
    );
    if let Some(lease) = leases.lock().get_mut("l1") {
        lease.completion_hold = None;
    }
    assert_eq!(
        leases.take_outgoing(10).completions.len(),
        1,
        "sent again after the pause"
    );
    assert!(leases.forget("other").is_none());
    assert!(leases.forget("l1").is_some());
    assert!(leases.is_empty());
}

#[test]
fn a_revoked_lease_takes_nothing_into_the_next_lease_of_its_run() {
    let leases = Leases::default();
    leases.insert("old", 1, "r1", RunKind::Checks);
    leases.revoke("old");
    leases.insert("new", 2, "r1", RunKind::Checks);
    // The old executor's late output goes nowhere.
    leases.push_frame("old", "check", "{}".into());
    leases.complete("old", "cancelled", "", "{}".into(), 0);
    let out = leases.take_outgoing(10);
    assert!(out.batches.is_empty() && out.completions.is_empty());
    assert!(leases.holds_run("r1"));
}

#[test]
fn no_frame_is_taken_after_the_completion() {
    let leases = Leases::default();
    leases.insert("l1", 1, "r1", RunKind::Checks);
    leases.push_frame("l1", "started", "{}".into());
    leases.complete(
        "l1",
        "error",
        "executor failed: panicked: x",
        "null".into(),
        0,
    );
    leases.push_frame("l1", "load", "{}".into());
    let out = leases.take_outgoing(10);
    assert_eq!(numbers(&out), [1]);
    assert_eq!(out.completions[0].last_frame, 1);
}

#[test]
fn fencing_stops_only_exclusive_runs_and_they_end_in_error() {
    let leases = Leases::default();
    let load = leases.insert("l1", 1, "r1", RunKind::Load);
    let checks = leases.insert("l2", 1, "r2", RunKind::Checks);
    assert_eq!(leases.fence_exclusive(), 1);
    assert!(load.is_cancelled() && !checks.is_cancelled());
    leases.complete("l1", "cancelled", "cancelled", "{}".into(), 0);
    let out = leases.take_outgoing(10);
    assert_eq!(out.completions[0].status, "error");
    assert!(out.completions[0].reason.contains("lost contact"));
}

/// A frame payload of `n` bytes (with the kind `load`, it costs `n + 4`).
fn payload(i: u32, n: usize) -> String {
    let text = format!("{{\"i\":{i}}}");
    format!("{text:<n$}")
}

#[tokio::test]
async fn a_full_buffer_makes_the_sender_wait_until_an_ack_frees_room() {
    let leases = Leases::with_frame_buffer(100);
    leases.insert("l1", 1, "r1", RunKind::Checks);
    for i in 0..4 {
        leases.send_frame("l1", "load", payload(i, 21)).await;
    }
    assert_eq!(leases.frame_bytes(), 100);
    let fifth = leases.send_frame("l1", "load", payload(4, 21));
    tokio::pin!(fifth);
    assert!(poll!(&mut fifth).is_pending(), "full: the sender waits");
    assert_eq!(numbers(&leases.take_outgoing(10)), [1, 2, 3, 4]);
    leases.ack("l1", 1, 1);
    assert!(
        poll!(&mut fifth).is_ready(),
        "one frame acknowledged: room for one"
    );
    assert_eq!(numbers(&leases.take_outgoing(10)), [5]);
    assert_eq!(leases.frame_bytes(), 100);
    leases.ack("l1", 5, 5);
    assert_eq!(
        leases.frame_bytes(),
        0,
        "every acknowledged frame gives its room back"
    );
}

#[tokio::test]
async fn a_revoked_lease_gives_its_room_back() {
    let leases = Leases::with_frame_buffer(50);
    leases.insert("old", 1, "r1", RunKind::Checks);
    leases.insert("l2", 1, "r2", RunKind::Checks);
    leases.send_frame("old", "load", payload(0, 46)).await;
    let other = leases.send_frame("l2", "load", payload(1, 10));
    tokio::pin!(other);
    assert!(
        poll!(&mut other).is_pending(),
        "the bound is the agent's, over every lease"
    );
    leases.revoke("old");
    assert!(poll!(&mut other).is_ready());
    assert_eq!(leases.frame_bytes(), 14);
}

#[tokio::test]
async fn under_backpressure_no_frame_is_dropped_or_reordered() {
    let leases = Leases::with_frame_buffer(200);
    leases.insert("l1", 1, "r1", RunKind::Scenario);
    let frames = leases.frame_sender("l1");
    let sender = tokio::spawn(async move {
        for i in 0..500u32 {
            let data = serde_json::json!({"i": i, "pad": "x".repeat((i % 40) as usize)});
            frames
                .send(crate::kinds::NewFrame {
                    kind: iohr_domain::FrameKind::Check,
                    data,
                })
                .await;
        }
    });
    // A slow controller: it takes at most 3 frames at a time and acknowledges them.
    let mut seen = Vec::new();
    for _ in 0..100_000 {
        if seen.len() >= 500 {
            break;
        }
        assert!(
            leases.frame_bytes() <= 200,
            "never more than the bound is held"
        );
        let out = leases.take_outgoing(3);
        for batch in &out.batches {
            let last = batch.frames.last().map_or(0, |f| f.number);
            for frame in &batch.frames {
                let data: serde_json::Value =
                    serde_json::from_str(&frame.payload_json).expect("a frame's JSON");
                seen.push((frame.number, data["i"].as_u64().expect("i")));
            }
            leases.ack(&batch.lease_id, last, last);
        }
        tokio::task::yield_now().await;
    }
    sender
        .await
        .expect("the sender ends once everything is acknowledged");
    let expected: Vec<(u64, u64)> = (0..500u64).map(|i| (i + 1, i)).collect();
    assert_eq!(
        seen, expected,
        "every frame, numbered in the order it was sent"
    );
    assert_eq!(leases.frame_bytes(), 0);
}

#[test]
fn a_leases_secret_values_are_scrubbed_from_its_frames_and_completion() {
    let leases = Leases::default();
    leases.insert("l1", 1, "r1", RunKind::Checks);
    leases.insert("l2", 1, "r2", RunKind::Checks);
    leases.scrub("l1", ["k-123".to_string(), "q\"uote".to_string()]);
    let echoed = serde_json::json!({"body": "got k-123 and q\"uote"}).to_string();
    leases.push_frame("l1", "check", echoed.clone());
    leases.push_frame("l2", "check", echoed.clone());
    leases.complete("l1", "failed", "header echoed k-123", echoed.clone(), 1);
    let out = leases.take_outgoing(10);
    let frames: Vec<(&str, &str)> = out
        .batches
        .iter()
        .flat_map(|b| {
            b.frames
                .iter()
                .map(|f| (b.lease_id.as_str(), f.payload_json.as_str()))
        })
        .collect();
    for (lease, payload) in &frames {
        if *lease == "l1" {
            assert_eq!(*payload, r#"{"body":"got [redacted] and [redacted]"}"#);
        } else {
            assert_eq!(*payload, echoed, "another lease's frames are its own");
        }
    }
    let completion = &out.completions[0];
    assert_eq!(completion.reason, "header echoed [redacted]");
    assert!(!completion.result_json.contains("k-123"));
    assert!(!format!("{:?}", leases.lock().get("l1")).contains("k-123"));
}
