//! Webhook secrets at rest, on both stores: sealed when the store has its key, rows
//! written in clear still read and sealed by `seal_plain_secrets`; and each account's
//! share of the due deliveries.

use iohr_domain::RunStatus;
use sqlx::Row;

use super::super::sealed::{self, SecretKey};
use super::super::tests::{both, failing_checks, run_to_end, seed};
use super::*;

fn new_hook(secret: &str) -> NewWebhook {
    NewWebhook {
        url: "https://hooks.example.com/x".into(),
        events: vec![crate::store::RUN_FINISHED.to_string()],
        format: "standard".into(),
        secret: secret.into(),
    }
}

async fn stored_secret(store: &Store, id: &str) -> String {
    sqlx::query("SELECT secret FROM webhooks WHERE id = $1")
        .bind(id)
        .fetch_one(&store.pool)
        .await
        .expect("row")
        .try_get("secret")
        .expect("secret")
}

fn key() -> SecretKey {
    let dir = std::env::temp_dir().join(format!("iohr-key-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    SecretKey::load_or_create(&dir).expect("key").0
}

#[tokio::test]
async fn secrets_are_sealed_at_rest_and_rows_in_clear_still_work() {
    for store in both().await {
        let (account, template) = seed(&store).await;
        // A row written before sealing (a store without its key).
        let old = store
            .create_webhook(&account.id, &new_hook("whsec_old"), "t")
            .await
            .expect("create");
        assert_eq!(stored_secret(&store, &old.id).await, "whsec_old");

        let store = store.with_secret_key(key());
        let new = store
            .create_webhook(&account.id, &new_hook("whsec_new"), "t")
            .await
            .expect("create");
        assert_eq!(new.secret, "whsec_new", "the creation's answer shows it");
        let at_rest = stored_secret(&store, &new.id).await;
        assert!(
            sealed::is_sealed(&at_rest) && !at_rest.contains("whsec_new"),
            "{at_rest}"
        );

        run_to_end(&store, &template, RunStatus::Failed, failing_checks()).await;
        store.fan_out_events(100).await.expect("fan out");
        let secrets = |due: Vec<DueDelivery>| {
            let mut pairs: Vec<(String, String)> = due
                .into_iter()
                .map(|d| (d.webhook.id, d.webhook.secret))
                .collect();
            pairs.sort();
            pairs
        };
        let mut expected = vec![
            (old.id.clone(), "whsec_old".to_string()),
            (new.id.clone(), "whsec_new".to_string()),
        ];
        expected.sort();
        let due = store.due_deliveries(now_ms(), 100, 100).await.expect("due");
        assert_eq!(secrets(due), expected, "the row in clear is read as it is");

        assert_eq!(store.seal_plain_secrets().await.expect("seal"), 1);
        assert_eq!(store.seal_plain_secrets().await.expect("again"), 0);
        assert!(!stored_secret(&store, &old.id).await.contains("whsec_old"));
        let due = store.due_deliveries(now_ms(), 100, 100).await.expect("due");
        assert_eq!(
            secrets(due),
            expected,
            "sealed rows open to the same secrets"
        );

        // Another key opens nothing: those deliveries wait, none is signed wrong.
        let wrong = store.clone().with_secret_key(key());
        assert!(
            wrong
                .due_deliveries(now_ms(), 100, 100)
                .await
                .expect("due")
                .is_empty()
        );
    }
}

#[tokio::test]
async fn an_account_gets_its_share_of_the_due_deliveries() {
    for store in both().await {
        let (account, template) = seed(&store).await;
        for n in 0..3 {
            store
                .create_webhook(&account.id, &new_hook(&format!("whsec_{n}")), "t")
                .await
                .expect("create");
        }
        run_to_end(&store, &template, RunStatus::Failed, failing_checks()).await;
        store.fan_out_events(100).await.expect("fan out");
        assert_eq!(
            store
                .due_deliveries(now_ms(), 100, 100)
                .await
                .expect("due")
                .len(),
            3
        );
        assert_eq!(
            store
                .due_deliveries(now_ms(), 100, 2)
                .await
                .expect("due")
                .len(),
            2,
            "at most the account's share"
        );
    }
}
