//! Account secrets on both stores: sealed at rest, listed without values, bounded per
//! account, opened only by name for their own account, gone with the account.

use std::collections::BTreeSet;

use sqlx::Row;

use super::super::sealed::{self, SecretKey};
use super::super::tests::{both, seed};
use super::*;

fn key() -> SecretKey {
    let dir = std::env::temp_dir().join(format!("iohr-key-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    SecretKey::load_or_create(&dir).expect("key").0
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn secrets_are_sealed_listed_without_values_and_opened_by_name() {
    for store in both().await {
        let (account, _) = seed(&store).await;
        // Without a key nothing is stored, not even in clear.
        assert!(matches!(
            store
                .put_account_secret(&account.id, "TOKEN", "v", "t")
                .await,
            Err(StoreError::Sealed(SealError::NoKey))
        ));
        let store = store.with_secret_key(key());
        let put = store
            .put_account_secret(&account.id, "TOKEN", "s3cr3t-value", "person:ada")
            .await
            .expect("put");
        assert!(matches!(put, SecretPut::Created(ref row) if row.name == "TOKEN"));
        let at_rest: String = sqlx::query("SELECT value FROM account_secrets WHERE name = 'TOKEN'")
            .fetch_one(&store.pool)
            .await
            .expect("row")
            .try_get("value")
            .expect("value");
        assert!(
            sealed::is_sealed(&at_rest) && !at_rest.contains("s3cr3t"),
            "{at_rest}"
        );
        let put = store
            .put_account_secret(&account.id, "TOKEN", "newer", "person:bob")
            .await
            .expect("replace");
        let SecretPut::Updated(row) = put else {
            panic!("{put:?}")
        };
        assert_eq!(
            (row.created_by.as_str(), row.updated_by.as_str()),
            ("person:ada", "person:bob")
        );
        let listed = store.account_secrets(&account.id).await.expect("list");
        assert_eq!(listed.len(), 1);
        assert!(!listed[0].to_api().to_string().contains("newer"));

        let opened = store
            .open_account_secrets(&account.id, &names(&["TOKEN"]))
            .await
            .expect("open");
        assert_eq!(opened.expect("held")["TOKEN"], "newer");
        assert_eq!(
            store
                .open_account_secrets(&account.id, &names(&["TOKEN", "OTHER"]))
                .await
                .expect("open"),
            Err("OTHER".to_string())
        );
        assert_eq!(
            store
                .missing_account_secrets(&account.id, &names(&["OTHER", "TOKEN"]))
                .await
                .expect("missing"),
            ["OTHER"]
        );
        // Another account holds none of it.
        let other = store
            .create_account("other", 2, false)
            .await
            .expect("account");
        assert_eq!(
            store
                .open_account_secrets(&other.id, &names(&["TOKEN"]))
                .await
                .expect("open"),
            Err("TOKEN".to_string())
        );
        // A sealed value moved to another account's row does not open.
        sqlx::query(
            "INSERT INTO account_secrets
                 (account_id, name, value, created_by, created_at, updated_by, updated_at)
             SELECT $1, name, value, created_by, created_at, updated_by, updated_at
             FROM account_secrets WHERE account_id = $2",
        )
        .bind(&other.id)
        .bind(&account.id)
        .execute(&store.pool)
        .await
        .expect("copy");
        assert!(
            store
                .open_account_secrets(&other.id, &names(&["TOKEN"]))
                .await
                .is_err()
        );

        let audit: Vec<String> = store
            .audit_lines(&account.id)
            .await
            .expect("audit")
            .iter()
            .map(|l| format!("{} {} {:?}", l.action, l.outcome, l.targets))
            .collect();
        assert!(
            audit.iter().any(|l| l.contains("secret.create"))
                && audit.iter().any(|l| l.contains("secret.update")),
            "{audit:?}"
        );
        assert!(
            audit
                .iter()
                .all(|l| !l.contains("newer") && !l.contains("s3cr3t"))
        );

        assert!(
            store
                .delete_account_secret(&account.id, "TOKEN", "t")
                .await
                .expect("delete")
        );
        assert!(
            !store
                .delete_account_secret(&account.id, "TOKEN", "t")
                .await
                .expect("again")
        );
        assert!(
            store
                .account_secrets(&account.id)
                .await
                .expect("list")
                .is_empty()
        );
    }
}

#[tokio::test]
async fn an_account_holds_a_bounded_number_and_they_go_with_it() {
    for store in both().await {
        let store = store.with_secret_key(key());
        let (account, _) = seed(&store).await;
        for i in 0..MAX_SECRETS_PER_ACCOUNT {
            let put = store
                .put_account_secret(&account.id, &format!("S{i}"), "v", "t")
                .await
                .expect("put");
            assert!(matches!(put, SecretPut::Created(_)));
        }
        assert_eq!(
            store
                .put_account_secret(&account.id, "ONE_MORE", "v", "t")
                .await
                .expect("put"),
            SecretPut::TooMany
        );
        // Replacing one still works at the bound.
        assert!(matches!(
            store
                .put_account_secret(&account.id, "S0", "w", "t")
                .await
                .expect("replace"),
            SecretPut::Updated(_)
        ));
        store
            .delete_account(&account.id, "acme", "operator")
            .await
            .expect("delete account");
        let left: i64 = sqlx::query("SELECT COUNT(*) AS n FROM account_secrets")
            .fetch_one(&store.pool)
            .await
            .expect("count")
            .try_get("n")
            .expect("n");
        assert_eq!(left, 0);
    }
}

/// Puts at once (two replicas, two clients): of one new name, one creates it and the
/// others replace it, none failing; racing for the account's last place, one gets it and
/// the others are refused, never past the bound.
#[tokio::test]
async fn puts_at_once_create_one_row_and_keep_the_bound() {
    for store in both().await {
        let store = store.with_secret_key(key());
        let (account, _) = seed(&store).await;
        let at_once = |names: Vec<String>| {
            let mut puts = tokio::task::JoinSet::new();
            for (i, name) in names.into_iter().enumerate() {
                let (store, account) = (store.clone(), account.id.clone());
                puts.spawn(async move {
                    store
                        .put_account_secret(&account, &name, &format!("v{i}"), "t")
                        .await
                });
            }
            puts.join_all()
        };
        let same = at_once(vec!["SAME".to_string(); 8]).await;
        let created = same
            .iter()
            .filter(|put| matches!(put, Ok(SecretPut::Created(_))))
            .count();
        assert!(
            same.iter()
                .all(|put| matches!(put, Ok(SecretPut::Created(_) | SecretPut::Updated(_)))),
            "{same:?}"
        );
        assert_eq!(created, 1, "{same:?}");

        for i in 0..MAX_SECRETS_PER_ACCOUNT - 2 {
            store
                .put_account_secret(&account.id, &format!("S{i}"), "v", "t")
                .await
                .expect("put");
        }
        let last = at_once((0..8).map(|i| format!("LAST{i}")).collect()).await;
        let created = last
            .iter()
            .filter(|put| matches!(put, Ok(SecretPut::Created(_))))
            .count();
        assert_eq!(created, 1, "{last:?}");
        assert!(
            last.iter()
                .all(|put| matches!(put, Ok(SecretPut::Created(_) | SecretPut::TooMany))),
            "{last:?}"
        );
        assert_eq!(
            store
                .account_secrets(&account.id)
                .await
                .expect("list")
                .len(),
            MAX_SECRETS_PER_ACCOUNT as usize
        );
    }
}
