//! A run's start, one path for every starter: `POST /runs` and a schedule's fire both turn
//! a [`CreateRun`] into a [`NewRun`] with [`prepare`] (validation, plan limits) and store
//! and queue it with [`submit`] (admission, units, audit line, the dispatcher's slot).

use std::time::Duration;

use iohr_domain::faults::Experiment;
use iohr_domain::faults::confirmation::{
    DEFAULT_CONFIRM_WITHIN, MAX_CONFIRM_WITHIN, confirmation_hash,
};
use iohr_domain::replay::{LoggedRequest, ReplaySpec};
use iohr_domain::run::ScenarioRef;
use iohr_domain::scenario_kind::ScenarioSpec;
use iohr_domain::{Executor, RunKind, RunStatus, StartedBy};
use serde::Deserialize;

use super::error::ApiError;
use super::run_guards;
use crate::Shared;
use crate::store::{Account, Fire, NewRun, RunRow, Scenario, format_ms};

/// A new run: its kind, where, against what, and either an inline `spec` or a stored
/// `scenario`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    #[schema(value_type = RunKind)]
    pub kind: String,
    /// One of the account's environments (`staging`, `production`).
    pub environment: String,
    /// The service under test, `http://host:port` (https for load, replay and capacity).
    pub target: String,
    /// The kind's spec, inline: its fields are the kind's (docs/checks, docs/load.md,
    /// docs/scenario.md, docs/faults.md, docs/capacity.md), checked at this POST
    /// (`invalid_spec` names the field).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub spec: Option<serde_json::Value>,
    #[serde(default)]
    pub scenario: Option<ScenarioRef>,
    /// The name an inline spec is stored under (default `inline-KIND`).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200)]
    pub scenario_name: Option<String>,
    /// `any` (default), `cloud` or `agent:NAME`.
    #[serde(default)]
    #[schema(pattern = "^(any|cloud|agent:.+)$")]
    pub executor: Option<String>,
    /// The change the run is for, such as `core#212`.
    #[serde(default)]
    #[schema(max_length = 200)]
    pub change: Option<String>,
    /// How long a production faults run waits for a person's confirmation (`30m`; default
    /// 1 h, at most 24 h).
    #[serde(default)]
    pub confirm_within: Option<String>,
    /// Load, replay and capacity runs: the agents the run is split over, each sending its share of
    /// the schedule (1 to 64, default 1). Placement, not part of the spec or its version:
    /// the run waits until that many agents can take it at once, and its result is
    /// theirs merged.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 64)]
    pub agents: Option<u32>,
}

/// The longest name, change reference or cancel reason accepted.
pub const MAX_NAME: usize = 200;

/// A kind named in a request body.
pub fn parse_kind(text: &str) -> Result<RunKind, ApiError> {
    text.parse().map_err(|e: iohr_domain::run::UnknownWord| {
        ApiError::bad_request("unknown_kind", e.to_string())
    })
}

/// Validates a spec for its kind; returns the units the run may spend.
pub fn validate_spec(kind: RunKind, spec: &serde_json::Value) -> Result<u64, ApiError> {
    super::limits::spec_cost(kind, spec, None).map(|cost| cost.units)
}

