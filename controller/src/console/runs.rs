//! The Runs page: the account's runs, newest first, filtered by status, kind,
//! environment and scenario; live rows follow their run's stream (console.js).

use axum::extract::{Query, State};
use axum::response::IntoResponse;
use iohr_domain::{RunKind, RunRecord, RunStatus};
use maud::{Markup, html};
use serde::Deserialize;

use super::ConsoleState;
use super::layout::{Extras, PageResult, page};
use super::session::Viewer;
use super::value::{query, short_time};
use crate::auth::ReadScope;
use crate::store::RunFilter;

/// The filter form's fields; an empty field is no filter.
#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    #[serde(default)]
    status: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    environment: String,
    #[serde(default)]
    scenario: String,
    #[serde(default)]
    cursor: String,
}

/// A form field as given: trimmed, `None` when empty.
pub fn given(field: &str) -> Option<String> {
    let field = field.trim();
    (!field.is_empty()).then(|| field.to_string())
}

/// Live rows that follow their stream at once: beyond them a reload shows the news.
pub const LIVE_ROWS: usize = 20;

pub async fn list_page(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    filter: Result<Query<Filter>, axum::extract::rejection::QueryRejection>,
) -> PageResult {
    let Query(filter) = filter.map_err(crate::error::ApiError::from)?;
    let caller = viewer.caller::<ReadScope>()?;
    // The same refusals as `GET /v1/reliability/runs` for the same text.
    let runs = RunFilter {
        status: crate::query::filter::<RunStatus>(given(&filter.status))?,
        kind: crate::query::filter::<RunKind>(given(&filter.kind))?,
        environment: given(&filter.environment),
        agent: None,
        scenario: given(&filter.scenario),
        limit: crate::query::page_limit(None)?,
        cursor: given(&filter.cursor),
    };
    let answer = crate::runs::read::list(&state.shared.store, caller.account_id(), &runs).await?;
    let body = html! {
        (filter_form(&filter))
        (runs_table(&answer.items, LIVE_ROWS))
        @if let Some(next) = &answer.next_cursor {
            p { a #next href=(next_page(&filter, next)) { "Older runs" } }
        }
    };
    Ok(page(Some(&viewer), "runs", "Runs", Extras::default(), body).into_response())
}

fn next_page(filter: &Filter, cursor: &str) -> String {
    let pairs = [
        ("status", filter.status.as_str()),
        ("kind", &filter.kind),
        ("environment", &filter.environment),
        ("scenario", &filter.scenario),
        ("cursor", cursor),
    ];
    format!("/runs{}", query(&pairs))
}

fn filter_form(filter: &Filter) -> Markup {
    html! {
        form #filter method="get" action="/runs" {
            label { "Status "
                select name="status" {
                    option value="" { "any" }
                    @for status in RunStatus::ALL {
                        option value=(status.as_str()) selected[filter.status == status.as_str()] { (status.as_str()) }
                    }
                }
            }
            label { "Kind "
                select name="kind" {
                    option value="" { "any" }
                    @for kind in RunKind::ALL {
                        option value=(kind.as_str()) selected[filter.kind == kind.as_str()] { (kind.as_str()) }
                    }
                }
            }
            label { "Environment " input name="environment" value=(filter.environment); }
            label { "Scenario " input name="scenario" value=(filter.scenario) placeholder="scenario id"; }
            button type="submit" { "Filter" }
        }
    }
}

/// A table of run records (the Runs page, a scenario's runs). The first `live_rows` live
/// runs carry `data-live`, which console.js follows.
pub fn runs_table(runs: &[RunRecord], live_rows: usize) -> Markup {
    let mut live = 0;
    html! {
        div.scroll { table #runs {
            thead { tr { th { "Run" } th { "Status" } th { "Kind" } th { "Scenario" } th { "Environment" }
                         th { "Target" } th { "Started by" } th { "Change" } th { "Created" }
                         th { "Duration" } th { "Result" } } }
            tbody {
                @for run in runs {
                    @let id = &run.id;
                    @let status = run.status.as_str();
                    @let is_live = matches!(status, "queued" | "running") && { live += 1; live <= live_rows };
                    tr data-run-id=(id) data-status=(status) data-kind=(run.kind.as_str()) data-live=[is_live.then_some("1")] {
                        td { a href=(format!("/runs/{id}")) { (short(id)) } }
                        td.status { (status) }
                        td { (run.kind.as_str()) }
                        td { a href=(format!("/scenarios/{}", run.scenario.id)) { (run.scenario.id) } " " small { (short_version(&run.scenario.version)) } }
                        td { (run.environment) }
                        td { (run.target) }
                        td { (run.started_by.kind) ":" (run.started_by.id) }
                        td { (run.started_by.change.as_deref().unwrap_or("")) }
                        td { (short_time(&run.created_at)) }
                        td.duration { (duration(run)) }
                        td.result { (outcome(run)) }
                    }
                }
            }
        } }
        @if runs.is_empty() { p.empty { "No runs." } }
    }
}

