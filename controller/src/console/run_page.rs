//! A run's page: its record, findings, units, who started it and for which change, a
//! form and the command that start it again, its result in lines, its plots once it
//! ended (drawn on the server, [`super::charts`]: its seconds and latency distribution,
//! or its sweep, as the kind says) and its live view (a live run's seconds, a faults
//! run's timeline), drawn by console.js from [`super::live`].

use axum::extract::{Path, State};
use axum::response::IntoResponse;
use iohr_domain::RunRecord;
use iohr_domain::checks::ChecksResult;
use iohr_domain::kind::LiveView;
use iohr_domain::stress::GeneratorSaturated;
use maud::{Markup, html};
use serde::Deserialize;

use super::ConsoleState;
use super::layout::{Extras, PageResult, page};
use super::plot::Level;
use super::runs::short_version;
use super::session::Viewer;
use crate::auth::ReadScope;

pub async fn show(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> PageResult {
    let caller = viewer.caller::<ReadScope>()?;
    let run = crate::runs::read::get(&state.shared.store, caller.account_id(), &id).await?;
    let title = format!("{} run {}", run.kind.as_str(), super::runs::short(&run.id));
    let finished = run.status.is_finished();
    // A finished run's plots are drawn here from its stored seconds and result; a live
    // run's grow in console.js from its feed.
    let plots = if finished {
        super::charts::plots(
            &state.shared,
            caller.account_id(),
            &[("run", &run)],
            state.trace_url.as_ref(),
        )
        .await?
    } else {
        html! {}
    };
    // A live run's plot draws its spec's latency thresholds before its result judges them.
    let thresholds = if finished {
        Vec::new()
    } else {
        let stored = state
            .shared
            .store
            .named_scenario(caller.account_id(), &run.scenario.id, &run.scenario.version)
            .await?;
        stored.map_or_else(Vec::new, |s| super::charts::spec_thresholds(&s.spec))
    };
    let body = html! {
        p { "Status: " strong #status data-status=(run.status.as_str()) data-run=(run.id) { (run.status.as_str()) }
            @if let Some(reason) = &run.reason { " — " span #reason { (reason) } } }
        (record(&run))
        h2 { "Start it again" }
        (super::start::again_form(&viewer, &run))
        pre #rerun { code { (rerun_command(&run)) } }
        @if finished {
            p { a #compare-with href=(format!("/compare?after={}", run.id)) { "Compare with an earlier run" } }
        }
        (live_view(&run, &thresholds))
        // What the run ends with: console.js swaps it (and #record) in when a live run
        // ends, so the page need not be reloaded.
        div #outcome {
            (plots)
            h2 { "Result" }
            (result(&run))
            (super::operations::table(run.result.as_ref()))
            h2 { "Findings" }
            (findings(&run))
        }
    };
    let extras = Extras { plots: !finished };
    Ok(page(Some(&viewer), "run", &title, extras, body).into_response())
}

fn record(run: &RunRecord) -> Markup {
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_string());
    html! {
        dl #record {
            dt { "Run" } dd { (run.id) }
            dt { "Kind" } dd { (run.kind.as_str()) }
            dt { "Scenario" } dd { a href=(format!("/scenarios/{}", run.scenario.id)) { (run.scenario.id) } " " small { (short_version(&run.scenario.version)) } }
            dt { "Environment" } dd { (run.environment) }
            dt { "Target" } dd { (run.target) }
            dt { "Executor" } dd { (run.executor.to_string()) }
            dt { "Agent" } dd { (dash(&run.agent)) }
            dt { "Started by" } dd { (run.started_by.kind) ":" (run.started_by.id) }
            dt { "Change" } dd { (dash(&run.started_by.change)) }
            dt { "Units" } dd { (run.units.spent) " spent of " (run.units.reserved) " reserved" }
            dt { "Created" } dd { (run.created_at) }
            dt { "Started" } dd { (dash(&run.started_at)) }
            dt { "Ended" } dd { (dash(&run.ended_at)) }
            @if let Some(confirmation) = &run.confirmation {
                dt { "Confirmation" } dd {
                    @match &confirmation.confirmed_by {
                        Some(by) => { "confirmed by " (by) }
                        None => { "waits for a person until " (confirmation.deadline)
                                  " (iohr reliability runs confirm " (run.id) " --hash " (confirmation.hash) ")" }
                    }
                }
            }
        }
    }
}

/// The exact command that starts this run again: the same stored scenario version, kind,
/// environment, target and executor (the change is the one thing a person will change).
pub fn rerun_command(run: &RunRecord) -> String {
    let mut command = format!(
        "iohr reliability run --kind {} --environment {} --target {} --scenario {} --version {} --executor {}",
        run.kind.as_str(),
        shell_word(&run.environment),
        shell_word(&run.target),
        shell_word(&run.scenario.id),
        shell_word(&run.scenario.version),
        shell_word(&run.executor.to_string()),
    );
    if let Some(change) = &run.started_by.change {
        command.push_str(&format!(" --change {}", shell_word(change)));
    }
    command.push_str(" --wait");
    command
}

/// A word as a POSIX shell reads it: quoted when it holds anything but safe characters.
fn shell_word(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The containers console.js fills from the run's live feed: a live run's seconds, and
/// a faults run's timeline (replayed when it has ended). A finished run's seconds are
/// drawn on the server ([`super::charts`]).
fn live_view(run: &RunRecord, thresholds: &[Level]) -> Markup {
    let feed = format!("/runs/{}/live", run.id);
    // `[[label, ms], ...]` for console.js.
    let limits: Vec<(&str, f64)> = thresholds
        .iter()
        .map(|l| (l.label.as_str(), l.value))
        .collect();
    let limits = serde_json::to_string(&limits).unwrap_or_else(|_| "[]".to_string());
    html! {
        @match run.kind.live_view() {
            LiveView::Seconds if !run.status.is_finished() => {
                h2 { "Each second (live)" }
                div #plot data-feed=(feed) data-seconds="0" data-thresholds=(limits) {}
                p.legend { "requests/s, p50 and p99 (ms, corrected for coordinated omission) and errors/s, per second of the run; the warm-up shaded; latency thresholds as red dashed lines" }
            }
            LiveView::Timeline => {
                h2 { "Timeline" }
                ol #timeline data-feed=(feed) {}
            }
            LiveView::Seconds | LiveView::Nothing => {}
        }
    }
}

fn result(run: &RunRecord) -> Markup {
    let Some(value) = run.result.as_ref().filter(|v| !v.is_null()) else {
        return html! { p.empty { "No result yet." } };
    };
    html! {
        // The generator set the pace for part of the measure: say so before the figures.
        @if let Some(saturated) = GeneratorSaturated::of_result(value) {
            p #saturated data-seconds=(saturated.count) {
                strong { (saturated.line()) } ": its figures may be the agent's own, not the \
                target's; compare refuses such a run"
            }
        }
        (figures(value))
    }
}

fn figures(value: &serde_json::Value) -> Markup {
    if let Some(lines) = iohr_domain::summary::result_lines(value) {
        return html! { ul #summary { @for line in lines { li { (line) } } } };
    }
    if let Ok(checks) = ChecksResult::deserialize(value) {
        return html! {
            p #summary { (if checks.passed { "passed" } else { "failed" }) ": " (checks.failed) " of " (checks.total) " checks failed" }
            table #checks {
                thead { tr { th { "Check" } th { "Passed" } th { "Status" } th { "Latency" } th { "Why" } } }
                tbody {
                    @for c in &checks.checks {
                        tr { td { (c.name) } td { (c.passed) } td { (c.status.map_or("-".to_string(), |s| s.to_string())) }
                             td { (format!("{:.1} ms", c.latency_ms)) }
                             td { (if c.failures.is_empty() { c.error.clone().unwrap_or_default() } else { c.failures.join("; ") }) } }
                    }
                    @for i in &checks.invariants {
                        tr { td { "invariant " (i.name) } td { (i.passed) } td {} td {} td { (i.failures.join("; ")) } }
                    }
                }
            }
        };
    }
    html! { pre #summary { (serde_json::to_string_pretty(value).unwrap_or_default()) } }
}

fn findings(run: &RunRecord) -> Markup {
    html! {
        @if run.findings.is_empty() {
            p.empty { "None." }
        } @else {
            table #findings {
                thead { tr { th { "Finding" } th { "Seen" } th { "Kind" } th { "Subject" } th { "Detail" } } }
                tbody {
                    @for f in &run.findings {
                        tr data-finding-id=(f.id) {
                            td { (f.title) }
                            td { (f.seen.as_str()) }
                            td { (serde_json::to_value(f.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()) }
                            td { (f.subject) }
                            td { (f.detail) }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iohr_domain::RunKind;

    #[test]
    fn words_are_quoted_only_when_the_shell_would_read_them_otherwise() {
        assert_eq!(
            shell_word("http://127.0.0.1:8080/x"),
            "http://127.0.0.1:8080/x"
        );
        assert_eq!(shell_word("sha256:ab"), "sha256:ab");
        assert_eq!(shell_word("core#212"), "'core#212'");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word("$(rm)"), "'$(rm)'");
        assert_eq!(shell_word(""), "''");
    }

    fn record(kind: RunKind) -> RunRecord {
        super::super::tests::run_record(kind, iohr_domain::RunStatus::Running)
    }

    /// The live view is the kind contract's: a plot of the seconds, a faults run's
    /// timeline, nothing for checks.
    #[test]
    fn each_kind_gets_the_live_view_its_contract_names() {
        for kind in RunKind::ALL {
            let page = live_view(&record(kind), &[]).into_string();
            let (plot, timeline) = (page.contains(r#"id="plot""#), page.contains("timeline"));
            let expected = match kind.live_view() {
                LiveView::Seconds => (true, false),
                LiveView::Timeline => (false, true),
                LiveView::Nothing => (false, false),
            };
            assert_eq!((plot, timeline), expected, "{kind}: {page}");
        }
        assert!(
            live_view(&record(RunKind::Checks), &[])
                .into_string()
                .is_empty()
        );
        assert!(
            live_view(&record(RunKind::Faults), &[])
                .into_string()
                .contains("Timeline")
        );
        assert!(
            live_view(&record(RunKind::Load), &[])
                .into_string()
                .contains("Each second")
        );
        // Ended, its seconds are drawn on the server instead.
        let mut ended = record(RunKind::Load);
        ended.status = iohr_domain::RunStatus::Passed;
        assert!(live_view(&ended, &[]).into_string().is_empty());
        let limit = Level {
            kind: "threshold",
            label: "p99 < 300ms".into(),
            value: 300.0,
        };
        assert!(
            live_view(&record(RunKind::Load), &[limit])
                .into_string()
                .contains(r#"data-thresholds="[[&quot;p99 &lt; 300ms&quot;,300.0]]""#)
        );
    }
}
