//! Scenario versions: immutable specs addressed by the hash of their canonical JSON.

use iohr_domain::version::{compact_json, version_of};
use sqlx::Row;

use super::{Result, Store, StoreError, now_ms};

#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The scenario's name: versions of one name form its history.
    pub id: String,
    pub version: String,
    pub kind: String,
    pub spec: serde_json::Value,
    pub created_at: i64,
}

impl Store {
    /// Stores a version (or finds the identical one already stored): versions never change.
    pub async fn put_scenario(
        &self,
        account_id: &str,
        name: &str,
        kind: &str,
        spec: &serde_json::Value,
    ) -> Result<Scenario> {
        let version = version_of(kind, spec);
        sqlx::query(
            "INSERT INTO scenarios (account_id, version, name, kind, spec, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (account_id, version) DO NOTHING",
        )
        .bind(account_id)
        .bind(&version)
        .bind(name)
        .bind(kind)
        .bind(compact_json(spec))
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        self.scenario(account_id, &version)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("scenario version {version}")))
    }

    pub async fn scenario(&self, account_id: &str, version: &str) -> Result<Option<Scenario>> {
        let row = sqlx::query("SELECT * FROM scenarios WHERE account_id = $1 AND version = $2")
            .bind(account_id)
            .bind(version)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| {
            let spec: String = row.try_get("spec")?;
            Ok(Scenario {
                id: row.try_get("name")?,
                version: row.try_get("version")?,
                kind: row.try_get("kind")?,
                spec: serde_json::from_str(&spec)
                    .map_err(|e| StoreError::Corrupt(format!("scenario spec: {e}")))?,
                created_at: row.try_get("created_at")?,
            })
        })
        .transpose()
    }
}
