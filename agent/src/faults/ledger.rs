//! The fault ledger: a durable record, on the agent's host, of every fault applied and not
//! yet undone, so that a restarted agent can undo what a crashed one left open.
//!
//! One append-only file of JSON lines (`ledger.jsonl` in the ledger's directory). A fault's
//! entry (with its undo and deadline) is written and fsynced *before* the fault is applied;
//! a better undo learnt while applying (a child's pid) and the entry's close are appended and
//! fsynced the same way. Opening the ledger rewrites the file with only the open entries
//! (a new file fsynced, renamed into place, the directory fsynced), which also drops a torn
//! last line left by a crash mid-write.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use iohr_domain::faults::Fault;
use serde::{Deserialize, Serialize};

use super::Undo;
use super::warden::{self, Claim, Claimant, Wardens};

const FILE: &str = "ledger.jsonl";
const REWRITE: &str = "ledger.jsonl.new";
const LOCK: &str = "ledger.lock";

/// One applied fault: what it is, how to undo it, and until when it may hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerEntry {
    pub id: String,
    pub run_id: String,
    pub fault: Fault,
    pub undo: Undo,
    /// Milliseconds since the Unix epoch.
    pub applied_at: u64,
    pub deadline: u64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Record {
    Open { entry: LedgerEntry },
    Undo { id: String, undo: Undo },
    Close { id: String, at: u64 },
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("fault ledger {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("fault ledger: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("fault ledger: the lock is poisoned")]
    Poisoned,
    /// Another agent process holds this ledger: two agents must not undo each other's
    /// faults.
    #[error(
        "fault ledger {0}: another agent process holds it; give each agent its own --state-dir"
    )]
    Held(PathBuf),
    /// A fault's warden could not be armed (the fault is then not applied).
    #[error("fault ledger: {0}")]
    Warden(#[from] warden::WardenError),
}

pub struct Ledger {
    dir: PathBuf,
    file: Mutex<File>,
    /// Holds the directory's advisory lock for the ledger's life (released on drop, and
    /// by the kernel when the process dies).
    _lock: File,
    /// Arms a warden for each entry whose fault outlives this process (the agent's; none
    /// in tests of the lifecycle alone).
    wardens: Option<Wardens>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").field("dir", &self.dir).finish()
    }
}

/// A ledger id that sorts by time: `MILLIS-RANDOM`.
pub fn new_id(now_ms: u64, random: u32) -> String {
    format!("{now_ms:013}-{random:08x}")
}

