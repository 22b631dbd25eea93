//! The outbox on both stores: events are written by the transaction that ends a run and
//! by nothing else, ids only, numbered without gaps per account; webhook subscriptions,
//! fan-out, attempts, 410 and redelivery; the consumers' cursors.

use iohr_domain::RunStatus;
use serde_json::json;

use super::super::tests::{both, failing_checks, run_to_end, seed, take_run};
use super::super::{
    AttemptOutcome, Ending, MAX_WEBHOOKS_PER_ACCOUNT, NewWebhook, Store, StoreError, now_ms,
};
use super::*;

async fn all_events(store: &Store, account_id: &str) -> Vec<EventRow> {
    store
        .events_after(account_id, 0, 1000)
        .await
        .expect("events")
}

#[tokio::test]
async fn a_runs_end_writes_its_events_in_its_transaction_and_nothing_else_does() {
    for store in both().await {
        let (account, template) = seed(&store).await;
        assert!(
            all_events(&store, &account.id).await.is_empty(),
            "a queued run announces nothing"
        );

        let (first, _) = run_to_end(&store, &template, RunStatus::Failed, failing_checks()).await;
        let events = all_events(&store, &account.id).await;
        let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(types, [FINDING_CREATED, FINDING_CREATED, RUN_FINISHED]);
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(
            events[2].data,
            json!({"run_id": first.id, "kind": "checks", "status": "failed", "environment": "staging"}),
            "ids and words only"
        );
        let mut created: Vec<(String, String)> = events[..2]
            .iter()
            .map(|e| {
                assert_eq!(e.data["run_id"], first.id.as_str());
                assert_eq!(e.data.as_object().unwrap().len(), 3, "{}", e.data);
                (
                    e.data["finding_id"].as_str().unwrap().to_string(),
                    e.data["signature"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        created.sort();
        let mut listed: Vec<(String, String)> = first
            .findings
            .iter()
            .map(|f| (f.id.clone(), f.signature.clone()))
            .collect();
        listed.sort();
        assert_eq!(created, listed);
        assert!(events.iter().all(|e| e.id.starts_with("evt_")));

        // Seen again: no finding is created, so only the run's end is announced.
        let (second, _) = run_to_end(&store, &template, RunStatus::Failed, failing_checks()).await;
        let events = all_events(&store, &account.id).await;
        assert_eq!(events.len(), 4);
        assert_eq!(
            (events[3].seq, events[3].data["run_id"].as_str()),
            (4, Some(second.id.as_str()))
        );

        // An ending that does not commit (frames missing) writes no event; nor does
        // finishing an ended run again.
        let (run, lease) = take_run(&store, &template).await;
        let ending = Ending {
            status: RunStatus::Passed,
            reason: None,
            result: Some(json!({})),
            units_spent: Some(1),
        };
        let refused = crate::runs::ending::finish_run_with_findings(
            &store,
            &run.id,
            Some(&lease),
            Some(9),
            &ending,
        )
        .await;
        assert!(
            matches!(refused, Err(StoreError::Conflict(_))),
            "{refused:?}"
        );
        assert_eq!(
            all_events(&store, &account.id).await.len(),
            4,
            "rolled back with the ending"
        );
        assert!(
            crate::runs::ending::finish_run(&store, &second.id, None, None, &ending)
                .await
                .expect("again")
                .is_none()
        );
        assert_eq!(all_events(&store, &account.id).await.len(), 4);
        assert!(
            crate::runs::ending::finish_run(&store, &run.id, None, None, &ending)
                .await
                .expect("end")
                .is_some()
        );
        let events = all_events(&store, &account.id).await;
        assert_eq!(
            (events.len(), events[4].data["status"].as_str()),
            (5, Some("passed"))
        );
        assert_eq!(store.last_event_seq(&account.id).await.expect("last"), 5);
        assert_eq!(
            store.events_after(&account.id, 3, 1).await.expect("page")[0].seq,
            4
        );
    }
}

/// Endings at once (PostgreSQL's concurrent writers; SQLite's serial ones) get one seq
/// each, with no gap: a reader after N misses nothing.
#[tokio::test]
async fn concurrent_endings_number_their_events_without_gaps() {
    for store in both().await {
        let (account, template) = seed(&store).await;
        let mut taken = Vec::new();
        for _ in 0..8 {
            taken.push(take_run(&store, &template).await);
        }
        let ending = Ending {
            status: RunStatus::Passed,
            reason: None,
            result: Some(json!({})),
            units_spent: Some(1),
        };
        let endings = taken.iter().map(|(run, lease)| {
            let (store, ending) = (store.clone(), ending.clone());
            let (id, lease) = (run.id.clone(), lease.clone());
            tokio::spawn(async move {
                crate::runs::ending::finish_run(&store, &id, Some(&lease), None, &ending).await
            })
        });
        for ended in futures_util::future::join_all(endings).await {
            assert!(ended.expect("task").expect("finish").is_some());
        }
        let events = all_events(&store, &account.id).await;
        assert_eq!(
            events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (1..=8).collect::<Vec<_>>()
        );
        let mut runs: Vec<&str> = events
            .iter()
            .filter_map(|e| e.data["run_id"].as_str())
            .collect();
        runs.sort();
        runs.dedup();
        assert_eq!(runs.len(), 8);
    }
}

fn hook(events: &[&str]) -> NewWebhook {
    NewWebhook {
        url: "http://127.0.0.1:9/hook".into(),
        events: events.iter().map(|e| e.to_string()).collect(),
        format: "standard".into(),
        secret: "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".into(),
    }
}

#[tokio::test]
async fn webhooks_fan_out_new_events_and_keep_a_delivery_log() {
    for store in both().await {
        let (account, template) = seed(&store).await;
        // An event before the subscription is not delivered to it.
        run_to_end(&store, &template, RunStatus::Passed, json!({})).await;
        let runs_only = store
            .create_webhook(&account.id, &hook(&[RUN_FINISHED]), "person:ada")
            .await
            .expect("create");
        let both_types = store
            .create_webhook(&account.id, &hook(&EVENT_TYPES), "person:ada")
            .await
            .expect("create");
        assert_eq!((runs_only.cursor, runs_only.state.as_str()), (1, "active"));
        assert!(
            !runs_only.to_api().to_string().contains("whsec_"),
            "the secret is never listed"
        );

        run_to_end(&store, &template, RunStatus::Failed, failing_checks()).await;
        assert_eq!(store.fan_out_events(100).await.expect("fan out"), 1 + 3);
        assert_eq!(
            store.fan_out_events(100).await.expect("again"),
            0,
            "each event once"
        );
        let log = store
            .deliveries(&both_types.id, 50, None)
            .await
            .expect("log");
        assert_eq!(
            log.iter().map(|d| d.event_seq).collect::<Vec<_>>(),
            [4, 3, 2],
            "newest first"
        );
        assert!(log.iter().all(|d| d.status == "pending" && d.attempts == 0));
        let only = store
            .deliveries(&runs_only.id, 50, None)
            .await
            .expect("log");
        assert_eq!((only.len(), only[0].event_type.as_str()), (1, RUN_FINISHED));

        let now = now_ms();
        let due = store.due_deliveries(now, 100, 100).await.expect("due");
        assert_eq!(due.len(), 4);
        assert!(
            due.iter()
                .all(|d| d.event.seq == d.delivery.event_seq && d.event.id == d.delivery.event_id)
        );

        // Fails, is retried later, then delivered.
        let first = &log[0];
        store
            .record_attempt(
                &both_types.id,
                first.event_seq,
                &AttemptOutcome::Failed {
                    status_code: Some(500),
                    error: "the receiver answered 500".into(),
                    retry_at: Some(now + 60_000),
                },
            )
            .await
            .expect("attempt");
        let later = store
            .deliveries(&both_types.id, 1, None)
            .await
            .expect("log")[0]
            .clone();
        assert_eq!(
            (
                later.status.as_str(),
                later.attempts,
                later.last_status_code
            ),
            ("pending", 1, Some(500))
        );
        assert!(
            !store
                .due_deliveries(now, 100, 100)
                .await
                .expect("due")
                .iter()
                .any(|d| d.delivery.event_seq == first.event_seq && d.webhook.id == both_types.id)
        );
        store
            .record_attempt(
                &both_types.id,
                first.event_seq,
                &AttemptOutcome::Delivered { status_code: 204 },
            )
            .await
            .expect("attempt");
        let done = store
            .deliveries(&both_types.id, 1, None)
            .await
            .expect("log")[0]
            .clone();
        assert_eq!(
            (done.status.as_str(), done.attempts, done.last_status_code),
            ("delivered", 2, Some(204))
        );
        assert!(done.delivered_at.is_some());

        // Given up; redelivered on request with its schedule started over.
        store
            .record_attempt(
                &both_types.id,
                3,
                &AttemptOutcome::Failed {
                    status_code: None,
                    error: "refused".into(),
                    retry_at: None,
                },
            )
            .await
            .expect("attempt");
        let given_up = store
            .deliveries(&both_types.id, 1, Some(4))
            .await
            .expect("log")[0]
            .clone();
        assert_eq!(
            (given_up.status.as_str(), given_up.next_attempt_at),
            ("failed", None)
        );
        let again = store
            .redeliver(&both_types.id, &given_up.event_id)
            .await
            .expect("redeliver")
            .expect("found");
        assert_eq!(
            (again.status.as_str(), again.attempts, again.schedule_from),
            ("pending", 1, 1)
        );
        assert!(
            store
                .redeliver(&both_types.id, "evt_none")
                .await
                .expect("q")
                .is_none()
        );

        // 410 disables the subscription: nothing of it is due any more.
        store
            .record_attempt(&runs_only.id, only[0].event_seq, &AttemptOutcome::Gone)
            .await
            .expect("gone");
        let disabled = store
            .webhook(&account.id, &runs_only.id)
            .await
            .expect("q")
            .expect("hook");
        assert_eq!(disabled.state, "disabled");
        assert!(disabled.disabled_reason.unwrap().contains("410"));
        assert!(
            store
                .due_deliveries(now_ms(), 100, 100)
                .await
                .expect("due")
                .iter()
                .all(|d| d.webhook.id != runs_only.id)
        );

        // Deleting takes the log with it; both changes are audited.
        assert!(
            store
                .delete_webhook(&account.id, &both_types.id, "token:t1")
                .await
                .expect("delete")
        );
        assert!(
            !store
                .delete_webhook(&account.id, &both_types.id, "token:t1")
                .await
                .expect("delete")
        );
        assert!(
            store
                .deliveries(&both_types.id, 50, None)
                .await
                .expect("log")
                .is_empty()
        );
        let actions: Vec<String> = store
            .audit_lines(&account.id)
            .await
            .expect("audit")
            .into_iter()
            .filter(|l| l.action.starts_with("webhook."))
            .map(|l| format!("{} {}", l.action, l.actor))
            .collect();
        assert_eq!(
            actions,
            [
                "webhook.create person:ada",
                "webhook.create person:ada",
                "webhook.delete token:t1"
            ]
        );
        assert!(
            store
                .audit_lines(&account.id)
                .await
                .expect("audit")
                .iter()
                .all(|l| !l.outcome.contains("whsec_")
                    && l.targets
                        .as_deref()
                        .is_none_or(|t| t == "http://127.0.0.1:9"))
        );
    }
}

#[tokio::test]
async fn subscriptions_are_bounded_per_account() {
    for store in both().await {
        let (account, _) = seed(&store).await;
        for _ in 0..MAX_WEBHOOKS_PER_ACCOUNT - 1 {
            store
                .create_webhook(&account.id, &hook(&[RUN_FINISHED]), "token:t1")
                .await
                .expect("create");
        }
        // Eight racing for the last place (two replicas, two clients): one gets it.
        let mut racing = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let (store, account) = (store.clone(), account.id.clone());
            racing.spawn(async move {
                store
                    .create_webhook(&account, &hook(&[RUN_FINISHED]), "token:t1")
                    .await
            });
        }
        let raced = racing.join_all().await;
        let created = raced.iter().filter(|r| r.is_ok()).count();
        assert_eq!(created, 1, "{raced:?}");
        assert!(
            raced
                .iter()
                .all(|r| matches!(r, Ok(_) | Err(StoreError::Conflict(_)))),
            "{raced:?}"
        );
        let refused = store
            .create_webhook(&account.id, &hook(&[RUN_FINISHED]), "token:t1")
            .await;
        assert!(
            matches!(refused, Err(StoreError::Conflict(_))),
            "{refused:?}"
        );
        assert_eq!(
            store.webhooks(&account.id).await.expect("list").len() as i64,
            MAX_WEBHOOKS_PER_ACCOUNT
        );
    }
}

#[tokio::test]
async fn a_consumers_cursor_names_the_accounts_it_has_yet_to_handle() {
    for store in both().await {
        let (account, template) = seed(&store).await;
        assert!(
            store
                .event_backlog("mqtt")
                .await
                .expect("backlog")
                .is_empty()
        );
        run_to_end(&store, &template, RunStatus::Passed, json!({})).await;
        run_to_end(&store, &template, RunStatus::Passed, json!({})).await;
        let backlog = store.event_backlog("mqtt").await.expect("backlog");
        assert_eq!(
            backlog,
            [Backlog {
                account_id: account.id.clone(),
                account_name: "acme".into(),
                done: 0
            }]
        );
        store
            .set_event_cursor("mqtt", &account.id, 1)
            .await
            .expect("cursor");
        assert_eq!(
            store.event_backlog("mqtt").await.expect("backlog")[0].done,
            1
        );
        store
            .set_event_cursor("mqtt", &account.id, 2)
            .await
            .expect("cursor");
        assert!(
            store
                .event_backlog("mqtt")
                .await
                .expect("backlog")
                .is_empty()
        );
        assert_eq!(
            store.event_backlog("other").await.expect("backlog").len(),
            1,
            "cursors are per consumer"
        );
    }
}
