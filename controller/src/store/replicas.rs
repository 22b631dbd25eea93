//! Controller replicas on one PostgreSQL store (`serve --replica`).
//!
//! Every replica serves the API and agent links and runs its own dispatcher for the
//! agents connected to it; the store is what they share:
//! - a replica is alive while it holds its number's advisory lock (one connection kept
//!   for it, as a standby's claim is): no clocks compared, and PostgreSQL frees the lock
//!   when the replica's connection goes;
//! - a queued run is placed by whichever replica has a free agent for it first: the
//!   lease is one conditional UPDATE (`offer_lease`), under a per-account transaction
//!   lock that is tried, not waited for (`pg_try_advisory_xact_lock`, the advisory form
//!   of `FOR UPDATE SKIP LOCKED`), so that the plan's concurrency holds across replicas
//!   and no replica waits while another places that account's runs (it tries again
//!   a few milliseconds later);
//! - `runs.replica` says which replica tracks a lease: its dispatcher's writes are
//!   fenced by it. A lease moves when its agent reconnects to another replica (the agent
//!   holding the lease is the proof) or when its replica died (a live one adopts it and
//!   gives the agent the usual time to come back);
//! - NOTIFY tells the others at once what they would otherwise find at their next
//!   once-a-second look: runs queued, frames stored, cancels asked (see `replica/`).

use std::collections::HashMap;

use iohr_domain::RunKind;
use sqlx::{AssertSqlSafe, Row};

use super::pooled::agent_has_room;
use super::run_row::{LEASABLE, RUN_COLUMNS, run_from_row};
use super::runs::offer_to;
use super::{Backend, Claim, LeaseGuard, Result, RunRow, Store, StoreError};

/// A run queued (new, or back from an offer): its id.
pub const QUEUE_CHANNEL: &str = "iohr_queue";
/// Frames stored: a [`FramesNotice`].
pub const FRAMES_CHANNEL: &str = "iohr_frames";
/// A run that held a lease ended: "REPLICA ACCOUNT", the replica that stored the ending
/// and the run's account (which may have room again).
pub const ENDED_CHANNEL: &str = "iohr_ended";
/// A cancel asked on one replica for a lease another tracks: the run's id.
pub const CANCELS_CHANNEL: &str = "iohr_cancels";

/// The first key of the replicas' advisory locks (the second is the number); apart from
/// the store's claim, which takes the one-key form.
const LOCK_CLASS: i32 = 0x4948_5252;
/// The first key of the per-account placing locks (the second is the account id's hash:
/// two accounts may share one, which only makes them take turns).
const PLACING_CLASS: i32 = 0x4948_5253;
/// Replica numbers tried, so a bound on how many replicas serve one store.
pub const MAX_REPLICAS: i32 = 64;

/// Frames `first..=last` of a run were stored by replica `replica`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramesNotice {
    pub replica: i64,
    pub first: u64,
    pub last: u64,
    pub run_id: String,
}

impl FramesNotice {
    fn payload(&self) -> String {
        format!(
            "{} {} {} {}",
            self.replica, self.first, self.last, self.run_id
        )
    }

    /// None for a payload not written by [`FramesNotice::payload`].
    pub fn parse(text: &str) -> Option<FramesNotice> {
        let mut parts = text.splitn(4, ' ');
        let replica = parts.next()?.parse().ok()?;
        let first = parts.next()?.parse().ok()?;
        let last = parts.next()?.parse().ok()?;
        let run_id = parts.next()?.to_string();
        (first <= last && !run_id.is_empty()).then_some(FramesNotice {
            replica,
            first,
            last,
            run_id,
        })
    }
}

/// What became of one offer a replica tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaOffer {
    Offered(LeaseGuard),
    /// Ended, or leased by another replica meanwhile: not this one's to offer.
    Gone,
    /// Another replica is placing this account's runs right now: try next tick.
    AccountBusy,
    /// The account runs as many as its plan allows, across replicas.
    AccountFull,
    /// The agent is full as the store has its leases (another replica leased it a split
    /// run's share, see `pooled.rs`), or another offer to it is being made.
    AgentTaken,
}

impl Store {
    /// This process's replica number; 0 when it serves the store alone.
    pub fn replica(&self) -> i64 {
        self.replica
    }

    pub fn is_replica(&self) -> bool {
        self.replica != 0
    }

