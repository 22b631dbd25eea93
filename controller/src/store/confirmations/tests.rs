//! Confirmations on both stores (see `store/tests.rs`).

use iohr_domain::{RunKind, RunStatus};
use serde_json::json;

use super::super::tests::{checks_run, postgres_store, sqlite_store};
use super::super::{Ending, NewRun, Store, now_ms};
use super::ConfirmRefusal;

async fn production_faults_run(store: &Store, deadline: i64) -> (String, String) {
    let account = store
        .create_account(&format!("acme-{}", uuid::Uuid::new_v4()), 2, false)
        .await
        .expect("account");
    store
        .add_environment(&account.id, "production", true)
        .await
        .expect("env");
    let scenario = store
        .put_scenario(&account.id, "latency", "faults", &json!({"method": []}))
        .await
        .expect("scenario");
    let run = crate::runs::start::insert_run(
        store,
        &NewRun {
            kind: RunKind::Faults,
            environment: "production".into(),
            units_reserved: 0,
            reason: Some("waiting".into()),
            confirmation: Some(("sha256:abc".into(), deadline)),
            ..checks_run(&account.id, &scenario)
        },
        "token:t1",
    )
    .await
    .expect("run");
    (account.id, run.id)
}

#[tokio::test]
async fn a_person_confirms_the_exact_hash_once_before_the_deadline() {
    for store in [sqlite_store().await, postgres_store().await] {
        let (account, run) = production_faults_run(&store, now_ms() + 60_000).await;
        let stored = store.run(&run).await.expect("read").expect("run");
        assert!(stored.confirmation.as_ref().expect("pending").is_pending());

        let wrong = store
            .confirm_run(&account, &run, "sha256:other", "ada", |_| None)
            .await
            .expect("store");
        assert_eq!(
            wrong.unwrap_err(),
            ConfirmRefusal::HashMismatch {
                expected: "sha256:abc".into()
            }
        );
        let confirmed = store
            .confirm_run(&account, &run, "sha256:abc", "ada", |_| None)
            .await
            .expect("store")
            .expect("confirmed");
        let c = confirmed.confirmation.expect("confirmation");
        assert_eq!(c.confirmed_by.as_deref(), Some("ada"));
        assert_eq!(confirmed.reason, None, "no longer waiting for anyone");
        let again = store
            .confirm_run(&account, &run, "sha256:abc", "bob", |_| None)
            .await
            .expect("store");
        assert!(matches!(again, Err(ConfirmRefusal::NotAwaiting(_))));
        let audit = store.audit_lines(&account).await.expect("audit");
        assert_eq!(
            audit
                .iter()
                .filter(|l| l.action == "run.confirm")
                .map(|l| l.actor.as_str())
                .collect::<Vec<_>>(),
            ["person:ada"]
        );
        assert!(
            store
                .lapsed_confirmations(now_ms() + 120_000)
                .await
                .expect("lapsed")
                .is_empty(),
            "a confirmed run never lapses"
        );
        // Another account cannot see it.
        assert!(
            store
                .confirm_run("someone-else", &run, "sha256:abc", "eve", |_| None)
                .await
                .is_err()
        );
    }
}

#[tokio::test]
async fn an_unconfirmed_run_lapses_at_its_deadline() {
    for store in [sqlite_store().await, postgres_store().await] {
        let deadline = now_ms() + 60_000;
        let (account, run) = production_faults_run(&store, deadline).await;
        assert!(
            store
                .lapsed_confirmations(deadline - 1)
                .await
                .expect("lapsed")
                .is_empty()
        );
        let lapsed = store.lapsed_confirmations(deadline).await.expect("lapsed");
        assert_eq!(
            lapsed.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            [run.as_str()]
        );
        let ending = Ending {
            status: RunStatus::Refused,
            reason: Some("confirmation lapsed".into()),
            result: None,
            units_spent: None,
        };
        crate::runs::ending::finish_run(&store, &run, None, None, &ending)
            .await
            .expect("finish");
        assert!(
            store
                .lapsed_confirmations(deadline)
                .await
                .expect("lapsed")
                .is_empty(),
            "an ended run is not lapsed twice"
        );
        let late = store
            .confirm_run(&account, &run, "sha256:abc", "ada", |_| None)
            .await
            .expect("store");
        assert!(matches!(late, Err(ConfirmRefusal::NotAwaiting(_))));
    }
}

#[tokio::test]
async fn a_confirmed_run_that_will_wait_for_an_agent_says_so_at_once() {
    for store in [sqlite_store().await, postgres_store().await] {
        let (account, run) = production_faults_run(&store, now_ms() + 60_000).await;
        let confirmed = store
            .confirm_run(&account, &run, "sha256:abc", "ada", |row| {
                Some(format!("no agent for {}", row.environment))
            })
            .await
            .expect("store")
            .expect("confirmed");
        assert_eq!(confirmed.reason.as_deref(), Some("no agent for production"));
        let stored = store.run(&run).await.expect("read").expect("run");
        assert_eq!(
            stored.reason, confirmed.reason,
            "stored with the confirmation"
        );
    }
}
