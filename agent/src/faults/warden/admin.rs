//! `iohr-agent faults list|undo --state-dir DIR`: what a state directory's ledger holds
//! open and which wardens are armed, and undoing it all by hand (an operator cleaning up).
//! Neither needs the ledger's lock: `list` only reads, and `undo` claims each entry as its
//! warden would, so it never undoes a fault its agent or warden is undoing.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::claim::{self, Claim, Claimant};
use super::{ARMED, Armed, Pin, WardenError, armed, file};
use crate::faults::ledger::{self, Ledger, LedgerEntry, LedgerError};
use crate::faults::{Undo, host, process};

/// `iohr-agent faults ...`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum FaultsCommand {
    /// The open fault ledger entries of a state directory and their armed wardens.
    List {
        #[command(flatten)]
        dir: StateDir,
        /// One JSON object instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Undo every open ledger entry of a state directory now, newest first.
    Undo {
        #[command(flatten)]
        dir: StateDir,
        /// One JSON object instead of lines.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Clone, clap::Args)]
pub struct StateDir {
    /// The agent's state directory (default: $XDG_STATE_HOME/iohr-agent, or
    /// ~/.local/state/iohr-agent).
    #[arg(long, env = "IOHR_AGENT_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
}

/// A warden as `faults list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct WardenView {
    #[serde(flatten)]
    pub armed: Armed,
    pub warden_alive: bool,
    pub owner_alive: bool,
    /// `undoing` or `undone`, and by whom, when someone claimed the undo.
    pub claim: Option<claim::Record>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    /// Newest first.
    pub open: Vec<LedgerEntry>,
    pub wardens: Vec<WardenView>,
}

/// What `faults list` shows of the ledger in `ledger_dir`.
pub fn list(ledger_dir: &Path) -> Result<Listing, WardenError> {
    let mut open = ledger::read_open(ledger_dir).map_err(ledger_error)?;
    open.reverse();
    let wardens = armed(ledger_dir)?
        .into_iter()
        .map(|armed| WardenView {
            warden_alive: armed.warden.alive(),
            owner_alive: armed.owner.alive(),
            claim: claim::read(ledger_dir, &armed.ledger_id),
            armed,
        })
        .collect();
    Ok(Listing { open, wardens })
}

impl Listing {
    pub fn lines(&self, now_ms: u64) -> Vec<String> {
        let mut lines = vec![format!("open ledger entries: {}", self.open.len())];
        for e in &self.open {
            lines.push(format!(
                "  {}  run {}  {}  undo {}  deadline {}",
                e.id,
                e.run_id,
                e.fault.name(),
                serde_json::to_string(&e.undo).unwrap_or_default(),
                relative(e.deadline, now_ms)
            ));
        }
        lines.push(format!("armed wardens: {}", self.wardens.len()));
        for w in &self.wardens {
            let alive = |yes: bool| if yes { "running" } else { "gone" };
            let claim = w
                .claim
                .as_ref()
                .map(|c| format!("  claimed by the {} ({:?})", c.by.as_str(), c.state))
                .unwrap_or_default();
            lines.push(format!(
                "  {}  warden process {} ({})  watching agent process {} ({})  deadline {}{claim}",
                w.armed.ledger_id,
                w.armed.warden.pid,
                alive(w.warden_alive),
                w.armed.owner.pid,
                alive(w.owner_alive),
                relative(w.armed.deadline, now_ms)
            ));
        }
        lines
    }
}

fn relative(deadline: u64, now_ms: u64) -> String {
    if deadline >= now_ms {
        format!("in {:.1} s", (deadline - now_ms) as f64 / 1000.0)
    } else {
        format!("{:.1} s ago", (now_ms - deadline) as f64 / 1000.0)
    }
}

/// What `faults undo` did with one entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub ledger_id: String,
    pub run_id: String,
    pub fault: String,
    /// `undone`, `nothing_left`, `already_undone`, `left` (someone else has it) or `failed`.
    pub outcome: &'static str,
    pub message: String,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.outcome != "failed"
    }
}

/// Undoes every open entry of the ledger in `ledger_dir`, newest first, closes each one
/// undone and ends its warden. Faults in a fault proxy are closed when no agent holds the
/// ledger (they died with it) and left to the agent that does.
pub fn undo_all(ledger_dir: &Path) -> Result<Vec<Outcome>, WardenError> {
    // Held while this runs when no agent has it, so that none starts meanwhile.
    let held = match Ledger::open(ledger_dir) {
        Ok(ledger) => Some(ledger),
        Err(LedgerError::Held(_)) => None,
        Err(e) => return Err(ledger_error(e)),
    };
    let mut open = ledger::read_open(ledger_dir).map_err(ledger_error)?;
    open.reverse();
    let mut outcomes = Vec::new();
    for entry in open {
        let outcome = undo_one(ledger_dir, &entry, held.is_some());
        outcomes.push(Outcome {
            ledger_id: entry.id.clone(),
            run_id: entry.run_id.clone(),
            fault: entry.fault.name().to_string(),
            outcome: outcome.0,
            message: outcome.1,
        });
    }
    Ok(outcomes)
}

