//! Starting a run from the console: a stored scenario version against an environment and
//! a target (the scenario page's form), or a run's own request again (the run page's).
//! Both post here, CSRF-checked, for a person with `reliability:run`, and go through the
//! run-lifecycle layer's one start ([`crate::runs::start`]) as `POST /runs` and a
//! schedule's fire do: the same checks, queue and refusals (shown as a page with their
//! code). The new run's page follows.

use axum::Form;
use axum::extract::State;
use axum::extract::rejection::FormRejection;
use axum::response::{IntoResponse, Redirect};
use iohr_domain::run::ScenarioRef;
use iohr_domain::{RunRecord, StartedBy};
use maud::{Markup, html};
use serde::Deserialize;

use super::ConsoleState;
use super::layout::PageResult;
use super::runs::given;
use super::session::{Viewer, form_csrf};
use crate::auth::RunScope;
use crate::error::ApiError;
use crate::runs::start::{MAX_NAME, RunRequest};

/// The form's fields: a stored scenario version and where to run it.
#[derive(Debug, Default, Deserialize)]
pub struct StartForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    scenario: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    environment: String,
    #[serde(default)]
    target: String,
    #[serde(default)]
    executor: String,
    #[serde(default)]
    change: String,
}

/// `POST /runs/start`: the CSRF token first, then the scope, then the layer's checks.
pub async fn start(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    form: Result<Form<StartForm>, FormRejection>,
) -> PageResult {
    let form = form_csrf(&viewer, form, |f: &StartForm| &f.csrf)?;
    let caller = viewer.caller::<RunScope>()?;
    for (name, value) in [("scenario", &form.scenario), ("version", &form.version)] {
        if value.trim().is_empty() || value.len() > MAX_NAME * 2 {
            return Err(ApiError::bad_request(
                "invalid_form",
                format!("{name}: give the stored scenario's {name}"),
            )
            .into());
        }
    }
    let request = RunRequest {
        kind: form.kind.trim().to_string(),
        environment: form.environment.trim().to_string(),
        target: form.target.trim().to_string(),
        spec: None,
        scenario: Some(ScenarioRef {
            id: form.scenario.trim().to_string(),
            version: form.version.trim().to_string(),
        }),
        scenario_name: None,
        executor: given(&form.executor),
        change: given(&form.change),
        confirm_within: None,
        agents: None,
    };
    let started_by = StartedBy {
        kind: "person".into(),
        id: viewer.person().to_string(),
        change: request.change.clone(),
        commit: None,
        base: None,
        forge: None,
    };
    let account = &caller.0.account;
    let run = crate::runs::start::start(
        &state.shared,
        account,
        &request,
        started_by,
        &caller.actor(),
        crate::store::now_ms(),
        None,
    )
    .await
    .map_err(ApiError::from)?;
    tracing::info!(run = %run.id, account = %account.name, person = %viewer.person(), "run started from the console");
    Ok(Redirect::to(&format!("/runs/{}", run.id)).into_response())
}

/// The run page's form: this run's stored scenario version, kind, environment, target
/// and executor again; the change may be edited.
pub fn again_form(viewer: &Viewer, run: &RunRecord) -> Markup {
    html! {
        form #again.start method="post" action="/runs/start" {
            input type="hidden" name="csrf" value=(viewer.csrf());
            input type="hidden" name="kind" value=(run.kind.as_str());
            input type="hidden" name="scenario" value=(run.scenario.id);
            input type="hidden" name="version" value=(run.scenario.version);
            input type="hidden" name="environment" value=(run.environment);
            input type="hidden" name="target" value=(run.target);
            input type="hidden" name="executor" value=(run.executor.to_string());
            label { "Change " input name="change" value=(run.started_by.change.as_deref().unwrap_or("")) maxlength=(MAX_NAME); }
            button type="submit" { "Start it again" }
        }
    }
}

/// The scenario page's form: one of its versions against an environment and target.
pub fn new_run_form(
    viewer: &Viewer,
    kind: &str,
    scenario: &str,
    versions: &[&str],
    target: &str,
) -> Markup {
    html! {
        form #start.start method="post" action="/runs/start" {
            input type="hidden" name="csrf" value=(viewer.csrf());
            input type="hidden" name="kind" value=(kind);
            input type="hidden" name="scenario" value=(scenario);
            label { "Version "
                select name="version" {
                    @for v in versions { option value=(v) { (super::runs::short_version(v)) } }
                }
            }
            label { "Environment " input name="environment" value="staging" required; }
            label { "Target " input name="target" value=(target) placeholder="http://host:port" required; }
            label { "Executor " input name="executor" value="any"; }
            label { "Change " input name="change" maxlength=(MAX_NAME) placeholder="owner/repo#12"; }
            button type="submit" { "Start a run" }
        }
    }
}
