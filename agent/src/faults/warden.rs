//! The warden: a fault that outlives the agent's process (a paused process, a disk fill's
//! file, a netem qdisc, a killed process to restart) has its undo armed outside that process
//! too, so that it is undone at its deadline or when the agent dies, whichever comes first,
//! even when nothing ever starts the agent again.
//!
//! A warden is the agent's own binary in a hidden mode (`iohr-agent warden`, [`watch`]),
//! started by [`Wardens::arm`] right after the fault's ledger entry is on disk and before the
//! fault is applied, in a session of its own (`setsid`: a signal to the agent's process
//! group or a hangup of its terminal does not reach it). It watches the agent through a
//! pidfd (which a reused pid cannot fool) and its own clock, and undoes the fault at
//! [`GRACE`] after the deadline (the agent's own undo comes first when the agent is well),
//! when the agent dies, or when it is sent SIGTERM. It reads the undo from the ledger entry,
//! so the ledger stays the one record.
//!
//! The agent and its warden never both undo one fault: whoever undoes it first *claims* it
//! ([`claim`]), under a short lock of the claims' own, and a claim held by a live process is
//! left alone; the claimant closes the ledger entry. (The ledger's own lock cannot serve: the
//! agent holds it for its whole life, so the warden of a stuck agent could never take it.)
//! Undos are idempotent and pinned as well, but that is not enough alone: a late second
//! SIGCONT or qdisc delete could undo a *later* fault on the same process or interface.

pub mod admin;
pub mod claim;
pub mod watch;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{FaultError, Undo, process};

pub use claim::{Claim, Claimant};

/// How long after a fault's deadline its warden undoes it: the agent's own undo, at the
/// deadline, comes first when the agent is well.
pub const GRACE: Duration = Duration::from_millis(500);

/// A warden ends by this long after its fault's deadline, whatever it is doing.
pub const HARD_STOP: Duration = Duration::from_secs(1);

/// How long a starting warden may take to say it watches the agent.
const READY_WAIT: Duration = Duration::from_secs(5);

/// The wardens' and claims' directory, inside the ledger's.
const DIR: &str = "wardens";

/// The arm record's file name ends with this; a claim's with `.claim`.
const ARMED: &str = "warden";

#[derive(Debug, thiserror::Error)]
pub enum WardenError {
    #[error("warden {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("warden: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("warden: {0}")]
    Failed(String),
    #[error("warden: {0}")]
    Fault(#[from] FaultError),
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WardenError + '_ {
    move |source| WardenError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Which undos need a warden: those of faults that stay after the agent's process is gone.
/// A fault proxy's faults die with it; hogs die with it (their death signal) and stop at
/// their deadline by themselves.
pub fn outlives_agent(undo: &Undo) -> bool {
    matches!(
        undo,
        Undo::Resume { .. }
            | Undo::RemoveFile { .. }
            | Undo::RemoveQdisc { .. }
            | Undo::Restart { .. }
    )
}

/// A process pinned by pid and start time (clock ticks since boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    pub pid: u32,
    pub start_time: u64,
}

impl Pin {
    /// This process.
    pub fn of_self() -> Result<Pin, WardenError> {
        let pid = std::process::id();
        let stat = process::stat(pid)?
            .ok_or_else(|| WardenError::Failed("cannot read this process's own stat".into()))?;
        Ok(Pin {
            pid,
            start_time: stat.start_time,
        })
    }

    /// The pinned process still runs (a zombie, a gone or a reused pid do not).
    pub fn alive(&self) -> bool {
        process::check_pinned(self.pid, self.start_time).is_ok()
    }
}

/// An armed warden, as `ID.warden` in the wardens' directory says (for `faults list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Armed {
    pub ledger_id: String,
    pub warden: Pin,
    /// The agent process it watches.
    pub owner: Pin,
    /// The fault's deadline, Unix milliseconds.
    pub deadline: u64,
}

/// The wardens' directory of a ledger directory.
pub fn dir(ledger_dir: &Path) -> PathBuf {
    ledger_dir.join(DIR)
}

/// `ID.EXT` in the wardens' directory; an id that is not a ledger id's shape is refused,
/// so no path can be made of one.
pub(crate) fn file(ledger_dir: &Path, id: &str, ext: &str) -> Result<PathBuf, WardenError> {
    let fine = !id.is_empty()
        && id.len() <= 64
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !fine {
        return Err(WardenError::Failed(format!("{id:?} is not a ledger id")));
    }
    Ok(dir(ledger_dir).join(format!("{id}.{ext}")))
}

/// Writes `value` as JSON to `path` whole: a temporary file renamed over it.
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), WardenError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, serde_json::to_vec(value)?).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// Reads `path` as JSON; `None` when it is not there or does not parse.
pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    std::fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
}

