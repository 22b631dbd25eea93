//! The forge reporter: one task per controller (with the outbox's other consumers, on the
//! replica holding the store's claim). Each poll it
//!
//! 1. reads the accounts' new events with its own cursor (`event_cursors`, consumer
//!    `forge`): a finished run marks its change's report, and the report of every run it
//!    stood beside as a fresh before-run;
//! 2. scans for queued and running runs of a forge's change that no report has seen, and
//!    marks their reports, so the forge says `pending` while runs are going. A scan,
//!    not a new event type: "a run was queued" is no product event subscribers asked
//!    for, and the scan is bounded by the runs in flight (`runs_by_status`);
//! 3. sends the due reports, at most `--forge-concurrency-per-account` of one account at
//!    once: what the change's newest run says now (`report.rs`), as a commit status and
//!    the change's one comment.
//!
//! A failure is retried on `--forge-retry-schedule` (stored: a restart keeps it), later
//! when the forge asks for it (`retry-after`, the rate limit's reset), and given up when
//! the schedule is used up; the change's next move starts a fresh one. Every attempt is a
//! line of the account's report log, never a body or a token. Nothing here blocks a run:
//! it only reads runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use iohr_domain::run::{Forge, RunStatus};
use tokio_util::sync::CancellationToken;

use super::client::{CallError, Endpoint, Outgoing};
use super::report::{Report, Standing, compose};
use super::{ForgeConfig, checked_commit, github, gitlab, parse_change};
use crate::Shared;
use crate::outbox::deliveries::{Clients, HttpsClient};
use crate::outbox::egress::EgressPolicy;
use crate::runs::baseline::{Baseline, baseline_by_rule};
use crate::runs::compare::{Before, CompareError, compare_with};
use crate::store::{
    DueReport, RUN_FINISHED, ReportKey, ReportLogLine, RunRow, Store, StoreError, now_ms,
};

/// The consumer name of the reporter's event cursors.
const CONSUMER: &str = "forge";
/// Events read per account per poll.
const EVENT_BATCH: u32 = 200;
/// Running runs marked per poll.
const SCAN_BATCH: u32 = 200;
/// Reports sent at most at once, all accounts together.
const CONCURRENCY: usize = 16;

/// The reporter's settings.
#[derive(Debug, Clone)]
pub struct ReporterConfig {
    pub forge: ForgeConfig,
    /// One call's time, answer included (`--webhook-timeout-ms`).
    pub timeout: Duration,
    pub poll: Duration,
}

/// Why a report was not sent.
#[derive(Debug, thiserror::Error)]
enum ReportError {
    #[error(transparent)]
    Forge(#[from] CallError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The compare pool is full, or the comparison's thread failed: tried again later.
    #[error("comparing: {0}")]
    Compare(String),
}

impl ReportError {
    fn class(&self) -> &'static str {
        match self {
            ReportError::Forge(error) => error.class(),
            ReportError::Store(_) => "store",
            ReportError::Compare(_) => "compare_busy",
        }
    }
}

/// What one attempt came to when nothing failed.
enum Sent {
    Reported {
        run_id: String,
        commit: Option<String>,
        state: &'static str,
        comment_id: Option<String>,
    },
    /// Nothing to say (no run, a change that names no forge's request or branch).
    Nothing,
    /// The account has no credentials for the forge: said once per mark, not retried.
    NoCredentials,
}

/// The reporter: runs until `shutdown`.
pub async fn run(
    shared: Shared,
    config: ReporterConfig,
    policy: Arc<EgressPolicy>,
    shutdown: CancellationToken,
) {
    let mut clients = match Clients::new(policy) {
        Ok(clients) => clients,
        Err(error) => {
            tracing::error!(%error, "the forge reporter cannot start: TLS configuration");
            return;
        }
    };
    let mut tick = tokio::time::interval(config.poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        tokio::select! {
            () = one_pass(&shared, &mut clients, &config) => {}
            // A report cut short is still due, and sent again after a restart.
            _ = shutdown.cancelled() => return,
        }
    }
}

