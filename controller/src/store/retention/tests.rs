//! The sweep on both stores, at explicit times (the controllable clock): what is older
//! than its period goes, what is younger stays, a run whose frames went keeps its record
//! and says since when, and small batches delete the same as large ones.

use std::time::Duration;

use crate::store::tests::{both, run_like, seed};
use crate::store::{AuditLine, Store};

use super::Periods;

const DAY: i64 = 24 * 3600 * 1000;
/// "Now" of the sweeps: day 1000 after the epoch.
const NOW: i64 = 1000 * DAY;

/// A run ended `days_ago` before [`NOW`], with three frames.
async fn ended_run(store: &Store, template: &crate::store::RunRow, days_ago: i64) -> String {
    let run = crate::runs::start::insert_run(store, &run_like(template), "token:t1")
        .await
        .expect("run");
    sqlx::query("UPDATE runs SET status = 'passed', ended_at = $1, result = '{}' WHERE id = $2")
        .bind(NOW - days_ago * DAY)
        .bind(&run.id)
        .execute(&store.pool)
        .await
        .expect("end");
    for number in 2..=4i64 {
        sqlx::query("INSERT INTO frames (run_id, number, kind, payload, at) VALUES ($1, $2, 'load', '{}', 0)")
            .bind(&run.id)
            .bind(number)
            .execute(&store.pool)
            .await
            .expect("frame");
    }
    run.id
}

async fn count(store: &Store, sql: &str, id: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .bind(id)
        .fetch_one(&store.pool)
        .await
        .expect("count")
}

async fn finding(store: &Store, account: &str, run: &str, closed_days_ago: Option<i64>) -> String {
    let id = crate::store::new_id();
    sqlx::query(
        "INSERT INTO findings (id, account_id, signature, kind, subject, title, detail,
             scenario_id, environment, target, status, first_run_id, last_run_id, times_seen,
             first_seen_at, last_seen_at, closed_at)
         VALUES ($1, $2, $3, 'check_failed', 's', 't', 'd', 'home', 'staging', 'x', $4, $5,
             $5, 1, 0, 0, $6)",
    )
    .bind(&id)
    .bind(account)
    .bind(format!("sig-{id}"))
    .bind(if closed_days_ago.is_some() {
        "closed"
    } else {
        "open"
    })
    .bind(run)
    .bind(closed_days_ago.map(|d| NOW - d * DAY))
    .execute(&store.pool)
    .await
    .expect("finding");
    sqlx::query("INSERT INTO run_findings (run_id, finding_id, seen) VALUES ($1, $2, 'new')")
        .bind(run)
        .bind(&id)
        .execute(&store.pool)
        .await
        .expect("sighting");
    id
}

#[tokio::test]
async fn a_sweep_deletes_what_its_periods_no_longer_keep() {
    for store in both().await {
        for batch in [1, 1000] {
            let (account, template) = seed(&store).await;
            let fresh = ended_run(&store, &template, 1).await;
            let month_old = ended_run(&store, &template, 40).await;
            let old = ended_run(&store, &template, 100).await;
            let open = finding(&store, &account.id, &fresh, None).await;
            let closed_long_ago = finding(&store, &account.id, &month_old, Some(120)).await;
            let closed_lately = finding(&store, &account.id, &month_old, Some(10)).await;
            for (days_ago, action) in [(400, "old.line"), (10, "new.line")] {
                let line = AuditLine {
                    at: NOW - days_ago * DAY,
                    actor: "token:t1".into(),
                    action: action.into(),
                    outcome: "ok".into(),
                    ..Default::default()
                };
                store.audit(&account.id, &line).await.expect("audit");
            }

            let hook = store
                .create_webhook(
                    &account.id,
                    &crate::store::NewWebhook {
                        url: "http://127.0.0.1:9/h".into(),
                        events: vec!["reliability.run.finished".into()],
                        format: "standard".into(),
                        secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
                    },
                    "token:t1",
                )
                .await
                .expect("webhook");
            // Delivered 40 days ago (expires), pending 40 days ago (still tried: stays),
            // delivered yesterday (stays).
            for (seq, status, days_ago) in [
                (1, "delivered", 40),
                (2, "pending", 40),
                (3, "delivered", 1),
            ] {
                sqlx::query(
                    "INSERT INTO webhook_deliveries (webhook_id, event_seq, event_id, event_type,
                         status, attempts, schedule_from, created_at)
                     VALUES ($1, $2, $3, 'reliability.run.finished', $4, 1, 0, $5)",
                )
                .bind(&hook.id)
                .bind(seq as i64)
                .bind(format!("evt_{seq}"))
                .bind(status)
                .bind(NOW - days_ago * DAY)
                .execute(&store.pool)
                .await
                .expect("delivery");
            }

            let swept = store
                .sweep(&Periods::default(), NOW, batch)
                .await
                .expect("sweep");
            assert_eq!(swept.runs, 1, "the run ended 100 days ago: {swept:?}");
            assert_eq!(
                swept.deliveries, 1,
                "the delivery finished 40 days ago: {swept:?}"
            );
            let left: Vec<i64> = sqlx::query_scalar(
                "SELECT event_seq FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY event_seq",
            )
            .bind(&hook.id)
            .fetch_all(&store.pool)
            .await
            .expect("deliveries");
            assert_eq!(left, [2, 3], "the pending one and the recent one stay");
            assert_eq!(
                swept.frames, 6,
                "the frames of the runs ended 40 and 100 days ago: {swept:?}"
            );
            assert_eq!(swept.findings, 1, "{swept:?}");
            assert!(swept.audit >= 1, "{swept:?}");

            let frames = "SELECT COUNT(*) FROM frames WHERE run_id = $1";
            let runs = "SELECT COUNT(*) FROM runs WHERE id = $1";
            let findings = "SELECT COUNT(*) FROM findings WHERE id = $1";
            assert_eq!(count(&store, runs, &old).await, 0);
            assert_eq!(count(&store, frames, &old).await, 0);
            assert_eq!(count(&store, runs, &month_old).await, 1, "the record stays");
            assert_eq!(count(&store, frames, &month_old).await, 0);
            assert_eq!(
                store.frames_expired_at(&month_old).await.expect("read"),
                Some(NOW)
            );
            assert_eq!(count(&store, frames, &fresh).await, 3);
            assert_eq!(store.frames_expired_at(&fresh).await.expect("read"), None);
            assert_eq!(count(&store, findings, &closed_long_ago).await, 0);
            assert_eq!(count(&store, findings, &closed_lately).await, 1);
            assert_eq!(count(&store, findings, &open).await, 1);
            let actions: Vec<String> = store
                .audit_lines(&account.id)
                .await
                .expect("lines")
                .into_iter()
                .map(|l| l.action)
                .collect();
            assert!(!actions.contains(&"old.line".to_string()), "{actions:?}");
            assert!(actions.contains(&"new.line".to_string()), "{actions:?}");

            // A second sweep at the same time finds nothing more.
            let again = store
                .sweep(&Periods::default(), NOW, batch)
                .await
                .expect("sweep");
            assert_eq!(again, super::Swept::default());
            // Shorter periods, as an installation may set them.
            let short = Periods {
                frames: Duration::from_secs(3600),
                ..Periods::default()
            };
            let swept = store.sweep(&short, NOW, batch).await.expect("sweep");
            assert_eq!(
                swept.frames, 3,
                "the day-old run's frames under a 1 h period"
            );
            // The next batch size seeds the same account again.
            store
                .delete_account(&account.id, &account.name, "test")
                .await
                .expect("delete");
        }
    }
}
