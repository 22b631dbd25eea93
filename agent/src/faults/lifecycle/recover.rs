//! A starting agent's recovery of what its ledger holds open, and whose turn it is to undo
//! an entry (this agent's, or its warden's: see `faults::warden`).

use std::time::Duration;

use super::super::ledger::{Ledger, LedgerEntry};
use super::super::warden::Claim;
use super::retry::retry_waits;
use super::{Clock, Driver, Retry};

/// Undoes every open entry of the ledger, newest first (a starting agent, before it takes
/// work). Returns what stayed open: entries whose undo failed after the retries.
pub async fn recover<D: Driver, E: Clock>(
    driver: &D,
    clock: &E,
    ledger: &Ledger,
    retry: Retry,
) -> Result<Vec<(LedgerEntry, String)>, super::super::ledger::LedgerError> {
    let mut still_open = Vec::new();
    for entry in ledger.open_entries()? {
        match take_turn(ledger, &entry.id, clock, retry.timeout).await {
            Turn::Ours => {}
            Turn::UndoneBy(who) => {
                tracing::info!(ledger_id = %entry.id, run = %entry.run_id, by = %who, "left-over fault already undone");
                ledger.close(&entry.id, clock.now_ms())?;
                continue;
            }
            Turn::Busy(why) => {
                still_open.push((entry, why));
                continue;
            }
        }
        let mut last = None;
        let mut waits = retry_waits(retry, clock);
        for attempt in 1..=retry.attempts.max(1) {
            let outcome = tokio::select! {
                out = driver.undo(&entry.undo) => out.map_err(|e| e.to_string()),
                _ = clock.sleep(retry.timeout) => Err("no answer".to_string()),
            };
            match outcome {
                Ok(()) => {
                    last = None;
                    break;
                }
                Err(e) => {
                    last = Some(e);
                    if attempt < retry.attempts {
                        clock.sleep(waits.next().unwrap_or(retry.max_wait)).await;
                    }
                }
            }
        }
        match last {
            None => {
                tracing::info!(ledger_id = %entry.id, run = %entry.run_id, fault = entry.fault.name(), "left-over fault undone");
                ledger.close(&entry.id, clock.now_ms())?;
            }
            Some(e) => {
                tracing::error!(ledger_id = %entry.id, run = %entry.run_id, error = %e, "left-over fault could not be undone");
                if let Err(release) = ledger.release(&entry.id) {
                    tracing::warn!(ledger_id = %entry.id, error = %release, "fault ledger: releasing the claim failed");
                }
                still_open.push((entry, e));
            }
        }
    }
    Ok(still_open)
}

/// Whose turn it is to undo a ledger entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Turn {
    /// This agent's: it undoes it now.
    Ours,
    /// Already undone by someone else (its warden, an operator).
    UndoneBy(String),
    /// Another live process is still undoing it after the wait; why, in words.
    Busy(String),
}

/// Claims the undo of entry `id`, waiting (at most `within`) while another live process
/// (its warden) undoes it. A claim that cannot be read or written leaves the undo to this
/// agent: undoing is the safe side.
pub(super) async fn take_turn<E: Clock>(
    ledger: &Ledger,
    id: &str,
    clock: &E,
    within: Duration,
) -> Turn {
    let until = clock.monotonic() + within;
    loop {
        match ledger.claim(id) {
            Ok(Claim::Ours) => return Turn::Ours,
            Ok(Claim::Undone { by }) => return Turn::UndoneBy(by.as_str().to_string()),
            Ok(Claim::Busy { by, pid }) if clock.monotonic() >= until => {
                return Turn::Busy(format!(
                    "the {} (process {pid}) is still undoing it",
                    by.as_str()
                ));
            }
            Ok(Claim::Busy { .. }) => clock.sleep(Duration::from_millis(20)).await,
            Err(e) => {
                tracing::warn!(ledger_id = id, error = %e, "fault ledger: the claim failed; undoing anyway");
                return Turn::Ours;
            }
        }
    }
}