async fn one_pass(shared: &Shared, clients: &mut Clients, config: &ReporterConfig) {
    let store = &shared.store;
    if let Err(error) = mark_from_events(store).await {
        tracing::warn!(%error, "forge reporter: reading events failed; retried next poll");
    }
    match store.unseen_forge_runs(SCAN_BATCH).await {
        Ok(unseen) => {
            for (key, run_id) in unseen {
                if let Err(error) = store.mark_forge_report(&key, Some(&run_id)).await {
                    tracing::warn!(%error, "forge reporter: marking a running run failed");
                }
            }
        }
        Err(error) => tracing::warn!(%error, "forge reporter: scanning running runs failed"),
    }
    let refreshed = match store.all_egress_allow().await {
        Ok(stored) => clients.refresh(stored).map_err(|e| e.to_string()),
        Err(error) => Err(error.to_string()),
    };
    if let Err(error) = refreshed {
        tracing::warn!(%error, "forge reporter: reading the accounts' egress exceptions failed");
        return;
    }
    let limit = u32::try_from(CONCURRENCY * 4).unwrap_or(u32::MAX);
    let due = match store.due_forge_reports(now_ms(), limit).await {
        Ok(due) => due,
        Err(error) => {
            tracing::warn!(%error, "forge reporter: reading due reports failed");
            return;
        }
    };
    // One account's share: the rest wait for the next poll.
    let per_account = config.forge.forge_concurrency_per_account as usize;
    let mut taken: HashMap<String, usize> = HashMap::new();
    let due: Vec<DueReport> = due
        .into_iter()
        .filter(|d| {
            let n = taken.entry(d.key.account_id.clone()).or_default();
            *n += 1;
            *n <= per_account
        })
        .collect();
    let clients = &*clients;
    futures_util::stream::iter(due)
        .for_each_concurrent(CONCURRENCY, |due| async move {
            attempt(shared, clients.of(&due.key.account_id), due, config).await;
        })
        .await;
}

/// Marks the reports the accounts' new `run.finished` events touch, moving the cursor.
async fn mark_from_events(store: &Store) -> Result<(), StoreError> {
    for account in store.event_backlog(CONSUMER).await? {
        for event in store
            .events_after(&account.account_id, account.done, EVENT_BATCH)
            .await?
        {
            if event.event_type == RUN_FINISHED
                && let Some(run_id) = event.data["run_id"].as_str()
            {
                for key in store
                    .forge_reports_of_run(&account.account_id, run_id)
                    .await?
                {
                    store.mark_forge_report(&key, None).await?;
                }
            }
            store
                .set_event_cursor(CONSUMER, &account.account_id, event.seq)
                .await?;
        }
    }
    Ok(())
}

async fn attempt(shared: &Shared, client: &HttpsClient, due: DueReport, config: &ReporterConfig) {
    let store = &shared.store;
    let key = &due.key;
    let mut line = ReportLogLine {
        at: now_ms(),
        forge: key.forge.clone(),
        change_ref: key.change_ref.clone(),
        attempt: due.attempts + 1,
        ..Default::default()
    };
    let done = match report_one(shared, client, &due, config, &mut line).await {
        Ok(Sent::Reported {
            run_id,
            commit,
            state,
            comment_id,
        }) => {
            if comment_id != due.comment_id
                && let Err(error) = store.set_forge_comment(key, comment_id.as_deref()).await
            {
                tracing::warn!(%error, "forge reporter: keeping the comment's id failed");
            }
            tracing::debug!(account = %key.account_id, change = %key.change_ref, run = %run_id, commit = ?commit, state, "forge report sent");
            line.outcome = "reported".to_string();
            true
        }
        Ok(Sent::Nothing) => return finish(store, key, due.wanted).await,
        Ok(Sent::NoCredentials) => {
            line.outcome = "no_credentials".to_string();
            true
        }
        Err(error) => {
            line.detail = Some(error.class().to_string());
            line.status_code = match &error {
                ReportError::Forge(call) => call.status_code().map(i64::from),
                _ => None,
            };
            tracing::info!(account = %key.account_id, change = %key.change_ref, %error, "forge report failed");
            let schedule = &config.forge.forge_retry_schedule;
            match schedule.next_delay(due.attempts + 1) {
                Some(delay) => {
                    let asked = match &error {
                        ReportError::Forge(call) => call.wait().unwrap_or_default(),
                        _ => Duration::ZERO,
                    };
                    let wait = delay.max(asked);
                    let retry_at =
                        now_ms() + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX / 2);
                    if let Err(error) = store.forge_report_failed(key, due.wanted, retry_at).await {
                        tracing::warn!(%error, "forge reporter: recording a failed attempt failed");
                    }
                    line.outcome = "failed".to_string();
                    false
                }
                None => {
                    line.outcome = "gave_up".to_string();
                    true
                }
            }
        }
    };
    if done {
        finish(store, key, due.wanted).await;
    }
    if let Err(error) = store.log_forge_report(&key.account_id, &line).await {
        tracing::warn!(%error, "forge reporter: writing the report log failed");
    }
}

