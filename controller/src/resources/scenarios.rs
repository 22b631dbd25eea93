//! Scenarios: a spec stored under a name (checked as a run's inline spec is), the
//! account's scenario names a page at a time, and one name's versions with the runs of
//! each.

use serde::Serialize;
use utoipa::ToSchema;

use crate::runs::start::{MAX_NAME, parse_kind};
use crate::runs::{Refusal, StartError};
use crate::store::{
    Result, Scenario, ScenarioName, ScenarioVersion, Store, StoreError, Stored, format_ms,
};

/// Why a scenario was not stored.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("name must be 1 to {MAX_NAME} characters")]
    InvalidName,
    /// An unknown kind or a spec its kind refuses (`invalid_spec` names the field).
    #[error(transparent)]
    Refused(#[from] StartError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Stores `spec` for `kind` under `name` (the same spec twice is one version; a name
/// given is kept) and says what storing did.
pub async fn create(
    store: &Store,
    account_id: &str,
    name: &str,
    kind: &str,
    spec: &serde_json::Value,
) -> std::result::Result<(Scenario, Stored), CreateError> {
    let kind = parse_kind(kind)?;
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(CreateError::InvalidName);
    }
    iohr_domain::kind::cost(kind, spec, None)
        .map_err(|e| StartError::refused(Refusal::InvalidSpec, e.to_string()))?;
    Ok(store
        .store_scenario(account_id, name, kind.as_str(), spec)
        .await?)
}

/// A scenario name: its kind, how many versions it names and the newest.
#[derive(Debug, Serialize, ToSchema)]
pub struct NameEntry {
    pub id: String,
    #[schema(value_type = iohr_domain::RunKind)]
    pub kind: String,
    pub versions: i64,
    pub latest_version: String,
    pub latest_at: String,
}

/// A page of scenario names, in order.
#[derive(Debug, Serialize, ToSchema)]
pub struct NamePage {
    pub scenarios: Vec<NameEntry>,
    /// The `cursor` of the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// One version a name labels, with the runs of that name and version.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionEntry {
    pub version: String,
    /// When the name was given to this version.
    pub created_at: String,
    pub runs: i64,
    pub last_run: Option<String>,
}

/// A scenario name and its versions, newest first (at most 500).
#[derive(Debug, Serialize, ToSchema)]
pub struct NameVersions {
    pub id: String,
    #[schema(value_type = iohr_domain::RunKind)]
    pub kind: String,
    pub versions: Vec<VersionEntry>,
}

/// The account's scenario names, in order, from after `cursor` (a name).
pub async fn list(
    store: &Store,
    account_id: &str,
    cursor: Option<&str>,
    limit: u32,
) -> Result<NamePage> {
    let (names, next_cursor) = store.list_scenarios(account_id, cursor, limit).await?;
    let scenarios = names
        .into_iter()
        .map(|n: ScenarioName| NameEntry {
            id: n.id,
            kind: n.kind,
            versions: n.versions,
            latest_version: n.latest_version,
            latest_at: format_ms(n.latest_at),
        })
        .collect();
    Ok(NamePage {
        scenarios,
        next_cursor,
    })
}

/// One scenario name's versions, newest first; `NotFound` names it as `scenario {id}`.
pub async fn versions(store: &Store, account_id: &str, id: &str) -> Result<NameVersions> {
    let versions = store.scenario_versions(account_id, id).await?;
    let Some(newest) = versions.first() else {
        return Err(StoreError::NotFound(format!("scenario {id}")));
    };
    let kind = store
        .scenario(account_id, &newest.version)
        .await?
        .map(|s| s.kind)
        .unwrap_or_default();
    let versions = versions
        .into_iter()
        .map(|v: ScenarioVersion| VersionEntry {
            version: v.version,
            created_at: format_ms(v.created_at),
            runs: v.runs,
            last_run: v.last_run,
        })
        .collect();
    Ok(NameVersions {
        id: id.to_string(),
        kind,
        versions,
    })
}
