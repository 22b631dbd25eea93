//! The Findings page: open and closed findings, how often each was seen, and closing one
//! (`reliability:run`, as `POST /v1/reliability/findings/{id}/close`).

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect};
use maud::html;
use serde::Deserialize;
use serde_json::Value;

use super::ConsoleState;
use super::layout::{Extras, PageResult, page};
use super::runs::short;
use super::session::{CsrfOnly, Viewer, form_csrf};
use super::value::{list, query, text, when};
use crate::auth::RunScope;

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
    let answer = crate::api::findings::list(
        State(state.shared.clone()),
        viewer.caller()?,
        Ok(Query(crate::api::findings::ListQuery {
            status: given(&filter.status),
            cursor: given(&filter.cursor),
            ..Default::default()
        })),
    )
    .await?
    .0;
    let findings = list(&answer, "findings");
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
                    @let id = text(f, "id");
                    @let status = text(f, "status");
                    @let last_run = text(f, "last_run");
                    tr data-finding-id=(id) data-status=(status) {
                        td { (text(f, "title")) br; small { (text(f, "subject")) } }
                        td { (status) @if status == "closed" { br; small { "by " (text(f, "closed_by")) } } }
                        td { (text(f, "times_seen")) " times" }
                        td { a href=(format!("/scenarios/{}", text(f, "scenario"))) { (text(f, "scenario")) } }
                        td { (text(f, "environment")) }
                        td { (when(f, "first_seen_at")) }
                        td { (when(f, "last_seen_at")) }
                        td { a href=(format!("/runs/{last_run}")) { (short(&last_run)) } }
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
        @if let Some(next) = answer.get("next_cursor").and_then(Value::as_str) {
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
    let _closed = crate::api::findings::close(
        State(state.shared.clone()),
        viewer.caller::<RunScope>()?,
        Path(id),
    )
    .await?;
    Ok(Redirect::to("/findings").into_response())
}
