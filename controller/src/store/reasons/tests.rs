//! Waiting reasons on both stores (see `store/tests.rs`).

use serde_json::json;

use super::super::tests::{checks_run, postgres_store, sqlite_store};
use super::super::{RunRow, Store};

async fn queued_runs(store: &Store, count: usize) -> Vec<RunRow> {
    let account = store
        .create_account(&format!("acme-{}", uuid::Uuid::new_v4()), 2, false)
        .await
        .expect("account");
    let scenario = store
        .put_scenario(
            &account.id,
            "home",
            "checks",
            &json!({"checks": [{"path": "/"}]}),
        )
        .await
        .expect("scenario");
    let mut runs = Vec::new();
    for _ in 0..count {
        let new = checks_run(&account.id, &scenario);
        runs.push(
            crate::runs::start::insert_run(store, &new, "token:t1")
                .await
                .expect("run"),
        );
    }
    runs
}

#[tokio::test]
async fn only_queued_unleased_runs_take_a_waiting_reason() {
    for store in [sqlite_store().await, postgres_store().await] {
        // More than one statement's worth, plus one offered meanwhile.
        let runs = queued_runs(&store, 503).await;
        let agent = store
            .register_agent_cert(&runs[0].account_id, "edge-1", "fp-1")
            .await
            .expect("agent");
        let offered = &runs[502];
        store
            .offer_lease(&offered.id, &agent)
            .await
            .expect("offer")
            .expect("offered");
        let ids: Vec<String> = runs.iter().map(|r| r.id.clone()).collect();
        store
            .set_waiting_reason(Some("no agent"), &ids)
            .await
            .expect("set");
        for run in &runs[..502] {
            let stored = store.run(&run.id).await.expect("read").expect("run");
            assert_eq!(stored.reason.as_deref(), Some("no agent"), "{}", run.id);
        }
        let stored = store.run(&offered.id).await.expect("read").expect("run");
        assert_eq!(stored.reason, None, "an offered run keeps its own");
        store
            .set_waiting_reason(None, &ids[..1])
            .await
            .expect("clear");
        let cleared = store.run(&ids[0]).await.expect("read").expect("run");
        assert_eq!(cleared.reason, None);
    }
}
