//! Who undoes a fault: the first to claim it. A claim is `ID.claim` in the wardens'
//! directory, read and written only under `claims.lock` (held for microseconds, never
//! across an undo). A claim by a process that is gone (pinned by pid and start time) is
//! stale and taken over; one by a live process is left to it; an undone claim stays
//! undone until the entry's files are removed with its close.

use std::fs::OpenOptions;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Pin, WardenError, dir, file, io, read_json, write_json};

pub(crate) const EXT: &str = "claim";
const LOCK: &str = "claims.lock";

/// How long a claim waits for the claims' lock before it gives up (the lock is held for
/// microseconds; only a holder stopped right then keeps it longer).
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// Who undoes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Claimant {
    /// The agent, at a deadline, a rollback or its start.
    Agent,
    /// The fault's warden.
    Warden,
    /// `iohr-agent faults undo`, by hand.
    Operator,
}

impl Claimant {
    pub fn as_str(self) -> &'static str {
        match self {
            Claimant::Agent => "agent",
            Claimant::Warden => "warden",
            Claimant::Operator => "operator",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Undoing,
    Undone,
}

/// `ID.claim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub state: State,
    pub by: Claimant,
    pub pid: u32,
    pub start_time: u64,
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This process undoes it now; [`settle`] says how that went.
    Ours,
    /// Already undone, by `by`.
    Undone { by: Claimant },
    /// A live process (`pid`) is undoing it.
    Busy { by: Claimant, pid: u32 },
}

/// Claims the undo of entry `id` for this process, as `by`.
pub fn claim(ledger_dir: &Path, id: &str, by: Claimant) -> Result<Claim, WardenError> {
    let me = Pin::of_self()?;
    let path = file(ledger_dir, id, EXT)?;
    locked(ledger_dir, || match read_json::<Record>(&path) {
        Some(r) if r.state == State::Undone => Ok(Claim::Undone { by: r.by }),
        Some(r) if r.pid == me.pid && r.start_time == me.start_time => Ok(Claim::Ours),
        Some(r)
            if Pin {
                pid: r.pid,
                start_time: r.start_time,
            }
            .alive() =>
        {
            Ok(Claim::Busy {
                by: r.by,
                pid: r.pid,
            })
        }
        // None, or a claimant that is gone: ours now.
        _ => {
            let record = Record {
                state: State::Undoing,
                by,
                pid: me.pid,
                start_time: me.start_time,
            };
            write_json(&path, &record).map(|()| Claim::Ours)
        }
    })
}

/// Ends this process's claim on entry `id`: undone (it stays so), or given up (the claim
/// is removed, so another may try). A claim that is not this process's is left as it is.
pub fn settle(ledger_dir: &Path, id: &str, undone: bool) -> Result<(), WardenError> {
    let me = Pin::of_self()?;
    let path = file(ledger_dir, id, EXT)?;
    locked(ledger_dir, || match read_json::<Record>(&path) {
        Some(mut r) if r.pid == me.pid && r.start_time == me.start_time => {
            if undone {
                r.state = State::Undone;
                write_json(&path, &r)
            } else {
                std::fs::remove_file(&path).map_err(io(&path))
            }
        }
        _ => Ok(()),
    })
}

/// The claim on entry `id`, if any.
pub fn read(ledger_dir: &Path, id: &str) -> Option<Record> {
    file(ledger_dir, id, EXT).ok().and_then(|p| read_json(&p))
}

/// Runs `f` holding the claims' lock (bounded wait).
fn locked<T>(
    ledger_dir: &Path,
    f: impl FnOnce() -> Result<T, WardenError>,
) -> Result<T, WardenError> {
    let dir = dir(ledger_dir);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let path = dir.join(LOCK);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(&path))?;
    let until = Instant::now() + LOCK_WAIT;
    loop {
        match lock.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(WardenError::Failed(format!(
                    "{} is held for more than {} s",
                    path.display(),
                    LOCK_WAIT.as_secs()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
    }
    // Released when `lock` is dropped, after `f`.
    f()
}
