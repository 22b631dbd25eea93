//! Accounts, their environments and their API tokens (stored hashed, shown once).

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};
use sqlx::Row;

use super::{Result, Store, StoreError, new_id, now_ms};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub id: String,
    pub name: String,
    pub max_running: i64,
    /// Units (requests) the account's runs may use each calendar month (UTC); 0: unlimited.
    pub units_per_month: i64,
    /// Runs the account may have queued at once; a POST past it is answered 429.
    pub max_queued: i64,
    /// The longest a load, replay or capacity run may last, in milliseconds.
    pub max_run_duration_ms: i64,
    /// The platform's own account: its agents are "our cloud", shared by all accounts.
    pub is_platform: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    pub name: String,
    pub production: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Run,
    Read,
    /// Reading the audit lines: a scope of its own, so a token that reads runs does not
    /// also read who did what.
    Audit,
    /// Held by a person's token: one of the account's admins, who may use the console
    /// before the owner opens it to everyone (`account open-console`).
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Run => "reliability:run",
            Scope::Read => "reliability:read",
            Scope::Audit => "reliability:audit",
            Scope::Admin => "reliability:admin",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "reliability:run" => Ok(Scope::Run),
            "reliability:read" => Ok(Scope::Read),
            "reliability:audit" => Ok(Scope::Audit),
            "reliability:admin" => Ok(Scope::Admin),
            other => Err(format!(
                "unknown scope {other:?}; expected reliability:run, reliability:read, \
                 reliability:audit or reliability:admin"
            )),
        }
    }
}

/// A token's last use is noted when the note is this old or older.
const LAST_USED_RESOLUTION_MS: i64 = 60_000;

/// A token as `token list` shows it: never its secret or its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenListing {
    pub id: String,
    pub account: String,
    pub scopes: Vec<String>,
    pub person: Option<String>,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// A token as the controller knows it: never its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub id: String,
    pub account: Account,
    pub scopes: Vec<Scope>,
    /// Set when the token belongs to a person; API tokens (automation) have none.
    pub person: Option<String>,
}

impl TokenInfo {
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }
}

pub(super) fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Default plan for new accounts: runs at once, units per month (0: unlimited).
pub const DEFAULT_MAX_RUNNING: i64 = 4;
/// Runs queued at once: far more than a team's pipelines start together, and few enough
/// that one token cannot fill the store or the dispatcher's queues.
pub const DEFAULT_MAX_QUEUED: i64 = 1000;
/// The longest load, replay or capacity run: an hour (10h is a typo, not a test).
pub const DEFAULT_MAX_RUN_DURATION_MS: i64 = 3_600_000;

/// A change to an account's plan: each field given is set, the others kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanChange {
    pub max_running: Option<i64>,
    pub max_queued: Option<i64>,
    pub max_run_duration_ms: Option<i64>,
    pub units_per_month: Option<i64>,
}

fn account_from_row(row: &sqlx::any::AnyRow) -> Result<Account> {
    Ok(Account {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        max_running: row.try_get("max_running")?,
        units_per_month: row.try_get("units_per_month")?,
        max_queued: row.try_get("max_queued")?,
        max_run_duration_ms: row.try_get("max_run_duration_ms")?,
        is_platform: row.try_get::<i64, _>("is_platform")? != 0,
    })
}

/// A token from a row of `t.id AS token_id, t.scopes, t.person, a.*`.
pub(super) fn token_from_row(row: &sqlx::any::AnyRow) -> Result<TokenInfo> {
    let scopes_text: String = row.try_get("scopes")?;
    let scopes = scopes_text
        .split_whitespace()
        .map(|s| s.parse::<Scope>().map_err(StoreError::Corrupt))
        .collect::<Result<Vec<_>>>()?;
    Ok(TokenInfo {
        id: row.try_get("token_id")?,
        account: account_from_row(row)?,
        scopes,
        person: row.try_get("person")?,
    })
}

impl Store {
    pub async fn create_account(
        &self,
        name: &str,
        max_running: i64,
        is_platform: bool,
    ) -> Result<Account> {
        if self.account_by_name(name).await?.is_some() {
            return Err(StoreError::Conflict(format!("account {name} exists")));
        }
        let id = new_id();
        sqlx::query(
            "INSERT INTO accounts (id, name, max_running, units_per_month, is_platform, created_at)
             VALUES ($1, $2, $3, 0, $4, $5)",
        )
        .bind(&id)
        .bind(name)
        .bind(max_running)
        .bind(i64::from(is_platform))
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(Account {
            id,
            name: name.to_string(),
            max_running,
            units_per_month: 0,
            max_queued: DEFAULT_MAX_QUEUED,
            max_run_duration_ms: DEFAULT_MAX_RUN_DURATION_MS,
            is_platform,
        })
    }

