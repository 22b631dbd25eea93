//! The Scenarios page: the account's scenario names; one name's versions and the runs of
//! each (the Runs page's table, filtered to the scenario).

use axum::extract::{Path, Query, State};
use axum::response::IntoResponse;
use maud::html;
use serde_json::Value;

use super::ConsoleState;
use super::layout::{Extras, PageResult, page};
use super::runs::{runs_table, short, short_version};
use super::session::Viewer;
use super::value::{list, query, text, when};

pub async fn list_page(State(state): State<ConsoleState>, viewer: Viewer) -> PageResult {
    let answer = crate::api::scenarios::list(
        State(state.shared.clone()),
        viewer.caller()?,
        Ok(Query(crate::api::scenarios::ListQuery {
            limit: Some(500),
            ..Default::default()
        })),
    )
    .await?
    .0;
    let answer = serde_json::to_value(answer).unwrap_or(Value::Null);
    let scenarios = list(&answer, "scenarios");
    let body = html! {
        table #scenarios {
            thead { tr { th { "Scenario" } th { "Kind" } th { "Versions" } th { "Newest version" } th { "Named at" } } }
            tbody {
                @for s in scenarios {
                    @let id = text(s, "id");
                    tr data-scenario-id=(id) {
                        td { a href=(format!("/scenarios/{id}")) { (id) } }
                        td { (text(s, "kind")) }
                        td { (text(s, "versions")) }
                        td { code { (short_version(&text(s, "latest_version"))) } }
                        td { (when(s, "latest_at")) }
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
    let versions = crate::api::scenarios::get(
        State(state.shared.clone()),
        viewer.caller()?,
        Path(id.clone()),
    )
    .await?
    .0;
    let versions = serde_json::to_value(versions).unwrap_or(Value::Null);
    let caller = viewer.caller::<crate::auth::ReadScope>()?;
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
    let body = html! {
        p { "Kind: " (text(&versions, "kind")) }
        h2 { "Versions" }
        table #versions {
            thead { tr { th { "Version" } th { "Named at" } th { "Runs" } th { "Last run" } } }
            tbody {
                @for v in list(&versions, "versions") {
                    @let version = text(v, "version");
                    @let last = text(v, "last_run");
                    tr data-version=(version) {
                        td { code { (version) } }
                        td { (when(v, "created_at")) }
                        td { (text(v, "runs")) }
                        td { @if !last.is_empty() { a href=(format!("/runs/{last}")) { (short(&last)) } } }
                    }
                }
            }
        }
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
