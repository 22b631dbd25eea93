//! Enrollment tokens: made by `iohr-controller agent-token create`, consumed once by an
//! agent's `Enroll`. Only the hash of a token's secret is stored.
//!
//! Consuming is one conditional UPDATE (unused, unexpired, this secret), in the same
//! transaction as the agent's new certificate and the audit line: two enrollments racing
//! with one token cannot both win, and a refused one changes nothing.

use sqlx::Row;

use super::accounts::hash_secret;
use super::agents::register_cert_in;
use super::audit::{AuditLine, insert_audit};
use super::{Result, Store, StoreError, new_id, now_ms};

/// A stored token's purpose, as `agent-token create` made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentGrant {
    pub token_id: String,
    pub account_id: String,
    pub account: String,
    pub agent_name: String,
    pub expires_at: i64,
}

/// Why a token enrolls nothing; `code` is what the agent link answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRefusal {
    /// No such token, or the secret is not its secret.
    Invalid,
    Used,
    Expired,
}

impl TokenRefusal {
    pub fn code(self) -> &'static str {
        match self {
            TokenRefusal::Invalid => "enrollment_token_invalid",
            TokenRefusal::Used => "enrollment_token_used",
            TokenRefusal::Expired => "enrollment_token_expired",
        }
    }
}

/// A token as `agent-token list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentTokenRow {
    pub id: String,
    pub agent_name: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub used_at: Option<i64>,
}

/// What `consume_enrollment` did: enrolled, or refused and nothing written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Consumed {
    Enrolled { agent_id: String },
    Refused(TokenRefusal),
}

impl Store {
    /// Stores a token for `agent_name` of the account, valid until `expires_at` (epoch
    /// ms), by the hash of `secret`.
    pub async fn create_enrollment_token(
        &self,
        account_id: &str,
        agent_name: &str,
        secret: &str,
        expires_at: i64,
    ) -> Result<String> {
        let id = new_id();
        sqlx::query(
            "INSERT INTO enrollment_tokens (id, hash, account_id, agent_name, created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&id)
        .bind(hash_secret(secret))
        .bind(account_id)
        .bind(agent_name)
        .bind(now_ms())
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(id)
    }

    /// What the token `id` with `secret` would enroll at `now`, or why not. Reads only:
    /// the enrollment checks the token before it looks at the request.
    pub async fn enrollment_grant(
        &self,
        id: &str,
        secret: &str,
        now: i64,
    ) -> Result<Result<EnrollmentGrant, TokenRefusal>> {
        let row = sqlx::query(
            "SELECT t.hash, t.account_id, acc.name AS account, t.agent_name, t.expires_at, t.used_at
             FROM enrollment_tokens t JOIN accounts acc ON acc.id = t.account_id
             WHERE t.id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(Err(TokenRefusal::Invalid));
        };
        let hash: String = row.try_get("hash")?;
        // The hash of a 256-bit random secret: comparing it leaks nothing about the secret.
        if hash != hash_secret(secret) {
            return Ok(Err(TokenRefusal::Invalid));
        }
        if row.try_get::<Option<i64>, _>("used_at")?.is_some() {
            return Ok(Err(TokenRefusal::Used));
        }
        let expires_at: i64 = row.try_get("expires_at")?;
        if expires_at <= now {
            return Ok(Err(TokenRefusal::Expired));
        }
        Ok(Ok(EnrollmentGrant {
            token_id: id.to_string(),
            account_id: row.try_get("account_id")?,
            account: row.try_get("account")?,
            agent_name: row.try_get("agent_name")?,
            expires_at,
        }))
    }

    /// Uses the token of `grant` at `now` and makes `fingerprint` the agent's only
    /// certificate (an earlier one is refused from then on), with an audit line; or, when
    /// another enrollment used it first or it expired meanwhile, nothing.
    pub async fn consume_enrollment(
        &self,
        grant: &EnrollmentGrant,
        secret: &str,
        fingerprint: &str,
        now: i64,
    ) -> Result<Consumed> {
        let mut tx = self.write_tx().await?;
        let taken = sqlx::query(
            "UPDATE enrollment_tokens SET used_at = $1
             WHERE id = $2 AND hash = $3 AND used_at IS NULL AND expires_at > $1",
        )
        .bind(now)
        .bind(&grant.token_id)
        .bind(hash_secret(secret))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if taken != 1 {
            tx.rollback().await?;
            return Ok(Consumed::Refused(
                match self.enrollment_grant(&grant.token_id, secret, now).await? {
                    Err(refusal) => refusal,
                    // Unchanged yet not taken: only a concurrent enrollment explains it.
                    Ok(_) => TokenRefusal::Used,
                },
            ));
        }
        let agent_id = register_cert_in(
            &mut tx,
            &grant.account_id,
            &grant.agent_name,
            fingerprint,
            true,
        )
        .await?;
        insert_audit(
            &mut tx,
            &grant.account_id,
            &AuditLine {
                at: now,
                actor: format!("enrollment:{}", grant.token_id),
                action: "agent.enroll".to_string(),
                outcome: format!(
                    "agent {} enrolled, certificate sha256 {fingerprint}",
                    grant.agent_name
                ),
                ..AuditLine::default()
            },
        )
        .await?;
        tx.commit().await?;
        Ok(Consumed::Enrolled { agent_id })
    }

    /// The account's tokens, oldest first (`agent-token list`); never a secret or a hash.
    pub async fn enrollment_tokens(&self, account_id: &str) -> Result<Vec<EnrollmentTokenRow>> {
        let rows = sqlx::query(
            "SELECT id, agent_name, created_at, expires_at, used_at FROM enrollment_tokens
             WHERE account_id = $1 ORDER BY created_at, id",
        )
        .bind(account_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(EnrollmentTokenRow {
                    id: row.try_get("id")?,
                    agent_name: row.try_get("agent_name")?,
                    created_at: row.try_get("created_at")?,
                    expires_at: row.try_get("expires_at")?,
                    used_at: row.try_get("used_at")?,
                })
            })
            .collect()
    }

    /// Deletes an unused token of the account, so that no enrollment can use it (it is
    /// then `enrollment_token_invalid`). A used one cannot be taken back: remove its agent.
    pub async fn revoke_enrollment_token(&self, account_id: &str, id: &str) -> Result<()> {
        let deleted = sqlx::query(
            "DELETE FROM enrollment_tokens WHERE id = $1 AND account_id = $2 AND used_at IS NULL",
        )
        .bind(id)
        .bind(account_id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if deleted == 1 {
            return Ok(());
        }
        let used = sqlx::query("SELECT 1 FROM enrollment_tokens WHERE id = $1 AND account_id = $2")
            .bind(id)
            .bind(account_id)
            .fetch_optional(&self.pool)
            .await?;
        Err(match used {
            Some(_) => StoreError::Conflict(format!(
                "enrollment token {id} was used already; `agent remove` refuses its agent's certificates"
            )),
            None => StoreError::NotFound(format!("enrollment token {id}")),
        })
    }

    /// The stored token `id` as (used_at, expires_at), for tests and the admin command.
    pub async fn enrollment_token_state(&self, id: &str) -> Result<(Option<i64>, i64)> {
        let row = sqlx::query("SELECT used_at, expires_at FROM enrollment_tokens WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("enrollment token {id}")))?;
        Ok((row.try_get("used_at")?, row.try_get("expires_at")?))
    }
}

#[cfg(test)]
mod tests;