    /// Takes the lowest free replica number: the returned store writes as that replica,
    /// and the claim (its advisory lock's connection) says it is alive while held.
    pub async fn join_replicas(&self) -> Result<(Store, Claim)> {
        if self.backend != Backend::Postgres {
            return Err(StoreError::Conflict(
                "--replica needs PostgreSQL: a SQLite store has one controller".to_string(),
            ));
        }
        for number in 1..=MAX_REPLICAS {
            let mut conn = self.pool.acquire().await?;
            let locked: bool = sqlx::query("SELECT pg_try_advisory_lock($1, $2) AS locked")
                .bind(LOCK_CLASS)
                .bind(number)
                .fetch_one(&mut *conn)
                .await?
                .try_get("locked")?;
            if locked {
                let mut store = self.clone();
                store.replica = i64::from(number);
                return Ok((store, Claim::Advisory(conn)));
            }
        }
        Err(StoreError::Conflict(format!(
            "{MAX_REPLICAS} replicas already serve this store, the most it takes"
        )))
    }

    /// The numbers of the replicas alive now (their locks held).
    pub async fn live_replicas(&self) -> Result<Vec<i64>> {
        let rows = sqlx::query(
            "SELECT objid::bigint AS number FROM pg_locks
             WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid::bigint = $1
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .bind(i64::from(LOCK_CLASS))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok(r.try_get::<i64, _>("number")?))
            .collect()
    }

    /// A listener on the replicas' channels, on a connection of its own.
    pub async fn listener(&self) -> Result<sqlx::postgres::PgListener> {
        let mut listener = sqlx::postgres::PgListener::connect(&self.url).await?;
        listener
            .listen_all([
                QUEUE_CHANNEL,
                FRAMES_CHANNEL,
                CANCELS_CHANNEL,
                ENDED_CHANNEL,
                super::OFFERS_CHANNEL,
            ])
            .await?;
        Ok(listener)
    }

