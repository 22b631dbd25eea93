//! Scenario versions: immutable specs addressed by the hash of their canonical JSON, and
//! the names that label them. A version may carry several names; a name keeps every
//! version stored under it, its history. A run is of one name and one version.

use iohr_domain::version::{compact_json, version_of};
use sqlx::{AssertSqlSafe, Row};

use super::page::{Bind, Keyset, Order};
use super::{Result, Store, StoreError, new_id, now_ms};

#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The scenario's name: versions of one name form its history.
    pub id: String,
    pub version: String,
    pub kind: String,
    pub spec: serde_json::Value,
    pub created_at: i64,
}

/// What storing a scenario did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// A spec not stored before: a new version, under this name.
    Created,
    /// The version existed; this name now labels it too.
    Named,
    /// This name already labelled this version: nothing changed.
    Exists,
}

impl Stored {
    pub fn as_str(self) -> &'static str {
        match self {
            Stored::Created => "created",
            Stored::Named => "named",
            Stored::Exists => "exists",
        }
    }
}

/// A name of the account's scenarios: its kind, how many versions, the newest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioName {
    pub id: String,
    pub kind: String,
    pub versions: i64,
    pub latest_version: String,
    pub latest_at: i64,
}

/// One version of a name: when it got the name, and the runs of that name and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioVersion {
    pub version: String,
    pub created_at: i64,
    pub runs: i64,
    pub last_run: Option<String>,
}

/// The most names a listing answers, and the most versions of one name.
pub const MAX_LISTED: u32 = 500;

impl Store {
    /// Stores a version under `name` (or finds it stored): versions never change, and a
    /// name given once is kept.
    pub async fn put_scenario(
        &self,
        account_id: &str,
        name: &str,
        kind: &str,
        spec: &serde_json::Value,
    ) -> Result<Scenario> {
        Ok(self.store_scenario(account_id, name, kind, spec).await?.0)
    }

    /// [`Store::put_scenario`], saying what it stored.
    pub async fn store_scenario(
        &self,
        account_id: &str,
        name: &str,
        kind: &str,
        spec: &serde_json::Value,
    ) -> Result<(Scenario, Stored)> {
        let version = version_of(kind, spec);
        let now = now_ms();
        let mut tx = self.write_tx().await?;
        let version_added = sqlx::query(
            "INSERT INTO scenarios (account_id, version, name, kind, spec, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (account_id, version) DO NOTHING",
        )
        .bind(account_id)
        .bind(&version)
        .bind(name)
        .bind(kind)
        .bind(compact_json(spec))
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        let name_added = sqlx::query(
            "INSERT INTO scenario_names (account_id, name, version, created_at, seq)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (account_id, name, version) DO NOTHING",
        )
        .bind(account_id)
        .bind(name)
        .bind(&version)
        .bind(now)
        .bind(new_id())
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        tx.commit().await?;
        let stored = match (version_added, name_added) {
            (true, _) => Stored::Created,
            (false, true) => Stored::Named,
            (false, false) => Stored::Exists,
        };
        let mut scenario = self
            .scenario(account_id, &version)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("scenario version {version}")))?;
        scenario.id = name.to_string();
        Ok((scenario, stored))
    }

    /// A version by its hash, under the name it was first stored with.
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

    /// The version `version` if `name` labels it.
    pub async fn named_scenario(
        &self,
        account_id: &str,
        name: &str,
        version: &str,
    ) -> Result<Option<Scenario>> {
        let labelled = sqlx::query(
            "SELECT 1 FROM scenario_names WHERE account_id = $1 AND name = $2 AND version = $3",
        )
        .bind(account_id)
        .bind(name)
        .bind(version)
        .fetch_optional(&self.pool)
        .await?
        .is_some();
        if !labelled {
            return Ok(None);
        }
        Ok(self
            .scenario(account_id, version)
            .await?
            .map(|scenario| Scenario {
                id: name.to_string(),
                ..scenario
            }))
    }

    /// The account's scenario names in order, after `cursor` (a name), at most `limit`,
    /// and the cursor of the next page (the keyset of every listing: the names of the
    /// page first, then what the page shows of them).
    pub async fn list_scenarios(
        &self,
        account_id: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<ScenarioName>, Option<String>)> {
        let (page, next) = Keyset::new(
            "SELECT DISTINCT name FROM scenario_names WHERE account_id = $1".to_string(),
            account_id,
        )
        .page(
            &self.pool,
            Order::Ascending,
            "name",
            cursor.map(|c| Bind::Text(c.to_string())),
            limit.min(MAX_LISTED),
            |row| Ok(row.try_get::<String, _>("name")?),
            |name| name.clone(),
        )
        .await?;
        let (Some(first), Some(last)) = (page.first(), page.last()) else {
            return Ok((Vec::new(), None));
        };
        // The page's names are consecutive in order: its rows are those between the first
        // and the last.
        let rows = sqlx::query(
            "SELECT n.name AS name, s.kind AS kind, n.version AS version,
                    n.created_at AS created_at
             FROM scenario_names n
             JOIN scenarios s ON s.account_id = n.account_id AND s.version = n.version
             WHERE n.account_id = $1 AND n.name >= $2 AND n.name <= $3
             ORDER BY n.name, n.seq DESC",
        )
        .bind(account_id)
        .bind(first)
        .bind(last)
        .fetch_all(&self.pool)
        .await?;
        let mut names: Vec<ScenarioName> = Vec::new();
        for row in &rows {
            let name: String = row.try_get("name")?;
            match names.last_mut() {
                Some(last) if last.id == name => last.versions += 1,
                _ => names.push(ScenarioName {
                    id: name,
                    kind: row.try_get("kind")?,
                    versions: 1,
                    latest_version: row.try_get("version")?,
                    latest_at: row.try_get("created_at")?,
                }),
            }
        }
        Ok((names, next))
    }

    /// The versions `name` labels, newest first (at most [`MAX_LISTED`]), each with the
    /// runs of that name and version; empty when the account has no such name.
    pub async fn scenario_versions(
        &self,
        account_id: &str,
        name: &str,
    ) -> Result<Vec<ScenarioVersion>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT n.version AS version, n.created_at AS created_at,
                    (SELECT COUNT(*) FROM runs r WHERE r.account_id = n.account_id
                        AND r.scenario_id = n.name AND r.scenario_version = n.version) AS runs,
                    (SELECT MAX(r.id) FROM runs r WHERE r.account_id = n.account_id
                        AND r.scenario_id = n.name AND r.scenario_version = n.version) AS last_run
             FROM scenario_names n
             WHERE n.account_id = $1 AND n.name = $2
             ORDER BY n.seq DESC LIMIT {MAX_LISTED}"
        )))
        .bind(account_id)
        .bind(name)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ScenarioVersion {
                    version: row.try_get("version")?,
                    created_at: row.try_get("created_at")?,
                    runs: row.try_get("runs")?,
                    last_run: row.try_get("last_run")?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
