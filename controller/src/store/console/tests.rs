//! Sessions on both stores: a session finds its person's token, ends with sign-out, with
//! its token's revocation and with its age; a token keeps its newest sessions only; the
//! console's open flag round-trips.

use crate::store::tests::{both, seed};
use crate::store::{Scope, now_ms};

use super::{MAX_SESSIONS_PER_TOKEN, SESSION_TTL_MS};

#[tokio::test]
async fn a_session_lives_with_its_token_and_ends_with_sign_out() {
    for store in both().await {
        let (account, _) = seed(&store).await;
        let (token, _) = store
            .create_token(&account, &[Scope::Read, Scope::Admin], Some("ada"))
            .await
            .expect("token");
        let cookie = store.create_console_session(&token).await.expect("session");
        let session = store
            .console_session(&cookie)
            .await
            .expect("read")
            .expect("live");
        assert_eq!(session.token.id, token.id);
        assert_eq!(session.token.person.as_deref(), Some("ada"));
        assert!(session.token.has(Scope::Admin));
        assert!(
            !session.console_open,
            "a new account's console is admin-only"
        );
        assert!(
            store
                .console_session("not-a-cookie")
                .await
                .expect("read")
                .is_none()
        );

        store.end_console_session(&cookie).await.expect("sign out");
        assert!(
            store
                .console_session(&cookie)
                .await
                .expect("read")
                .is_none()
        );

        let again = store.create_console_session(&token).await.expect("session");
        store.revoke_token(&token.id).await.expect("revoke");
        assert!(
            store.console_session(&again).await.expect("read").is_none(),
            "a revoked token's sessions end with it"
        );
    }
}

#[tokio::test]
async fn an_old_session_is_refused_and_a_token_keeps_its_newest_sessions() {
    for store in both().await {
        let (account, _) = seed(&store).await;
        let (token, _) = store
            .create_token(&account, &[Scope::Read], Some("bo"))
            .await
            .expect("token");
        let old = store.create_console_session(&token).await.expect("session");
        sqlx::query("UPDATE console_sessions SET expires_at = $1")
            .bind(now_ms() - 1)
            .execute(&store.pool)
            .await
            .expect("age it");
        assert!(store.console_session(&old).await.expect("read").is_none());

        let mut cookies = Vec::new();
        for _ in 0..MAX_SESSIONS_PER_TOKEN + 2 {
            cookies.push(store.create_console_session(&token).await.expect("session"));
        }
        let kept: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM console_sessions")
            .fetch_one(&store.pool)
            .await
            .expect("count");
        assert_eq!(
            kept, MAX_SESSIONS_PER_TOKEN,
            "the expired one swept, the oldest ended"
        );
        let newest = cookies.last().expect("one");
        let session = store
            .console_session(newest)
            .await
            .expect("read")
            .expect("live");
        let expires: i64 = sqlx::query_scalar("SELECT MAX(expires_at) FROM console_sessions")
            .fetch_one(&store.pool)
            .await
            .expect("expiry");
        assert!(expires <= now_ms() + SESSION_TTL_MS);
        assert_eq!(session.token.id, token.id);
    }
}

#[tokio::test]
async fn the_console_opens_and_closes() {
    for store in both().await {
        let (account, _) = seed(&store).await;
        assert!(!store.console_open(&account.id).await.expect("read"));
        store
            .set_console_open(&account.id, true)
            .await
            .expect("open");
        assert!(store.console_open(&account.id).await.expect("read"));
        store
            .set_console_open(&account.id, false)
            .await
            .expect("close");
        assert!(!store.console_open(&account.id).await.expect("read"));
        assert!(store.set_console_open("nobody", true).await.is_err());
    }
}
