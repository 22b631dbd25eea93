//! A run's start, one path for every starter (`POST /runs`, a schedule's fire): a
//! [`RunRequest`] is checked against the account and its spec planned once ([`check`]),
//! made into the run to store ([`prepare`]), then stored and queued ([`submit`]:
//! admission, units and audit line in one transaction, the dispatcher's places).

use std::time::Duration;

use iohr_domain::faults::confirmation::confirmation_hash;
use iohr_domain::run::ScenarioRef;
use iohr_domain::{Executor, RunKind, RunStatus, StartedBy};

use super::error::{Refusal, StartError};
use super::plan::{PlannedRun, reads_earlier_run};
use super::{ending, from_run, guards};
use crate::Shared;
use crate::store::{Account, Fire, NewRun, RunRow, Scenario, Store, StoreError, format_ms, now_ms};

/// The longest name, change reference or cancel reason accepted.
pub const MAX_NAME: usize = 200;

/// What a starter asks for: its kind, where, against what, and either an inline `spec` or
/// a stored `scenario` (the API's `CreateRun`, a schedule's stored request).
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    pub kind: String,
    pub environment: String,
    pub target: String,
    pub spec: Option<serde_json::Value>,
    pub scenario: Option<ScenarioRef>,
    pub scenario_name: Option<String>,
    pub executor: Option<String>,
    pub change: Option<String>,
    pub confirm_within: Option<String>,
    pub agents: Option<u32>,
}

/// What a run's request names, checked: the scenario stored, the target and executor
/// parsed, the spec planned. A schedule keeps these and makes a [`NewRun`] of them at each
/// fire.
#[derive(Debug, Clone)]
pub struct CheckedRun {
    pub kind: RunKind,
    pub scenario: Scenario,
    pub target: String,
    pub executor: Executor,
    pub confirm_within: Option<Duration>,
    /// The agents it is split over (1: not split).
    pub agents: u32,
    /// Its spec read once: cost, thresholds, faults.
    pub planned: PlannedRun,
}

impl CheckedRun {
    /// The units the run may spend.
    pub fn units(&self) -> u64 {
        self.planned.cost.units
    }
}

/// A kind named in a request.
pub fn parse_kind(text: &str) -> Result<RunKind, StartError> {
    text.parse().map_err(|e: iohr_domain::run::UnknownWord| {
        StartError::refused(Refusal::UnknownKind, e.to_string())
    })
}

/// Reads and plans a spec for a run (`invalid_spec` names the field).
fn plan(
    kind: RunKind,
    spec: &serde_json::Value,
    target: &str,
    agents: Option<u32>,
) -> Result<PlannedRun, StartError> {
    PlannedRun::of(kind, spec, target, agents)
        .map_err(|e| StartError::refused(Refusal::InvalidSpec, e.to_string()))
}

/// Checks a run's request against the account (its environments, agents, plan), plans its
/// spec once and stores an inline spec as a scenario version. `check_room`: whether the
/// account's queue must have room now (a new run: yes; a new schedule: its fires check).
pub async fn check(
    shared: &Shared,
    account: &Account,
    request: &RunRequest,
    check_room: bool,
) -> Result<CheckedRun, StartError> {
    let kind = parse_kind(&request.kind)?;
    let environments = shared.store.environments(&account.id).await?;
    let Some(environment) = environments.iter().find(|e| e.name == request.environment) else {
        let known: Vec<_> = environments.iter().map(|e| e.name.as_str()).collect();
        return Err(StartError::refused(
            Refusal::UnknownEnvironment,
            format!(
                "environment {:?} does not exist; this account has: {}",
                request.environment,
                known.join(", ")
            ),
        ));
    };
    let needs_confirmation = kind.traits().confirmed_in_production && environment.production;
    let confirm_within =
        guards::confirmation_window(request.confirm_within.as_deref(), needs_confirmation)?;
    let target = guards::target(&request.target)?;
    if target.starts_with("https://") && !kind.traits().https {
        return Err(StartError::refused(
            Refusal::InvalidTarget,
            format!(
                "target: https targets are supported by {} runs only so far; use http://",
                RunKind::listed_where(|t| t.https, "and")
            ),
        ));
    }
    let executor: Executor = match &request.executor {
        None => Executor::Any,
        Some(text) => text.parse().map_err(|e: iohr_domain::run::UnknownWord| {
            StartError::refused(Refusal::InvalidExecutor, e.to_string())
        })?,
    };
    guards::known_executor(shared, &account.id, &executor).await?;
    guards::cloud_target(shared, &account.id, &target, &executor).await?;
    if request.change.as_ref().is_some_and(|c| c.len() > MAX_NAME) {
        return Err(StartError::refused(
            Refusal::InvalidChange,
            format!("change is limited to {MAX_NAME} characters"),
        ));
    }
    if check_room {
        guards::queue_room(shared, account).await?;
    }
    let resolved;
    let spec = match &request.spec {
        Some(spec) if reads_earlier_run(kind, spec) => {
            resolved = from_run::resolve(shared, &account.id, spec).await?;
            Some(&resolved)
        }
        spec => spec.as_ref(),
    };
    let (scenario, planned) = match (spec, &request.scenario) {
        (Some(spec), None) => {
            let planned = plan(kind, spec, &target, request.agents)?;
            guards::secrets(shared, &account.id, spec).await?;
            let name = request
                .scenario_name
                .clone()
                .unwrap_or_else(|| iohr_domain::kind::stored_name(kind, spec));
            if name.is_empty() || name.len() > MAX_NAME {
                return Err(StartError::refused(
                    Refusal::InvalidScenarioName,
                    format!("scenario_name must be 1 to {MAX_NAME} characters"),
                ));
            }
            let stored = shared
                .store
                .put_scenario(&account.id, &name, kind.as_str(), spec)
                .await?;
            (stored, planned)
        }
        (None, Some(reference)) => {
            let found = shared
                .store
                .named_scenario(&account.id, &reference.id, &reference.version)
                .await?
                .ok_or_else(|| {
                    StartError::refused(
                        Refusal::UnknownScenario,
                        format!(
                            "scenario {} version {} does not exist",
                            reference.id, reference.version
                        ),
                    )
                })?;
            if found.kind != kind.as_str() {
                return Err(StartError::refused(
                    Refusal::KindMismatch,
                    format!(
                        "scenario {} is of kind {}, not {kind}",
                        found.id, found.kind
                    ),
                ));
            }
            guards::secrets(shared, &account.id, &found.spec).await?;
            let planned = plan(kind, &found.spec, &target, request.agents)?;
            (found, planned)
        }
        _ => {
            return Err(StartError::refused(
                Refusal::SpecOrScenario,
                "give either spec (inline) or scenario {id, version}, not both or neither",
            ));
        }
    };
    // A faults probe's url must name the run's own target: reported once the scenario is
    // stored, as a plan's other refusals.
    planned
        .on_target
        .clone()
        .map_err(|e| StartError::refused(Refusal::InvalidSpec, e.to_string()))?;
    guards::length(kind, &planned.cost, account)?;
    let agents = guards::agents(account, &planned, &executor, request.agents)?;
    Ok(CheckedRun {
        kind,
        scenario,
        target,
        executor,
        confirm_within,
        agents,
        planned,
    })
}

