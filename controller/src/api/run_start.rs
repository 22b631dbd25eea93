//! `POST /runs`' body and its adapter over the run-lifecycle layer (`crate::runs::start`):
//! the body translated into a [`RunRequest`], the layer's refusals into an [`ApiError`] of
//! the same code. A new schedule checks its run here too.

use iohr_domain::run::ScenarioRef;
use iohr_domain::{RunKind, StartedBy};
use serde::Deserialize;

use super::error::ApiError;
use crate::Shared;
pub use crate::runs::start::MAX_NAME;
use crate::runs::start::{self as layer, CheckedRun, RunRequest};
use crate::store::{Account, Fire, NewRun, RunRow};

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

impl From<&CreateRun> for RunRequest {
    fn from(body: &CreateRun) -> RunRequest {
        RunRequest {
            kind: body.kind.clone(),
            environment: body.environment.clone(),
            target: body.target.clone(),
            spec: body.spec.clone(),
            scenario: body.scenario.clone(),
            scenario_name: body.scenario_name.clone(),
            executor: body.executor.clone(),
            change: body.change.clone(),
            confirm_within: body.confirm_within.clone(),
            agents: body.agents,
        }
    }
}

/// A kind named in a request body.
pub fn parse_kind(text: &str) -> Result<RunKind, ApiError> {
    Ok(layer::parse_kind(text)?)
}

/// What a run's request names, checked (see [`CheckedRun`]).
pub type Checked = CheckedRun;

/// Checks a run's request ([`layer::check`]).
pub async fn check(
    shared: &Shared,
    account: &Account,
    body: &CreateRun,
    check_room: bool,
) -> Result<Checked, ApiError> {
    Ok(layer::check(shared, account, &body.into(), check_room).await?)
}

/// The run a checked request makes now ([`layer::prepare`]).
pub fn prepare(
    shared: &Shared,
    account: &Account,
    body: &CreateRun,
    checked: Checked,
    started_by: StartedBy,
    now: i64,
) -> NewRun {
    layer::prepare(shared, account, &body.into(), checked, started_by, now)
}

/// Stores and queues a run ([`layer::submit`]).
pub async fn submit(
    shared: &Shared,
    account: &Account,
    new: &NewRun,
    actor: &str,
    fire: Option<&Fire>,
) -> Result<RunRow, ApiError> {
    Ok(layer::submit(shared, account, new, actor, fire).await?)
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
            commit: None,
            base: None,
            forge: None,
        },
        None => StartedBy {
            kind: "token".into(),
            id: token_id.to_string(),
            change,
            commit: None,
            base: None,
            forge: None,
        },
    }
}
