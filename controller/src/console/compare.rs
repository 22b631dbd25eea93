//! The Compare page: pick two runs, read the verdict and each difference with its
//! interval, see both runs on one plot (their seconds aligned on the measure's start and
//! their latency distributions, or their sweeps and knees: [`super::charts`]), copy the
//! markdown for a pull request. The same comparison as `GET /v1/reliability/compare`
//! (and its refusals). Once one run is picked, the other picker offers only the runs it
//! compares with: finished, of its kind, scenario version, environment and target.

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
        .filter(|r| r.status.is_finished())
        .collect();
    let (before, after) = (picked.before.trim(), picked.after.trim());
    // The run the other picker is matched to: the after run once it is picked.
    let anchor_id = if after.is_empty() { before } else { after };
    let anchor = finished.iter().find(|r| r.id == anchor_id).copied();
    let others: Vec<&RunRecord> = match anchor {
        Some(anchor) => finished
            .iter()
            .filter(|r| comparable(anchor, r))
            .copied()
            .collect(),
        None => finished.clone(),
    };
    let (before_runs, after_runs) = if after.is_empty() && anchor.is_some() {
        (&finished, &others)
    } else {
        (&others, &finished)
    };
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
    // Compared: both runs on one plot, as their kind plots them; also when a run's
    // generator saturated, which the plot of its seconds helps to see.
    let plotted = match &answer {
        Some(Ok(_)) => true,
        Some(Err(error)) => error.code == "generator_saturated",
        None => false,
    };
    let plots = match plotted {
        true => {
            let store = &state.shared.store;
            let b = crate::runs::read::get(store, caller.account_id(), before).await?;
            let a = crate::runs::read::get(store, caller.account_id(), after).await?;
            super::charts::plots(
                &state.shared,
                caller.account_id(),
                &[("before", &b), ("after", &a)],
                state.trace_url.as_ref(),
            )
            .await?
        }
        _ => html! {},
    };
    let status = match &answer {
        Some(Err(error)) => error.status,
        _ => axum::http::StatusCode::OK,
    };
    let body = html! {
        form #compare method="get" action="/compare" data-anchor=[anchor.map(|a| a.id.as_str())] {
            (picker("before", "Before", before_runs, before))
            (picker("after", "After", after_runs, after))
            button type="submit" { "Compare" }
        }
        @match &answer {
            None => { p.hint { "Pick two finished runs of one scenario version and target." } }
            Some(Err(error)) => { p #refusal data-code=(error.code) { (error.message) } (plots) }
            Some(Ok(comparison)) => { (verdict(comparison)) (plots) }
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

/// Whether `run` compares with `anchor`: another finished run of its kind, scenario
/// version, environment and target (what compare refuses otherwise).
fn comparable(anchor: &RunRecord, run: &RunRecord) -> bool {
    run.id != anchor.id
        && run.status.is_finished()
        && run.kind == anchor.kind
        && run.scenario.version == anchor.scenario.version
        && run.environment == anchor.environment
        && run.target == anchor.target
}

fn picker(name: &str, label: &str, runs: &[&RunRecord], chosen: &str) -> Markup {
    html! {
        label { (label) " "
            select name=(name) data-options=(runs.len()) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use iohr_domain::{RunKind, RunStatus};

    fn run(id: &str, kind: RunKind, version: &str, target: &str, status: RunStatus) -> RunRecord {
        let mut run = super::super::tests::run_record(kind, status);
        run.id = id.to_string();
        run.scenario.version = version.to_string();
        run.target = target.to_string();
        run
    }

    #[test]
    fn only_finished_runs_of_one_kind_version_environment_and_target_compare() {
        let t = "http://127.0.0.1:9";
        let anchor = run("a", RunKind::Load, "v1", t, RunStatus::Passed);
        assert!(comparable(
            &anchor,
            &run("b", RunKind::Load, "v1", t, RunStatus::Failed)
        ));
        assert!(!comparable(&anchor, &anchor), "not with itself");
        assert!(!comparable(
            &anchor,
            &run("c", RunKind::Replay, "v1", t, RunStatus::Passed)
        ));
        assert!(!comparable(
            &anchor,
            &run("d", RunKind::Load, "v2", t, RunStatus::Passed)
        ));
        assert!(!comparable(
            &anchor,
            &run(
                "e",
                RunKind::Load,
                "v1",
                "http://127.0.0.1:8",
                RunStatus::Passed
            )
        ));
        assert!(!comparable(
            &anchor,
            &run("f", RunKind::Load, "v1", t, RunStatus::Running)
        ));
        let mut elsewhere = run("g", RunKind::Load, "v1", t, RunStatus::Passed);
        elsewhere.environment = "production".into();
        assert!(!comparable(&anchor, &elsewhere));
    }
}
