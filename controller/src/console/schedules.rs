//! The Schedules page: each schedule's expression, next fires, skips and last run, and
//! pausing or resuming one (`reliability:run`, as `PATCH /v1/reliability/schedules/{id}`).

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect};
use maud::html;

use super::ConsoleState;
use super::layout::{Extras, PageResult, page};
use super::runs::short;
use super::session::{CsrfOnly, Viewer, form_csrf};
use super::value::short_time;
use crate::auth::{ReadScope, RunScope};

pub async fn list_page(State(state): State<ConsoleState>, viewer: Viewer) -> PageResult {
    let caller = viewer.caller::<ReadScope>()?;
    let schedules =
        crate::resources::schedules::list(&state.shared.store, caller.account_id()).await?;
    let body = html! {
        table #schedules {
            thead { tr { th { "Schedule" } th { "Cron (UTC)" } th { "Kind" } th { "Scenario" } th { "Environment" }
                         th { "Next fires" } th { "Skipped" } th { "Last skip" } th { "Last run" } th {} } }
            tbody {
                @for s in &schedules {
                    @let id = &s.id;
                    @let enabled = s.enabled;
                    @let last_run = s.last_run.as_deref().unwrap_or("");
                    tr data-schedule-id=(id) data-enabled=(enabled) {
                        td { (s.name) @if !enabled { " " small.paused { "paused" } } }
                        td { code { (s.cron) } }
                        td { (s.kind) }
                        td { (s.scenario.id) }
                        td { (s.environment) }
                        td.next { @for at in s.next_fires.iter().take(3) { (at.get(..16).unwrap_or("").replace('T', " ")) br; } }
                        td.skipped { (s.skipped) }
                        td { (short_time(s.last_skipped_at.as_deref().unwrap_or(""))) }
                        td { @if !last_run.is_empty() { a href=(format!("/runs/{last_run}")) { (short(last_run)) } } }
                        td {
                            @let (action, label, class) = if enabled { ("pause", "Pause", "pause") } else { ("resume", "Resume", "resume") };
                            form class=(class) method="post" action=(format!("/schedules/{id}/{action}")) {
                                input type="hidden" name="csrf" value=(viewer.csrf());
                                button type="submit" { (label) }
                            }
                        }
                    }
                }
            }
        }
        @if schedules.is_empty() { p.empty { "No schedules (iohr reliability schedules create)." } }
    };
    Ok(page(
        Some(&viewer),
        "schedules",
        "Schedules",
        Extras::default(),
        body,
    )
    .into_response())
}

async fn set_enabled(
    state: ConsoleState,
    viewer: Viewer,
    id: String,
    form: Result<Form<CsrfOnly>, FormRejection>,
    enabled: bool,
) -> PageResult {
    form_csrf(&viewer, form, |f| &f.csrf)?;
    let caller = viewer.caller::<RunScope>()?;
    let _changed = crate::resources::schedules::set_enabled(
        &state.shared.store,
        caller.account_id(),
        &id,
        enabled,
        &caller.actor(),
    )
    .await?;
    Ok(Redirect::to("/schedules").into_response())
}

pub async fn pause(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
    form: Result<Form<CsrfOnly>, FormRejection>,
) -> PageResult {
    set_enabled(state, viewer, id, form, false).await
}

pub async fn resume(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
    form: Result<Form<CsrfOnly>, FormRejection>,
) -> PageResult {
    set_enabled(state, viewer, id, form, true).await
}