impl Ledger {
    /// Opens (creating) the ledger in `dir`, keeping only its open entries.
    pub fn open(dir: &Path) -> Result<Ledger, LedgerError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| LedgerError::Io { path, source }
        };
        fs::create_dir_all(dir).map_err(io(dir))?;
        let lock_path = dir.join(LOCK);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(LedgerError::Held(dir.to_path_buf())),
            Err(fs::TryLockError::Error(source)) => {
                return Err(LedgerError::Io {
                    path: lock_path,
                    source,
                });
            }
        }
        let path = dir.join(FILE);
        let open = read_open_entries(&path)?;
        // Rewrite: the open entries only, then rename over the old file.
        let rewrite = dir.join(REWRITE);
        {
            let mut file = File::create(&rewrite).map_err(io(&rewrite))?;
            let mut text = String::new();
            for entry in open {
                text.push_str(&serde_json::to_string(&Record::Open { entry })?);
                text.push('\n');
            }
            file.write_all(text.as_bytes()).map_err(io(&rewrite))?;
            file.sync_all().map_err(io(&rewrite))?;
        }
        fs::rename(&rewrite, &path).map_err(io(&path))?;
        sync_dir(dir)?;
        // No agent runs on this ledger: the wardens' files of closed entries are old.
        let open_ids: Vec<String> = read_open_entries(&path)?
            .into_iter()
            .map(|e| e.id)
            .collect();
        warden::sweep(dir, &open_ids);
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        Ok(Ledger {
            dir: dir.to_path_buf(),
            file: Mutex::new(file),
            _lock: lock,
            wardens: None,
        })
    }

    /// From now on every entry whose fault outlives this process gets a warden
    /// (`program warden ...`, the agent's own binary) before the fault is applied.
    pub fn with_wardens(mut self, program: &Path) -> Result<Ledger, LedgerError> {
        self.wardens = Some(Wardens::new(program)?);
        Ok(self)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes a fault's entry and, when its fault outlives this process, arms its warden;
    /// returns once both are in place. Call before applying it. A warden that cannot be
    /// armed closes the entry and is an error: the fault must not be applied.
    pub fn record(&self, entry: &LedgerEntry) -> Result<(), LedgerError> {
        self.append(&Record::Open {
            entry: entry.clone(),
        })?;
        self.arm(&entry.id, &entry.undo, entry.deadline)
    }

    /// Replaces an entry's undo (one learnt while applying, such as a child's pid); a
    /// warden reads it from here when it acts, and one is armed if the new undo needs it.
    pub fn set_undo(&self, id: &str, undo: &Undo, deadline: u64) -> Result<(), LedgerError> {
        self.append(&Record::Undo {
            id: id.to_string(),
            undo: undo.clone(),
        })?;
        self.arm(id, undo, deadline)
    }

    fn arm(&self, id: &str, undo: &Undo, deadline: u64) -> Result<(), LedgerError> {
        let Some(wardens) = &self.wardens else {
            return Ok(());
        };
        if !warden::outlives_agent(undo) || wardens.is_armed(id) {
            return Ok(());
        }
        if let Err(e) = wardens.arm(&self.dir, id, deadline) {
            tracing::error!(ledger_id = id, error = %e, "no warden for the fault; it is not applied");
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(deadline);
            let _ = self.close(id, now);
            return Err(e.into());
        }
        Ok(())
    }

    /// Claims the undo of entry `id` for this process before undoing it: [`Claim::Ours`],
    /// or its warden (or an operator) has it or did it. See [`warden::claim`].
    pub fn claim(&self, id: &str) -> Result<Claim, LedgerError> {
        Ok(warden::claim::claim(&self.dir, id, Claimant::Agent)?)
    }

    /// Gives up this process's claim on entry `id` (its undo failed): its warden may try.
    pub fn release(&self, id: &str) -> Result<(), LedgerError> {
        Ok(warden::claim::settle(&self.dir, id, false)?)
    }

    /// Closes an entry: its fault is undone (or was never applied). Its warden is ended.
    pub fn close(&self, id: &str, at: u64) -> Result<(), LedgerError> {
        self.append(&Record::Close {
            id: id.to_string(),
            at,
        })?;
        match &self.wardens {
            Some(wardens) => wardens.disarm(&self.dir, id),
            None => warden::forget(&self.dir, id),
        }
        Ok(())
    }

    /// The entries not closed, newest first: what a starting agent undoes, in that order.
    pub fn open_entries(&self) -> Result<Vec<LedgerEntry>, LedgerError> {
        let _guard = self.file.lock().map_err(|_| LedgerError::Poisoned)?;
        let mut entries = read_open_entries(&self.dir.join(FILE))?;
        entries.reverse();
        Ok(entries)
    }

    fn append(&self, record: &Record) -> Result<(), LedgerError> {
        let mut line = serde_json::to_string(record)?;
        line.push('\n');
        let path = self.dir.join(FILE);
        let mut file = self.file.lock().map_err(|_| LedgerError::Poisoned)?;
        let io = |source| LedgerError::Io {
            path: path.clone(),
            source,
        };
        file.write_all(line.as_bytes()).map_err(io)?;
        file.sync_data().map_err(io)
    }
}

/// The open entries of the ledger in `dir`, oldest first, read without its lock (the
/// ledger's agent may be running): for wardens and `iohr-agent faults`.
pub fn read_open(dir: &Path) -> Result<Vec<LedgerEntry>, LedgerError> {
    read_open_entries(&dir.join(FILE))
}

/// Appends the close of entry `id` to the ledger in `dir` from another process than its
/// agent's (a warden, an operator): one line in one write, so it never mixes with the
/// agent's own appends.
pub fn append_close(dir: &Path, id: &str, at: u64) -> Result<(), LedgerError> {
    let path = dir.join(FILE);
    let mut line = serde_json::to_string(&Record::Close {
        id: id.to_string(),
        at,
    })?;
    line.push('\n');
    let io = |source| LedgerError::Io {
        path: path.clone(),
        source,
    };
    let mut file = OpenOptions::new().append(true).open(&path).map_err(io)?;
    file.write_all(line.as_bytes()).map_err(io)?;
    file.sync_data().map_err(io)
}

