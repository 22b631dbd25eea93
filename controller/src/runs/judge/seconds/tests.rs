use iohr_domain::histogram::{encode, latency_histogram};
use iohr_domain::load::Threshold;
use iohr_domain::{RunKind, RunStatus};
use serde_json::json;

use crate::runs::relay::AppendOutcome;
use crate::store::tests::{both, seed};
use crate::store::{Ending, LeaseGuard, NewRun, Store};

/// A measured second of one share, as its `load` frame carries it: `n` answers of
/// `micros` each.
fn second(second: u64, n: u64, micros: u64) -> serde_json::Value {
    phase_second("measure", second, n, micros)
}

fn phase_second(phase: &str, second: u64, n: u64, micros: u64) -> serde_json::Value {
    let mut latency = latency_histogram().expect("histogram");
    latency.record_n(micros, n).expect("record");
    json!({
        "second": second, "phase": phase, "requests": n, "responses": {"2xx": n},
        "errors": {}, "intended": n, "sent": n, "late": 0, "dropped": 0,
        "histogram": encode(&latency).expect("encode"), "operations": {},
    })
}

/// `frames` (number, kind, payload) appended by a share: the split run's frames they
/// made, and why the split run stops if they made it cross a threshold.
async fn appended(
    store: &Store,
    (share, guard): (&str, &LeaseGuard),
    frames: Vec<(u64, &str, serde_json::Value)>,
) -> (Vec<crate::store::StoredFrame>, Option<(String, String)>) {
    let frames: Vec<(u64, String, serde_json::Value)> = frames
        .into_iter()
        .map(|(n, k, p)| (n, k.to_string(), p))
        .collect();
    match crate::runs::relay::append_frames(store, share, guard, &frames)
        .await
        .expect("append")
    {
        AppendOutcome::Stored {
            relayed,
            split_aborted,
            ..
        } => (relayed, split_aborted),
        AppendOutcome::Stale => panic!("stale"),
    }
}

/// A share's `load` frame `number`: why the split run stops, if it made it cross.
async fn send(
    store: &Store,
    share: &str,
    guard: &LeaseGuard,
    number: u64,
    payload: serde_json::Value,
) -> Option<(String, String)> {
    appended(store, (share, guard), vec![(number, "load", payload)])
        .await
        .1
}

/// `abort_on_fail` of a split run: a second counts once every share has sent it, the
/// merged measure so far is judged in order, the first crossing is returned once, and
/// the split run ends `failed` with it when its shares (cancelled for it) end.
#[tokio::test]
async fn a_split_run_stops_when_its_merged_seconds_cross_a_threshold() {
    for store in both().await {
        let (account, template) = seed(&store).await;
        let rules: Vec<Threshold> = vec!["p99 < 10ms".parse().expect("threshold")];
        let new = NewRun {
            agents: 2,
            kind: RunKind::Load,
            abort_on: rules,
            ..crate::store::tests::run_like(&template)
        };
        let (run, shares) = crate::runs::start::store_run(&store, &new, "token:t1", None)
            .await
            .expect("run");
        let guards =
            crate::store::tests::take_shares(&store, &account.id, "fp-abort", &shares).await;
        let (a, b) = ((&shares[0].id, &guards[0]), (&shares[1].id, &guards[1]));

        // Second 1 fast on both; second 2: share 0 has a few slow answers, enough for
        // its own p99 to cross, but share 1's second 2 is not in yet, and then its many
        // fast ones keep the whole under. Second 3 slow on both crosses.
        assert_eq!(send(&store, a.0, a.1, 1, second(1, 100, 1_000)).await, None);
        assert_eq!(send(&store, b.0, b.1, 1, second(1, 100, 1_000)).await, None);
        assert_eq!(send(&store, a.0, a.1, 2, second(2, 5, 50_000)).await, None);
        assert_eq!(
            send(&store, b.0, b.1, 2, second(2, 1_000, 1_000)).await,
            None,
            "the whole's p99 is 1 ms: 5 of 1,205 answers were slow (share 0's alone: 5 of 105)"
        );
        assert_eq!(
            send(&store, b.0, b.1, 3, second(3, 100, 50_000)).await,
            None
        );
        let (split, why) = send(&store, a.0, a.1, 3, second(3, 100, 50_000))
            .await
            .expect("second 3 crosses on the whole");
        assert_eq!(split, run.id);
        assert!(
            why.starts_with("threshold p99 < 10ms crossed after 3 s ("),
            "{why}"
        );
        assert_eq!(
            send(&store, a.0, a.1, 4, second(4, 100, 50_000)).await,
            None,
            "told once"
        );

        // The dispatcher cancels both shares with the reason; the split run fails.
        for (share, guard) in [a, b] {
            let cancelled = Ending {
                status: RunStatus::Cancelled,
                reason: Some(why.clone()),
                result: None,
                units_spent: Some(1),
            };
            crate::runs::ending::finish_run_with_findings(
                &store,
                share,
                Some(guard),
                None,
                &cancelled,
            )
            .await
            .expect("finish")
            .expect("ended");
        }
        let ended = store.run(&run.id).await.expect("run").expect("row");
        assert_eq!(ended.status, RunStatus::Failed);
        assert_eq!(ended.reason.as_deref(), Some(why.as_str()));
        crate::store::tests::assert_no_rows(&store, &run.id, &["split_measures", "split_seconds"])
            .await;
    }
}

