//! The plan's admission on both stores (see `store/tests.rs`): the queue's bound, under
//! concurrent inserts too, and the month's unit budget.

use futures_util::future::join_all;
use iohr_domain::RunStatus;
use serde_json::json;

use super::super::tests::{checks_run, postgres_store, sqlite_store};
use super::super::{Account, Ending, NewRun, PlanChange, RunFilter, Store, StoreError, now_ms};
use super::month_bounds;

async fn both() -> Vec<Store> {
    vec![sqlite_store().await, postgres_store().await]
}

async fn account(store: &Store, change: PlanChange) -> (Account, NewRun) {
    let account = store
        .create_account("acme", 100, false)
        .await
        .expect("account");
    let account = store.set_plan(&account.id, &change).await.expect("plan");
    store
        .add_environment(&account.id, "staging", false)
        .await
        .expect("env");
    let scenario = store
        .put_scenario(
            &account.id,
            "home",
            "checks",
            &json!({"checks": [{"path": "/"}]}),
        )
        .await
        .expect("scenario");
    let run = checks_run(&account.id, &scenario);
    (account, run)
}

fn reserving(run: &NewRun, units: i64) -> NewRun {
    NewRun {
        units_reserved: units,
        ..run.clone()
    }
}

async fn stored_runs(store: &Store, account: &Account) -> usize {
    let filter = RunFilter {
        limit: 500,
        ..RunFilter::default()
    };
    store
        .list_runs(&account.id, &filter)
        .await
        .expect("list")
        .0
        .len()
}

/// Ends a run as an agent would have, having spent `spent` units.
async fn end(store: &Store, id: &str, spent: i64) {
    let ending = Ending {
        status: RunStatus::Passed,
        reason: None,
        result: None,
        units_spent: Some(spent),
    };
    crate::runs::ending::finish_run(store, id, None, None, &ending)
        .await
        .expect("finish")
        .expect("ended");
}

#[tokio::test]
async fn a_run_past_the_queue_bound_is_not_stored_and_one_ending_makes_room() {
    for store in both().await {
        let change = PlanChange {
            max_queued: Some(2),
            ..PlanChange::default()
        };
        let (account, run) = account(&store, change).await;
        assert_eq!(account.max_queued, 2);
        let first = crate::runs::start::insert_run(&store, &run, "token:t1")
            .await
            .expect("first");
        crate::runs::start::insert_run(&store, &run, "token:t1")
            .await
            .expect("second");
        assert_eq!(store.queued_runs(&account.id).await.expect("count"), 2);
        let past = crate::runs::start::insert_run(&store, &run, "token:t1").await;
        assert!(
            matches!(past, Err(StoreError::TooManyQueued { limit: 2 })),
            "{past:?}"
        );
        assert_eq!(stored_runs(&store, &account).await, 2, "nothing stored");
        let audit = store.audit_lines(&account.id).await.expect("audit");
        assert_eq!(audit.len(), 2, "no audit line either: {audit:?}");

        end(&store, &first.id, 1).await;
        let third = crate::runs::start::insert_run(&store, &run, "token:t1")
            .await
            .expect("room again");
        assert_eq!(third.status, RunStatus::Queued);
    }
}

#[tokio::test]
async fn concurrent_inserts_never_pass_the_queue_bound() {
    for store in both().await {
        let change = PlanChange {
            max_queued: Some(5),
            ..PlanChange::default()
        };
        let (account, run) = account(&store, change).await;
        let tries =
            join_all((0..20).map(|_| crate::runs::start::insert_run(&store, &run, "token:t1")))
                .await;
        let stored = tries.iter().filter(|t| t.is_ok()).count();
        let refused = tries
            .iter()
            .filter(|t| matches!(t, Err(StoreError::TooManyQueued { limit: 5 })))
            .count();
        assert_eq!((stored, refused), (5, 15), "{tries:?}");
        assert_eq!(stored_runs(&store, &account).await, 5);
    }
}

