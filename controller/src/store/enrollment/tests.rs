//! Enrollment tokens on both stores, with the clock given: expiry to the millisecond, one
//! winner among racing enrollments, a refusal that writes nothing, re-enrollment replacing
//! the agent's certificate.

use super::*;
use crate::store::tests::both;

const HOUR: i64 = 3_600_000;

async fn account(store: &Store) -> crate::store::Account {
    store
        .create_account("acme", 2, false)
        .await
        .expect("account")
}

#[tokio::test]
async fn a_token_enrolls_once_until_it_expires() {
    for store in both().await {
        let acme = account(&store).await;
        let now = now_ms();
        let id = store
            .create_enrollment_token(&acme.id, "edge-1", "s3cret", now + HOUR)
            .await
            .unwrap();
        assert_eq!(
            store.enrollment_grant(&id, "wrong", now).await.unwrap(),
            Err(TokenRefusal::Invalid)
        );
        assert_eq!(
            store
                .enrollment_grant("no-such-id", "s3cret", now)
                .await
                .unwrap(),
            Err(TokenRefusal::Invalid)
        );
        assert_eq!(
            store
                .enrollment_grant(&id, "s3cret", now + HOUR)
                .await
                .unwrap(),
            Err(TokenRefusal::Expired)
        );
        let grant = store
            .enrollment_grant(&id, "s3cret", now + HOUR - 1)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (grant.account.as_str(), grant.agent_name.as_str()),
            ("acme", "edge-1")
        );

        // Expired between the check and the consumption: nothing is written.
        assert_eq!(
            store
                .consume_enrollment(&grant, "s3cret", "fp-late", now + HOUR)
                .await
                .unwrap(),
            Consumed::Refused(TokenRefusal::Expired)
        );
        assert!(
            store
                .agent_by_fingerprint("fp-late")
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(store.enrollment_token_state(&id).await.unwrap().0, None);

        let enrolled = store
            .consume_enrollment(&grant, "s3cret", "fp-1", now)
            .await
            .unwrap();
        assert!(
            matches!(enrolled, Consumed::Enrolled { .. }),
            "{enrolled:?}"
        );
        let agent = store.agent_by_fingerprint("fp-1").await.unwrap().unwrap();
        assert_eq!(agent.name, "edge-1");
        assert_eq!(
            store.enrollment_token_state(&id).await.unwrap().0,
            Some(now)
        );
        assert_eq!(
            store.enrollment_grant(&id, "s3cret", now).await.unwrap(),
            Err(TokenRefusal::Used)
        );
        assert_eq!(
            store
                .consume_enrollment(&grant, "s3cret", "fp-2", now)
                .await
                .unwrap(),
            Consumed::Refused(TokenRefusal::Used)
        );
        let lines = store.audit_lines(&acme.id).await.unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0].action, "agent.enroll");
        assert_eq!(lines[0].actor, format!("enrollment:{id}"));
        assert!(lines[0].outcome.contains("fp-1") && !lines[0].outcome.contains("s3cret"));
    }
}

#[tokio::test]
async fn racing_enrollments_have_one_winner() {
    for store in both().await {
        let acme = account(&store).await;
        let now = now_ms();
        let id = store
            .create_enrollment_token(&acme.id, "edge-1", "s3cret", now + HOUR)
            .await
            .unwrap();
        let grant = store
            .enrollment_grant(&id, "s3cret", now)
            .await
            .unwrap()
            .unwrap();
        let racers: Vec<_> = (0..8)
            .map(|i| {
                let (store, grant) = (store.clone(), grant.clone());
                tokio::spawn(async move {
                    store
                        .consume_enrollment(&grant, "s3cret", &format!("fp-{i}"), now)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut winners = 0;
        for racer in racers {
            match racer.await.unwrap() {
                Consumed::Enrolled { .. } => winners += 1,
                Consumed::Refused(refusal) => assert_eq!(refusal, TokenRefusal::Used),
            }
        }
        assert_eq!(winners, 1);
        let mut known = 0;
        for i in 0..8 {
            if store
                .agent_by_fingerprint(&format!("fp-{i}"))
                .await
                .unwrap()
                .is_some()
            {
                known += 1;
            }
        }
        assert_eq!(known, 1, "only the winner's certificate is registered");
    }
}

#[tokio::test]
async fn re_enrollment_replaces_the_certificate() {
    for store in both().await {
        let acme = account(&store).await;
        let now = now_ms();
        store
            .register_agent_cert(&acme.id, "edge-1", "fp-old")
            .await
            .unwrap();
        let id = store
            .create_enrollment_token(&acme.id, "edge-1", "s3cret", now + HOUR)
            .await
            .unwrap();
        let grant = store
            .enrollment_grant(&id, "s3cret", now)
            .await
            .unwrap()
            .unwrap();
        let old = store.agent_by_fingerprint("fp-old").await.unwrap().unwrap();
        let Consumed::Enrolled { agent_id } = store
            .consume_enrollment(&grant, "s3cret", "fp-new", now)
            .await
            .unwrap()
        else {
            panic!("not enrolled");
        };
        assert_eq!(agent_id, old.agent_id, "the same agent, a new certificate");
        assert!(
            store
                .agent_by_fingerprint("fp-old")
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            store
                .agent_by_fingerprint("fp-new")
                .await
                .unwrap()
                .is_some()
        );
    }
}

#[tokio::test]
async fn tokens_are_listed_and_an_unused_one_revoked() {
    for store in both().await {
        let acme = account(&store).await;
        let other = store.create_account("other", 2, false).await.unwrap();
        let now = now_ms();
        let unused = store
            .create_enrollment_token(&acme.id, "edge-1", "one", now + HOUR)
            .await
            .unwrap();
        let used = store
            .create_enrollment_token(&acme.id, "edge-2", "two", now + HOUR)
            .await
            .unwrap();
        let grant = store
            .enrollment_grant(&used, "two", now)
            .await
            .unwrap()
            .unwrap();
        store
            .consume_enrollment(&grant, "two", "fp-2", now)
            .await
            .unwrap();
        let listed = store.enrollment_tokens(&acme.id).await.unwrap();
        let agents: Vec<(&str, bool)> = listed
            .iter()
            .map(|t| (t.agent_name.as_str(), t.used_at.is_some()))
            .collect();
        assert_eq!(agents, [("edge-1", false), ("edge-2", true)]);
        assert!(store.enrollment_tokens(&other.id).await.unwrap().is_empty());

        // Another account's id, a used token and an unknown one change nothing.
        assert!(matches!(
            store.revoke_enrollment_token(&other.id, &unused).await,
            Err(StoreError::NotFound(_))
        ));
        assert!(matches!(
            store.revoke_enrollment_token(&acme.id, &used).await,
            Err(StoreError::Conflict(_))
        ));
        assert_eq!(store.enrollment_tokens(&acme.id).await.unwrap().len(), 2);
        store
            .revoke_enrollment_token(&acme.id, &unused)
            .await
            .unwrap();
        assert_eq!(
            store.enrollment_grant(&unused, "one", now).await.unwrap(),
            Err(TokenRefusal::Invalid),
            "a revoked token enrolls nothing"
        );
        assert!(matches!(
            store.revoke_enrollment_token(&acme.id, &unused).await,
            Err(StoreError::NotFound(_))
        ));
    }
}