    pub async fn account_by_name(&self, name: &str) -> Result<Option<Account>> {
        let row = sqlx::query("SELECT * FROM accounts WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(account_from_row).transpose()
    }

    pub async fn account(&self, id: &str) -> Result<Account> {
        let row = sqlx::query("SELECT * FROM accounts WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(row) => account_from_row(&row),
            None => Err(StoreError::NotFound(format!("account {id}"))),
        }
    }

    pub async fn accounts(&self) -> Result<Vec<Account>> {
        let rows = sqlx::query("SELECT * FROM accounts ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(account_from_row).collect()
    }

    /// Changes what `change` names of an account's plan, in one statement.
    pub async fn set_plan(&self, account_id: &str, change: &PlanChange) -> Result<Account> {
        let done = sqlx::query(
            "UPDATE accounts SET max_running = COALESCE($1, max_running),
                 max_queued = COALESCE($2, max_queued),
                 max_run_duration_ms = COALESCE($3, max_run_duration_ms),
                 units_per_month = COALESCE($4, units_per_month)
             WHERE id = $5",
        )
        .bind(change.max_running)
        .bind(change.max_queued)
        .bind(change.max_run_duration_ms)
        .bind(change.units_per_month)
        .bind(account_id)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("account {account_id}")));
        }
        self.account(account_id).await
    }

    pub async fn add_environment(
        &self,
        account_id: &str,
        name: &str,
        production: bool,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO environments (account_id, name, production) VALUES ($1, $2, $3)
             ON CONFLICT (account_id, name) DO UPDATE SET production = excluded.production",
        )
        .bind(account_id)
        .bind(name)
        .bind(i64::from(production))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn environments(&self, account_id: &str) -> Result<Vec<Environment>> {
        let rows = sqlx::query(
            "SELECT name, production FROM environments WHERE account_id = $1 ORDER BY name",
        )
        .bind(account_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Environment {
                    name: row.try_get("name")?,
                    production: row.try_get::<i64, _>("production")? != 0,
                })
            })
            .collect()
    }

    /// Creates a token and returns it with its secret, which is shown once and never stored.
    pub async fn create_token(
        &self,
        account: &Account,
        scopes: &[Scope],
        person: Option<&str>,
    ) -> Result<(TokenInfo, String)> {
        let mut random = [0u8; 24];
        rand::fill(&mut random);
        let secret = format!("iohr_{}", hex::encode(random));
        let id = new_id();
        let scope_text = scopes
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        sqlx::query(
            "INSERT INTO tokens (id, account_id, hash, scopes, person, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&id)
        .bind(&account.id)
        .bind(hash_secret(&secret))
        .bind(&scope_text)
        .bind(person)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        let info = TokenInfo {
            id,
            account: account.clone(),
            scopes: scopes.to_vec(),
            person: person.map(str::to_string),
        };
        Ok((info, secret))
    }

    /// The live (not revoked) token with this secret; notes that it was used.
    pub async fn token_by_secret(&self, secret: &str) -> Result<Option<TokenInfo>> {
        let row = sqlx::query(
            "SELECT t.id AS token_id, t.scopes, t.person, t.last_used_at, a.*
             FROM tokens t JOIN accounts a ON a.id = t.account_id
             WHERE t.hash = $1 AND t.revoked_at IS NULL",
        )
        .bind(hash_secret(secret))
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let info = token_from_row(&row)?;
        let id = info.id.clone();
        let last_used: Option<i64> = row.try_get("last_used_at")?;
        let now = now_ms();
        if last_used.is_none_or(|at| now - at >= LAST_USED_RESOLUTION_MS) {
            // Losing this note must not refuse the request it came with.
            if let Err(error) = sqlx::query("UPDATE tokens SET last_used_at = $1 WHERE id = $2")
                .bind(now)
                .bind(&id)
                .execute(&self.pool)
                .await
            {
                tracing::warn!(token = %id, %error, "noting the token's last use failed");
            }
        }
        Ok(Some(info))
    }

    /// Every token (of one account, or all), oldest first: never a secret or its hash.
    pub async fn list_tokens(&self, account: Option<&Account>) -> Result<Vec<TokenListing>> {
        let rows = sqlx::query(
            "SELECT t.id, a.name AS account, t.scopes, t.person, t.created_at, t.last_used_at,
                    t.revoked_at
             FROM tokens t JOIN accounts a ON a.id = t.account_id
             WHERE $1 = '' OR t.account_id = $1
             ORDER BY t.created_at, t.id",
        )
        .bind(account.map_or("", |a| a.id.as_str()))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let scopes: String = row.try_get("scopes")?;
                Ok(TokenListing {
                    id: row.try_get("id")?,
                    account: row.try_get("account")?,
                    scopes: scopes.split_whitespace().map(str::to_string).collect(),
                    person: row.try_get("person")?,
                    created_at: row.try_get("created_at")?,
                    last_used_at: row.try_get("last_used_at")?,
                    revoked_at: row.try_get("revoked_at")?,
                })
            })
            .collect()
    }

    pub async fn revoke_token(&self, token_id: &str) -> Result<()> {
        let done =
            sqlx::query("UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
                .bind(now_ms())
                .bind(token_id)
                .execute(&self.pool)
                .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("live token {token_id}")));
        }
        Ok(())
    }
}