async fn finish(store: &Store, key: &ReportKey, wanted: i64) {
    if let Err(error) = store.forge_report_done(key, wanted).await {
        tracing::warn!(%error, "forge reporter: recording a sent report failed");
    }
}

async fn report_one(
    shared: &Shared,
    client: &HttpsClient,
    due: &DueReport,
    config: &ReporterConfig,
    line: &mut ReportLogLine,
) -> Result<Sent, ReportError> {
    let store = &shared.store;
    let key = &due.key;
    let (Ok(forge), Some(change)) = (key.forge.parse::<Forge>(), parse_change(&key.change_ref))
    else {
        return Ok(Sent::Nothing);
    };
    let Some(run_id) = store.current_forge_run(key).await? else {
        return Ok(Sent::Nothing);
    };
    let Some(run) = store.run_of_account(&key.account_id, &run_id).await? else {
        return Ok(Sent::Nothing);
    };
    let commit = checked_commit(run.started_by.commit.as_deref());
    line.run_id = Some(run.id.clone());
    line.commit = commit.clone();
    let Some(credentials) = store.open_forge_credentials(&key.account_id, forge).await? else {
        return Ok(Sent::NoCredentials);
    };
    let standing = standing_of(shared, &run).await?;
    let public_url = config.forge.public_url.as_deref();
    let report: Report = compose(
        &key.change_ref,
        &run.id,
        commit.as_deref(),
        &standing,
        public_url,
    );
    line.state = Some(report.state.as_str().to_string());
    let target_url = public_url.map(|url| format!("{url}/console/runs/{}", run.id));
    let out = Outgoing {
        change: &change,
        change_ref: &key.change_ref,
        commit: commit.as_deref(),
        report: &report,
        target_url: target_url.as_deref(),
        comment_id: due.comment_id.as_deref(),
    };
    let headers = match forge {
        Forge::Github => github::headers(&credentials.token),
        Forge::Gitlab => gitlab::headers(&credentials.token),
    };
    let endpoint = Endpoint {
        client,
        api_url: &credentials.api_url,
        headers,
        timeout: config.timeout,
    };
    let comment_id = match forge {
        Forge::Github => github::send_report(&endpoint, &out).await?,
        Forge::Gitlab => {
            line.state = Some(gitlab::state(&report).to_string());
            gitlab::send_report(&endpoint, &out).await?
        }
    };
    Ok(Sent::Reported {
        run_id: run.id,
        commit,
        state: report.state.as_str(),
        comment_id,
    })
}

/// Where `run` stands with its baseline now.
async fn standing_of(shared: &Shared, run: &RunRow) -> Result<Standing, ReportError> {
    if !run.status.is_finished() {
        return Ok(Standing::Running);
    }
    if matches!(
        run.status,
        RunStatus::Error | RunStatus::Cancelled | RunStatus::Refused
    ) {
        return Ok(Standing::Ended {
            status: run.status,
            reason: run.reason.clone(),
        });
    }
    let (baseline, rule) = baseline_by_rule(&shared.store, &run.account_id, &run.id, None)
        .await
        .map_err(|e| match e {
            crate::runs::baseline::BaselineError::Store(store) => ReportError::Store(store),
            other => ReportError::Compare(other.to_string()),
        })?;
    match baseline {
        Baseline::Missing(why) => Ok(Standing::NoBaseline(why)),
        Baseline::Waiting(before) => Ok(Standing::BaselineRunning { before: before.id }),
        Baseline::Found(before) => {
            // Compared with the baseline just found, as `before=baseline` is: one found on
            // the trigger's base target is compared across the two targets, with a note.
            let id = before.id.clone();
            let before = Before::Found {
                run: Box::new(before),
                on_base_target: rule.on_base_target,
            };
            match compare_with(shared, &run.account_id, before, &run.id, None).await {
                Ok(comparison) => Ok(Standing::Compared(Box::new(comparison))),
                Err(CompareError::Refused(refusal)) => Ok(Standing::NotCompared {
                    before: id,
                    why: refusal.to_string(),
                }),
                Err(CompareError::Store(error)) => Err(ReportError::Store(error)),
                Err(other) => Err(ReportError::Compare(other.to_string())),
            }
        }
    }
}
