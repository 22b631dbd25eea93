//! What a new run is checked for before it is stored, beyond its spec: a target in its
//! one normal spelling, a cloud run's target outside the deny-list, an `agent:NAME`
//! executor that names an agent of the account, the secrets its spec names, the plan's
//! limits (length, queue room, agents at once), the confirmation window, and why it will
//! wait when no connected agent could take it.

use std::time::Duration;

use iohr_domain::cost::RunCost;
use iohr_domain::faults::confirmation::{DEFAULT_CONFIRM_WITHIN, MAX_CONFIRM_WITHIN};
use iohr_domain::target::normalize_target;
use iohr_domain::{Executor, RunKind};

use super::error::{Refusal, StartError};
use super::plan::PlannedRun;
use crate::Shared;
use crate::store::Account;

/// The target as it is stored and compared (see [`normalize_target`]).
pub fn target(text: &str) -> Result<String, StartError> {
    normalize_target(text).map_err(|e| StartError::refused(Refusal::InvalidTarget, e.to_string()))
}

/// Refuses a cloud run (`executor: cloud`) whose target is a literal address the
/// platform agents' deny-list refuses (`target_not_allowed`): it could only end in
/// their refusal. A host name is judged by the platform agent as it connects.
/// The account's own exceptions (`account allow-target`) count with the process-wide ones.
pub async fn cloud_target(
    shared: &Shared,
    account_id: &str,
    target: &str,
    executor: &Executor,
) -> Result<(), StartError> {
    if !matches!(executor, Executor::Cloud) {
        return Ok(());
    }
    let Ok(uri) = target.parse::<hyper::Uri>() else {
        return Ok(()); // normalize_target answered first
    };
    let egress = shared.account_egress(account_id).await?;
    egress
        .check_cloud_target(&uri)
        .map_err(|refusal| StartError::refused(Refusal::TargetNotAllowed, refusal.to_string()))
}

/// Refuses `agent:NAME` when the account has no such agent: never registered, or removed.
/// An agent that is registered but offline is known (the run waits for it, saying so).
pub async fn known_executor(
    shared: &Shared,
    account_id: &str,
    executor: &Executor,
) -> Result<(), StartError> {
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
    Err(StartError::refused(
        Refusal::UnknownAgent,
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

/// Every `${secret:NAME}` the spec's headers name is one of the account's secrets
/// (`unknown_secret`, naming them): checked before anything is stored. One deleted
/// after this ends the run when it is leased (`queue/dispatcher/offers.rs`).
pub async fn secrets(
    shared: &Shared,
    account_id: &str,
    spec: &serde_json::Value,
) -> Result<(), StartError> {
    let names = iohr_domain::request::secret_names(spec);
    let missing = shared
        .store
        .missing_account_secrets(account_id, &names)
        .await?;
    if missing.is_empty() {
        return Ok(());
    }
    Err(StartError::refused(
        Refusal::UnknownSecret,
        format!(
            "the spec names account secret {} this account does not have; store it with PUT /v1/reliability/secrets/NAME (reliability:admin)",
            missing.join(", ")
        ),
    ))
}

/// Refuses a run longer than its account's plan allows, naming both and the limit.
pub fn length(kind: RunKind, cost: &RunCost, account: &Account) -> Result<(), StartError> {
    let Some((length, what)) = cost.length else {
        return Ok(());
    };
    let limit = Duration::from_millis(u64::try_from(account.max_run_duration_ms).unwrap_or(0));
    if length <= limit {
        return Ok(());
    }
    Err(StartError::refused(
        Refusal::RunTooLong,
        format!(
            "{what} {} is over this plan's limit of {} for {kind} runs (a plan can raise it: iohr-controller account set-plan --max-run-duration)",
            humantime::format_duration(length),
            humantime::format_duration(limit),
        ),
    ))
}

/// Refuses a new run at once when the account's queue is already full, before anything of
/// it is written; the store decides again as it stores the run.
pub async fn queue_room(shared: &Shared, account: &Account) -> Result<(), StartError> {
    if shared.store.queued_runs(&account.id).await? >= account.max_queued {
        return Err(StartError::TooManyQueued {
            limit: account.max_queued,
        });
    }
    Ok(())
}

/// `agents` checked: a load, replay or capacity run whose connections split over that many
/// agents (`invalid_agents`, the kind's answer in the plan), no more than the plan runs at
/// once and not on one named agent (`agents_not_placeable`), since every share holds an
/// agent of its own.
pub fn agents(
    account: &Account,
    planned: &PlannedRun,
    executor: &Executor,
    agents: Option<u32>,
) -> Result<u32, StartError> {
    let Some(agents) = agents.filter(|n| *n != 1) else {
        return Ok(1);
    };
    if let Some(Err(e)) = &planned.split {
        return Err(StartError::refused(Refusal::InvalidAgents, e.to_string()));
    }
    if matches!(executor, Executor::Agent(_)) {
        return Err(StartError::refused(
            Refusal::AgentsNotPlaceable,
            format!("agents: {agents} shares need {agents} agents; executor names one"),
        ));
    }
    if i64::from(agents) > account.max_running {
        return Err(StartError::refused(
            Refusal::AgentsNotPlaceable,
            format!(
                "agents: {agents} shares run at once and the plan runs at most {} runs at a time",
                account.max_running
            ),
        ));
    }
    Ok(agents)
}

/// How long a run waits for its confirmation: only production faults runs do.
pub fn confirmation_window(
    text: Option<&str>,
    needed: bool,
) -> Result<Option<Duration>, StartError> {
    let invalid = |message: String| StartError::refused(Refusal::InvalidConfirmWithin, message);
    match (text, needed) {
        (None, false) => Ok(None),
        (Some(_), false) => Err(invalid(
            "confirm_within applies only to faults runs in a production environment".into(),
        )),
        (None, true) => Ok(Some(DEFAULT_CONFIRM_WITHIN)),
        (Some(text), true) => {
            let within = humantime::parse_duration(text)
                .map_err(|e| invalid(format!("confirm_within: {e} (such as 30m)")))?;
            if within.is_zero() || within > MAX_CONFIRM_WITHIN {
                return Err(invalid(
                    "confirm_within must be above 0 and at most 24h".into(),
                ));
            }
            Ok(Some(within))
        }
    }
}
