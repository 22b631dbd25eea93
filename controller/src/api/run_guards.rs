//! What a new run is checked for before it is stored, beyond its spec: a target in its
//! one normal spelling, a cloud run's target outside the deny-list, an `agent:NAME`
//! executor that names an agent of the account, and why it will wait when no connected
//! agent could take it.

use iohr_domain::target::normalize_target;
use iohr_domain::{Executor, RunKind};

use super::error::ApiError;
use crate::Shared;

/// The target as it is stored and compared (see [`normalize_target`]).
pub fn target(text: &str) -> Result<String, ApiError> {
    normalize_target(text).map_err(|e| ApiError::bad_request("invalid_target", e.to_string()))
}

/// Refuses a cloud run (`executor: cloud`) whose target is a literal address the
/// platform agents' deny-list refuses, 422 `target_not_allowed`: it could only end in
/// their refusal. A host name is judged by the platform agent as it connects.
/// The account's own exceptions (`account allow-target`) count with the process-wide ones.
pub async fn cloud_target(
    shared: &Shared,
    account_id: &str,
    target: &str,
    executor: &Executor,
) -> Result<(), ApiError> {
    if !matches!(executor, Executor::Cloud) {
        return Ok(());
    }
    let Ok(uri) = target.parse::<hyper::Uri>() else {
        return Ok(()); // normalize_target answered first
    };
    let egress = shared.account_egress(account_id).await?;
    egress.check_cloud_target(&uri).map_err(|refusal| {
        ApiError::new(
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "target_not_allowed",
            refusal.to_string(),
        )
    })
}

/// Refuses `agent:NAME` when the account has no such agent: never registered, or removed.
/// An agent that is registered but offline is known (the run waits for it, saying so).
pub async fn known_executor(
    shared: &Shared,
    account_id: &str,
    executor: &Executor,
) -> Result<(), ApiError> {
    let Executor::Agent(name) = executor else {
        return Ok(());
    };
    if shared.store.agent_exists(account_id, name).await? {
        return Ok(());
    }
    let known: Vec<String> = shared
        .store
        .agents(account_id)
        .await?
        .into_iter()
        .map(|a| a.name)
        .collect();
    let known = if known.is_empty() {
        "none".to_string()
    } else {
        known.join(", ")
    };
    Err(ApiError::bad_request(
        "unknown_agent",
        format!(
            "executor agent:{name}: this account has no agent named {name} (its agents: {known})"
        ),
    ))
}

/// Why a run queued now would wait for an agent: none connected could take it.
pub fn waiting_reason(
    shared: &Shared,
    account_id: &str,
    kind: RunKind,
    environment: &str,
    executor: &Executor,
) -> Option<String> {
    shared
        .dispatcher
        .waiting_reason(account_id, executor, environment, kind)
}