#[tokio::test]
async fn the_month_budget_refuses_what_is_not_left_and_gets_back_what_runs_did_not_spend() {
    for store in both().await {
        let change = PlanChange {
            units_per_month: Some(10),
            ..PlanChange::default()
        };
        let (account, run) = account(&store, change).await;
        let big = crate::runs::start::insert_run(&store, &reserving(&run, 6), "token:t1")
            .await
            .expect("six of ten");
        assert_eq!(big.status, RunStatus::Queued);

        let over = crate::runs::start::insert_run(&store, &reserving(&run, 5), "token:t1")
            .await
            .expect("stored refused");
        assert_eq!(over.status, RunStatus::Refused);
        assert!(over.ended_at.is_some());
        let reason = over.reason.clone().unwrap_or_default();
        assert!(
            reason.contains("reserves 5 units and 4 of this month's 10 are left"),
            "{reason}"
        );
        let (_, next) = month_bounds(now_ms());
        assert!(
            reason.contains(&super::super::format_ms(next).replace(".000Z", "Z")),
            "{reason}"
        );
        let frames = store.frames_after(&over.id, 0, 10).await.expect("frames");
        assert_eq!(frames.len(), 1, "{frames:?}");
        assert_eq!(frames[0].kind, "finished");
        assert_eq!(frames[0].payload["status"], "refused");
        assert_eq!(frames[0].payload["reason"], reason.as_str());
        let audit = store.audit_lines(&account.id).await.expect("audit");
        assert_eq!(
            audit.iter().map(|l| l.outcome.as_str()).collect::<Vec<_>>(),
            ["queued", "refused"]
        );
        assert!(
            store
                .unfinished_runs()
                .await
                .expect("q")
                .iter()
                .all(|r| r.id != over.id)
        );

        // The six reserved, two spent: four come back.
        end(&store, &big.id, 2).await;
        let used = store.month_use(&account.id, now_ms()).await.expect("use");
        assert_eq!((used.used, used.budget), (2, 10));
        let eight = crate::runs::start::insert_run(&store, &reserving(&run, 8), "token:t1")
            .await
            .expect("eight");
        assert_eq!(eight.status, RunStatus::Queued);

        // Nothing left: even a run reserving nothing (a closed-model load) is refused.
        let free = crate::runs::start::insert_run(&store, &reserving(&run, 0), "token:t1")
            .await
            .expect("stored refused");
        assert_eq!(free.status, RunStatus::Refused, "{:?}", free.reason);

        // What ended last month is not this month's.
        let (month_start, _) = month_bounds(now_ms());
        sqlx::query("UPDATE runs SET ended_at = $1 WHERE id = $2")
            .bind(month_start - 1)
            .bind(&big.id)
            .execute(&store.pool)
            .await
            .expect("back-date");
        let used = store.month_use(&account.id, now_ms()).await.expect("use");
        assert_eq!(used.used, 8, "only the live run's reservation");
        let two = crate::runs::start::insert_run(&store, &reserving(&run, 2), "token:t1")
            .await
            .expect("two");
        assert_eq!(two.status, RunStatus::Queued, "{:?}", two.reason);
    }
}

#[tokio::test]
async fn without_a_budget_nothing_is_refused() {
    for store in both().await {
        let (_, run) = account(&store, PlanChange::default()).await;
        let huge = crate::runs::start::insert_run(&store, &reserving(&run, 3_600_000), "token:t1")
            .await
            .expect("stored");
        assert_eq!(huge.status, RunStatus::Queued);
    }
}

#[test]
fn months_start_on_the_first_at_midnight_utc() {
    let at = |text: &str| {
        humantime::parse_rfc3339(text)
            .expect("time")
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as i64
    };
    assert_eq!(
        month_bounds(at("2026-12-15T08:09:22Z")),
        (at("2026-12-01T00:00:00Z"), at("2027-01-01T00:00:00Z"))
    );
    assert_eq!(
        month_bounds(at("2028-02-29T23:59:59.999Z")),
        (at("2028-02-01T00:00:00Z"), at("2028-03-01T00:00:00Z"))
    );
    assert_eq!(
        month_bounds(at("2026-03-01T00:00:00Z")),
        (at("2026-03-01T00:00:00Z"), at("2026-04-01T00:00:00Z"))
    );
}
