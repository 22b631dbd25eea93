//! Triggers: the account's triggers as records, made, paused or resumed, and deleted with
//! their audit lines, and a trigger's delivery log. What a new trigger holds is checked
//! by the surface that took it (`api/triggers.rs`); its deliveries are taken by the
//! trigger surface (`crate::trigger`).

use iohr_domain::RunKind;
use iohr_domain::run::ScenarioRef;
use serde::{Deserialize, Serialize};

pub mod substitute;

use crate::store::{
    NewTrigger, Result, Store, StoreError, TriggerDelivery, TriggerRow, format_ms, now_ms,
};

/// Where a trigger's deliveries are sent, under the API's address.
pub fn delivery_path(id: &str) -> String {
    format!("/v1/reliability/triggers/{id}/deliveries")
}

/// How a trigger's after-run finds its baseline (`runs/baseline.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BaselineRule {
    /// How far back a passed run on the base branch counts, as `7d`.
    pub window: String,
    /// Where a baseline may have run besides the run's own target (and where a fresh
    /// before-run goes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_target: Option<String>,
    /// Whether a before-run on the base branch is started beside each after-run.
    pub fresh_baseline: bool,
}

/// A trigger as the API shows it (never its secret). Times are RFC 3339 UTC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TriggerRecord {
    pub id: String,
    pub name: String,
    /// `github`, `gitlab` or `generic`.
    pub source: String,
    pub enabled: bool,
    /// Where the forge sends deliveries, under the API's address.
    pub delivery_path: String,
    #[schema(value_type = RunKind)]
    pub kind: String,
    pub scenario: ScenarioRef,
    pub environment: String,
    /// May hold `{pr}`, `{sha}` and `{branch}`.
    pub target: String,
    pub executor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_within: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<u32>,
    pub baseline: BaselineRule,
    pub created_by: String,
    pub created_at: String,
    pub last_delivery_at: Option<String>,
    pub last_run: Option<String>,
}

/// One delivery of the log: the outcome and why, never the body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeliveryRecord {
    pub delivery_id: String,
    pub at: String,
    pub event: String,
    /// `starting`, `started`, `ignored` or `refused`.
    pub outcome: String,
    pub reason: Option<String>,
    pub run: Option<String>,
    pub baseline_run: Option<String>,
}

/// A window as people write it.
pub fn format_window(ms: i64) -> String {
    humantime::format_duration(std::time::Duration::from_millis(ms.max(0) as u64)).to_string()
}

pub fn record(row: &TriggerRow) -> TriggerRecord {
    TriggerRecord {
        id: row.id.clone(),
        name: row.name.clone(),
        source: row.source.clone(),
        enabled: row.enabled,
        delivery_path: delivery_path(&row.id),
        kind: row.kind.clone(),
        scenario: ScenarioRef {
            id: row.scenario_id.clone(),
            version: row.scenario_version.clone(),
        },
        environment: row.environment.clone(),
        target: row.target.clone(),
        executor: row.executor.clone(),
        confirm_within: row.confirm_within.clone(),
        agents: row.agents,
        baseline: BaselineRule {
            window: format_window(row.window_ms),
            base_target: row.base_target.clone(),
            fresh_baseline: row.fresh_baseline,
        },
        created_by: row.created_by.clone(),
        created_at: format_ms(row.created_at),
        last_delivery_at: row.last_delivery_at.map(format_ms),
        last_run: row.last_run_id.clone(),
    }
}

fn delivery_record(delivery: &TriggerDelivery) -> DeliveryRecord {
    DeliveryRecord {
        delivery_id: delivery.delivery_id.clone(),
        at: format_ms(delivery.at),
        event: delivery.event.clone(),
        outcome: delivery.outcome.clone(),
        reason: delivery.reason.clone(),
        run: delivery.run_id.clone(),
        baseline_run: delivery.baseline_run_id.clone(),
    }
}

/// Stores a checked trigger.
pub async fn create(store: &Store, new: &NewTrigger) -> Result<TriggerRecord> {
    let row = store.insert_trigger(new, now_ms()).await?;
    Ok(record(&row))
}

/// The account's triggers.
pub async fn list(store: &Store, account_id: &str) -> Result<Vec<TriggerRecord>> {
    Ok(store
        .triggers(account_id)
        .await?
        .iter()
        .map(record)
        .collect())
}

/// One trigger of the account as stored; `NotFound` names it as `trigger {id}`.
pub async fn row(store: &Store, account_id: &str, id: &str) -> Result<TriggerRow> {
    store
        .trigger(account_id, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("trigger {id}")))
}

/// Pauses or resumes one trigger of the account.
pub async fn set_enabled(
    store: &Store,
    account_id: &str,
    id: &str,
    enabled: bool,
    actor: &str,
) -> Result<TriggerRecord> {
    let row = store
        .set_trigger_enabled(account_id, id, enabled, actor, now_ms())
        .await?;
    Ok(record(&row))
}

/// Deletes one trigger of the account (the runs it started stay).
pub async fn delete(store: &Store, account_id: &str, id: &str, actor: &str) -> Result<()> {
    store.delete_trigger(account_id, id, actor, now_ms()).await
}

/// One trigger's delivery log, newest first.
pub async fn deliveries(store: &Store, account_id: &str, id: &str) -> Result<Vec<DeliveryRecord>> {
    row(store, account_id, id).await?;
    Ok(store
        .trigger_deliveries(id)
        .await?
        .iter()
        .map(delivery_record)
        .collect())
}
