//! A run's baseline: the run it is compared with, found, not hand-picked (design notes §9).
//!
//! The rule (issue 33): the fresh before-run a trigger started beside the run, when it
//! asked for one (found once it passed, waiting while it runs, missing when it ended
//! otherwise); else the latest `passed` run of the same scenario version and environment,
//! on the same target (or the trigger's base target), whose `change` is the run's base
//! (`owner/repo@main`), ended within the trigger's window before the run was made
//! (7 days for a run no trigger started). A run without a base may be given one (`?base=`).
//!
//! This file's signature is shared by the trigger surface, `GET /runs/{id}/baseline`, the
//! gate and the forge reporter.

use std::time::Duration;

use iohr_domain::RunStatus;
use serde::Serialize;

use super::guards;
use crate::resources::triggers::substitute::{self, Values};
use crate::store::{BaselineQuery, RunRow, Store, StoreError, format_ms};

/// How far back a baseline is looked for when no trigger says.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a run's baseline is now.
#[derive(Debug, Clone)]
pub enum Baseline {
    /// The run to compare with, ended `passed`.
    Found(RunRow),
    /// The fresh before-run started beside the run, not ended yet.
    Waiting(RunRow),
    /// No run meets the rule; the text says which rule found nothing, for people.
    Missing(String),
}

/// Which rule a baseline was looked for by, as `GET /runs/{id}/baseline` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Rule {
    /// `fresh_baseline` (the before-run started beside it) or `latest_passed`.
    pub rule: String,
    /// The change a baseline ran for (`owner/repo@main`); none for a fresh baseline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// The targets a baseline may have run on: the run's, and the trigger's base target.
    pub targets: Vec<String>,
    /// How far back, as `7d`, and the earliest end taken (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_since: Option<String>,
    /// Whether the baseline found ran on the trigger's base target, not the run's own:
    /// compare then takes the two targets as one and says so in its notes.
    pub on_base_target: bool,
}

/// Why a baseline could not be looked for.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// The run is missing (`NotFound`), or the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A base given by the caller is not `owner/repo@branch`.
    #[error("base: {0}")]
    InvalidBase(String),
}

/// `owner/repo@branch`, validated.
fn checked_base(text: &str) -> Result<(String, String), String> {
    let (repo, branch) = text
        .rsplit_once('@')
        .ok_or_else(|| format!("{:?} is not owner/repo@branch", substitute::shorten(text)))?;
    Ok((substitute::repo(repo)?, substitute::branch(branch)?))
}

/// The pull request number of a change `owner/repo#N`.
fn pr_of(change: Option<&str>) -> Option<u64> {
    change?.rsplit_once('#')?.1.parse().ok()
}

/// The baseline of the account's run `run_id` (another account's run reads as missing)
/// and the rule that found it (or found nothing). `base` names the base of a run that has
/// none (`owner/repo@main`); a run with a base keeps its own. Found once per question:
/// the forge reporter compares the baseline it found ([`super::compare::Before`]).
pub async fn baseline_by_rule(
    store: &Store,
    account_id: &str,
    run_id: &str,
    base: Option<&str>,
) -> Result<(Baseline, Rule), BaselineError> {
    let run = super::read::owned(store, account_id, run_id).await?;
    if let Some(before_id) = &run.baseline_run {
        let rule = Rule {
            rule: "fresh_baseline".into(),
            base: None,
            targets: Vec::new(),
            window: None,
            ended_since: None,
            on_base_target: false,
        };
        let Some(before) = store.run_of_account(account_id, before_id).await? else {
            let why = format!(
                "the fresh before-run {before_id} started beside run {} is gone",
                run.id
            );
            return Ok((Baseline::Missing(why), rule));
        };
        let rule = Rule {
            targets: vec![before.target.clone()],
            on_base_target: before.target != run.target,
            ..rule
        };
        let found = match before.status {
            RunStatus::Passed => Baseline::Found(before),
            RunStatus::Queued | RunStatus::Running => Baseline::Waiting(before),
            other => Baseline::Missing(format!(
                "the fresh before-run {} ended {other}, not passed",
                before.id
            )),
        };
        return Ok((found, rule));
    }
    let base = match (&run.started_by.base, base) {
        (Some(own), _) => own.clone(),
        (None, Some(given)) => given.to_string(),
        (None, None) => {
            let rule = Rule {
                rule: "latest_passed".into(),
                base: None,
                targets: vec![run.target.clone()],
                window: None,
                ended_since: None,
                on_base_target: false,
            };
            let why = format!(
                "run {} names no base change (a pull request's base branch); name one with ?base=owner/repo@main",
                run.id
            );
            return Ok((Baseline::Missing(why), rule));
        }
    };
    let (_, base_branch) = checked_base(&base).map_err(BaselineError::InvalidBase)?;
    let trigger = match run.started_by.kind.as_str() {
        "trigger" => store.trigger(account_id, &run.started_by.id).await?,
        _ => None,
    };
    let window_ms = trigger
        .as_ref()
        .map_or(DEFAULT_WINDOW.as_millis() as i64, |t| t.window_ms);
    // The trigger's base target as this run's delivery made it: the base branch, the
    // pull request's number; a template that needs more is left out.
    let base_target = trigger
        .as_ref()
        .and_then(|t| t.base_target.as_deref())
        .and_then(|template| {
            let values = Values {
                pr: pr_of(run.started_by.change.as_deref()),
                sha: None,
                branch: Some(base_branch.clone()),
            };
            substitute::substitute(template, &values).ok()
        })
        .and_then(|made| guards::target(&made).ok());
    let mut targets = vec![run.target.clone()];
    targets.extend(base_target.filter(|t| *t != run.target));
    let ended_since = run.created_at - window_ms;
    let query = BaselineQuery {
        account_id,
        scenario_id: &run.scenario_id,
        scenario_version: &run.scenario_version,
        environment: &run.environment,
        targets: [&targets[0], targets.last().unwrap_or(&targets[0])],
        change: &base,
        ended_since,
        not_id: &run.id,
    };
    let found = store.latest_passed(&query).await?;
    let window = crate::resources::triggers::format_window(window_ms);
    let rule = Rule {
        rule: "latest_passed".into(),
        base: Some(base.clone()),
        on_base_target: found.as_ref().is_some_and(|f| f.target != run.target),
        targets: targets.clone(),
        window: Some(window.clone()),
        ended_since: Some(format_ms(ended_since)),
    };
    let baseline = match found {
        Some(found) => Baseline::Found(found),
        None => Baseline::Missing(format!(
            "no passed run of scenario {} version {} in {} on {} for change {base} ended since {} (window {window})",
            run.scenario_id,
            run.scenario_version,
            run.environment,
            targets.join(" or "),
            format_ms(ended_since),
        )),
    };
    Ok((baseline, rule))
}
