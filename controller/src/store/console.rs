//! The console's sessions and whether an account's console is open to all its people.
//!
//! A session is a random cookie; the store keeps its hash, so a copy of the store signs
//! nobody in. A session lives as long as its token does, and at most [`SESSION_TTL_MS`].

use sqlx::Row;

use super::accounts::{hash_secret, token_from_row};
use super::{Result, Store, StoreError, TokenInfo, now_ms};

/// A session's longest life: a working day, then the person signs in again.
pub const SESSION_TTL_MS: i64 = 12 * 3_600_000;
/// Sessions one token holds at once (browsers, devices); signing in again past it ends
/// the oldest, so sign-ins cannot grow the table without bound.
pub const MAX_SESSIONS_PER_TOKEN: i64 = 8;

/// A live session: its person's token, and whether the account's console is open.
#[derive(Debug, Clone)]
pub struct ConsoleSession {
    pub token: TokenInfo,
    pub console_open: bool,
}

impl Store {
    /// Starts a session for `token` and returns its cookie secret (shown once, not kept).
    pub async fn create_console_session(&self, token: &TokenInfo) -> Result<String> {
        let mut random = [0u8; 32];
        rand::fill(&mut random);
        let secret = hex::encode(random);
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM console_sessions WHERE expires_at <= $1")
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO console_sessions (hash, token_id, account_id, created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(hash_secret(&secret))
        .bind(&token.id)
        .bind(&token.account.id)
        .bind(now)
        .bind(now + SESSION_TTL_MS)
        .execute(&mut *tx)
        .await?;
        // Keep the token's newest sessions only.
        sqlx::query(
            "DELETE FROM console_sessions WHERE token_id = $1 AND hash NOT IN (
                 SELECT hash FROM console_sessions WHERE token_id = $1
                 ORDER BY created_at DESC, hash LIMIT $2)",
        )
        .bind(&token.id)
        .bind(MAX_SESSIONS_PER_TOKEN)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(secret)
    }

    /// The live session with this cookie secret: unexpired, its token not revoked.
    pub async fn console_session(&self, secret: &str) -> Result<Option<ConsoleSession>> {
        let row = sqlx::query(
            "SELECT t.id AS token_id, t.scopes, t.person, a.*
             FROM console_sessions s
             JOIN tokens t ON t.id = s.token_id
             JOIN accounts a ON a.id = s.account_id
             WHERE s.hash = $1 AND s.expires_at > $2 AND t.revoked_at IS NULL",
        )
        .bind(hash_secret(secret))
        .bind(now_ms())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(ConsoleSession {
            token: token_from_row(&row)?,
            console_open: row.try_get::<i64, _>("console_open")? != 0,
        }))
    }

    /// Ends a session (sign-out); ending one that is gone is not an error.
    pub async fn end_console_session(&self, secret: &str) -> Result<()> {
        sqlx::query("DELETE FROM console_sessions WHERE hash = $1")
            .bind(hash_secret(secret))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Opens (or closes) the account's console to its people who are not admins.
    pub async fn set_console_open(&self, account_id: &str, open: bool) -> Result<()> {
        let done = sqlx::query("UPDATE accounts SET console_open = $1 WHERE id = $2")
            .bind(i64::from(open))
            .bind(account_id)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("account {account_id}")));
        }
        Ok(())
    }

    pub async fn console_open(&self, account_id: &str) -> Result<bool> {
        let open: Option<i64> =
            sqlx::query_scalar("SELECT console_open FROM accounts WHERE id = $1")
                .bind(account_id)
                .fetch_optional(&self.pool)
                .await?;
        open.map(|o| o != 0)
            .ok_or_else(|| StoreError::NotFound(format!("account {account_id}")))
    }
}

#[cfg(test)]
mod tests;