/// Without `abort_on_fail`, a split run's seconds are merged and nothing is judged.
#[tokio::test]
async fn a_split_run_without_abort_on_fail_is_not_judged_live() {
    for store in both().await {
        let (account, template) = seed(&store).await;
        let new = NewRun {
            agents: 2,
            kind: RunKind::Load,
            ..crate::store::tests::run_like(&template)
        };
        let (_, shares) = crate::runs::start::store_run(&store, &new, "token:t1", None)
            .await
            .expect("run");
        let agent = store
            .register_agent_cert(&account.id, "edge-1", "fp-no-abort")
            .await
            .expect("agent");
        for share in &shares {
            let guard = store
                .offer_lease(&share.id, &agent)
                .await
                .expect("offer")
                .expect("offered");
            assert!(store.accept_lease(&share.id, &guard).await.expect("accept"));
            assert_eq!(
                send(&store, &share.id, &guard, 1, second(1, 100, 900_000)).await,
                None
            );
        }
    }
}

/// `frames` (number, kind, payload) of a share: the split run's frames they made.
async fn append(
    store: &Store,
    (share, guard): (&String, &LeaseGuard),
    frames: Vec<(u64, &str, serde_json::Value)>,
) -> Vec<crate::store::StoredFrame> {
    appended(store, (share, guard), frames).await.0
}

/// The split run's stream has one `load` frame per second of the whole, warm-up and
/// measure alike: made once every share has sent that second, its counts and histogram
/// the shares' summed, and saying how many shares it holds; the shares' own seconds are
/// not relayed. A second a share never sent (it ended first) is merged from the parts
/// that came when the split run ends, before its `finished` frame.
#[tokio::test]
async fn a_split_runs_stream_has_one_second_of_the_whole_per_second() {
    for store in both().await {
        let (account, template) = seed(&store).await;
        let new = NewRun {
            agents: 2,
            kind: RunKind::Load,
            ..crate::store::tests::run_like(&template)
        };
        let (run, shares) = crate::runs::start::store_run(&store, &new, "token:t1", None)
            .await
            .expect("run");
        let guards =
            crate::store::tests::take_shares(&store, &account.id, "fp-live", &shares).await;
        let (a, b) = ((&shares[0].id, &guards[0]), (&shares[1].id, &guards[1]));
        // A warm-up second and a measured one share a number: both are merged.
        let relayed = append(
            &store,
            a,
            vec![
                (1, "phase", json!({"phase": "warmup"})),
                (2, "load", phase_second("warmup", 1, 10, 1_000)),
                (3, "load", second(1, 100, 1_000)),
            ],
        )
        .await;
        let kinds: Vec<&str> = relayed.iter().map(|f| f.kind.as_str()).collect();
        assert_eq!(kinds, ["phase"], "share 0's seconds wait for share 1's");
        assert_eq!(relayed[0].payload["share"], 0);

        let relayed = append(
            &store,
            b,
            vec![
                (1, "load", phase_second("warmup", 1, 30, 2_000)),
                (2, "load", second(1, 300, 2_000)),
                (3, "load", second(2, 300, 2_000)),
            ],
        )
        .await;
        let seconds: Vec<(String, u64, u64, u64)> = relayed
            .iter()
            .map(|f| {
                assert_eq!(f.kind, "load");
                assert!(f.payload.get("share").is_none(), "{}", f.payload);
                (
                    f.payload["phase"].as_str().expect("phase").to_string(),
                    f.payload["second"].as_u64().expect("second"),
                    f.payload["requests"].as_u64().expect("requests"),
                    f.payload["shares"].as_u64().expect("shares"),
                )
            })
            .collect();
        assert_eq!(
            seconds,
            [
                ("warmup".to_string(), 1, 40, 2),
                ("measure".to_string(), 1, 400, 2)
            ],
            "second 2 waits for share 0's"
        );
        let histogram = relayed[1].payload["histogram"].as_str().expect("histogram");
        let whole = iohr_domain::histogram::decode(histogram).expect("decode");
        assert_eq!(whole.len(), 400, "the shares' histograms added");

        // Share 0 ends before its second 2: the ending merges share 1's alone.
        for (share, guard) in [a, b] {
            let ended = Ending {
                status: RunStatus::Passed,
                reason: None,
                result: None,
                units_spent: Some(1),
            };
            crate::runs::ending::finish_run_with_findings(&store, share, Some(guard), None, &ended)
                .await
                .expect("finish")
                .expect("ended");
        }
        let frames = store.frames_after(&run.id, 0, 100).await.expect("frames");
        let numbers: Vec<u64> = frames.iter().map(|f| f.number).collect();
        assert_eq!(numbers, (1..=frames.len() as u64).collect::<Vec<_>>());
        let tail: Vec<(&str, Option<u64>, Option<u64>)> = frames
            .iter()
            .rev()
            .take(2)
            .rev()
            .map(|f| {
                (
                    f.kind.as_str(),
                    f.payload["second"].as_u64(),
                    f.payload["shares"].as_u64(),
                )
            })
            .collect();
        assert_eq!(tail, [("load", Some(2), Some(1)), ("finished", None, None)]);
    }
}