/// The run a checked request makes now (`now`: Unix ms, the starter's clock).
pub fn prepare(
    shared: &Shared,
    account: &Account,
    request: &RunRequest,
    checked: CheckedRun,
    started_by: StartedBy,
    now: i64,
) -> NewRun {
    let units = checked.units();
    let CheckedRun {
        kind,
        scenario,
        target,
        executor,
        confirm_within,
        agents,
        planned,
    } = checked;
    // What a faults run applies, named on its audit line (providers completed only by
    // the agent's environment are not known here).
    let faults = Some(planned.faults.join(", ")).filter(|names| !names.is_empty());
    let confirmation = confirm_within.map(|within| {
        let hash = confirmation_hash(&scenario.version, &target, &request.environment);
        (hash, now + within.as_millis() as i64)
    });
    // A split run's shares run with `abort_on_fail` off: the controller judges it on the
    // whole.
    let abort_on = if agents > 1 {
        planned.abort_on
    } else {
        Vec::new()
    };
    let reason = match &confirmation {
        Some((hash, deadline)) => Some(format!(
            "waiting for a person's confirmation of {hash} until {} (POST /v1/reliability/runs/ID/confirm)",
            format_ms(*deadline)
        )),
        None => guards::waiting_reason(shared, &account.id, kind, &request.environment, &executor),
    };
    NewRun {
        account_id: account.id.clone(),
        kind,
        scenario_id: scenario.id,
        scenario_version: scenario.version,
        environment: request.environment.clone(),
        target,
        executor,
        started_by,
        units_reserved: units as i64,
        reason,
        confirmation,
        faults,
        agents,
        abort_on,
        baseline_run: None,
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
) -> Result<RunRow, StartError> {
    // The dispatcher's places (one per share of a split run) are taken before the
    // commit (`busy` when its queue is full), so the sends after it cannot fail and
    // nothing is stored unannounced.
    let slots = match &new.confirmation {
        None => (0..new.agents.max(1))
            .map(|_| shared.dispatcher.reserve())
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => Vec::new(),
    };
    let (run, shares) = store_run(&shared.store, new, actor, fire).await?;
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

/// Stores a run in one transaction (admission, units, its audit line; a fire's row; a
/// split run's shares): a run the plan refuses at the door is stored ended, so its
/// ending is written with it, as any ending's (`ending.rs`): its `finished` frame and
/// its `run.finished` event. Returns the run and its shares.
pub async fn store_run(
    store: &Store,
    new: &NewRun,
    actor: &str,
    fire: Option<&Fire>,
) -> Result<(RunRow, Vec<RunRow>), StoreError> {
    let mut tx = store.begin().await?;
    let (run, shares) = tx.insert_new_run(new, actor, fire).await?;
    if run.status.is_finished() {
        let now = run.ended_at.unwrap_or_else(now_ms);
        let frames = ending::last_frames(&run.id, 0, &[], run.status, run.reason.as_deref(), now);
        tx.append_frames(&run.id, 0, &frames, false).await?;
        let events = ending::ending_events(&run, run.status, &[]);
        tx.insert_events(&run.account_id, &events, now).await?;
    }
    tx.commit().await?;
    Ok((run, shares))
}

/// [`store_run`] for a run of no schedule: the run.
pub async fn insert_run(store: &Store, new: &NewRun, actor: &str) -> Result<RunRow, StoreError> {
    Ok(store_run(store, new, actor, None).await?.0)
}

/// A run started in one step: checked (with the queue's room), prepared at `now` and
/// submitted; what a schedule's fire does.
pub async fn start(
    shared: &Shared,
    account: &Account,
    request: &RunRequest,
    started_by: StartedBy,
    actor: &str,
    now: i64,
    fire: Option<&Fire>,
) -> Result<RunRow, StartError> {
    let checked = check(shared, account, request, true).await?;
    let new = prepare(shared, account, request, checked, started_by, now);
    submit(shared, account, &new, actor, fire).await
}
