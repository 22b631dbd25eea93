//! Agents and their certificates. An agent is known by its certificate's fingerprint;
//! what it serves (environments, kinds, labels, `max_concurrent_jobs`) is what its last
//! hello declared.

use std::collections::BTreeMap;

use sqlx::Row;

use super::audit::{AuditLine, insert_audit};
use super::{Result, Store, StoreError, json_list, new_id, now_ms, to_json};

/// Who a connecting certificate belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentIdentity {
    pub agent_id: String,
    pub name: String,
    pub account_id: String,
    /// An agent of the platform account: part of "our cloud".
    pub is_platform: bool,
}

/// What an agent declared in its hello.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declaration {
    pub version: String,
    pub kinds: Vec<String>,
    pub environments: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub max_concurrent_jobs: u32,
}

/// Whose agents a question is about.
#[derive(Debug, Clone, Copy)]
pub enum AgentScope<'a> {
    Account(&'a str),
    /// One agent of an account, by name.
    Named(&'a str, &'a str),
    /// Our cloud: the platform account's agents.
    Platform,
}

/// A LIKE pattern matching `word` as one quoted JSON string in a list.
pub(super) fn quoted_like(word: &str) -> String {
    let escaped: String = word
        .chars()
        .flat_map(|c| match c {
            '%' | '_' | '!' => vec!['!', c],
            other => vec![other],
        })
        .collect();
    format!("%\"{escaped}\"%")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRow {
    pub id: String,
    pub name: String,
    pub account_id: String,
    pub last_seen_at: Option<i64>,
    pub declaration: Declaration,
    /// The replica its stream is on, as that replica last said (see migration 0018).
    pub connected_replica: Option<i64>,
}

/// A lease as stored: its run, agent and state (`offered`, `accepted`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLease {
    pub run_id: String,
    pub agent_id: String,
    pub lease_id: String,
    pub state: String,
    pub kind: String,
}

impl Store {
    /// Records a newly issued certificate for an agent, creating the agent if needed.
    /// A removed agent of the same name comes back with only this certificate.
    pub async fn register_agent_cert(
        &self,
        account_id: &str,
        name: &str,
        fingerprint: &str,
    ) -> Result<String> {
        let mut tx = self.write_tx().await?;
        let agent_id = register_cert_in(&mut tx, account_id, name, fingerprint, false).await?;
        tx.commit().await?;
        Ok(agent_id)
    }

