use serde_json::json;

use crate::store::tests::{both, checks_run};
use crate::store::{Store, Stored};

async fn account(store: &Store) -> String {
    let account = store
        .create_account("acme", 2, false)
        .await
        .expect("account");
    store
        .add_environment(&account.id, "staging", false)
        .await
        .expect("env");
    account.id
}

#[tokio::test]
async fn a_name_given_is_kept_and_labels_the_version() {
    for store in both().await {
        let account = account(&store).await;
        let spec = json!({"checks": [{"path": "/"}]});
        let put = |name: &'static str, spec: serde_json::Value| {
            let store = store.clone();
            let account = account.clone();
            async move {
                store
                    .store_scenario(&account, name, "checks", &spec)
                    .await
                    .expect("store")
            }
        };
        let (first, stored) = put("inline-checks", spec.clone()).await;
        assert_eq!(stored, Stored::Created);
        let (again, stored) = put("inline-checks", spec.clone()).await;
        assert_eq!((stored, &again.version), (Stored::Exists, &first.version));
        // The same spec under the user's own name: that name, not the first one.
        let (smoke, stored) = put("smoke", spec.clone()).await;
        assert_eq!(stored, Stored::Named);
        assert_eq!(
            (smoke.id.as_str(), &smoke.version),
            ("smoke", &first.version)
        );
        let found = store
            .named_scenario(&account, "smoke", &first.version)
            .await
            .expect("read")
            .expect("smoke labels it");
        assert_eq!(found.id, "smoke");
        assert!(
            store
                .named_scenario(&account, "other", &first.version)
                .await
                .expect("read")
                .is_none()
        );

        // A second version of smoke, and a run of it.
        let (newer, stored) = put("smoke", json!({"checks": [{"path": "/health"}]})).await;
        assert_eq!(stored, Stored::Created);
        let run = crate::runs::start::insert_run(&store, &checks_run(&account, &newer), "token:t1")
            .await
            .expect("run");
        let (names, next) = store
            .list_scenarios(&account, None, 50)
            .await
            .expect("list");
        let listed: Vec<(&str, i64, &str)> = names
            .iter()
            .map(|n| (n.id.as_str(), n.versions, n.latest_version.as_str()))
            .collect();
        assert_eq!(
            listed,
            [
                ("inline-checks", 1, first.version.as_str()),
                ("smoke", 2, newer.version.as_str())
            ]
        );
        assert_eq!(next, None);
        let (page, next) = store.list_scenarios(&account, None, 1).await.expect("list");
        assert_eq!((page.len(), next.as_deref()), (1, Some("inline-checks")));
        let (page, next) = store
            .list_scenarios(&account, next.as_deref(), 1)
            .await
            .expect("list");
        assert_eq!((page[0].id.as_str(), next), ("smoke", None));

        let versions = store
            .scenario_versions(&account, "smoke")
            .await
            .expect("versions");
        let seen: Vec<(&str, i64, Option<&str>)> = versions
            .iter()
            .map(|v| (v.version.as_str(), v.runs, v.last_run.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                (newer.version.as_str(), 1, Some(run.id.as_str())),
                (first.version.as_str(), 0, None)
            ]
        );
        assert!(
            store
                .scenario_versions(&account, "nothing")
                .await
                .expect("versions")
                .is_empty()
        );
    }
}
