//! One run split over three agents: three shares of one plan run side by side against
//! one local target, as three agents would, each at a third of the rate. Together they
//! send the asked rate, and their frames and results merge exactly.

use std::collections::BTreeMap;
use std::time::Duration;

use iohr_domain::RunStatus;
use iohr_domain::histogram::decode;
use iohr_domain::load::{LoadPlan, LoadResult, LoadSecond, LoadSpec, Share, merge_histograms};

use super::range_tests::serve_ok;
use super::run;
use crate::frames::FrameSender;
use crate::run_context::RunContext;

/// One share's run: its result and its `load` frames.
async fn run_share(plan: LoadPlan, target: String) -> (LoadResult, Vec<LoadSecond>) {
    let (tx, mut rx) = FrameSender::channel();
    let outcome = run(plan, &RunContext::<()>::new(target, tx)).await;
    assert_eq!(outcome.status, RunStatus::Passed, "{:?}", outcome.reason);
    let mut seconds = Vec::new();
    while let Ok(frame) = rx.try_recv() {
        if frame.kind == iohr_domain::FrameKind::Load {
            seconds.push(serde_json::from_value(frame.data).expect("a load frame"));
        }
    }
    (
        serde_json::from_value(outcome.result).expect("a load result"),
        seconds,
    )
}

fn samples(text: Option<&String>) -> u64 {
    text.map_or(0, |t| decode(t).expect("histogram").len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shares_side_by_side_send_the_asked_rate_and_merge_exactly() {
    let target = serve_ok().await;
    let rate = 300.0;
    let spec = serde_json::json!({"operations": [{"path": "/", "weight": 2}, {"path": "/b"}],
        "model": "open", "rate": rate, "duration": "2s", "warmup": "500ms", "connections": 8,
        "thresholds": ["error_rate < 1%"]});
    let plan = LoadSpec::from_json(&spec)
        .and_then(|s| s.plan())
        .expect("plan");
    let runs = Share::all(3).expect("shares").map(|share| {
        let plan = plan.clone().share(share).expect("a share");
        tokio::spawn(run_share(plan, target.clone()))
    });
    let mut parts = Vec::new();
    for run in runs.collect::<Vec<_>>() {
        parts.push(
            tokio::time::timeout(Duration::from_secs(30), run)
                .await
                .expect("the share ends")
                .expect("its task did not panic"),
        );
    }
    let results: Vec<LoadResult> = parts.iter().map(|(r, _)| r.clone()).collect();
    let connections: Vec<u32> = results.iter().map(|r| r.connections).collect();
    assert_eq!(connections, vec![3, 3, 2]);
    // 600 arrivals in the measure: a third each, every third from the share's index.
    let sent: Vec<u64> = results.iter().map(|r| r.intended).collect();
    assert_eq!(sent, vec![200, 200, 200]);
    for r in &results {
        let share_rate = r.achieved_rate;
        assert!(
            (share_rate - rate / 3.0).abs() <= rate / 300.0,
            "{share_rate}/s"
        );
    }

    let merged = LoadResult::merge(&results).expect("merge");
    assert!(
        (merged.achieved_rate - rate).abs() <= rate * 0.01,
        "{} /s achieved together",
        merged.achieved_rate
    );
    assert!((merged.intended_rate.expect("open") - rate).abs() <= rate * 0.01);
    let each: u64 = results.iter().map(|r| r.latency.samples).sum();
    assert_eq!(merged.latency.samples, each);
    assert_eq!(merged.counts.requests, 600);
    assert_eq!(
        merged.warmup.requests, 150,
        "the warm-up split too: 90/s of 500 ms each"
    );
    assert_eq!(
        (merged.thresholds.len(), merged.thresholds[0].passed),
        (1, true)
    );
    let by_op: BTreeMap<&str, u64> = merged
        .operations
        .iter()
        .map(|o| (o.name.as_str(), o.counts.requests))
        .collect();
    assert_eq!(
        by_op,
        BTreeMap::from([("GET /", 400), ("GET /b", 200)]),
        "the whole's mix"
    );

    // The seconds of the three, merged second by second, add up to the merged result.
    let mut seconds: BTreeMap<(String, u64), Vec<LoadSecond>> = BTreeMap::new();
    for (_, frames) in &parts {
        for s in frames {
            seconds
                .entry((s.phase.clone(), s.second))
                .or_default()
                .push(s.clone());
        }
    }
    let merged_seconds: Vec<LoadSecond> = seconds
        .values()
        .map(|parts| LoadSecond::merge(parts).expect("merge a second"))
        .collect();
    for ((phase, second), parts) in &seconds {
        let whole = merged_seconds
            .iter()
            .find(|s| (&s.phase, s.second) == (phase, *second))
            .expect("merged");
        let sum: u64 = parts.iter().map(|p| samples(p.histogram.as_ref())).sum();
        assert_eq!(samples(whole.histogram.as_ref()), sum, "{phase} {second}");
        assert_eq!(whole.sent, parts.iter().map(|p| p.sent).sum::<u64>());
    }
    let measured: Vec<&str> = merged_seconds
        .iter()
        .filter(|s| s.phase == "measure")
        .filter_map(|s| s.histogram.as_deref())
        .collect();
    let from_seconds = merge_histograms(measured).expect("merge").expect("seconds");
    assert_eq!(
        from_seconds,
        decode(&merged.latency.histogram).expect("decode"),
        "the merged seconds are exactly the merged result"
    );
}

/// A share does not judge the run's thresholds on its part of the samples: with a p99
/// it has too few samples for, it passes and says why (the controller judges the
/// shares' merged result); the same plan run whole fails on that threshold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_leaves_the_thresholds_to_the_whole() {
    let target = serve_ok().await;
    let spec = serde_json::json!({"operations": [{"path": "/"}], "model": "open", "rate": 100,
        "duration": "1s", "connections": 4, "thresholds": ["p99 < 2s"]});
    let plan = LoadSpec::from_json(&spec)
        .and_then(|s| s.plan())
        .expect("plan");
    let whole = run(
        plan.clone(),
        &RunContext::<()>::new(target.clone(), FrameSender::channel().0),
    )
    .await;
    assert_eq!(whole.status, RunStatus::Failed, "100 samples judge no p99");
    let share = plan
        .share(Share::new(0, 2).expect("share"))
        .expect("a share");
    let (result, _) = run_share(share, target).await;
    assert!(
        !result.thresholds[0].passed,
        "what its part observed is kept"
    );
    assert!(
        result
            .notes
            .iter()
            .any(|n| n.contains("judged on the whole run")),
        "{:?}",
        result.notes
    );
}