/// A replay `from_run`: the earlier scenario run of this account (finished), its spec's
/// operations and its record's request log, written into the spec the run stores, so the
/// replay is self-contained and two replays of one run are one scenario version.
async fn resolve_replay(
    shared: &Shared,
    account_id: &str,
    spec: &serde_json::Value,
) -> Result<serde_json::Value, ApiError> {
    let invalid = |m: String| ApiError::bad_request("invalid_spec", m);
    let replay = ReplaySpec::from_json(spec).map_err(|e| invalid(e.to_string()))?;
    let from = replay.from_run.clone().unwrap_or_default();
    let earlier = shared
        .store
        .run_of_account(account_id, &from)
        .await?
        .ok_or_else(|| invalid(format!("spec.from_run: run {from:?} does not exist")))?;
    if earlier.kind != RunKind::Scenario || !earlier.status.is_finished() {
        return Err(invalid(format!(
            "spec.from_run: run {from} is a {} run that is {}; a replay takes a finished scenario run",
            earlier.kind, earlier.status
        )));
    }
    let log: Vec<LoggedRequest> = earlier
        .result
        .as_ref()
        .and_then(|r| r.get("requests"))
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .filter(|log: &Vec<LoggedRequest>| !log.is_empty())
        .ok_or_else(|| invalid(format!("spec.from_run: run {from} recorded no requests")))?;
    let stored = shared
        .store
        .scenario(account_id, &earlier.scenario_version)
        .await?
        .ok_or_else(|| invalid(format!("spec.from_run: the scenario of run {from} is gone")))?;
    let scenario = ScenarioSpec::from_json(&stored.spec).map_err(|e| invalid(e.to_string()))?;
    let resolved = replay.resolve_from_scenario(&scenario, log);
    serde_json::to_value(&resolved).map_err(|e| invalid(e.to_string()))
}

/// Who starts a run: its `started_by` and the actor its audit line names.
#[derive(Debug, Clone)]
pub struct Starter {
    pub started_by: StartedBy,
    pub actor: String,
}

/// What a run's request names, checked: the scenario stored, the target and executor
/// parsed. A schedule keeps these and makes a [`NewRun`] of them at each fire.
#[derive(Debug, Clone)]
pub struct Checked {
    pub kind: RunKind,
    pub scenario: Scenario,
    pub target: String,
    pub executor: Executor,
    pub confirm_within: Option<Duration>,
    /// The units the run may spend.
    pub units: u64,
    /// The agents it is split over (1: not split).
    pub agents: u32,
}

/// Checks a run's request against the account (its environments, agents, plan) and stores
/// an inline spec as a scenario version. `check_room`: whether the account's queue must
/// have room now (a new run: yes; a new schedule: its fires check).
pub async fn check(
    shared: &Shared,
    account: &Account,
    body: &CreateRun,
    check_room: bool,
) -> Result<Checked, ApiError> {
    let kind = parse_kind(&body.kind)?;
    let environments = shared.store.environments(&account.id).await?;
    let Some(environment) = environments.iter().find(|e| e.name == body.environment) else {
        let known: Vec<_> = environments.iter().map(|e| e.name.as_str()).collect();
        return Err(ApiError::bad_request(
            "unknown_environment",
            format!(
                "environment {:?} does not exist; this account has: {}",
                body.environment,
                known.join(", ")
            ),
        ));
    };
    let needs_confirmation = kind.traits().confirmed_in_production && environment.production;
    let confirm_within = confirmation_window(body.confirm_within.as_deref(), needs_confirmation)?;
    let target = run_guards::target(&body.target)?;
    if target.starts_with("https://") && !kind.traits().https {
        return Err(ApiError::bad_request(
            "invalid_target",
            "target: https targets are supported by load, replay and capacity runs only so far; use http://",
        ));
    }
    let executor: Executor = match &body.executor {
        None => Executor::Any,
        Some(text) => text.parse().map_err(|e: iohr_domain::run::UnknownWord| {
            ApiError::bad_request("invalid_executor", e.to_string())
        })?,
    };
    run_guards::known_executor(shared, &account.id, &executor).await?;
    run_guards::cloud_target(shared, &account.id, &target, &executor).await?;
    if body.change.as_ref().is_some_and(|c| c.len() > MAX_NAME) {
        return Err(ApiError::bad_request(
            "invalid_change",
            format!("change is limited to {MAX_NAME} characters"),
        ));
    }
    if check_room {
        super::limits::check_queue_room(shared, account).await?;
    }
    let resolved;
    let spec = match (kind, &body.spec) {
        (RunKind::Replay, Some(spec)) if spec.get("from_run").is_some() => {
            resolved = resolve_replay(shared, &account.id, spec).await?;
            Some(&resolved)
        }
        (_, spec) => spec.as_ref(),
    };
    let scenario = match (spec, &body.scenario) {
        (Some(spec), None) => {
            validate_spec(kind, spec)?;
            check_secrets(shared, &account.id, spec).await?;
            let name = body
                .scenario_name
                .clone()
                .unwrap_or_else(|| format!("inline-{kind}"));
            if name.is_empty() || name.len() > MAX_NAME {
                return Err(ApiError::bad_request(
                    "invalid_scenario_name",
                    format!("scenario_name must be 1 to {MAX_NAME} characters"),
                ));
            }
            shared
                .store
                .put_scenario(&account.id, &name, kind.as_str(), spec)
                .await?
        }
        (None, Some(reference)) => {
            let found = shared
                .store
                .named_scenario(&account.id, &reference.id, &reference.version)
                .await?
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "unknown_scenario",
                        format!(
                            "scenario {} version {} does not exist",
                            reference.id, reference.version
                        ),
                    )
                })?;
            if found.kind != kind.as_str() {
                return Err(ApiError::bad_request(
                    "kind_mismatch",
                    format!(
                        "scenario {} is of kind {}, not {kind}",
                        found.id, found.kind
                    ),
                ));
            }
            check_secrets(shared, &account.id, &found.spec).await?;
            found
        }
        _ => {
            return Err(ApiError::bad_request(
                "spec_or_scenario",
                "give either spec (inline) or scenario {id, version}, not both or neither",
            ));
        }
    };
    // A faults probe's url must name the run's own target.
    let cost = super::limits::spec_cost(kind, &scenario.spec, Some(&target))?;
    super::limits::check_length(kind, &cost, account)?;
    let agents = check_agents(account, kind, &scenario.spec, &executor, body.agents)?;
    Ok(Checked {
        kind,
        scenario,
        target,
        executor,
        confirm_within,
        units: cost.units,
        agents,
    })
}

