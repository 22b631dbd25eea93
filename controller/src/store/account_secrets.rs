//! Account secrets: values a run's headers name as `${secret:NAME}`. Stored sealed with
//! the data dir's key (`sealed.rs`; the account and the name are the associated data, so
//! a value moved to another row does not open), written through the API and never read
//! back by it: the only reader is [`Store::open_account_secrets`], for a leased run's
//! offer. Audit lines name the secret, never its value.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::Row;

use super::audit::{AuditLine, AuditedPut, put_audited_bounded};
use super::sealed::SealError;
use super::{Result, Store, StoreError, format_ms};

/// Secrets one account may hold.
pub const MAX_SECRETS_PER_ACCOUNT: i64 = 100;
/// The longest value, in bytes.
pub const MAX_SECRET_BYTES: usize = 4096;
/// The longest name.
pub const MAX_SECRET_NAME: usize = 64;

/// A secret as the API lists it: its name and times, never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRow {
    pub name: String,
    pub created_by: String,
    pub created_at: i64,
    pub updated_by: String,
    pub updated_at: i64,
}

impl SecretRow {
    pub fn to_api(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "created_by": self.created_by,
            "created_at": format_ms(self.created_at),
            "updated_by": self.updated_by,
            "updated_at": format_ms(self.updated_at),
        })
    }
}

/// What a PUT came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretPut {
    Created(SecretRow),
    Updated(SecretRow),
    /// The account holds [`MAX_SECRETS_PER_ACCOUNT`]: nothing stored.
    TooMany,
}

fn secret_from_row(row: &sqlx::any::AnyRow) -> Result<SecretRow> {
    Ok(SecretRow {
        name: row.try_get("name")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        updated_by: row.try_get("updated_by")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// The associated data a secret is sealed with.
fn sealed_as(account_id: &str, name: &str) -> String {
    format!("account-secret:{account_id}:{name}")
}

impl Store {
    /// Whether this store can seal secrets (`serve` gives it the data dir's key).
    pub fn seals_secrets(&self) -> bool {
        self.secrets.is_some()
    }

    /// Stores (or replaces) an account secret, sealed, with its audit line, in one
    /// transaction. Never in clear: without a key it is [`SealError::NoKey`].
    pub async fn put_account_secret(
        &self,
        account_id: &str,
        name: &str,
        value: &str,
        actor: &str,
    ) -> Result<SecretPut> {
        let key = self.secrets.as_ref().ok_or(SealError::NoKey)?;
        let sealed = key.seal(&sealed_as(account_id, name), value)?;
        let put = AuditedPut {
            table: "account_secrets",
            key: Some(("name", name)),
            values: &[("value", &sealed)],
            actor,
        };
        let line = |created: bool| AuditLine {
            actor: actor.to_string(),
            action: if created {
                "secret.create"
            } else {
                "secret.update"
            }
            .to_string(),
            outcome: format!(
                "account secret {name} {}",
                if created { "created" } else { "replaced" }
            ),
            ..Default::default()
        };
        Ok(
            match put_audited_bounded(
                self,
                account_id,
                put,
                Some(MAX_SECRETS_PER_ACCOUNT),
                line,
                secret_from_row,
            )
            .await?
            {
                None => SecretPut::TooMany,
                Some((true, row)) => SecretPut::Created(row),
                Some((false, row)) => SecretPut::Updated(row),
            },
        )
    }

    /// The account's secrets by name: names and times, never values.
    pub async fn account_secrets(&self, account_id: &str) -> Result<Vec<SecretRow>> {
        let rows = sqlx::query(
            "SELECT name, created_by, created_at, updated_by, updated_at FROM account_secrets
             WHERE account_id = $1 ORDER BY name",
        )
        .bind(account_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(secret_from_row).collect()
    }

    /// Deletes a secret and writes the audit line; `false` when the account has none of
    /// that name.
    pub async fn delete_account_secret(
        &self,
        account_id: &str,
        name: &str,
        actor: &str,
    ) -> Result<bool> {
        let line = AuditLine {
            actor: actor.to_string(),
            action: "secret.delete".to_string(),
            outcome: format!("account secret {name} deleted"),
            ..Default::default()
        };
        super::audit::delete_audited(
            self,
            "DELETE FROM account_secrets WHERE account_id = $1 AND name = $2",
            account_id,
            name,
            line,
        )
        .await
    }

    /// The names of `names` the account has no secret of, in order.
    pub async fn missing_account_secrets(
        &self,
        account_id: &str,
        names: &BTreeSet<String>,
    ) -> Result<Vec<String>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let held: BTreeSet<String> = self
            .account_secrets(account_id)
            .await?
            .into_iter()
            .map(|row| row.name)
            .collect();
        Ok(names.difference(&held).cloned().collect())
    }

    /// The values of `names`, opened, for the offer of a run of this account: `Ok(Err(name))`
    /// names the first one the account no longer has. The values go to the offer only.
    pub async fn open_account_secrets(
        &self,
        account_id: &str,
        names: &BTreeSet<String>,
    ) -> Result<std::result::Result<BTreeMap<String, String>, String>> {
        let mut values = BTreeMap::new();
        if names.is_empty() {
            return Ok(Ok(values));
        }
        let key = self.secrets.as_ref().ok_or(SealError::NoKey)?;
        for name in names {
            let stored: Option<String> = sqlx::query(
                "SELECT value FROM account_secrets WHERE account_id = $1 AND name = $2",
            )
            .bind(account_id)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .map(|row| row.try_get("value"))
            .transpose()?;
            let Some(stored) = stored else {
                return Ok(Err(name.clone()));
            };
            // Never stored in clear: a row that is not sealed is not a secret of ours.
            if !super::sealed::is_sealed(&stored) {
                return Err(StoreError::Corrupt(format!(
                    "account secret {name} is not sealed"
                )));
            }
            values.insert(
                name.clone(),
                key.open(&sealed_as(account_id, name), &stored)?,
            );
        }
        Ok(Ok(values))
    }
}

#[cfg(test)]
mod tests;
