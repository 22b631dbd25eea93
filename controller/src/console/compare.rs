//! The Compare page: pick two runs, read the verdict and each difference with its
//! interval, copy the markdown for a pull request. The same comparison as
//! `GET /v1/reliability/compare` (and its refusals).

use axum::extract::{Query, State};
use axum::response::IntoResponse;
use iohr_domain::RunRecord;
use iohr_domain::compare::Comparison;
use maud::{Markup, html};
use serde::Deserialize;

use super::ConsoleState;
use super::layout::{Extras, PageResult, page};
use super::runs::short;
use super::session::Viewer;
use super::value::short_time;
use crate::auth::ReadScope;
use crate::store::RunFilter;

/// Finished runs offered in the pickers, newest first.
const PICKABLE: u32 = 100;

#[derive(Debug, Default, Deserialize)]
pub struct Picked {
    #[serde(default)]
    before: String,
    #[serde(default)]
    after: String,
}

pub async fn show(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    picked: Result<Query<Picked>, axum::extract::rejection::QueryRejection>,
) -> PageResult {
    let Query(picked) = picked.map_err(crate::error::ApiError::from)?;
    let caller = viewer.caller::<ReadScope>()?;
    let runs = crate::runs::read::list(
        &state.shared.store,
        caller.account_id(),
        &RunFilter {
            limit: PICKABLE,
            ..RunFilter::default()
        },
    )
    .await?;
    let finished: Vec<&RunRecord> = runs
        .items
        .iter()
        .filter(|r| !matches!(r.status.as_str(), "queued" | "running"))
        .collect();
    let (before, after) = (picked.before.trim(), picked.after.trim());
    let answer = if before.is_empty() || after.is_empty() {
        None
    } else {
        Some(
            crate::runs::compare::compare_runs(
                &state.shared,
                caller.account_id(),
                before,
                after,
                None,
            )
            .await
            .map_err(crate::error::ApiError::from),
        )
    };
    let status = match &answer {
        Some(Err(error)) => error.status,
        _ => axum::http::StatusCode::OK,
    };
    let body = html! {
        form #compare method="get" action="/compare" {
            (picker("before", "Before", &finished, before))
            (picker("after", "After", &finished, after))
            button type="submit" { "Compare" }
        }
        @match &answer {
            None => { p.hint { "Pick two finished runs of one scenario version and target." } }
            Some(Err(error)) => { p #refusal data-code=(error.code) { (error.message) } }
            Some(Ok(comparison)) => { (verdict(comparison)) }
        }
    };
    Ok((
        status,
        page(Some(&viewer), "compare", "Compare", Extras::default(), body),
    )
        .into_response())
}

fn verdict(comparison: &Comparison) -> Markup {
    let lines = comparison.lines();
    let rest = lines.get(comparison.differences.len() + 1..).unwrap_or(&[]);
    html! {
        p { "Verdict: " strong #verdict data-verdict=(comparison.verdict.as_str()) { (comparison.verdict.as_str()) } }
        ul #differences {
            @for difference in &comparison.differences {
                li class=(if difference.worse { "worse" } else { "better" }) { (difference.line) }
            }
        }
        @if !rest.is_empty() {
            ul #notes { @for line in rest { li { (line) } } }
        }
        h2 { "For the pull request" }
        pre #markdown { (comparison.markdown()) }
        p { "The same from the command line: "
            code { "iohr reliability compare " (comparison.before) " " (comparison.after) " --format markdown" } }
    }
}

fn picker(name: &str, label: &str, runs: &[&RunRecord], chosen: &str) -> Markup {
    html! {
        label { (label) " "
            select name=(name) {
                option value="" { "pick a run" }
                @for run in runs {
                    @let id = &run.id;
                    option value=(id) selected[id == chosen] {
                        (short(id)) " " (run.kind.as_str()) " " (run.scenario.id) " "
                        (run.status.as_str()) " " (short_time(&run.created_at))
                        @let change = run.started_by.change.as_deref().unwrap_or("");
                        @if !change.is_empty() { " " (change) }
                    }
                }
            }
        }
    }
}