/// Every `${secret:NAME}` the spec's headers name is one of the account's secrets
/// (`unknown_secret`, 422, naming them): checked before anything is stored. One deleted
/// after this ends the run when it is leased (`queue/dispatcher/offers.rs`).
async fn check_secrets(
    shared: &Shared,
    account_id: &str,
    spec: &serde_json::Value,
) -> Result<(), ApiError> {
    let names = iohr_domain::request::secret_names(spec);
    let missing = shared
        .store
        .missing_account_secrets(account_id, &names)
        .await?;
    if missing.is_empty() {
        return Ok(());
    }
    Err(ApiError::new(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        "unknown_secret",
        format!(
            "the spec names account secret {} this account does not have; store it with PUT /v1/reliability/secrets/NAME (reliability:admin)",
            missing.join(", ")
        ),
    ))
}

/// `agents` checked: a load, replay or capacity run whose connections split over that many agents
/// (`invalid_agents`), no more than the plan runs at once and not on one named agent
/// (`agents_not_placeable`), since every share holds an agent of its own.
fn check_agents(
    account: &Account,
    kind: RunKind,
    spec: &serde_json::Value,
    executor: &Executor,
    agents: Option<u32>,
) -> Result<u32, ApiError> {
    let Some(agents) = agents.filter(|n| *n != 1) else {
        return Ok(1);
    };
    iohr_domain::kind::check_split(kind, spec, agents)
        .map_err(|e| ApiError::bad_request("invalid_agents", e.to_string()))?;
    if matches!(executor, Executor::Agent(_)) {
        return Err(ApiError::bad_request(
            "agents_not_placeable",
            format!("agents: {agents} shares need {agents} agents; executor names one"),
        ));
    }
    if i64::from(agents) > account.max_running {
        return Err(ApiError::bad_request(
            "agents_not_placeable",
            format!(
                "agents: {agents} shares run at once and the plan runs at most {} runs at a time",
                account.max_running
            ),
        ));
    }
    Ok(agents)
}

