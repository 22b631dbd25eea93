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
use super::value::{list, text, when};
use crate::api::schedules::PatchSchedule;
use crate::auth::RunScope;
use crate::error::JsonBody;

pub async fn list_page(State(state): State<ConsoleState>, viewer: Viewer) -> PageResult {
    let answer = crate::api::schedules::list(State(state.shared.clone()), viewer.caller()?)
        .await?
        .0;
    let schedules = list(&answer, "schedules");
    let body = html! {
        table #schedules {
            thead { tr { th { "Schedule" } th { "Cron (UTC)" } th { "Kind" } th { "Scenario" } th { "Environment" }
                         th { "Next fires" } th { "Skipped" } th { "Last skip" } th { "Last run" } th {} } }
            tbody {
                @for s in schedules {
                    @let id = text(s, "id");
                    @let enabled = text(s, "enabled") == "true";
                    @let last_run = text(s, "last_run");
                    tr data-schedule-id=(id) data-enabled=(enabled) {
                        td { (text(s, "name")) @if !enabled { " " small.paused { "paused" } } }
                        td { code { (text(s, "cron")) } }
                        td { (text(s, "kind")) }
                        td { (text(s, "scenario.id")) }
                        td { (text(s, "environment")) }
                        td.next { @for at in list(s, "next_fires").iter().take(3) { (at.as_str().unwrap_or("").get(..16).unwrap_or("").replace('T', " ")) br; } }
                        td.skipped { (text(s, "skipped")) }
                        td { (when(s, "last_skipped_at")) }
                        td { @if !last_run.is_empty() { a href=(format!("/runs/{last_run}")) { (short(&last_run)) } } }
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
    let _changed = crate::api::schedules::patch(
        State(state.shared.clone()),
        viewer.caller::<RunScope>()?,
        Path(id),
        JsonBody(PatchSchedule {
            enabled: Some(enabled),
            ..PatchSchedule::default()
        }),
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
