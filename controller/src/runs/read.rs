//! Reading runs: the account's runs a page at a time and one run as its record, typed, for
//! every surface alike (the REST API answers them as JSON, the console renders them).
//! Another account's run reads as missing, never as forbidden.

use iohr_domain::RunRecord;

use crate::query::Page;
use crate::store::{Result, RunFilter, RunRow, Store, StoreError};

/// The account's runs that pass `filter`, newest first, a page at a time.
pub async fn list(store: &Store, account_id: &str, filter: &RunFilter) -> Result<Page<RunRecord>> {
    let (runs, next_cursor) = store.list_runs(account_id, filter).await?;
    Ok(Page {
        items: runs.iter().map(|r| r.to_record()).collect(),
        next_cursor,
    })
}

/// One run of the account as stored; `NotFound` names it as `run {id}`.
pub async fn owned(store: &Store, account_id: &str, id: &str) -> Result<RunRow> {
    store
        .run_of_account(account_id, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("run {id}")))
}

/// One run of the account as its record (with its result and findings); `NotFound` names
/// it as `run {id}`.
pub async fn get(store: &Store, account_id: &str, id: &str) -> Result<RunRecord> {
    let run = owned(store, account_id, id).await?;
    store.run_record(&run).await
}
