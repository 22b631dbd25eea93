use iohr_domain::RunStatus;
use iohr_domain::histogram::{encode, latency_histogram};
use iohr_domain::load::Threshold;
use serde_json::json;

use crate::store::tests::{both, seed};
use crate::store::{AppendOutcome, Ending, LeaseGuard, NewRun, Store};

/// A measured second of one share, as its `load` frame carries it: `n` answers of
/// `micros` each.
fn second(second: u64, n: u64, micros: u64) -> serde_json::Value {
    let mut latency = latency_histogram().expect("histogram");
    latency.record_n(micros, n).expect("record");
    json!({
        "second": second, "phase": "measure", "requests": n, "responses": {"2xx": n},
        "errors": {}, "intended": n, "sent": n, "late": 0, "dropped": 0,
        "histogram": encode(&latency).expect("encode"), "operations": {},
    })
}

async fn send(
    store: &Store,
    share: &str,
    guard: &LeaseGuard,
    number: u64,
    payload: serde_json::Value,
) -> Option<(String, String)> {
    match store
        .append_frames(share, guard, &[(number, "load".to_string(), payload)])
        .await
        .expect("append")
    {
        AppendOutcome::Stored { split_aborted, .. } => split_aborted,
        AppendOutcome::Stale => panic!("stale"),
    }
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
            abort_on: rules,
            ..crate::store::tests::run_like(&template)
        };
        let (run, shares) = store
            .insert_new_run(&new, "token:t1", None)
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
            store
                .finish_run_with_findings(share, Some(guard), None, &cancelled)
                .await
                .expect("finish")
                .expect("ended");
        }
        let ended = store.run(&run.id).await.expect("run").expect("row");
        assert_eq!(ended.status, RunStatus::Failed);
        assert_eq!(ended.reason.as_deref(), Some(why.as_str()));
        for table in ["split_measures", "split_seconds"] {
            let left: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM {table} WHERE run_id = $1"
            )))
            .bind(&run.id)
            .fetch_one(&store.pool)
            .await
            .expect("count");
            assert_eq!(left, 0, "{table} goes with the ending");
        }
    }
}

/// Without `abort_on_fail`, a split run's seconds are relayed and nothing is judged.
#[tokio::test]
async fn a_split_run_without_abort_on_fail_is_not_judged_live() {
    for store in both().await {
        let (account, template) = seed(&store).await;
        let new = NewRun {
            agents: 2,
            ..crate::store::tests::run_like(&template)
        };
        let (_, shares) = store
            .insert_new_run(&new, "token:t1", None)
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