    /// Tells the other replicas, when this one is a replica; delivered at commit.
    pub(super) async fn notify<'e, E>(
        &self,
        executor: E,
        channel: &str,
        payload: &str,
    ) -> Result<()>
    where
        E: sqlx::Executor<'e, Database = sqlx::Any>,
    {
        if self.is_replica() {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(channel)
                .bind(payload)
                .execute(executor)
                .await?;
        }
        Ok(())
    }

    pub(super) async fn notify_frames<'e, E>(
        &self,
        executor: E,
        run_id: &str,
        first: u64,
        last: u64,
    ) -> Result<()>
    where
        E: sqlx::Executor<'e, Database = sqlx::Any>,
    {
        let notice = FramesNotice {
            replica: self.replica,
            first,
            last,
            run_id: run_id.to_string(),
        };
        self.notify(executor, FRAMES_CHANNEL, &notice.payload())
            .await
    }

    /// Offers one account's placed runs of a round, each to its agent, within the
    /// account's plan counted across every replica (see the module's comment) and the
    /// agent's room as the store has its leases.
    pub async fn offer_leases_as_replica(
        &self,
        account_id: &str,
        offers: &[(String, String, RunKind)],
    ) -> Result<Vec<ReplicaOffer>> {
        let mut tx = self.pool.begin().await?;
        // One replica places an account's runs at a time: a lock of the transaction's,
        // tried (a replica that finds it taken tries again shortly), and apart from the
        // account's row, which a POST's admission holds while it stores a run.
        let locked = try_placing_lock(&mut tx, account_id).await?;
        if !locked {
            return Ok(vec![ReplicaOffer::AccountBusy; offers.len()]);
        }
        let mut room = plan_room(&mut tx, account_id).await?;
        let mut answers = Vec::with_capacity(offers.len());
        for (run_id, agent_id, kind) in offers {
            if room == 0 {
                answers.push(ReplicaOffer::AccountFull);
                continue;
            }
            if !agent_has_room(&mut tx, agent_id, *kind).await? {
                answers.push(ReplicaOffer::AgentTaken);
                continue;
            }
            answers.push(
                match offer_to(&mut *tx, run_id, agent_id, self.replica).await? {
                    Some(guard) => {
                        room -= 1;
                        ReplicaOffer::Offered(guard)
                    }
                    None => ReplicaOffer::Gone,
                },
            );
        }
        tx.commit().await?;
        Ok(answers)
    }

    /// Takes over a lease its agent reports on this replica: the agent holding the
    /// lease is the proof, wherever the lease was tracked. None when it is not current.
    pub async fn adopt_lease(
        &self,
        run_id: &str,
        guard: &LeaseGuard,
        agent_id: &str,
    ) -> Result<Option<RunRow>> {
        let done = sqlx::query(
            "UPDATE runs SET replica = $1
             WHERE id = $2 AND lease_id = $3 AND lease_epoch = $4 AND agent_id = $5
                 AND lease_state IS NOT NULL AND status IN ('queued', 'running')",
        )
        .bind(self.replica)
        .bind(run_id)
        .bind(&guard.lease_id)
        .bind(guard.epoch as i64)
        .bind(agent_id)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() != 1 {
            return Ok(None);
        }
        self.run(run_id).await
    }

    /// Takes over the leases of replicas that are not alive: this one waits for their
    /// agents (or ends their runs `agent lost`) as a restarted controller would.
    pub async fn adopt_orphans(&self, live: &[i64]) -> Result<Vec<RunRow>> {
        // This replica is alive, whatever the lock table said a moment ago.
        let live: Vec<String> = live
            .iter()
            .chain([&self.replica])
            .map(i64::to_string)
            .collect();
        let rows = sqlx::query(AssertSqlSafe(format!(
            "UPDATE runs SET replica = $1
             WHERE lease_state IS NOT NULL AND status IN ('queued', 'running')
                 AND replica NOT IN ({})
             RETURNING id",
            live.join(", ")
        )))
        .bind(self.replica)
        .fetch_all(&self.pool)
        .await?;
        let mut adopted = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.try_get("id")?;
            if let Some(run) = self.run(&id).await? {
                adopted.push(run);
            }
        }
        Ok(adopted)
    }

    /// Queued runs no agent holds, oldest first, at most `limit`: what every replica
    /// may place.
    pub async fn unleased_runs(&self, limit: u32) -> Result<Vec<RunRow>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id
             WHERE r.status = 'queued' AND r.lease_state IS NULL AND {LEASABLE}
             ORDER BY r.id LIMIT {limit}"
        )))
        .fetch_all(&self.pool)
        .await?;
        let runs: Vec<RunRow> = rows.iter().map(run_from_row).collect::<Result<_>>()?;
        // A production faults run waits for a person, not in a queue.
        Ok(runs
            .into_iter()
            .filter(|r| !r.confirmation.as_ref().is_some_and(|c| c.is_pending()))
            .collect())
    }

    /// Leases held per account, across replicas.
    pub async fn leases_by_account(&self) -> Result<HashMap<String, usize>> {
        let rows = sqlx::query(
            "SELECT account_id, COUNT(*) AS n FROM runs
             WHERE status IN ('queued', 'running') AND lease_state IS NOT NULL
             GROUP BY account_id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let n: i64 = r.try_get("n")?;
                Ok((r.try_get("account_id")?, usize::try_from(n).unwrap_or(0)))
            })
            .collect()
    }

    /// Asks the replica tracking a run's lease to cancel it. False when the run ended
    /// or holds no lease (then the caller ends it itself).
    pub async fn request_cancel(&self, run_id: &str, reason: &str) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(
            "UPDATE runs SET cancel_requested = $1, reason = $1
             WHERE id = $2 AND status IN ('queued', 'running') AND lease_state IS NOT NULL",
        )
        .bind(reason)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        let asked = done.rows_affected() == 1;
        if asked {
            self.notify(&mut *tx, CANCELS_CHANNEL, run_id).await?;
        }
        tx.commit().await?;
        Ok(asked)
    }

    /// Cancels asked elsewhere for leases this replica tracks: (run, reason).
    pub async fn cancels_asked(&self) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT id, cancel_requested FROM runs
             WHERE replica = $1 AND cancel_requested IS NOT NULL
                 AND status IN ('queued', 'running')",
        )
        .bind(self.replica)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("cancel_requested")?)))
            .collect()
    }
}

/// Tries the account's placing lock for the transaction: false when another replica
/// holds it (that replica is placing the account's runs; try again shortly).
pub(super) async fn try_placing_lock(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    account_id: &str,
) -> Result<bool> {
    Ok(
        sqlx::query("SELECT pg_try_advisory_xact_lock($1, hashtext($2)) AS locked")
            .bind(PLACING_CLASS)
            .bind(account_id)
            .fetch_one(&mut **tx)
            .await?
            .try_get("locked")?,
    )
}

/// How many more runs the account's plan lets hold a lease now, counted across
/// replicas in the store (another replica may have been told of a change first).
pub(super) async fn plan_room(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    account_id: &str,
) -> Result<usize> {
    let max_running: i64 = sqlx::query("SELECT max_running FROM accounts WHERE id = $1")
        .bind(account_id)
        .fetch_optional(&mut **tx)
        .await?
        .map(|row| row.try_get("max_running"))
        .transpose()?
        .unwrap_or(0);
    let max_running = usize::try_from(max_running).unwrap_or(0);
    let active: i64 = sqlx::query(
        "SELECT COUNT(*) AS n FROM runs
         WHERE account_id = $1 AND status IN ('queued', 'running') AND lease_state IS NOT NULL",
    )
    .bind(account_id)
    .fetch_one(&mut **tx)
    .await?
    .try_get("n")?;
    Ok(max_running.saturating_sub(usize::try_from(active).unwrap_or(usize::MAX)))
}

#[cfg(test)]
mod tests;