/// Replays the file: the entries opened and not closed, oldest first. A last line without
/// its newline (torn by a crash) is ignored, as is any line that does not parse.
fn read_open_entries(path: &Path) -> Result<Vec<LedgerEntry>, LedgerError> {
    let text = match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(LedgerError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    };
    let mut open: Vec<LedgerEntry> = Vec::new();
    for line in complete.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Record>(line) {
            Ok(Record::Open { entry }) => {
                open.retain(|e| e.id != entry.id);
                open.push(entry);
            }
            Ok(Record::Undo { id, undo }) => {
                if let Some(e) = open.iter_mut().find(|e| e.id == id) {
                    e.undo = undo;
                }
            }
            Ok(Record::Close { id, .. }) => open.retain(|e| e.id != id),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "fault ledger: unreadable line skipped");
            }
        }
    }
    Ok(open)
}

fn sync_dir(dir: &Path) -> Result<(), LedgerError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| LedgerError::Io {
            path: dir.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iohr_domain::faults::fault::{CpuHog, DiskFill};

    fn entry(id: &str, at: u64) -> LedgerEntry {
        LedgerEntry {
            id: id.into(),
            run_id: "run-1".into(),
            fault: Fault::CpuHog(CpuHog {
                workers: 1,
                load_percent: 50,
            }),
            undo: Undo::Nothing {
                why: "planned".into(),
            },
            applied_at: at,
            deadline: at + 30_000,
        }
    }

    #[test]
    fn entries_survive_a_reopen_newest_first_and_closed_ones_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        {
            let ledger = Ledger::open(dir.path()).unwrap();
            ledger.record(&entry("a", 1)).unwrap();
            ledger.record(&entry("b", 2)).unwrap();
            ledger.record(&entry("c", 3)).unwrap();
            ledger
                .set_undo(
                    "b",
                    &Undo::StopChild {
                        pid: 42,
                        start_time: 7,
                    },
                    30_002,
                )
                .unwrap();
            ledger.close("a", 5).unwrap();
        }
        let ledger = Ledger::open(dir.path()).unwrap();
        let open = ledger.open_entries().unwrap();
        let ids: Vec<_> = open.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["c", "b"]);
        assert_eq!(
            open[1].undo,
            Undo::StopChild {
                pid: 42,
                start_time: 7
            }
        );
        // Reopening compacted the file to the open entries.
        let text = fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert_eq!(text.lines().count(), 2);
        ledger.close("b", 6).unwrap();
        ledger.close("c", 6).unwrap();
        assert!(ledger.open_entries().unwrap().is_empty());
        drop(ledger);
        assert!(
            Ledger::open(dir.path())
                .unwrap()
                .open_entries()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_torn_last_line_is_ignored_and_later_appends_are_read() {
        let dir = tempfile::tempdir().unwrap();
        {
            let ledger = Ledger::open(dir.path()).unwrap();
            ledger.record(&entry("a", 1)).unwrap();
        }
        // A crash in the middle of writing the next entry.
        let mut whole = serde_json::to_string(&Record::Open {
            entry: LedgerEntry {
                fault: Fault::DiskFill(DiskFill {
                    directory: "/tmp/x".into(),
                    size_mb: 1,
                }),
                ..entry("b", 2)
            },
        })
        .unwrap();
        whole.truncate(whole.len() / 2);
        OpenOptions::new()
            .append(true)
            .open(dir.path().join(FILE))
            .unwrap()
            .write_all(whole.as_bytes())
            .unwrap();
        let ledger = Ledger::open(dir.path()).unwrap();
        let ids: Vec<_> = ledger
            .open_entries()
            .unwrap()
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(ids, ["a"]);
        // The torn text is gone, so the next entry is a line of its own.
        ledger.record(&entry("c", 3)).unwrap();
        drop(ledger);
        let ledger = Ledger::open(dir.path()).unwrap();
        let ids: Vec<_> = ledger
            .open_entries()
            .unwrap()
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(ids, ["c", "a"]);
    }

    #[test]
    fn ids_sort_by_time() {
        assert!(new_id(999, u32::MAX) < new_id(1000, 0));
    }
}