    /// Removes an agent: every certificate it had is refused from now on.
    pub async fn remove_agent(&self, account_id: &str, name: &str) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let row = sqlx::query(
            "SELECT id FROM agents WHERE account_id = $1 AND name = $2 AND removed_at IS NULL",
        )
        .bind(account_id)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(StoreError::NotFound(format!("agent {name}")));
        };
        let id: String = row.try_get("id")?;
        sqlx::query("DELETE FROM agent_certs WHERE agent_id = $1")
            .bind(&id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE agents SET removed_at = $1 WHERE id = $2")
            .bind(now_ms())
            .bind(&id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Makes `new_fingerprint` a certificate of the agent whose certificate `presented`
    /// is, keeping `presented` (valid until it expires) and dropping any other, with an
    /// audit line. False, and nothing written, when `presented` no longer belongs to a
    /// live agent (removed since the caller connected).
    pub async fn renew_agent_cert(
        &self,
        identity: &AgentIdentity,
        presented: &str,
        new_fingerprint: &str,
        now: i64,
    ) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let live = sqlx::query(
            "SELECT 1 FROM agent_certs c JOIN agents a ON a.id = c.agent_id
             WHERE c.fingerprint = $1 AND a.id = $2 AND a.removed_at IS NULL",
        )
        .bind(presented)
        .bind(&identity.agent_id)
        .fetch_optional(&mut *tx)
        .await?;
        if live.is_none() {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query("DELETE FROM agent_certs WHERE agent_id = $1 AND fingerprint <> $2")
            .bind(&identity.agent_id)
            .bind(presented)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO agent_certs (fingerprint, agent_id, created_at) VALUES ($1, $2, $3)",
        )
        .bind(new_fingerprint)
        .bind(&identity.agent_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        insert_audit(
            &mut tx,
            &identity.account_id,
            &AuditLine {
                at: now,
                actor: format!("agent:{}", identity.name),
                action: "agent.renew".to_string(),
                outcome: format!(
                    "agent {} renewed its certificate: sha256 {presented} replaced by sha256 {new_fingerprint}",
                    identity.name
                ),
                ..AuditLine::default()
            },
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// The live agent a certificate fingerprint belongs to.
    pub async fn agent_by_fingerprint(&self, fingerprint: &str) -> Result<Option<AgentIdentity>> {
        let row = sqlx::query(
            "SELECT a.id, a.name, a.account_id, acc.is_platform
             FROM agent_certs c
             JOIN agents a ON a.id = c.agent_id
             JOIN accounts acc ON acc.id = a.account_id
             WHERE c.fingerprint = $1 AND a.removed_at IS NULL",
        )
        .bind(fingerprint)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok(AgentIdentity {
                agent_id: row.try_get("id")?,
                name: row.try_get("name")?,
                account_id: row.try_get("account_id")?,
                is_platform: row.try_get::<i64, _>("is_platform")? != 0,
            })
        })
        .transpose()
    }

    pub async fn record_hello(&self, agent_id: &str, hello: &Declaration) -> Result<()> {
        sqlx::query(
            "UPDATE agents SET version = $1, kinds = $2, environments = $3, labels = $4,
                 max_concurrent_jobs = $5, last_seen_at = $6, connected_replica = $8
             WHERE id = $7",
        )
        .bind(&hello.version)
        .bind(to_json(&hello.kinds))
        .bind(to_json(&hello.environments))
        .bind(to_json(&hello.labels))
        .bind(i64::from(hello.max_concurrent_jobs))
        .bind(now_ms())
        .bind(agent_id)
        .bind(self.is_replica().then(|| self.replica()))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records when an agent was last heard (its stream ended then); as a replica, that
    /// its stream is no longer here, unless another replica has it by now.
    pub async fn touch_agent(&self, agent_id: &str, at_ms: i64) -> Result<()> {
        sqlx::query(
            "UPDATE agents SET last_seen_at = $1, connected_replica = CASE
                 WHEN connected_replica = $3 THEN NULL ELSE connected_replica END
             WHERE id = $2",
        )
        .bind(at_ms)
        .bind(agent_id)
        .bind(self.replica())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The leases (offered or running) of an account's agents, as the store holds them:
    /// what `GET /agents` shows of agents connected to another replica.
    pub async fn agent_leases(&self, account_id: &str) -> Result<Vec<StoredLease>> {
        let rows = sqlx::query(
            "SELECT id, agent_id, lease_id, lease_state, kind FROM runs
             WHERE account_id = $1 AND agent_id IS NOT NULL AND lease_id IS NOT NULL
                 AND lease_state IS NOT NULL AND status IN ('queued', 'running')
             ORDER BY id",
        )
        .bind(account_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(StoredLease {
                    run_id: row.try_get("id")?,
                    agent_id: row.try_get("agent_id")?,
                    lease_id: row.try_get("lease_id")?,
                    state: row.try_get("lease_state")?,
                    kind: row.try_get("kind")?,
                })
            })
            .collect()
    }

    /// Which of these agents have been removed, or are gone with their account.
    pub async fn removed_among(&self, agent_ids: &[String]) -> Result<Vec<String>> {
        // In chunks: both databases limit the parameters of one statement.
        let mut live = std::collections::HashSet::new();
        for chunk in agent_ids.chunks(500) {
            let placeholders: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT id FROM agents WHERE removed_at IS NULL AND id IN ({})",
                placeholders.join(", ")
            );
            // Only placeholders are formatted into the SQL; the ids are bound.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(id);
            }
            for row in query.fetch_all(&self.pool).await? {
                live.insert(row.try_get::<String, _>("id")?);
            }
        }
        Ok(agent_ids
            .iter()
            .filter(|id| !live.contains(*id))
            .cloned()
            .collect())
    }

    /// Whether a live agent in `scope` has declared it runs `kind` (in `environment`,
    /// when given). Declarations are JSON lists, matched as quoted words.
    pub async fn agent_serves(
        &self,
        scope: AgentScope<'_>,
        kind: &str,
        environment: Option<&str>,
    ) -> Result<bool> {
        let mut binds: Vec<String> = Vec::new();
        let mut clauses = vec!["a.removed_at IS NULL".to_string()];
        let mut bind = |clause: &str, value: String, clauses: &mut Vec<String>| {
            binds.push(value);
            let escape = if clause.ends_with("LIKE") {
                " ESCAPE '!'"
            } else {
                ""
            };
            clauses.push(format!("{clause} ${}{escape}", binds.len()));
        };
        match scope {
            AgentScope::Account(account) => {
                bind("a.account_id =", account.to_string(), &mut clauses)
            }
            AgentScope::Named(account, name) => {
                bind("a.account_id =", account.to_string(), &mut clauses);
                bind("a.name =", name.to_string(), &mut clauses);
            }
            AgentScope::Platform => clauses.push("acc.is_platform = 1".to_string()),
        }
        bind("a.kinds LIKE", quoted_like(kind), &mut clauses);
        if let Some(environment) = environment {
            bind(
                "a.environments LIKE",
                quoted_like(environment),
                &mut clauses,
            );
        }
        let sql = format!(
            "SELECT COUNT(*) AS n FROM agents a JOIN accounts acc ON acc.id = a.account_id WHERE {}",
            clauses.join(" AND ")
        );
        // Only placeholders and constant clauses are formatted in; values are bound.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for value in &binds {
            query = query.bind(value);
        }
        let n: i64 = query.fetch_one(&self.pool).await?.try_get("n")?;
        Ok(n > 0)
    }

    pub async fn agent_exists(&self, account_id: &str, name: &str) -> Result<bool> {
        let row = sqlx::query(
            "SELECT id FROM agents WHERE account_id = $1 AND name = $2 AND removed_at IS NULL",
        )
        .bind(account_id)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.is_some())
    }

    /// The live agents of an account.
    pub async fn agents(&self, account_id: &str) -> Result<Vec<AgentRow>> {
        let rows = sqlx::query(
            "SELECT * FROM agents WHERE account_id = $1 AND removed_at IS NULL ORDER BY name",
        )
        .bind(account_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(agent_from_row).collect()
    }
}