/// How long a run ran, from its start to its end: `1 m 05 s`; empty until it has both.
pub fn duration(run: &RunRecord) -> String {
    let at = |t: &Option<String>| {
        t.as_deref()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
    };
    let (Some(start), Some(end)) = (at(&run.started_at), at(&run.ended_at)) else {
        return String::new();
    };
    let seconds = end.duration_since(start).map_or(0, |d| d.as_secs());
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 => format!("{} m {:02} s", seconds / 60, seconds % 60),
        _ => format!("{} h {:02} m", seconds / 3600, seconds % 3600 / 60),
    }
}

/// The longest result shown in a row; the run's page has the whole.
const RESULT_CHARS: usize = 90;

/// A run's result in a few words: why it has its status, else its result's first line.
pub fn outcome(run: &RunRecord) -> String {
    let checks = |value: &serde_json::Value| {
        iohr_domain::checks::ChecksResult::deserialize(value)
            .ok()
            .map(|c| format!("{} of {} checks failed", c.failed, c.total))
    };
    let text = run.reason.clone().or_else(|| {
        let value = run.result.as_ref()?;
        iohr_domain::summary::result_lines(value)
            .and_then(|lines| lines.into_iter().next())
            .or_else(|| checks(value))
    });
    let text = text.unwrap_or_default();
    if text.chars().count() > RESULT_CHARS {
        let cut: String = text.chars().take(RESULT_CHARS - 1).collect();
        format!("{cut}…")
    } else {
        text
    }
}

/// An id's last 8 characters: enough to tell runs apart in a table (uuid v7 starts with time).
pub fn short(id: &str) -> &str {
    id.get(id.len().saturating_sub(8)..).unwrap_or(id)
}

/// `sha256:0123abcd…` shortened to its first 12 hex digits.
pub fn short_version(version: &str) -> String {
    let hex = version.strip_prefix("sha256:").unwrap_or(version);
    hex.get(..12).unwrap_or(hex).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(
        started: Option<&str>,
        ended: Option<&str>,
        reason: Option<&str>,
        result: serde_json::Value,
    ) -> RunRecord {
        let mut run = super::super::tests::run_record(RunKind::Checks, RunStatus::Passed);
        run.started_at = started.map(str::to_string);
        run.ended_at = ended.map(str::to_string);
        run.reason = reason.map(str::to_string);
        run.result = Some(result).filter(|r| !r.is_null());
        run
    }

    #[test]
    fn a_row_says_how_long_a_run_ran_and_its_result_in_a_few_words() {
        let at = |t: &str| Some(format!("2026-10-07T{t}Z"));
        let ran = |from: &str, to: &str| {
            duration(&record(
                at(from).as_deref(),
                at(to).as_deref(),
                None,
                json!(null),
            ))
        };
        assert_eq!(ran("10:00:00.000", "10:00:12.900"), "12 s");
        assert_eq!(ran("10:00:00.000", "10:01:05.000"), "1 m 05 s");
        assert_eq!(ran("10:00:00.000", "12:03:00.000"), "2 h 03 m");
        assert_eq!(
            duration(&record(
                at("10:00:00.000").as_deref(),
                None,
                None,
                json!(null)
            )),
            ""
        );

        let checks =
            json!({"passed": false, "total": 2, "failed": 1, "checks": [], "invariants": []});
        assert_eq!(
            outcome(&record(None, None, None, checks.clone())),
            "1 of 2 checks failed"
        );
        let long = "x".repeat(200);
        let cut = outcome(&record(None, None, Some(&long), checks));
        assert_eq!(
            cut.chars().count(),
            RESULT_CHARS,
            "the reason first, cut short"
        );
        assert!(cut.ends_with('…'));
        assert_eq!(outcome(&record(None, None, None, json!(null))), "");
    }
}
