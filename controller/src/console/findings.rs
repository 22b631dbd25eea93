//! The Findings page: open and closed findings, how often each was seen, and closing one
//! (`reliability:run`, as `POST /v1/reliability/findings/{id}/close`).

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect};
use iohr_domain::finding::FindingStatus;
use maud::html;
use serde::Deserialize;

use super::ConsoleState;
use super::layout::{Extras, PageResult, page};
use super::runs::short;
use super::session::{CsrfOnly, Viewer, form_csrf};
use super::value::{query, short_time};
use crate::auth::{ReadScope, RunScope};
use crate::store::FindingFilter;

#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    #[serde(default)]
    status: String,
    #[serde(default)]
    cursor: String,
}

pub async fn list_page(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    filter: Result<Query<Filter>, axum::extract::rejection::QueryRejection>,
) -> PageResult {
    let Query(filter) = filter.map_err(crate::error::ApiError::from)?;
    let given = |f: &str| (!f.trim().is_empty()).then(|| f.trim().to_string());
    let caller = viewer.caller::<ReadScope>()?;
    // The same refusals as `GET /v1/reliability/findings` for the same text.
    let wanted = FindingFilter {
        status: crate::query::filter::<FindingStatus>(given(&filter.status))?,
        scenario: None,
        environment: None,
        limit: crate::query::page_limit(None)?,
        cursor: given(&filter.cursor),
    };
    let answer =
        crate::resources::findings::list(&state.shared.store, caller.account_id(), &wanted).await?;
    let findings = &answer.items;
    let body = html! {
        form #filter method="get" action="/findings" {
            label { "Status "
                select name="status" {
                    option value="" { "any" }
                    @for status in ["open", "closed"] {
                        option value=(status) selected[filter.status == status] { (status) }
                    }
                }
            }
            button type="submit" { "Filter" }
        }
        table #findings {
            thead { tr { th { "Finding" } th { "Status" } th { "Seen" } th { "Scenario" } th { "Environment" }
                         th { "First seen" } th { "Last seen" } th { "Last run" } th {} } }
            tbody {
                @for f in findings {
                    @let id = &f.id;
                    @let status = f.status.as_str();
                    @let last_run = &f.last_run;
                    tr data-finding-id=(id) data-status=(status) {
                        td { (f.title) br; small { (f.subject) } }
                        td { (status) @if status == "closed" { br; small { "by " (f.closed_by.as_deref().unwrap_or("")) } } }
                        td { (f.times_seen) " times" }
                        td { a href=(format!("/scenarios/{}", f.scenario)) { (f.scenario) } }
                        td { (f.environment) }
                        td { (short_time(&f.first_seen_at)) }
                        td { (short_time(&f.last_seen_at)) }
                        td { a href=(format!("/runs/{last_run}")) { (short(last_run)) } }
                        td {
                            @if status == "open" {
                                form.close method="post" action=(format!("/findings/{id}/close")) {
                                    input type="hidden" name="csrf" value=(viewer.csrf());
                                    button type="submit" { "Close" }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if findings.is_empty() { p.empty { "No findings." } }
        @if let Some(next) = &answer.next_cursor {
            p { a #next href=(format!("/findings{}", query(&[("status", &filter.status), ("cursor", next)]))) { "Older findings" } }
        }
    };
    Ok(page(
        Some(&viewer),
        "findings",
        "Findings",
        Extras::default(),
        body,
    )
    .into_response())
}

pub async fn close(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
    form: Result<Form<CsrfOnly>, FormRejection>,
) -> PageResult {
    form_csrf(&viewer, form, |f| &f.csrf)?;
    let caller = viewer.caller::<RunScope>()?;
    let _closed = crate::resources::findings::close(
        &state.shared.store,
        caller.account_id(),
        &id,
        &caller.actor(),
    )
    .await?;
    Ok(Redirect::to("/findings").into_response())
}
