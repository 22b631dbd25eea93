//! Findings: the problems runs found. Another account's finding reads as missing
//! (`NotFound` names it as `finding {id}`).

use iohr_domain::finding::Finding;

use crate::query::Page;
use crate::store::{FindingFilter, Result, Store, StoreError};

/// The runs listed with one finding.
const RUNS_SHOWN: u32 = 100;

fn missing(id: &str) -> StoreError {
    StoreError::NotFound(format!("finding {id}"))
}

/// The account's findings that pass `filter`, a page at a time.
pub async fn list(
    store: &Store,
    account_id: &str,
    filter: &FindingFilter,
) -> Result<Page<Finding>> {
    let (findings, next_cursor) = store.list_findings(account_id, filter).await?;
    Ok(Page {
        items: findings.iter().map(|f| f.to_api(None)).collect(),
        next_cursor,
    })
}

/// One finding with the runs that saw it (the latest [`RUNS_SHOWN`]).
pub async fn get(store: &Store, account_id: &str, id: &str) -> Result<Finding> {
    let finding = store
        .finding(account_id, id)
        .await?
        .ok_or_else(|| missing(id))?;
    let runs = store.finding_runs(&finding.id, RUNS_SHOWN).await?;
    Ok(finding.to_api(Some(runs)))
}

/// Closes one finding of the account; `actor` is who closed it (audit and `closed_by`).
pub async fn close(store: &Store, account_id: &str, id: &str, actor: &str) -> Result<Finding> {
    let finding = store
        .close_finding(account_id, id, actor)
        .await?
        .ok_or_else(|| missing(id))?;
    tracing::info!(finding = %finding.id, %actor, "finding closed");
    Ok(finding.to_api(None))
}