/// Registers `fingerprint` as a certificate of agent `name` inside a write transaction,
/// creating the agent or bringing a removed one back. `replace` drops its other
/// certificates (an enrollment replaces; `agent-cert` adds, as it always has).
pub(super) async fn register_cert_in(
    conn: &mut sqlx::AnyConnection,
    account_id: &str,
    name: &str,
    fingerprint: &str,
    replace: bool,
) -> Result<String> {
    let existing = sqlx::query("SELECT id FROM agents WHERE account_id = $1 AND name = $2")
        .bind(account_id)
        .bind(name)
        .fetch_optional(&mut *conn)
        .await?;
    let agent_id = match existing {
        Some(row) => {
            let id: String = row.try_get("id")?;
            sqlx::query("UPDATE agents SET removed_at = NULL WHERE id = $1")
                .bind(&id)
                .execute(&mut *conn)
                .await?;
            if replace {
                sqlx::query("DELETE FROM agent_certs WHERE agent_id = $1")
                    .bind(&id)
                    .execute(&mut *conn)
                    .await?;
            }
            id
        }
        None => {
            let id = new_id();
            sqlx::query(
                "INSERT INTO agents (id, account_id, name, created_at) VALUES ($1, $2, $3, $4)",
            )
            .bind(&id)
            .bind(account_id)
            .bind(name)
            .bind(now_ms())
            .execute(&mut *conn)
            .await?;
            id
        }
    };
    sqlx::query("INSERT INTO agent_certs (fingerprint, agent_id, created_at) VALUES ($1, $2, $3)")
        .bind(fingerprint)
        .bind(&agent_id)
        .bind(now_ms())
        .execute(&mut *conn)
        .await?;
    Ok(agent_id)
}

fn agent_from_row(row: &sqlx::any::AnyRow) -> Result<AgentRow> {
    let labels: String = row.try_get("labels")?;
    let max_jobs: i64 = row.try_get("max_concurrent_jobs")?;
    Ok(AgentRow {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        account_id: row.try_get("account_id")?,
        last_seen_at: row.try_get("last_seen_at")?,
        connected_replica: row.try_get("connected_replica")?,
        declaration: Declaration {
            version: row
                .try_get::<Option<String>, _>("version")?
                .unwrap_or_default(),
            kinds: json_list(&row.try_get::<String, _>("kinds")?),
            environments: json_list(&row.try_get::<String, _>("environments")?),
            labels: serde_json::from_str(&labels).unwrap_or_default(),
            max_concurrent_jobs: u32::try_from(max_jobs).unwrap_or(0),
        },
    })
}
