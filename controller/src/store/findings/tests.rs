//! Findings: one per fingerprint across runs, reopened when seen again, and one even
//! when runs end at once.

use iohr_domain::RunStatus;

use crate::store::tests::*;
use crate::store::*;

#[tokio::test]
async fn findings_are_deduplicated_across_runs_and_reopen_when_seen_again() {
    use iohr_domain::finding::{FindingKind, FindingStatus, Sighting};
    for store in both().await {
        let (account, template) = seed(&store).await;
        let (first, frames) =
            run_to_end(&store, &template, RunStatus::Failed, failing_checks()).await;
        assert_eq!(
            frames.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(),
            ["finding", "finding", "finished"],
            "one frame per finding, then finished, in the ending's transaction"
        );
        assert_eq!(frames[0].number, 1);
        assert_eq!(first.frames_through, 3);
        assert_eq!(first.findings.len(), 2);
        assert!(first.findings.iter().all(|f| f.seen == Sighting::New));
        let check = first
            .findings
            .iter()
            .find(|f| f.kind == FindingKind::CheckFailed)
            .expect("check finding")
            .clone();
        assert_eq!(frames[0].payload["seen"], "new");

        let (second, _) = run_to_end(&store, &template, RunStatus::Failed, failing_checks()).await;
        assert_eq!(
            second
                .findings
                .iter()
                .map(|f| (&f.id, f.seen))
                .collect::<Vec<_>>(),
            first
                .findings
                .iter()
                .map(|f| (&f.id, Sighting::SeenAgain))
                .collect::<Vec<_>>(),
            "the same findings, seen again"
        );
        let stored = store
            .finding(&account.id, &check.id)
            .await
            .expect("q")
            .expect("finding");
        assert_eq!(
            (
                stored.times_seen,
                stored.first_run_id.as_str(),
                stored.last_run_id.as_str()
            ),
            (2, first.id.as_str(), second.id.as_str())
        );
        assert_eq!(stored.status, FindingStatus::Open);

        // Closing is idempotent and audited each time.
        let closed = store
            .close_finding(&account.id, &check.id, "person:ada")
            .await
            .expect("close")
            .expect("found");
        assert_eq!(closed.status, FindingStatus::Closed);
        assert_eq!(closed.closed_by.as_deref(), Some("person:ada"));
        let again = store
            .close_finding(&account.id, &check.id, "token:t2")
            .await
            .expect("close")
            .expect("found");
        assert_eq!(
            (again.closed_at, again.closed_by.as_deref()),
            (closed.closed_at, Some("person:ada")),
            "the first close stands"
        );
        let lines = store.audit_lines(&account.id).await.expect("audit");
        let closes: Vec<&AuditLine> = lines
            .iter()
            .filter(|l| l.action == "finding.close")
            .collect();
        assert_eq!(closes.len(), 2);
        assert!(closes[0].outcome.contains("closed") && closes[1].outcome.contains("already"));

        // Filters and paging; another account sees nothing.
        let list = |status, scenario: Option<&str>, environment: Option<&str>| FindingFilter {
            status,
            scenario: scenario.map(str::to_string),
            environment: environment.map(str::to_string),
            limit: 10,
            cursor: None,
        };
        let ids = |rows: Vec<FindingRow>| rows.into_iter().map(|f| f.id).collect::<Vec<_>>();
        let (closed_page, _) = store
            .list_findings(&account.id, &list(Some(FindingStatus::Closed), None, None))
            .await
            .expect("list");
        assert_eq!(ids(closed_page), vec![check.id.clone()]);
        let (open_page, _) = store
            .list_findings(&account.id, &list(Some(FindingStatus::Open), None, None))
            .await
            .expect("list");
        assert_eq!(open_page.len(), 1);
        assert_ne!(open_page[0].id, check.id);
        let (by_scenario, _) = store
            .list_findings(
                &account.id,
                &list(None, Some(&template.scenario_id), Some("staging")),
            )
            .await
            .expect("list");
        assert_eq!(by_scenario.len(), 2);
        assert!(
            store
                .list_findings(&account.id, &list(None, Some("other"), None))
                .await
                .expect("list")
                .0
                .is_empty()
        );
        let (page, next) = store
            .list_findings(
                &account.id,
                &FindingFilter {
                    limit: 1,
                    ..FindingFilter::default()
                },
            )
            .await
            .expect("page");
        let (page2, last) = store
            .list_findings(
                &account.id,
                &FindingFilter {
                    limit: 1,
                    cursor: next,
                    ..FindingFilter::default()
                },
            )
            .await
            .expect("page 2");
        assert_eq!((page.len(), page2.len(), last), (1, 1, None));
        assert!(page[0].id > page2[0].id, "newest first");
        let other = store
            .create_account("other", 1, false)
            .await
            .expect("other");
        assert!(
            store
                .finding(&other.id, &check.id)
                .await
                .expect("q")
                .is_none()
        );
        assert!(
            store
                .close_finding(&other.id, &check.id, "token:x")
                .await
                .expect("q")
                .is_none()
        );

        // Seen again while closed: open again, and the run says so.
        let (third, _) = run_to_end(&store, &template, RunStatus::Failed, failing_checks()).await;
        let reopened = third
            .findings
            .iter()
            .find(|f| f.id == check.id)
            .expect("seen");
        assert_eq!(reopened.seen, Sighting::Reopened);
        assert!(
            third
                .findings
                .iter()
                .any(|f| f.id != check.id && f.seen == Sighting::SeenAgain)
        );
        let stored = store
            .finding(&account.id, &check.id)
            .await
            .expect("q")
            .expect("finding");
        assert_eq!(
            (stored.status, stored.times_seen, stored.closed_at),
            (FindingStatus::Open, 3, None)
        );
        let runs = store.finding_runs(&check.id, 10).await.expect("runs");
        assert_eq!(
            runs.iter()
                .map(|r| (r.run.as_str(), r.seen))
                .collect::<Vec<_>>(),
            [
                (third.id.as_str(), Sighting::Reopened),
                (second.id.as_str(), Sighting::SeenAgain),
                (first.id.as_str(), Sighting::New)
            ]
        );

        // A run without a verdict finds nothing, whatever its result says.
        let (errored, frames) =
            run_to_end(&store, &template, RunStatus::Error, failing_checks()).await;
        assert!(errored.findings.is_empty());
        assert_eq!(frames.len(), 1);
    }
}

#[tokio::test]
async fn runs_ending_at_once_share_one_finding() {
    use iohr_domain::finding::Sighting;
    for store in both().await {
        let (account, template) = seed(&store).await;
        let first = take_run(&store, &template).await;
        let second = take_run(&store, &template).await;
        let ((a, _), (b, _)) = tokio::join!(
            end_run(&store, first, RunStatus::Failed, failing_checks()),
            end_run(&store, second, RunStatus::Failed, failing_checks()),
        );
        let mut seen: Vec<Sighting> = a
            .findings
            .iter()
            .chain(&b.findings)
            .map(|f| f.seen)
            .collect();
        seen.sort_by_key(|s| s.as_str());
        assert_eq!(
            seen,
            [
                Sighting::New,
                Sighting::New,
                Sighting::SeenAgain,
                Sighting::SeenAgain
            ],
            "one run created each finding, the other saw it again"
        );
        let (all, _) = store
            .list_findings(
                &account.id,
                &FindingFilter {
                    limit: 10,
                    ..FindingFilter::default()
                },
            )
            .await
            .expect("list");
        assert_eq!(all.len(), 2);
        assert!(all.iter().all(|f| f.times_seen == 2));
    }
}
