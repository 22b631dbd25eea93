//! Findings: written as a run ends, in the transaction that stores its end (so a crash
//! cannot keep the end and lose its findings), one row per (account, signature); listed,
//! read and closed through the API. A closed finding seen again is open again.

use iohr_domain::finding::{
    Derived, Finding, FindingKind, FindingRun, FindingStatus, RunFinding, Sighting,
};
// Dynamic SQL here is assembled from constants only; every value is bound.
use sqlx::{Any, AssertSqlSafe, Row, Transaction};

use super::audit::AuditLine;
use super::page::Keyset;
use super::run_row::RunRow;
use super::{Result, Store, StoreError, format_ms, new_id};

#[derive(Debug, Clone, PartialEq)]
pub struct FindingRow {
    pub id: String,
    pub account_id: String,
    pub signature: String,
    pub kind: FindingKind,
    pub subject: String,
    pub title: String,
    pub detail: String,
    pub scenario_id: String,
    pub environment: String,
    pub target: String,
    pub status: FindingStatus,
    pub first_run_id: String,
    pub last_run_id: String,
    pub times_seen: i64,
    pub first_seen_at: i64,
    pub last_seen_at: i64,
    pub closed_at: Option<i64>,
    pub closed_by: Option<String>,
}

impl FindingRow {
    /// As the API serves it; `runs` only where the single finding is asked for.
    pub fn to_api(&self, runs: Option<Vec<FindingRun>>) -> Finding {
        Finding {
            id: self.id.clone(),
            signature: self.signature.clone(),
            kind: self.kind,
            subject: self.subject.clone(),
            title: self.title.clone(),
            detail: self.detail.clone(),
            scenario: self.scenario_id.clone(),
            environment: self.environment.clone(),
            target: self.target.clone(),
            status: self.status,
            first_run: self.first_run_id.clone(),
            last_run: self.last_run_id.clone(),
            times_seen: self.times_seen.max(0) as u64,
            first_seen_at: format_ms(self.first_seen_at),
            last_seen_at: format_ms(self.last_seen_at),
            closed_at: self.closed_at.map(format_ms),
            closed_by: self.closed_by.clone(),
            runs,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct FindingFilter {
    pub status: Option<FindingStatus>,
    /// A scenario id (its name).
    pub scenario: Option<String>,
    pub environment: Option<String>,
    pub limit: u32,
    /// The id of the last finding of the previous page (newest first).
    pub cursor: Option<String>,
}

fn finding_from_row(row: &sqlx::any::AnyRow) -> Result<FindingRow> {
    let corrupt =
        |what: &str, e: &dyn std::fmt::Display| StoreError::Corrupt(format!("{what}: {e}"));
    let kind: String = row.try_get("kind")?;
    let status: String = row.try_get("status")?;
    Ok(FindingRow {
        id: row.try_get("id")?,
        account_id: row.try_get("account_id")?,
        signature: row.try_get("signature")?,
        kind: kind.parse().map_err(|e| corrupt("finding kind", &e))?,
        subject: row.try_get("subject")?,
        title: row.try_get("title")?,
        detail: row.try_get("detail")?,
        scenario_id: row.try_get("scenario_id")?,
        environment: row.try_get("environment")?,
        target: row.try_get("target")?,
        status: status.parse().map_err(|e| corrupt("finding status", &e))?,
        first_run_id: row.try_get("first_run_id")?,
        last_run_id: row.try_get("last_run_id")?,
        times_seen: row.try_get("times_seen")?,
        first_seen_at: row.try_get("first_seen_at")?,
        last_seen_at: row.try_get("last_seen_at")?,
        closed_at: row.try_get("closed_at")?,
        closed_by: row.try_get("closed_by")?,
    })
}

/// Records what an ending run found, inside the transaction that ends it: a new
/// signature creates a finding, a known one is seen again (and reopened when it was
/// closed). `found` comes ordered by signature, so concurrent endings lock findings in
/// one order. `for_update` is the backend's row-lock clause.
pub(super) async fn record_findings(
    tx: &mut Transaction<'_, Any>,
    for_update: &str,
    run: &RunRow,
    found: &[Derived],
    now: i64,
) -> Result<Vec<RunFinding>> {
    let mut seen_by_run = Vec::with_capacity(found.len());
    for derived in found {
        // A conflict means the signature is known: then it is read (and locked) below.
        // On PostgreSQL a concurrent insert of the same signature waits for the other
        // transaction and then conflicts, so two runs never both create it.
        let created = sqlx::query(
            "INSERT INTO findings (id, account_id, signature, kind, subject, title, detail,
                 scenario_id, environment, target, status, first_run_id, last_run_id,
                 times_seen, first_seen_at, last_seen_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'open', $11, $11, 1, $12, $12)
             ON CONFLICT (account_id, signature) DO NOTHING
             RETURNING id",
        )
        .bind(new_id())
        .bind(&run.account_id)
        .bind(&derived.signature)
        .bind(derived.kind.as_str())
        .bind(&derived.subject)
        .bind(&derived.title)
        .bind(&derived.detail)
        .bind(&run.scenario_id)
        .bind(&run.environment)
        .bind(&run.target)
        .bind(&run.id)
        .bind(now)
        .fetch_optional(&mut **tx)
        .await?;
        let (id, seen) = match created {
            Some(row) => (row.try_get::<String, _>("id")?, Sighting::New),
            None => {
                let row = sqlx::query(AssertSqlSafe(format!(
                    "SELECT id, status FROM findings WHERE account_id = $1 AND signature = $2{for_update}"
                )))
                .bind(&run.account_id)
                .bind(&derived.signature)
                .fetch_one(&mut **tx)
                .await?;
                let id: String = row.try_get("id")?;
                let status: String = row.try_get("status")?;
                sqlx::query(
                    "UPDATE findings SET title = $1, detail = $2, last_run_id = $3,
                         times_seen = times_seen + 1, last_seen_at = $4, status = 'open',
                         closed_at = NULL, closed_by = NULL
                     WHERE id = $5",
                )
                .bind(&derived.title)
                .bind(&derived.detail)
                .bind(&run.id)
                .bind(now)
                .bind(&id)
                .execute(&mut **tx)
                .await?;
                let seen = if status == FindingStatus::Closed.as_str() {
                    Sighting::Reopened
                } else {
                    Sighting::SeenAgain
                };
                (id, seen)
            }
        };
        sqlx::query("INSERT INTO run_findings (run_id, finding_id, seen) VALUES ($1, $2, $3)")
            .bind(&run.id)
            .bind(&id)
            .bind(seen.as_str())
            .execute(&mut **tx)
            .await?;
        seen_by_run.push(RunFinding {
            id,
            signature: derived.signature.clone(),
            kind: derived.kind,
            subject: derived.subject.clone(),
            title: derived.title.clone(),
            detail: derived.detail.clone(),
            seen,
        });
    }
    Ok(seen_by_run)
}

impl Store {
    /// A finding of this account; another account's finding is "not found".
    pub async fn finding(&self, account_id: &str, id: &str) -> Result<Option<FindingRow>> {
        let row = sqlx::query("SELECT * FROM findings WHERE id = $1 AND account_id = $2")
            .bind(id)
            .bind(account_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(finding_from_row).transpose()
    }

    /// The runs that saw a finding, newest first, at most `limit`.
    pub async fn finding_runs(&self, finding_id: &str, limit: u32) -> Result<Vec<FindingRun>> {
        let rows = sqlx::query(
            "SELECT run_id, seen FROM run_findings WHERE finding_id = $1
             ORDER BY run_id DESC LIMIT $2",
        )
        .bind(finding_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let seen: String = row.try_get("seen")?;
                Ok(FindingRun {
                    run: row.try_get("run_id")?,
                    seen: Sighting::parse(&seen)
                        .ok_or_else(|| StoreError::Corrupt(format!("sighting {seen:?}")))?,
                })
            })
            .collect()
    }

    /// Newest first (by creation), with the cursor of the next page when there is one.
    pub async fn list_findings(
        &self,
        account_id: &str,
        filter: &FindingFilter,
    ) -> Result<(Vec<FindingRow>, Option<String>)> {
        let mut page = Keyset::new(
            "SELECT * FROM findings WHERE account_id = $1".to_string(),
            account_id,
        );
        page.and("status =", filter.status.map(|s| s.as_str().to_string()));
        page.and("scenario_id =", filter.scenario.clone());
        page.and("environment =", filter.environment.clone());
        page.fetch(
            &self.pool,
            "id",
            filter.cursor.as_deref(),
            filter.limit,
            finding_from_row,
            |f: &FindingRow| &f.id,
        )
        .await
    }

    /// Closes a finding of this account and writes the audit line, in one transaction.
    /// Closing a closed finding changes nothing (its first close stands) but is audited
    /// too. `None` when the account has no such finding.
    pub async fn close_finding(
        &self,
        account_id: &str,
        id: &str,
        actor: &str,
    ) -> Result<Option<FindingRow>> {
        let mut tx = self.write_tx().await?;
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT * FROM findings WHERE id = $1 AND account_id = $2{}",
            self.for_update(None)
        )))
        .bind(id)
        .bind(account_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(mut finding) = row.as_ref().map(finding_from_row).transpose()? else {
            return Ok(None);
        };
        let outcome = if finding.status == FindingStatus::Closed {
            format!("finding {id} was already closed")
        } else {
            let now = super::now_ms();
            sqlx::query(
                "UPDATE findings SET status = 'closed', closed_at = $1, closed_by = $2
                 WHERE id = $3",
            )
            .bind(now)
            .bind(actor)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            finding.status = FindingStatus::Closed;
            finding.closed_at = Some(now);
            finding.closed_by = Some(actor.to_string());
            format!("finding {id} closed")
        };
        let line = AuditLine {
            at: 0,
            actor: actor.to_string(),
            action: "finding.close".to_string(),
            run_id: None,
            targets: Some(finding.target.clone()),
            outcome,
            ..Default::default()
        };
        super::audit::insert_audit(&mut tx, account_id, &line).await?;
        tx.commit().await?;
        Ok(Some(finding))
    }
}

#[cfg(test)]
mod tests;
