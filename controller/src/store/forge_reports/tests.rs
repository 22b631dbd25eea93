//! Forge credentials and reports on both stores: tokens sealed and never listed, the
//! reports' marks, due times, retries and the comment's id, the change's newest run (a
//! before-run beside it is not one), the log's bound, all gone with the account.

use iohr_domain::run::Forge;
use sqlx::Row;

use super::super::sealed::{self, SealError, SecretKey};
use super::super::tests::{both, run_like, seed};
use super::*;
use crate::store::StoreError;

fn key() -> SecretKey {
    let dir = std::env::temp_dir().join(format!("iohr-key-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    SecretKey::load_or_create(&dir).expect("key").0
}

#[tokio::test]
async fn tokens_are_sealed_listed_without_the_token_and_go_with_the_account() {
    for store in both().await {
        let (account, _) = seed(&store).await;
        assert!(matches!(
            store
                .put_forge_credentials(&account.id, Forge::Github, "https://x", "t", "a")
                .await,
            Err(StoreError::Sealed(SealError::NoKey))
        ));
        let store = store.with_secret_key(key());
        let (replaced, row) = store
            .put_forge_credentials(
                &account.id,
                Forge::Github,
                "https://api.github.com",
                "ghp_s3cr3t",
                "person:ada",
            )
            .await
            .expect("put");
        assert!(!replaced);
        assert_eq!(row.api_url, "https://api.github.com");
        assert!(!row.to_api().to_string().contains("s3cr3t"));
        let at_rest: String = sqlx::query("SELECT token FROM forge_credentials")
            .fetch_one(&store.pool)
            .await
            .expect("row")
            .try_get("token")
            .expect("token");
        assert!(sealed::is_sealed(&at_rest) && !at_rest.contains("s3cr3t"));
        let (replaced, _) = store
            .put_forge_credentials(
                &account.id,
                Forge::Github,
                "https://ghe.example/api/v3",
                "ghp_newer",
                "person:bob",
            )
            .await
            .expect("replace");
        assert!(replaced);
        let opened = store
            .open_forge_credentials(&account.id, Forge::Github)
            .await
            .expect("open")
            .expect("some");
        assert_eq!(
            (opened.api_url.as_str(), opened.token.as_str()),
            ("https://ghe.example/api/v3", "ghp_newer")
        );
        assert!(!format!("{opened:?}").contains("ghp_newer"));
        assert!(
            store
                .open_forge_credentials(&account.id, Forge::Gitlab)
                .await
                .expect("open")
                .is_none()
        );
        let listed = store.forge_credentials(&account.id).await.expect("list");
        assert_eq!(listed.len(), 1);
        assert!(
            !store
                .delete_forge_credentials(&account.id, Forge::Gitlab, "person:ada")
                .await
                .expect("delete")
        );
        store
            .put_forge_credentials(&account.id, Forge::Gitlab, "https://gl", "glpat", "a")
            .await
            .expect("gitlab");
        store
            .mark_forge_report(
                &ReportKey {
                    account_id: account.id.clone(),
                    forge: "github".into(),
                    change_ref: "o/r#1".into(),
                },
                None,
            )
            .await
            .expect("mark");
        store
            .log_forge_report(
                &account.id,
                &ReportLogLine {
                    at: now_ms(),
                    forge: "github".into(),
                    change_ref: "o/r#1".into(),
                    outcome: "reported".into(),
                    attempt: 1,
                    ..Default::default()
                },
            )
            .await
            .expect("log");
        store
            .delete_account(&account.id, "acme", "operator")
            .await
            .expect("delete account");
        for (table, count) in store.account_rows(&account.id).await.expect("rows") {
            assert_eq!(count, 0, "{table}");
        }
    }
}

#[tokio::test]
async fn reports_are_marked_due_retried_and_done() {
    for store in both().await {
        let (account, queued) = seed(&store).await;
        let mut new = run_like(&queued);
        new.started_by.change = Some("o/r#7".into());
        new.started_by.commit = Some("a".repeat(40));
        new.started_by.forge = Some(Forge::Github);
        let after = crate::runs::start::insert_run(&store, &new, "token:t1")
            .await
            .expect("run");
        let key = ReportKey {
            account_id: account.id.clone(),
            forge: "github".into(),
            change_ref: "o/r#7".into(),
        };
        // A queued run of a forge's change is seen once.
        let unseen = store.unseen_forge_runs(10).await.expect("unseen");
        assert_eq!(unseen, vec![(key.clone(), after.id.clone())]);
        store
            .mark_forge_report(&key, Some(&after.id))
            .await
            .expect("mark");
        assert!(
            store
                .unseen_forge_runs(10)
                .await
                .expect("unseen")
                .is_empty()
        );
        let due = store.due_forge_reports(now_ms(), 10).await.expect("due");
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].wanted, due[0].attempts), (1, 0));
        // A failure waits for its retry; a new mark makes it due at once.
        store
            .forge_report_failed(&key, 1, now_ms() + 60_000)
            .await
            .expect("failed");
        assert!(
            store
                .due_forge_reports(now_ms(), 10)
                .await
                .expect("due")
                .is_empty()
        );
        store.mark_forge_report(&key, None).await.expect("mark");
        let due = store.due_forge_reports(now_ms(), 10).await.expect("due");
        assert_eq!((due[0].wanted, due[0].attempts), (2, 0));
        store
            .set_forge_comment(&key, Some("42"))
            .await
            .expect("comment");
        // Done with an older mark: still due for the newer one.
        store.forge_report_done(&key, 1).await.expect("done");
        let due = store.due_forge_reports(now_ms(), 10).await.expect("due");
        assert_eq!(due[0].comment_id.as_deref(), Some("42"));
        store.forge_report_done(&key, 2).await.expect("done");
        assert!(
            store
                .due_forge_reports(now_ms(), 10)
                .await
                .expect("due")
                .is_empty()
        );

        // The change's newest run; a before-run beside a later one is not it, and its
        // ending touches the later one's report.
        assert_eq!(
            store.current_forge_run(&key).await.expect("current"),
            Some(after.id.clone())
        );
        let before = crate::runs::start::insert_run(&store, &new, "token:t1")
            .await
            .expect("before");
        let mut beside = new.clone();
        beside.baseline_run = Some(before.id.clone());
        let later = crate::runs::start::insert_run(&store, &beside, "token:t1")
            .await
            .expect("later");
        assert_eq!(
            store.current_forge_run(&key).await.expect("current"),
            Some(later.id.clone())
        );
        let touched = store
            .forge_reports_of_run(&account.id, &before.id)
            .await
            .expect("touched");
        assert!(touched.contains(&key), "{touched:?}");
        assert!(
            store
                .forge_reports_of_run("another-account", &before.id)
                .await
                .expect("touched")
                .is_empty()
        );
    }
}

#[tokio::test]
async fn the_report_log_keeps_the_newest_lines_of_an_account() {
    let store = both().await.remove(0);
    let (account, _) = seed(&store).await;
    for i in 0..MAX_REPORT_LOG_PER_ACCOUNT + 3 {
        let line = ReportLogLine {
            at: 1_000 + i,
            forge: "github".into(),
            change_ref: "o/r#1".into(),
            outcome: "reported".into(),
            attempt: i,
            ..Default::default()
        };
        store
            .log_forge_report(&account.id, &line)
            .await
            .expect("log");
    }
    let lines = store
        .forge_report_log(&account.id, 1000)
        .await
        .expect("log");
    assert_eq!(lines.len() as i64, MAX_REPORT_LOG_PER_ACCOUNT);
    assert_eq!(
        lines[0].attempt,
        MAX_REPORT_LOG_PER_ACCOUNT + 2,
        "newest first"
    );
}
