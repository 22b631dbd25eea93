use iohr_domain::RunStatus;
use serde_json::json;

use crate::runs::relay::AppendOutcome;
use crate::store::tests::{both, seed};
use crate::store::{Ending, NewRun, RunFilter};

fn ending(status: RunStatus, reason: &str) -> Ending {
    Ending {
        status,
        reason: Some(reason.to_string()),
        result: None,
        units_spent: Some(3),
    }
}

/// A split run is stored with its shares, listed and counted as one run, started by its
/// first share's acceptance, fed its shares' frames and ended exactly once, by its last
/// share's ending, even when two shares end at once.
#[tokio::test]
async fn a_split_run_starts_relays_and_ends_with_its_shares() {
    for store in both().await {
        let (account, template) = seed(&store).await;
        let new = NewRun {
            agents: 2,
            ..crate::store::tests::run_like(&template)
        };
        let (run, shares) = crate::runs::start::store_run(&store, &new, "token:t1", None)
            .await
            .expect("run");
        assert_eq!((run.agents, shares.len()), (Some(2), 2));
        assert_eq!(
            shares[1]
                .share_of
                .as_ref()
                .map(|(p, s)| (p.as_str(), s.index())),
            Some((run.id.as_str(), 1))
        );
        let filter = RunFilter {
            limit: 50,
            ..RunFilter::default()
        };
        let (listed, _) = store.list_runs(&account.id, &filter).await.expect("list");
        assert!(
            listed.iter().all(|r| r.share_of.is_none()),
            "shares are not listed"
        );
        // The seed's run and the split run: its shares are not counted apart.
        assert_eq!(store.queued_runs(&account.id).await.expect("queued"), 2);
        let leasable = store.unfinished_runs().await.expect("unfinished");
        assert!(
            leasable.iter().all(|r| r.id != run.id),
            "the split run itself is never leased"
        );

        let guards =
            crate::store::tests::take_shares(&store, &account.id, "fp-split", &shares).await;
        assert_eq!(
            store.run(&run.id).await.expect("run").expect("row").status,
            RunStatus::Running
        );

        let frame = |n: u64| (n, "phase".to_string(), json!({"note": n}));
        let AppendOutcome::Stored { relayed, .. } =
            crate::runs::relay::append_frames(&store, &shares[1].id, &guards[1], &[frame(2)])
                .await
                .expect("append")
        else {
            panic!("stale")
        };
        assert!(relayed.is_empty(), "frame 2 waits for frame 1");
        let AppendOutcome::Stored { relayed, .. } =
            crate::runs::relay::append_frames(&store, &shares[1].id, &guards[1], &[frame(1)])
                .await
                .expect("append")
        else {
            panic!("stale")
        };
        let relayed: Vec<(String, u64, serde_json::Value)> = relayed
            .into_iter()
            .map(|f| (f.run_id, f.number, f.payload))
            .collect();
        assert_eq!(
            relayed,
            [
                (run.id.clone(), 1, json!({"note": 1, "share": 1})),
                (run.id.clone(), 2, json!({"note": 2, "share": 1}))
            ]
        );

        let (passed, failed) = (
            ending(RunStatus::Passed, "ok"),
            ending(RunStatus::Error, "target gone"),
        );
        let (a, b) = tokio::join!(
            crate::runs::ending::finish_run_with_findings(
                &store,
                &shares[0].id,
                Some(&guards[0]),
                None,
                &passed
            ),
            crate::runs::ending::finish_run_with_findings(
                &store,
                &shares[1].id,
                Some(&guards[1]),
                None,
                &failed
            ),
        );
        let frames: Vec<_> = [a, b]
            .into_iter()
            .flat_map(|f| f.expect("finish").expect("ended"))
            .filter(|f| f.run_id == run.id)
            .collect();
        assert_eq!(frames.len(), 1, "the split run ended once: {frames:?}");
        assert_eq!(frames[0].kind, "finished");
        let ended = store.run(&run.id).await.expect("run").expect("row");
        assert_eq!(ended.status, RunStatus::Error);
        assert_eq!(
            ended.reason.as_deref(),
            Some("share 1 (agent edge-1) ended error: target gone")
        );
        assert_eq!(ended.units_spent, 6, "its shares' units, summed");
        assert_eq!(ended.frames_through, 3);
    }
}
