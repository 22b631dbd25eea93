//! Runs and their leases. A lease is the (lease_id, epoch) pair on the run's row: every
//! change an agent asks for names it, and a change naming an old pair does nothing.

// Dynamic SQL here is assembled from constants only; every value is bound.
use sqlx::{AssertSqlSafe, Row};

use super::admission::Verdict;
use super::audit::AuditLine;
use super::page::Keyset;
pub(super) use super::run_row::{
    LEASABLE, LeaseGuard, NewRun, RUN_COLUMNS, RunFilter, RunRow, run_from_row,
};
use super::tx::Tx;
use super::{Result, Store, new_id, now_ms};

impl Tx {
    /// Stores a new run and the audit line of its start, after checking it against its
    /// account's plan (see `admission`): past the queue's bound nothing is stored
    /// ([`super::StoreError::TooManyQueued`]); past the month's unit budget it is stored ended
    /// `refused`, with its reason (what else that ending writes, its `finished` frame and
    /// event, the run-lifecycle layer decides: `runs/start.rs`). With a schedule's fire,
    /// the fire's row is claimed too, so a fire that happened already stores nothing
    /// (`Conflict`). Returns the run and the shares a split run (`agents` > 1) is stored
    /// with: what the dispatcher queues in its place (see `shares.rs`).
    pub async fn insert_new_run(
        &mut self,
        run: &NewRun,
        actor: &str,
        fire: Option<&super::schedules::Fire>,
    ) -> Result<(RunRow, Vec<RunRow>)> {
        let id = new_id();
        let now = now_ms();
        let tx = &mut self.tx;
        if let Some(fire) = fire {
            super::schedules::claim_fire(tx, fire, "started", Some(&id)).await?;
        }
        let verdict =
            super::admission::admit(&self.store, tx, &run.account_id, run.units_reserved, now)
                .await?;
        let (status, reason, ended_at) = match &verdict {
            Verdict::Queue => ("queued", run.reason.clone(), None),
            Verdict::Refuse(why) => ("refused", Some(why.clone()), Some(now)),
        };
        sqlx::query(
            "INSERT INTO runs (id, account_id, kind, scenario_id, scenario_version, environment,
                 target, executor, started_by_type, started_by_id, change_ref, change_commit,
                 change_base, change_forge, status, reason,
                 units_reserved, created_at, confirm_hash, confirm_deadline, ended_at,
                 share_count, baseline_run)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
                 $16, $17, $18, $19, $20, $21, $22, $23)",
        )
        .bind(&id)
        .bind(&run.account_id)
        .bind(run.kind.as_str())
        .bind(&run.scenario_id)
        .bind(&run.scenario_version)
        .bind(&run.environment)
        .bind(&run.target)
        .bind(run.executor.to_string())
        .bind(&run.started_by.kind)
        .bind(&run.started_by.id)
        .bind(&run.started_by.change)
        .bind(&run.started_by.commit)
        .bind(&run.started_by.base)
        .bind(run.started_by.forge.map(|f| f.as_str()))
        .bind(status)
        .bind(&reason)
        .bind(run.units_reserved)
        .bind(now)
        .bind(run.confirmation.as_ref().map(|(hash, _)| hash.clone()))
        .bind(run.confirmation.as_ref().map(|(_, deadline)| *deadline))
        .bind(ended_at)
        .bind((run.agents > 1).then_some(i64::from(run.agents)))
        .bind(&run.baseline_run)
        .execute(&mut **tx)
        .await?;
        let share_ids = if matches!(verdict, Verdict::Queue) && run.agents > 1 {
            super::split_seconds::watch(tx, &id, &run.abort_on).await?;
            super::shares::insert_shares(tx, &id, run, now).await?
        } else {
            Vec::new()
        };
        let line = AuditLine {
            at: now,
            actor: actor.to_string(),
            action: "run.start".to_string(),
            run_id: Some(id.clone()),
            targets: Some(run.target.clone()),
            outcome: status.to_string(),
            schedule_id: fire.map(|f| f.schedule_id.clone()),
            faults: run.faults.clone(),
        };
        super::audit::insert_audit(tx, &run.account_id, &line).await?;
        if let Some(fire) = fire {
            super::schedules::record_started(tx, fire, &id).await?;
            let line = AuditLine {
                at: fire.at,
                action: "schedule.fire".to_string(),
                outcome: format!("started: run {id} {status}"),
                ..line
            };
            super::audit::insert_audit(tx, &run.account_id, &line).await?;
        }
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id WHERE r.id = $1"
        )))
        .bind(&id)
        .fetch_one(&mut **tx)
        .await?;
        let stored = run_from_row(&row)?;
        let mut shares = Vec::with_capacity(share_ids.len());
        for share in &share_ids {
            let row = sqlx::query(AssertSqlSafe(format!(
                "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id WHERE r.id = $1"
            )))
            .bind(share)
            .fetch_one(&mut **tx)
            .await?;
            shares.push(run_from_row(&row)?);
        }
        // A split run is queued as its shares; it is never leased itself.
        let queued: Vec<&str> = if shares.is_empty() {
            vec![id.as_str()]
        } else {
            share_ids.iter().map(String::as_str).collect()
        };
        if status == "queued" && run.confirmation.is_none() {
            for queued in queued {
                self.store
                    .notify(&mut *self.tx, super::QUEUE_CHANNEL, queued)
                    .await?;
            }
        }
        Ok((stored, shares))
    }
}

