use iohr_domain::RunStatus;
use iohr_domain::capacity::{Stage, SweepPoint};
use iohr_domain::histogram::{encode, latency_histogram};
use iohr_domain::load::Counts;
use iohr_domain::quantile::Percentile;
use serde_json::json;

use crate::store::tests::{both, checks_run};
use crate::store::{Ending, LeaseGuard, Store};

/// One share's point of a step offered `offered`/s: `n` answers of `micros` each, at
/// `achieved`/s (its own verdict on its part, as the agent judges it, left true).
fn point(step: u32, offered: f64, achieved: f64, n: u64, micros: u64) -> SweepPoint {
    let mut latency = latency_histogram().expect("histogram");
    latency.record_n(micros, n).expect("record");
    let none = || Percentile::Insufficient {
        insufficient: "a share's".to_string(),
        samples: n,
    };
    SweepPoint {
        step,
        stage: Stage::Sweep,
        offered,
        achieved,
        counts: Counts {
            requests: n,
            responses: [("2xx".to_string(), n)].into(),
            errors: Default::default(),
        },
        error_rate: 0.0,
        late: 0,
        dropped: 0,
        p50: none(),
        p99: none(),
        p99_us: Some(micros),
        meets_slo: true,
        broke: Vec::new(),
        histogram: encode(&latency).expect("encode"),
    }
}

async fn end_step(store: &Store, share: &str, guard: &LeaseGuard, number: u64, p: &SweepPoint) {
    let payload = json!({"event": "end", "step": p.step, "point": p, "phase": "step end"});
    crate::runs::relay::append_frames(
        store,
        share,
        guard,
        &[(number, "phase".to_string(), payload)],
    )
    .await
    .expect("append");
}

/// A split sweep's step is judged once every share has ended it, on the merge: a share's
/// own part meeting the SLO does not make the whole meet it. Each share's agent gets the
/// same verdict, a stale lease none, and the rows go with the run's ending.
#[tokio::test]
async fn a_split_sweeps_steps_are_judged_on_every_shares_part_merged() {
    for store in both().await {
        let account = store
            .create_account("acme", 2, false)
            .await
            .expect("account");
        store
            .add_environment(&account.id, "staging", false)
            .await
            .expect("env");
        let spec = json!({"operations": [{"path": "/"}], "rates": [100, 150],
            "step": "2s", "discard": "0s", "slo": {"p99": "200ms"}, "connections": 4});
        let scenario = store
            .put_scenario(&account.id, "sweep", "capacity", &spec)
            .await
            .expect("scenario");
        let new = crate::store::NewRun {
            kind: iohr_domain::RunKind::Capacity,
            agents: 2,
            ..checks_run(&account.id, &scenario)
        };
        let (run, shares) = crate::runs::start::store_run(&store, &new, "token:t1", None)
            .await
            .expect("run");
        let guards =
            crate::store::tests::take_shares(&store, &account.id, "fp-steps", &shares).await;
        let (a, b) = ((&shares[0].id, &guards[0]), (&shares[1].id, &guards[1]));
        let verdict = |share: &str, guard: &LeaseGuard, step: u32| {
            let (store, share, guard) = (store.clone(), share.to_string(), guard.clone());
            async move {
                crate::runs::step_verdict(&store, &share, &guard, step)
                    .await
                    .expect("verdict")
            }
        };

        // Step 1: each share keeps up with its half (50/s of 100/s), fast answers.
        end_step(&store, a.0, a.1, 1, &point(1, 100.0, 50.0, 100, 1_000)).await;
        assert_eq!(
            verdict(a.0, a.1, 1).await,
            None,
            "share 1 has not ended step 1"
        );
        end_step(&store, b.0, b.1, 1, &point(1, 100.0, 49.8, 100, 2_000)).await;
        let first = verdict(a.0, a.1, 1).await.expect("judged");
        assert!(first.meets_slo, "{first:?}");
        assert!(first.start_after_ms <= 300, "{first:?}");
        let other = verdict(b.0, b.1, 1).await.expect("judged");
        assert_eq!((other.step, other.meets_slo), (1, true));
        let stale = LeaseGuard {
            lease_id: a.1.lease_id.clone(),
            epoch: a.1.epoch + 1,
        };
        assert_eq!(
            verdict(a.0, &stale, 1).await,
            None,
            "a stale lease learns nothing"
        );

        // Step 2: share 0's part is fast, share 1's slow; the whole's p99 breaks the SLO.
        end_step(&store, a.0, a.1, 2, &point(2, 150.0, 75.0, 100, 1_000)).await;
        end_step(&store, b.0, b.1, 2, &point(2, 150.0, 75.0, 100, 300_000)).await;
        for (share, guard) in [a, b] {
            let second = verdict(share, guard, 2).await.expect("judged");
            assert!(!second.meets_slo, "{second:?}");
            assert!(second.reason.starts_with("p99 "), "{second:?}");
        }
        assert_eq!(verdict(a.0, a.1, 3).await, None, "no step 3 yet");

        for (share, guard) in [a, b] {
            let cancelled = Ending {
                status: RunStatus::Cancelled,
                reason: Some("stopped".to_string()),
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
        assert_eq!(ended.status, RunStatus::Cancelled);
        crate::store::tests::assert_no_rows(&store, &run.id, &["split_step_points", "split_steps"])
            .await;
    }
}

/// Step 0, the start: a share asking for it learns nothing while another share does not
/// hold its lease (offered, not yet accepted: its offer may lapse and go elsewhere), and
/// once every share does, each is told one instant, soon; a stale lease is told nothing.
#[tokio::test]
async fn a_split_runs_shares_start_once_every_share_holds_its_lease() {
    for store in both().await {
        let (account, template) = crate::store::tests::seed(&store).await;
        let new = crate::store::NewRun {
            agents: 2,
            kind: iohr_domain::RunKind::Load,
            ..crate::store::tests::run_like(&template)
        };
        let (_, shares) = crate::runs::start::store_run(&store, &new, "token:t1", None)
            .await
            .expect("run");
        let agent = store
            .register_agent_cert(&account.id, "edge-1", "fp-start")
            .await
            .expect("agent");
        let mut guards = Vec::new();
        for share in &shares {
            guards.push(
                store
                    .offer_lease(&share.id, &agent)
                    .await
                    .expect("offer")
                    .expect("offered"),
            );
        }
        let start = iohr_proto::START_STEP;
        assert!(
            store
                .accept_lease(&shares[0].id, &guards[0])
                .await
                .expect("accept")
        );
        assert_eq!(
            crate::runs::step_verdict(&store, &shares[0].id, &guards[0], start)
                .await
                .expect("ask"),
            None,
            "share 1 is offered, not held"
        );
        assert!(
            store
                .accept_lease(&shares[1].id, &guards[1])
                .await
                .expect("accept")
        );
        for (share, guard) in shares.iter().zip(&guards) {
            let go = crate::runs::step_verdict(&store, &share.id, guard, start)
                .await
                .expect("ask")
                .expect("every share holds its lease");
            assert_eq!((go.step, go.meets_slo), (start, true));
            assert!(go.start_after_ms <= 300, "{go:?}");
        }
        let stale = LeaseGuard {
            lease_id: "not-the-lease".to_string(),
            epoch: guards[0].epoch,
        };
        assert_eq!(
            crate::runs::step_verdict(&store, &shares[0].id, &stale, start)
                .await
                .expect("ask"),
            None
        );
    }
}
