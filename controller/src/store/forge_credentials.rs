//! Forge credentials: one token and API base URL per account and forge, which the forge
//! reporter (`crate::forge`) writes pull-request comments and commit statuses with. The
//! token is sealed with the data dir's key (`sealed.rs`; the account and the forge are
//! the associated data, so a value moved to another row does not open), written through
//! the API and never read back by it: the only reader is
//! [`Store::open_forge_credentials`], for the reporter. Audit lines name the forge and
//! the URL, never the token.

use iohr_domain::run::Forge;
use sqlx::Row;

use super::audit::{AuditLine, AuditedPut, put_audited};
use super::sealed::SealError;
use super::{Result, Store, StoreError, format_ms};

/// The longest token, in bytes.
pub const MAX_FORGE_TOKEN_BYTES: usize = 1024;

/// A forge's credentials as the API lists them: never the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgeCredentialRow {
    pub forge: Forge,
    pub api_url: String,
    pub created_by: String,
    pub created_at: i64,
    pub updated_by: String,
    pub updated_at: i64,
}

impl ForgeCredentialRow {
    pub fn to_api(&self) -> serde_json::Value {
        serde_json::json!({
            "forge": self.forge.as_str(),
            "api_url": self.api_url,
            "created_by": self.created_by,
            "created_at": format_ms(self.created_at),
            "updated_by": self.updated_by,
            "updated_at": format_ms(self.updated_at),
        })
    }
}

/// A forge's credentials, opened for the reporter.
#[derive(Clone, PartialEq, Eq)]
pub struct ForgeCredentials {
    pub api_url: String,
    pub token: String,
}

impl std::fmt::Debug for ForgeCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForgeCredentials")
            .field("api_url", &self.api_url)
            .field("token", &"..")
            .finish()
    }
}

fn credential_from_row(row: &sqlx::any::AnyRow) -> Result<ForgeCredentialRow> {
    let forge: String = row.try_get("forge")?;
    Ok(ForgeCredentialRow {
        forge: forge
            .parse()
            .map_err(|e| StoreError::Corrupt(format!("forge_credentials.forge: {e}")))?,
        api_url: row.try_get("api_url")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        updated_by: row.try_get("updated_by")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// The associated data a token is sealed with.
fn sealed_as(account_id: &str, forge: Forge) -> String {
    format!("forge-token:{account_id}:{}", forge.as_str())
}

impl Store {
    /// Stores (or replaces) an account's credentials for `forge`, the token sealed, with
    /// its audit line, in one transaction. `Ok(true)` when they replaced earlier ones.
    /// Never in clear: without a key it is [`SealError::NoKey`].
    pub async fn put_forge_credentials(
        &self,
        account_id: &str,
        forge: Forge,
        api_url: &str,
        token: &str,
        actor: &str,
    ) -> Result<(bool, ForgeCredentialRow)> {
        let key = self.secrets.as_ref().ok_or(SealError::NoKey)?;
        let sealed = key.seal(&sealed_as(account_id, forge), token)?;
        let put = AuditedPut {
            table: "forge_credentials",
            key: Some(("forge", forge.as_str())),
            values: &[("token", &sealed), ("api_url", api_url)],
            actor,
        };
        let line = |created: bool| AuditLine {
            actor: actor.to_string(),
            action: if created { "forge.set" } else { "forge.update" }.to_string(),
            outcome: format!(
                "{} credentials {} (API {api_url})",
                forge.as_str(),
                if created { "set" } else { "replaced" }
            ),
            ..Default::default()
        };
        let (created, row) = put_audited(self, account_id, put, line, credential_from_row).await?;
        Ok((!created, row))
    }

    /// The account's forge credentials: forges and URLs, never tokens.
    pub async fn forge_credentials(&self, account_id: &str) -> Result<Vec<ForgeCredentialRow>> {
        let rows = sqlx::query(
            "SELECT forge, api_url, created_by, created_at, updated_by, updated_at
             FROM forge_credentials WHERE account_id = $1 ORDER BY forge",
        )
        .bind(account_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(credential_from_row).collect()
    }

    /// Deletes the account's credentials for `forge` with the audit line; `false` when
    /// there were none.
    pub async fn delete_forge_credentials(
        &self,
        account_id: &str,
        forge: Forge,
        actor: &str,
    ) -> Result<bool> {
        let line = AuditLine {
            actor: actor.to_string(),
            action: "forge.delete".to_string(),
            outcome: format!("{} credentials deleted", forge.as_str()),
            ..Default::default()
        };
        super::audit::delete_audited(
            self,
            "DELETE FROM forge_credentials WHERE account_id = $1 AND forge = $2",
            account_id,
            forge.as_str(),
            line,
        )
        .await
    }

    /// The account's credentials for `forge`, the token opened, for the reporter only.
    pub async fn open_forge_credentials(
        &self,
        account_id: &str,
        forge: Forge,
    ) -> Result<Option<ForgeCredentials>> {
        let row = sqlx::query(
            "SELECT token, api_url FROM forge_credentials WHERE account_id = $1 AND forge = $2",
        )
        .bind(account_id)
        .bind(forge.as_str())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let sealed: String = row.try_get("token")?;
        // Never stored in clear: a row that is not sealed is not a token of ours.
        if !super::sealed::is_sealed(&sealed) {
            return Err(StoreError::Corrupt(format!(
                "the {} token is not sealed",
                forge.as_str()
            )));
        }
        let key = self.secrets.as_ref().ok_or(SealError::NoKey)?;
        Ok(Some(ForgeCredentials {
            api_url: row.try_get("api_url")?,
            token: key.open(&sealed_as(account_id, forge), &sealed)?,
        }))
    }
}
