//! The Scenarios page: the account's scenario names; one name's versions, a form to start
//! a run of one, the trend of its recent runs' p99 and verdicts, and its runs (the Runs
//! page's table, filtered to the scenario).

use axum::extract::{Path, State};
use axum::response::IntoResponse;
use maud::html;

use super::ConsoleState;
use super::charts::trend_plot;
use super::layout::{Extras, PageResult, page};
use super::runs::{runs_table, short, short_version};
use super::session::Viewer;
use super::start::new_run_form;
use super::value::{query, short_time};
use crate::auth::ReadScope;

pub async fn list_page(State(state): State<ConsoleState>, viewer: Viewer) -> PageResult {
    let caller = viewer.caller::<ReadScope>()?;
    // The longest page a listing gives: the console shows the first 500 names.
    let scenarios =
        crate::resources::scenarios::list(&state.shared.store, caller.account_id(), None, 500)
            .await?
            .scenarios;
    let body = html! {
        table #scenarios {
            thead { tr { th { "Scenario" } th { "Kind" } th { "Versions" } th { "Newest version" } th { "Named at" } } }
            tbody {
                @for s in &scenarios {
                    @let id = &s.id;
                    tr data-scenario-id=(id) {
                        td { a href=(format!("/scenarios/{id}")) { (id) } }
                        td { (s.kind) }
                        td { (s.versions) }
                        td { code { (short_version(&s.latest_version)) } }
                        td { (short_time(&s.latest_at)) }
                    }
                }
            }
        }
        @if scenarios.is_empty() { p.empty { "No scenarios yet: a run's spec is stored as one." } }
    };
    Ok(page(
        Some(&viewer),
        "scenarios",
        "Scenarios",
        Extras::default(),
        body,
    )
    .into_response())
}

pub async fn show(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> PageResult {
    let caller = viewer.caller::<ReadScope>()?;
    let versions =
        crate::resources::scenarios::versions(&state.shared.store, caller.account_id(), &id)
            .await?;
    let runs = crate::runs::read::list(
        &state.shared.store,
        caller.account_id(),
        &crate::store::RunFilter {
            scenario: Some(id.clone()),
            limit: crate::query::page_limit(None)?,
            ..Default::default()
        },
    )
    .await?;
    let version_ids: Vec<&str> = versions
        .versions
        .iter()
        .map(|v| v.version.as_str())
        .collect();
    // The newest run's target, as the form's first guess.
    let last_target = runs.items.first().map_or("", |r| r.target.as_str());
    let body = html! {
        p { "Kind: " (versions.kind) }
        h2 { "Versions" }
        div.scroll { table #versions {
            thead { tr { th { "Version" } th { "Named at" } th { "Runs" } th { "Last run" } } }
            tbody {
                @for v in &versions.versions {
                    @let version = &v.version;
                    @let last = v.last_run.as_deref().unwrap_or("");
                    tr data-version=(version) {
                        td { code { (version) } }
                        td { (short_time(&v.created_at)) }
                        td { (v.runs) }
                        td { @if !last.is_empty() { a href=(format!("/runs/{last}")) { (short(last)) } } }
                    }
                }
            }
        } }
        h2 { "Start a run" }
        (new_run_form(&viewer, &versions.kind, &id, &version_ids, last_target))
        h2 { "Trend" }
        (trend_plot(&runs.items).render())
        p.legend { "p99 (corrected, where the kind measures one) of its recent finished runs, oldest first; each run's verdict a dot: green passed, red failed or error, grey otherwise" }
        h2 { "Runs" }
        (runs_table(&runs.items, super::runs::LIVE_ROWS))
        p { a href=(format!("/runs{}", query(&[("scenario", &id)]))) { "All runs of this scenario" } }
    };
    Ok(page(
        Some(&viewer),
        "scenarios",
        &format!("Scenario {id}"),
        Extras::default(),
        body,
    )
    .into_response())
}
