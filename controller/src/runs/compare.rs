//! What is different now: two finished runs of one account compared
//! ([`iohr_domain::compare`]), for every surface (REST, gRPC `WatchRun`'s compare, the
//! console). Another account's run reads as missing. `before` may be `baseline`: the
//! after run's found baseline (`runs/baseline.rs`); one found on the trigger's base
//! target is compared as if on the after run's target, and the notes say so. Findings the after run has and the
//! before run lacks are differences too. Refusals are a typed [`CompareError`]; each
//! surface says it in its own terms (`crate::error` holds the HTTP one).

use iohr_domain::compare::{Comparison, NOISE_FLOOR, Refusal, Side, add_new_findings, compare};

use super::baseline::Baseline;
use crate::Shared;
use crate::compare_pool::{Failed, Full};
use crate::store::{RunRow, StoreError};

/// Why two runs were not compared.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// The noise floor is not a share in `[0, 1)`.
    #[error("noise_floor is a share between 0 and 1, such as 0.02")]
    NoiseFloor,
    /// The compare pool has no place for this account now.
    #[error("{0}; retry shortly")]
    Busy(Full),
    /// Either run is missing (`NotFound`), or the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The comparison's thread failed: a bug.
    #[error(transparent)]
    Failed(Failed),
    /// The runs cannot be compared (different scenario or target, not finished, ...).
    #[error("{0}")]
    Refused(Refusal),
    /// `before=baseline` and the after run has none: why, by which rule.
    #[error("no baseline: {0}")]
    NoBaseline(String),
}

/// The `before` that names the after run's found baseline.
pub const BASELINE: &str = "baseline";

fn side(run: &RunRow) -> Side<'_> {
    Side {
        id: &run.id,
        kind: run.kind,
        scenario_version: &run.scenario_version,
        environment: &run.environment,
        target: &run.target,
        status: run.status,
        result: run.result.as_ref(),
    }
}

/// The comparison of two of an account's runs (`noise_floor` defaults to
/// [`NOISE_FLOOR`]).
pub async fn compare_runs(
    shared: &Shared,
    account_id: &str,
    before: &str,
    after: &str,
    noise_floor: Option<f64>,
) -> Result<Comparison, CompareError> {
    let noise_floor = noise_floor.unwrap_or(NOISE_FLOOR);
    if !(0.0..1.0).contains(&noise_floor) {
        return Err(CompareError::NoiseFloor);
    }
    // A place first: refused at once when every one is taken, before anything is read.
    let admitted = shared
        .compares
        .admit(account_id)
        .map_err(CompareError::Busy)?;
    let mut runs = Vec::with_capacity(2);
    let mut on_base_target = false;
    if before == BASELINE {
        let (found, rule) =
            super::baseline::baseline_by_rule(&shared.store, account_id, after, None)
                .await
                .map_err(|e| match e {
                    super::baseline::BaselineError::Store(e) => CompareError::Store(e),
                    other => CompareError::NoBaseline(other.to_string()),
                })?;
        match found {
            Baseline::Found(run) => {
                on_base_target = rule.on_base_target;
                runs.push(run);
            }
            Baseline::Waiting(run) => {
                return Err(CompareError::Refused(Refusal::NotFinished {
                    id: run.id,
                    status: run.status,
                }));
            }
            Baseline::Missing(why) => return Err(CompareError::NoBaseline(why)),
        }
    }
    let ids: &[&str] = if runs.is_empty() {
        &[before, after]
    } else {
        &[after]
    };
    for id in ids {
        let run = shared
            .store
            .run_of_account(account_id, id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("run {id}")))?;
        runs.push(run);
    }
    // Tens of milliseconds of CPU for long load runs: on a blocking thread.
    let computed = admitted
        .run(move || {
            let (before, after) = (&runs[0], &runs[1]);
            // Only a found baseline on the trigger's base target compares across targets.
            let mut before_side = side(before);
            if on_base_target {
                before_side.target = &after.target;
            }
            let mut comparison = compare(&before_side, &side(after), noise_floor)?;
            if on_base_target {
                comparison.notes.push(format!(
                    "the baseline {} ran on the trigger's base target {}, the run on {}: compared as one target",
                    before.id, before.target, after.target
                ));
            }
            add_new_findings(&mut comparison, &before.findings, &after.findings);
            Ok::<_, Refusal>(comparison)
        })
        .await
        .map_err(CompareError::Failed)?;
    computed.map_err(CompareError::Refused)
}