fn undo_one(ledger_dir: &Path, entry: &LedgerEntry, no_agent: bool) -> (&'static str, String) {
    let id = entry.id.as_str();
    if let Undo::ProxyFault { proxy, .. } = &entry.undo {
        if !no_agent {
            return (
                "left",
                format!(
                    "a fault of the fault proxy {proxy}, in the running agent, which removes it"
                ),
            );
        }
        return match close(ledger_dir, id) {
            Ok(()) => (
                "nothing_left",
                format!("the fault proxy {proxy} ended with its agent"),
            ),
            Err(e) => ("failed", e.to_string()),
        };
    }
    match claim::claim(ledger_dir, id, Claimant::Operator) {
        Ok(Claim::Ours) => {}
        Ok(Claim::Undone { by }) => {
            return match close(ledger_dir, id) {
                Ok(()) => ("already_undone", format!("undone by the {}", by.as_str())),
                Err(e) => ("failed", e.to_string()),
            };
        }
        Ok(Claim::Busy { by, pid }) => {
            return (
                "left",
                format!("the {} (process {pid}) is undoing it", by.as_str()),
            );
        }
        Err(e) => return ("failed", e.to_string()),
    }
    let mut last = String::new();
    for attempt in 0..3u32 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(200) * attempt);
        }
        match host::undo_blocking(&entry.undo) {
            Ok(report) => {
                let settled =
                    claim::settle(ledger_dir, id, true).and_then(|()| close(ledger_dir, id));
                return match settled {
                    Err(e) => ("failed", format!("undone, but: {e}")),
                    Ok(()) if report.undone => ("undone", report.message),
                    Ok(()) => ("nothing_left", report.message),
                };
            }
            Err(e) => last = e.to_string(),
        }
    }
    let _ = claim::settle(ledger_dir, id, false);
    ("failed", last)
}

/// Closes entry `id`, then ends its warden (pinned: no other process is signalled) and
/// removes its files.
fn close(ledger_dir: &Path, id: &str) -> Result<(), WardenError> {
    ledger::append_close(ledger_dir, id, now_ms()).map_err(ledger_error)?;
    if let Some(armed) = armed(ledger_dir)?.into_iter().find(|a| a.ledger_id == id) {
        stop_warden(&armed.warden);
    }
    if let Ok(path) = file(ledger_dir, id, ARMED) {
        let _ = std::fs::remove_file(path);
    }
    if let Ok(path) = file(ledger_dir, id, claim::EXT) {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

fn stop_warden(warden: &Pin) {
    match process::signal_pinned(
        warden.pid,
        warden.start_time,
        nix::sys::signal::Signal::SIGKILL,
    ) {
        Ok(sent) => tracing::info!(warden = warden.pid, %sent, "warden ended"),
        Err(e) => tracing::info!(warden = warden.pid, error = %e, "warden already gone"),
    }
}

fn ledger_error(e: LedgerError) -> WardenError {
    WardenError::Failed(e.to_string())
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Runs `faults list|undo` on the ledger of `state_dir` (`default` when not given) and
/// prints what it found or did; the exit status: 0, or 3 when an undo failed.
pub fn run(command: FaultsCommand, default: Option<PathBuf>) -> Result<i32, WardenError> {
    let (dir, json) = match &command {
        FaultsCommand::List { dir, json } | FaultsCommand::Undo { dir, json } => {
            (dir.state_dir.clone().or(default), *json)
        }
    };
    let Some(state_dir) = dir else {
        return Err(WardenError::Failed(
            "no --state-dir, IOHR_AGENT_STATE_DIR, XDG_STATE_HOME or HOME".into(),
        ));
    };
    let ledger_dir = state_dir.join("ledger");
    let (text, code) = match command {
        FaultsCommand::List { .. } => {
            let listing = list(&ledger_dir)?;
            let text = if json {
                serde_json::to_string(&listing)?
            } else {
                listing.lines(now_ms()).join("\n")
            };
            (text, 0)
        }
        FaultsCommand::Undo { .. } => {
            let outcomes = undo_all(&ledger_dir)?;
            let code = if outcomes.iter().all(Outcome::ok) {
                0
            } else {
                3
            };
            let text = if json {
                serde_json::json!({ "undo": outcomes }).to_string()
            } else if outcomes.is_empty() {
                "nothing open".to_string()
            } else {
                outcomes
                    .iter()
                    .map(|o| format!("{}  {}  {}: {}", o.ledger_id, o.fault, o.outcome, o.message))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            (text, code)
        }
    };
    println!("{text}");
    Ok(code)
}
