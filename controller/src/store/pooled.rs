//! A split run placed across replicas (`serve --replica`). Each replica places runs on
//! the agents linked to it; a split run needs N agents at once, and when no one replica
//! has N free agents that serve it, the replica placing it leases its shares to free
//! agents on any live replica instead: all shares in one transaction under the
//! account's placing lock, or none of them, so two split runs never each hold part of
//! the agents the other waits for.
//!
//! An agent may now be offered runs by a replica other than its own, so on replicas
//! every offer (this one's and the usual one in `replicas.rs`) first takes the agent's
//! offering lock, tried, and counts the agent's leases in the store
//! ([`agent_has_room`]): two replicas never book the same agent past its
//! `max_concurrent_jobs`, or with two exclusive runs.
//!
//! A share leased to an agent on another replica names that replica in `runs.replica`:
//! the lease is that replica's to track and offer, as if it had placed it. It hears of
//! it by NOTIFY on [`OFFERS_CHANNEL`], or at its once-a-second look
//! ([`Store::untracked_offers`]) if the notice was lost. The shares then start together
//! at the start barrier (`steps.rs`), wherever their agents are.

use iohr_domain::{Executor, RunKind};
use sqlx::{AssertSqlSafe, Row};

use super::agents::quoted_like;
use super::replicas::{plan_room, try_placing_lock};
use super::runs::offer_to;
use super::{LeaseGuard, Result, Store};

/// A share offered to an agent on another replica: "REPLICA RUN", the replica that is
/// to offer it and the run's id.
pub const OFFERS_CHANNEL: &str = "iohr_offers";

/// The first key of the per-agent offering locks (the second is the agent id's hash: two
/// agents may share one, which only makes their offers take turns).
const OFFERING_CLASS: i32 = 0x4948_5254;

/// What a split run's shares need of an agent.
#[derive(Debug, Clone, Copy)]
pub struct PoolAsk<'a> {
    pub account_id: &'a str,
    pub executor: &'a Executor,
    pub environment: &'a str,
    pub kind: RunKind,
}

/// One share's lease from a pooled placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PooledShare {
    pub run_id: String,
    pub agent_id: String,
    /// The replica that tracks the lease: the agent's.
    pub replica: i64,
    pub guard: LeaseGuard,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pooled {
    /// Every share leased, in the order asked.
    Leased(Vec<PooledShare>),
    /// Another replica is placing the account's runs: try again shortly.
    AccountBusy,
    /// The plan has no room for every share.
    AccountFull,
    /// Fewer free agents serve it on all live replicas together than it has shares:
    /// how many there are.
    TooFewAgents(usize),
    /// A share was leased or ended meanwhile: nothing was leased.
    Gone,
}

impl Store {
    /// Leases every share in `shares` (queued, unleased) at once, or none (see the
    /// module's comment): share `i` to `here[i]` when that is given (a free agent linked
    /// to this replica), the others to the least busy free agents linked to other live
    /// replicas. `live` are the live replicas' numbers.
    pub async fn offer_pooled(
        &self,
        ask: PoolAsk<'_>,
        shares: &[String],
        here: &[Option<String>],
        live: &[i64],
    ) -> Result<Pooled> {
        let mut tx = self.pool.begin().await?;
        if !try_placing_lock(&mut tx, ask.account_id).await? {
            return Ok(Pooled::AccountBusy);
        }
        if plan_room(&mut tx, ask.account_id).await? < shares.len() {
            return Ok(Pooled::AccountFull);
        }
        let mut agents: Vec<Option<(String, i64)>> = Vec::with_capacity(shares.len());
        for at in 0..shares.len() {
            let mine = match here.get(at).cloned().flatten() {
                Some(agent) if agent_has_room(&mut tx, &agent, ask.kind).await? => {
                    Some((agent, self.replica))
                }
                _ => None,
            };
            agents.push(mine);
        }
        let wanted = agents.iter().filter(|a| a.is_none()).count();
        let mine: Vec<&str> = here.iter().flatten().map(String::as_str).collect();
        let mut elsewhere = Vec::new();
        for (agent, replica) in self
            .agents_elsewhere(&mut tx, ask, live, &mine, wanted)
            .await?
        {
            if elsewhere.len() == wanted {
                break;
            }
            if agent_has_room(&mut tx, &agent, ask.kind).await? {
                elsewhere.push((agent, replica));
            }
        }
        if elsewhere.len() < wanted {
            return Ok(Pooled::TooFewAgents(
                shares.len() - wanted + elsewhere.len(),
            ));
        }
        let mut elsewhere = elsewhere.into_iter();
        let mut leased = Vec::with_capacity(shares.len());
        for (run_id, agent) in shares.iter().zip(agents) {
            let Some((agent_id, replica)) = agent.or_else(|| elsewhere.next()) else {
                return Ok(Pooled::TooFewAgents(leased.len()));
            };
            // One share gone and the transaction is dropped: nothing was leased.
            let Some(guard) = offer_to(&mut *tx, run_id, &agent_id, replica).await? else {
                return Ok(Pooled::Gone);
            };
            if replica != self.replica {
                self.notify(&mut *tx, OFFERS_CHANNEL, &format!("{replica} {run_id}"))
                    .await?;
            }
            leased.push(PooledShare {
                run_id: run_id.clone(),
                agent_id,
                replica,
                guard,
            });
        }
        tx.commit().await?;
        Ok(Pooled::Leased(leased))
    }