/// The run a checked request makes now (`now`: Unix ms, the starter's clock).
pub fn prepare(
    shared: &Shared,
    account: &Account,
    body: &CreateRun,
    checked: Checked,
    started_by: StartedBy,
    now: i64,
) -> NewRun {
    let Checked {
        kind,
        scenario,
        target,
        executor,
        confirm_within,
        units,
        agents,
    } = checked;
    // What a faults run applies, named on its audit line (providers completed only by
    // the agent's environment are not known here).
    let faults = (kind == RunKind::Faults)
        .then(|| Experiment::from_json(&scenario.spec).ok())
        .flatten()
        .map(|experiment| experiment.fault_names().join(", "))
        .filter(|names| !names.is_empty());
    let confirmation = confirm_within.map(|within| {
        let hash = confirmation_hash(&scenario.version, &target, &body.environment);
        (hash, now + within.as_millis() as i64)
    });
    // A split run's shares run with `abort_on_fail` off: the store judges it on the whole.
    let abort_on = if agents > 1 {
        iohr_domain::kind::abort_thresholds(kind, &scenario.spec)
    } else {
        Vec::new()
    };
    let reason = match &confirmation {
        Some((hash, deadline)) => Some(format!(
            "waiting for a person's confirmation of {hash} until {} (POST /v1/reliability/runs/ID/confirm)",
            format_ms(*deadline)
        )),
        None => run_guards::waiting_reason(shared, &account.id, kind, &body.environment, &executor),
    };
    NewRun {
        account_id: account.id.clone(),
        kind,
        scenario_id: scenario.id,
        scenario_version: scenario.version,
        environment: body.environment.clone(),
        target,
        executor,
        started_by,
        units_reserved: units as i64,
        reason,
        confirmation,
        faults,
        agents,
        abort_on,
    }
}

/// Stores a run (admission, units and its audit line in one transaction; a fire's row
/// with it) and hands it to the dispatcher.
pub async fn submit(
    shared: &Shared,
    account: &Account,
    new: &NewRun,
    actor: &str,
    fire: Option<&Fire>,
) -> Result<RunRow, ApiError> {
    // The dispatcher's places (one per share of a split run) are taken before the
    // commit (503 `busy` when its queue is full), so the sends after it cannot fail and
    // nothing is stored unannounced.
    let slots = match &new.confirmation {
        None => (0..new.agents.max(1))
            .map(|_| shared.dispatcher.reserve())
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => Vec::new(),
    };
    let (run, shares) = shared.store.insert_new_run(new, actor, fire).await?;
    if run.status == RunStatus::Refused {
        // Over the month's unit budget: stored ended, with its reason.
        tracing::info!(run = %run.id, account = %account.name, reason = ?run.reason, "run refused by the plan");
    } else if slots.is_empty() {
        // Queued only once a person confirms it (see `confirm`); the dispatcher ends it
        // `refused` if nobody does in time.
        tracing::info!(run = %run.id, account = %account.name, "production faults run waits for a confirmation");
    } else {
        // No await between the commit and this: a client gone now cannot leave a stored
        // run the dispatcher does not know. A split run is queued as its shares.
        let queued = if shares.is_empty() {
            std::slice::from_ref(&run)
        } else {
            shares.as_slice()
        };
        for (slot, queued) in slots.into_iter().zip(queued) {
            slot.run_queued(queued, account.max_running);
        }
        tracing::info!(run = %run.id, kind = %new.kind, agents = new.agents, account = %account.name, "run queued");
    }
    Ok(run)
}

/// The `started_by` of a run POSTed by this caller: the person, else the token.
pub fn started_by_caller(
    person: Option<&str>,
    token_id: &str,
    change: Option<String>,
) -> StartedBy {
    match person {
        Some(person) => StartedBy {
            kind: "person".into(),
            id: person.to_string(),
            change,
        },
        None => StartedBy {
            kind: "token".into(),
            id: token_id.to_string(),
            change,
        },
    }
}

/// How long a run waits for its confirmation: only production faults runs do.
pub fn confirmation_window(text: Option<&str>, needed: bool) -> Result<Option<Duration>, ApiError> {
    let invalid = |message: String| ApiError::bad_request("invalid_confirm_within", message);
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
