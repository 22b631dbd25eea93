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
use crate::compare_pool::{Admitted, Failed, Full};
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

/// A comparison's before run: one named by id, or the after run's baseline as
/// `runs/baseline.rs` found it.
#[derive(Debug, Clone)]
pub enum Before<'a> {
    Id(&'a str),
    Found {
        run: Box<RunRow>,
        /// As the baseline's rule says: it ran on the trigger's base target.
        on_base_target: bool,
    },
}

/// The noise floor checked and a place in the compare pool: refused at once when every
/// one is taken, before anything is read.
fn admitted(
    shared: &Shared,
    account_id: &str,
    noise_floor: Option<f64>,
) -> Result<(f64, Admitted), CompareError> {
    let noise_floor = noise_floor.unwrap_or(NOISE_FLOOR);
    if !(0.0..1.0).contains(&noise_floor) {
        return Err(CompareError::NoiseFloor);
    }
    let admitted = shared
        .compares
        .admit(account_id)
        .map_err(CompareError::Busy)?;
    Ok((noise_floor, admitted))
}

/// The comparison of two of an account's runs (`noise_floor` defaults to
/// [`NOISE_FLOOR`]); `before` may be [`BASELINE`].
pub async fn compare_runs(
    shared: &Shared,
    account_id: &str,
    before: &str,
    after: &str,
    noise_floor: Option<f64>,
) -> Result<Comparison, CompareError> {
    let (noise_floor, admitted) = admitted(shared, account_id, noise_floor)?;
    let before = if before == BASELINE {
        let (found, rule) =
            super::baseline::baseline_by_rule(&shared.store, account_id, after, None)
                .await
                .map_err(|e| match e {
                    super::baseline::BaselineError::Store(e) => CompareError::Store(e),
                    other => CompareError::NoBaseline(other.to_string()),
                })?;
        match found {
            Baseline::Found(run) => Before::Found {
                run: Box::new(run),
                on_base_target: rule.on_base_target,
            },
            Baseline::Waiting(run) => {
                return Err(CompareError::Refused(Refusal::NotFinished {
                    id: run.id,
                    status: run.status,
                }));
            }
            Baseline::Missing(why) => return Err(CompareError::NoBaseline(why)),
        }
    } else {
        Before::Id(before)
    };
    compared(shared, account_id, admitted, before, after, noise_floor).await
}

/// [`compare_runs`] with the before run given: the forge reporter's, which found the
/// baseline already to say where the run stands, and compares with that one.
pub async fn compare_with(
    shared: &Shared,
    account_id: &str,
    before: Before<'_>,
    after: &str,
    noise_floor: Option<f64>,
) -> Result<Comparison, CompareError> {
    let (noise_floor, admitted) = admitted(shared, account_id, noise_floor)?;
    compared(shared, account_id, admitted, before, after, noise_floor).await
}

async fn compared(
    shared: &Shared,
    account_id: &str,
    admitted: Admitted,
    before: Before<'_>,
    after: &str,
    noise_floor: f64,
) -> Result<Comparison, CompareError> {
    let (mut runs, on_base_target, ids) = match before {
        Before::Id(before) => (Vec::with_capacity(2), false, [before, after].to_vec()),
        Before::Found {
            run,
            on_base_target,
        } => (vec![*run], on_base_target, vec![after]),
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