    /// Agents linked to live replicas other than this one, not in `mine`, that serve
    /// `ask` and had room for it (their `max_concurrent_jobs`, and no exclusive run
    /// beside an exclusive one) when read, least busy first: (agent, its replica). A few
    /// more than `wanted`, for those another offer takes meanwhile.
    async fn agents_elsewhere(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        ask: PoolAsk<'_>,
        live: &[i64],
        mine: &[&str],
        wanted: usize,
    ) -> Result<Vec<(String, i64)>> {
        let others: Vec<String> = live
            .iter()
            .filter(|r| **r != self.replica)
            .map(i64::to_string)
            .collect();
        if wanted == 0 || others.is_empty() {
            return Ok(Vec::new());
        }
        let Some((scope, environment)) = scope(ask.executor) else {
            return Ok(Vec::new());
        };
        // Bound after the account, kind and environment: $4 onwards.
        let not_mine: String = (0..mine.len())
            .map(|i| format!(" AND a.id <> ${}", i + 4))
            .collect();
        let exclusive_here = if ask.kind.is_exclusive() {
            format!(
                "AND COALESCE(SUM(CASE WHEN r.kind IN ({}) THEN 1 ELSE 0 END), 0) = 0",
                exclusive_kinds()
            )
        } else {
            String::new()
        };
        // Only replica numbers, constant kind names and placeholders are formatted in;
        // the account, kind and environment are bound.
        let sql = format!(
            "SELECT a.id, a.connected_replica, COUNT(r.id) AS leases
             FROM agents a JOIN accounts acc ON acc.id = a.account_id
             LEFT JOIN runs r ON r.agent_id = a.id AND r.lease_state IS NOT NULL
                 AND r.status IN ('queued', 'running')
             WHERE {scope} AND a.removed_at IS NULL
                 AND a.connected_replica IN ({others})
                 AND a.kinds LIKE $2 ESCAPE '!' AND {environment}{not_mine}
             GROUP BY a.id, a.connected_replica, a.max_concurrent_jobs
             HAVING COUNT(r.id) < CASE WHEN a.max_concurrent_jobs < 1 THEN 1
                 ELSE a.max_concurrent_jobs END {exclusive_here}
             ORDER BY leases, a.id
             LIMIT {limit}",
            others = others.join(", "),
            limit = wanted + 8,
        );
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(ask.account_id)
            .bind(quoted_like(ask.kind.as_str()))
            .bind(quoted_like(ask.environment));
        for agent in mine {
            query = query.bind(*agent);
        }
        let rows = query.fetch_all(&mut **tx).await?;
        rows.iter()
            .map(|row| Ok((row.try_get("id")?, row.try_get("connected_replica")?)))
            .collect()
    }