/// The armed wardens' records of a ledger directory, by ledger id.
pub fn armed(ledger_dir: &Path) -> Result<Vec<Armed>, WardenError> {
    let dir = dir(ledger_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&dir)(e)),
    };
    let mut out: Vec<Armed> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ARMED))
        .filter_map(|p| read_json(&p))
        .collect();
    out.sort_by(|a, b| a.ledger_id.cmp(&b.ledger_id));
    Ok(out)
}

/// Removes what the wardens' directory holds of entry `id` (its arm record and its claim).
pub(crate) fn forget(ledger_dir: &Path, id: &str) {
    for ext in [ARMED, claim::EXT] {
        if let Ok(path) = file(ledger_dir, id, ext) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Removes the files of entries no longer open (a ledger being opened: no agent runs on it).
pub(crate) fn sweep(ledger_dir: &Path, open: &[String]) {
    let Ok(entries) = std::fs::read_dir(dir(ledger_dir)) else {
        return;
    };
    for path in entries.filter_map(Result::ok).map(|e| e.path()) {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let id = name.split('.').next().unwrap_or_default();
        let ours =
            name.ends_with(&format!(".{ARMED}")) || name.ends_with(&format!(".{}", claim::EXT));
        if ours && !open.iter().any(|o| o == id) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The agent's side: starts a warden per fault, and ends it when the fault is closed.
#[derive(Debug)]
pub struct Wardens {
    program: PathBuf,
    owner: Pin,
    /// The wardens this process started, by ledger id: killed and reaped on disarm.
    children: Mutex<HashMap<String, Child>>,
}

impl Wardens {
    /// Wardens of this process, run as `program warden ...` (the agent's own binary).
    pub fn new(program: &Path) -> Result<Wardens, WardenError> {
        Ok(Wardens {
            program: program.to_path_buf(),
            owner: Pin::of_self()?,
            children: Mutex::new(HashMap::new()),
        })
    }

    fn children(&self) -> std::sync::MutexGuard<'_, HashMap<String, Child>> {
        self.children
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn is_armed(&self, id: &str) -> bool {
        self.children().contains_key(id)
    }

    /// Starts the warden of open ledger entry `id` and waits (bounded) until it watches
    /// this process. Blocking (a few milliseconds).
    pub fn arm(&self, ledger_dir: &Path, id: &str, deadline: u64) -> Result<Armed, WardenError> {
        let wardens = dir(ledger_dir);
        std::fs::create_dir_all(&wardens).map_err(io(&wardens))?;
        let record = file(ledger_dir, id, ARMED)?;
        let mut cmd = Command::new(&self.program);
        cmd.arg("warden")
            .arg("--ledger-dir")
            .arg(ledger_dir)
            .args(["--id", id])
            .args(["--owner-pid", &self.owner.pid.to_string()])
            .args(["--owner-start-time", &self.owner.start_time.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        process::in_own_session(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| WardenError::Failed(format!("starting a warden: {e}")))?;
        let said = first_line(&mut child);
        let ready = match said.recv_timeout(READY_WAIT) {
            Ok(line) if line.trim() == "ready" => Ok(()),
            Ok(line) => Err(line.trim().trim_start_matches("error: ").to_string()),
            Err(_) => Err(format!(
                "it did not say it watches the agent within {} s",
                READY_WAIT.as_secs()
            )),
        };
        let pid = child.id();
        let stat = process::stat(pid).ok().flatten();
        let (Ok(()), Some(stat)) = (ready.clone(), stat) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(WardenError::Failed(format!(
                "the warden of {id} (process {pid}) did not start: {}",
                ready
                    .err()
                    .unwrap_or_else(|| "its stat cannot be read".into())
            )));
        };
        let armed = Armed {
            ledger_id: id.to_string(),
            warden: Pin {
                pid,
                start_time: stat.start_time,
            },
            owner: self.owner,
            deadline,
        };
        write_json(&record, &armed)?;
        tracing::info!(ledger_id = id, warden = pid, deadline, "warden armed");
        self.children().insert(id.to_string(), child);
        Ok(armed)
    }

    /// Ends the warden of entry `id` (its fault is undone or was never applied) and removes
    /// its files. A warden that already ended is reaped.
    pub fn disarm(&self, ledger_dir: &Path, id: &str) {
        if let Some(mut child) = self.children().remove(id) {
            // Still our unreaped child: its pid cannot have been reused.
            let _ = child.kill();
            let _ = child.wait();
            tracing::info!(ledger_id = id, warden = child.id(), "warden disarmed");
        }
        forget(ledger_dir, id);
    }
}

/// The child's first line on stdout, read on a thread so the wait for it is bounded.
fn first_line(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut line = String::new();
            if BufReader::new(stdout).read_line(&mut line).unwrap_or(0) > 0 {
                let _ = tx.send(line);
            }
        });
    }
    rx
}

#[cfg(test)]
mod tests;