impl Store {
    pub async fn run(&self, id: &str) -> Result<Option<RunRow>> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id WHERE r.id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    /// A run of this account; another account's run is "not found", never a hint.
    pub async fn run_of_account(&self, account_id: &str, id: &str) -> Result<Option<RunRow>> {
        Ok(self.run(id).await?.filter(|r| r.account_id == account_id))
    }

    /// Newest first, with the cursor of the next page when there is one.
    pub async fn list_runs(
        &self,
        account_id: &str,
        filter: &RunFilter,
    ) -> Result<(Vec<RunRow>, Option<String>)> {
        let mut page = Keyset::new(
            format!(
                "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id
                 WHERE r.account_id = $1 AND r.parent_id IS NULL"
            ),
            account_id,
        );
        page.and("r.status =", filter.status.map(|s| s.as_str().to_string()));
        page.and("r.kind =", filter.kind.map(|k| k.as_str().to_string()));
        page.and("r.environment =", filter.environment.clone());
        page.and("a.name =", filter.agent.clone());
        page.and("r.scenario_id =", filter.scenario.clone());
        page.fetch(
            &self.pool,
            "r.id",
            filter.cursor.as_deref(),
            filter.limit,
            run_from_row,
            |r: &RunRow| &r.id,
        )
        .await
    }

    /// Queued and running runs that are leased (not a split run, whose shares are),
    /// oldest first: what a restarted controller rebuilds from.
    pub async fn unfinished_runs(&self) -> Result<Vec<RunRow>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN agents a ON a.id = r.agent_id
             WHERE r.status IN ('queued', 'running') AND {LEASABLE} ORDER BY r.id"
        )))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    /// Offers a queued run to an agent under a new lease (the epoch goes up by one).
    pub async fn offer_lease(&self, run_id: &str, agent_id: &str) -> Result<Option<LeaseGuard>> {
        offer_to(&self.pool, run_id, agent_id, self.replica).await
    }

    /// The agent accepted: the run is running.
    pub async fn accept_lease(&self, run_id: &str, guard: &LeaseGuard) -> Result<bool> {
        let now = now_ms();
        let accepted = sqlx::query(
            "UPDATE runs SET status = 'running', lease_state = 'accepted', started_at = $1,
                 reason = NULL
             WHERE id = $2 AND lease_id = $3 AND lease_epoch = $4 AND lease_state = 'offered'
                 AND status = 'queued' AND replica = $5
             RETURNING parent_id",
        )
        .bind(now)
        .bind(run_id)
        .bind(&guard.lease_id)
        .bind(guard.epoch as i64)
        .bind(self.replica)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = accepted else {
            return Ok(false);
        };
        if let Some(parent) = row.try_get::<Option<String>, _>("parent_id")? {
            self.start_parent(&parent, now).await?;
        }
        Ok(true)
    }

    /// An offer refused or not answered in time: the run is queued again, unleased.
    pub async fn withdraw_offer(&self, run_id: &str, guard: &LeaseGuard) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE runs SET lease_state = NULL, lease_id = NULL, agent_id = NULL
             WHERE id = $1 AND lease_id = $2 AND lease_epoch = $3 AND lease_state = 'offered'
                 AND replica = $4",
        )
        .bind(run_id)
        .bind(&guard.lease_id)
        .bind(guard.epoch as i64)
        .bind(self.replica)
        .execute(&self.pool)
        .await?;
        let requeued = done.rows_affected() == 1;
        if requeued {
            self.notify(&self.pool, super::QUEUE_CHANNEL, run_id)
                .await?;
        }
        Ok(requeued)
    }

    /// Sets the reason of a run that has not ended (why it waits, who cancelled it).
    pub async fn set_reason(&self, run_id: &str, reason: Option<&str>) -> Result<()> {
        sqlx::query(
            "UPDATE runs SET reason = $1 WHERE id = $2 AND status IN ('queued', 'running')",
        )
        .bind(reason)
        .bind(run_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

/// Offers a queued, unleased run to an agent under a new lease (the epoch goes up by
/// one), tracked by replica `replica`; None when the run was leased or ended meanwhile.
pub(super) async fn offer_to<'e, E>(
    executor: E,
    run_id: &str,
    agent_id: &str,
    replica: i64,
) -> Result<Option<LeaseGuard>>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let lease_id = new_id();
    let row = sqlx::query(
        "UPDATE runs SET lease_epoch = lease_epoch + 1, lease_id = $1, agent_id = $2,
             lease_state = 'offered', replica = $3, cancel_requested = NULL
         WHERE id = $4 AND status = 'queued' AND lease_state IS NULL
         RETURNING lease_epoch",
    )
    .bind(&lease_id)
    .bind(agent_id)
    .bind(replica)
    .bind(run_id)
    .fetch_optional(executor)
    .await?;
    row.map(|row| {
        Ok(LeaseGuard {
            lease_id,
            epoch: row.try_get::<i64, _>("lease_epoch")?.max(0) as u64,
        })
    })
    .transpose()
}