    /// How many agents linked to live replicas (this one included) serve `ask`, busy or
    /// not: what a waiting split run's reason counts.
    pub async fn agents_serving_everywhere(&self, ask: PoolAsk<'_>, live: &[i64]) -> Result<usize> {
        let Some((scope, environment)) = scope(ask.executor) else {
            return Ok(0);
        };
        let replicas: Vec<String> = live
            .iter()
            .chain([&self.replica])
            .map(i64::to_string)
            .collect();
        // Only replica numbers and a constant clause are formatted in; values are bound.
        let sql = format!(
            "SELECT COUNT(*) AS n FROM agents a JOIN accounts acc ON acc.id = a.account_id
             WHERE {scope} AND a.removed_at IS NULL AND a.connected_replica IN ({})
                 AND a.kinds LIKE $2 ESCAPE '!' AND {environment}",
            replicas.join(", ")
        );
        let n: i64 = sqlx::query(AssertSqlSafe(sql))
            .bind(ask.account_id)
            .bind(quoted_like(ask.kind.as_str()))
            .bind(quoted_like(ask.environment))
            .fetch_one(&self.pool)
            .await?
            .try_get("n")?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Shares offered to this replica's agents by another replica that this one does
    /// not track yet: a lost notice's runs, found at the once-a-second look.
    pub async fn untracked_offers(&self, tracked: impl Fn(&str) -> bool) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT id FROM runs
             WHERE replica = $1 AND status = 'queued' AND lease_state = 'offered'",
        )
        .bind(self.replica)
        .fetch_all(&self.pool)
        .await?;
        let mut ids = Vec::new();
        for row in rows {
            let id: String = row.try_get("id")?;
            if !tracked(&id) {
                ids.push(id);
            }
        }
        Ok(ids)
    }
}

/// Whose agents serve a split run, as SQL over `agents a JOIN accounts acc` with the
/// account bound as `$1` and the environment's pattern as `$3`: the scope, and the
/// environment's clause (the cloud's agents serve every environment). None for one
/// named agent (a split run never is: refused at the POST).
fn scope(executor: &Executor) -> Option<(&'static str, &'static str)> {
    match executor {
        Executor::Any => Some(("a.account_id = $1", "a.environments LIKE $3 ESCAPE '!'")),
        Executor::Cloud => Some(("acc.is_platform = 1 AND $1 IS NOT NULL", "$3 IS NOT NULL")),
        Executor::Agent(_) => None,
    }
}

/// Takes the agent's offering lock for the transaction (tried: false when another
/// offer to it is being made) and says whether the agent has room for a run of `kind`
/// as the store has its leases: its `max_concurrent_jobs`, and no exclusive run beside
/// another. Replicas only (see the module's comment).
pub(super) async fn agent_has_room(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    agent_id: &str,
    kind: RunKind,
) -> Result<bool> {
    let locked: bool = sqlx::query("SELECT pg_try_advisory_xact_lock($1, hashtext($2)) AS locked")
        .bind(OFFERING_CLASS)
        .bind(agent_id)
        .fetch_one(&mut **tx)
        .await?
        .try_get("locked")?;
    if !locked {
        return Ok(false);
    }
    // Only constant kind names are formatted in; the agent is bound.
    let row = sqlx::query(AssertSqlSafe(format!(
        "SELECT
             (SELECT CASE WHEN max_concurrent_jobs < 1 THEN 1 ELSE max_concurrent_jobs END
              FROM agents WHERE id = $1) AS max_jobs,
             COUNT(*) AS leases,
             COALESCE(SUM(CASE WHEN kind IN ({}) THEN 1 ELSE 0 END), 0) AS exclusive
         FROM runs WHERE agent_id = $1 AND lease_state IS NOT NULL
             AND status IN ('queued', 'running')",
        exclusive_kinds()
    )))
    .bind(agent_id)
    .fetch_one(&mut **tx)
    .await?;
    let max_jobs: Option<i64> = row.try_get("max_jobs")?;
    let leases: i64 = row.try_get("leases")?;
    let exclusive_held: i64 = row.try_get("exclusive")?;
    Ok(max_jobs.is_some_and(|max| leases < max) && !(kind.is_exclusive() && exclusive_held > 0))
}

/// The exclusive kinds as an SQL list of constants: `'load', 'faults', ...`.
fn exclusive_kinds() -> String {
    let kinds: Vec<String> = RunKind::ALL
        .iter()
        .filter(|k| k.is_exclusive())
        .map(|k| format!("'{}'", k.as_str()))
        .collect();
    kinds.join(", ")
}

#[cfg(test)]
mod tests;
