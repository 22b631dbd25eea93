//! Process, host and netem faults behind one entry point for the `faults` kind: [`plan`]
//! (the undo for the ledger, touching nothing), [`apply`] and [`undo`] (also the ledger's
//! recovery at start).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, UNIX_EPOCH};

use iohr_domain::faults::{Fault, Policy};
use serde::Serialize;

use super::{FaultError, Undo, hog, netem, process};

/// How long a hog may take to be in full effect (memory touched, file written): within the
/// lifecycle's 10 s bound on an apply.
pub const HOG_READY_WAIT: Duration = Duration::from_secs(8);

/// What an undo did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UndoReport {
    /// False when nothing was left to undo (the process or file already gone, a fault that
    /// cannot be undone); the message says which.
    pub undone: bool,
    pub message: String,
}

impl UndoReport {
    pub fn undone(message: impl Into<String>) -> Self {
        UndoReport {
            undone: true,
            message: message.into(),
        }
    }

    pub fn nothing_left(message: impl Into<String>) -> Self {
        UndoReport {
            undone: false,
            message: message.into(),
        }
    }
}

/// How `fault` would be undone, without touching anything: the ledger holds it before
/// [`apply`], and a dry run lists it. A process that is not there is an error.
pub fn plan(fault: &Fault, policy: &Policy) -> Result<Undo, FaultError> {
    match fault {
        Fault::Process(p) => {
            let target = process::find(&p.name, p.pid, policy.process_owner(&p.name))?;
            Ok(process::undo_for(
                p.action,
                &target,
                policy.restart_command(&p.name),
            ))
        }
        // The child's pid is known once it is spawned; apply gives the real one, and a
        // crashed agent's hog died with it (its death signal).
        Fault::CpuHog(_) | Fault::MemoryHog(_) => Ok(Undo::StopChild {
            pid: 0,
            start_time: 0,
        }),
        Fault::DiskFill(d) => Ok(Undo::RemoveFile {
            path: planned_fill(&d.directory, d.size_mb, &policy.directories)?,
        }),
        Fault::Netem(n) => Ok(netem::undo_for(n)),
        Fault::Network(_) | Fault::Http(_) => Err(not_host(fault)),
    }
}

/// Applies a host fault until `deadline_ms` (Unix milliseconds); hogs stop by themselves
/// then. The policy is checked again here; the restart command is the policy's.
pub async fn apply(
    fault: &Fault,
    policy: &Policy,
    hog_program: &Path,
    deadline_ms: u64,
) -> Result<Undo, FaultError> {
    if matches!(fault, Fault::Network(_) | Fault::Http(_)) {
        return Err(not_host(fault));
    }
    // Host faults do not touch the run's target port: any port passes the check.
    policy.check(fault, 0).map_err(FaultError::NotAllowed)?;
    let fault = fault.clone();
    let policy = policy.clone();
    let program = hog_program.to_path_buf();
    tokio::task::spawn_blocking(move || apply_blocking(&fault, &policy, &program, deadline_ms))
        .await
        .map_err(|e| FaultError::Failed(format!("applying a host fault: {e}")))?
}

/// [`apply`] on the calling thread (it waits, bounded, for processes and hogs).
pub fn apply_blocking(
    fault: &Fault,
    policy: &Policy,
    hog_program: &Path,
    deadline_ms: u64,
) -> Result<Undo, FaultError> {
    let deadline = UNIX_EPOCH + Duration::from_millis(deadline_ms);
    let start_hog = |spec: hog::HogSpec| -> Result<Undo, FaultError> {
        let mut child = hog::spawn(hog_program, &spec, deadline)?;
        child.go(HOG_READY_WAIT)?;
        Ok(child.undo())
    };
    match fault {
        Fault::Process(p) => {
            let restart = policy.restart_command(&p.name);
            let target = process::find(&p.name, p.pid, policy.process_owner(&p.name))?;
            let undo = process::undo_for(p.action, &target, restart);
            let done = process::apply(p.action, &target, restart)?;
            tracing::info!(name = %p.name, pid = target.pid, action = ?p.action, done, "process fault applied");
            Ok(undo)
        }
        Fault::CpuHog(h) => start_hog(hog::HogSpec::Cpu {
            workers: h.workers,
            load_percent: h.load_percent,
        }),
        Fault::MemoryHog(h) => start_hog(hog::HogSpec::Memory { size_mb: h.size_mb }),
        Fault::DiskFill(d) => {
            let path = take_planned_fill(&d.directory, d.size_mb, &policy.directories)?;
            start_hog(hog::HogSpec::Disk {
                path,
                size_mb: d.size_mb,
            })
        }
        Fault::Netem(n) => {
            netem::apply(&netem::Tc::host(), n)?;
            Ok(netem::undo_for(n))
        }
        Fault::Network(_) | Fault::Http(_) => Err(not_host(fault)),
    }
}

/// Undoes a host fault, off the async runtime. Undoing twice is harmless: the second finds
/// nothing left. What it did is logged; [`undo_blocking`] returns it.
pub async fn undo(undo: &Undo) -> Result<(), FaultError> {
    let undo = undo.clone();
    let report = tokio::task::spawn_blocking(move || undo_blocking(&undo))
        .await
        .map_err(|e| FaultError::Failed(format!("undoing a host fault: {e}")))??;
    tracing::info!(undone = report.undone, message = %report.message, "host fault undo");
    Ok(())
}

/// Undoes one host fault on the calling thread and says what it did. Blocking (it waits,
/// bounded, for processes to go and commands to end). [`Undo::ProxyFault`] belongs to the
/// fault proxy and is refused here.
pub fn undo_blocking(undo: &Undo) -> Result<UndoReport, FaultError> {
    match undo {
        Undo::Resume { pid, start_time } => {
            match process::signal_pinned(*pid, *start_time, nix::sys::signal::Signal::SIGCONT) {
                Ok(sent) => Ok(UndoReport::undone(sent)),
                Err(FaultError::NotFound(why)) => Ok(UndoReport::nothing_left(why)),
                Err(e) => Err(e),
            }
        }
        Undo::Restart { command } => process::run_restart(command).map(UndoReport::undone),
        Undo::StopChild { pid, start_time } => hog::stop_child(*pid, *start_time),
        Undo::RemoveFile { path } => hog::remove_fill(path),
        Undo::RemoveQdisc { interface } => netem::remove(&netem::Tc::host(), interface),
        Undo::Nothing { why } => Ok(UndoReport::nothing_left(why.clone())),
        Undo::ProxyFault { proxy, id } => Err(FaultError::Failed(format!(
            "fault {id} of proxy {proxy} is not a host fault; the fault proxy undoes it"
        ))),
    }
}

fn not_host(fault: &Fault) -> FaultError {
    FaultError::Failed(format!(
        "a {} fault is not a host fault; the fault proxy applies it",
        fault.name()
    ))
}

/// The disk fill file [`plan`] named, by directory and size, so that [`apply`] writes the
/// very file the ledger already holds (the newest plan wins).
fn planned_fills() -> std::sync::MutexGuard<'static, HashMap<(String, u64), PathBuf>> {
    static PLANNED: OnceLock<Mutex<HashMap<(String, u64), PathBuf>>> = OnceLock::new();
    PLANNED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn planned_fill(directory: &str, size_mb: u64, allowed: &[String]) -> Result<PathBuf, FaultError> {
    let path = hog::disk_fill_path(&fill_directory(directory, allowed)?)?;
    planned_fills().insert((directory.to_string(), size_mb), path.clone());
    Ok(path)
}

fn take_planned_fill(
    directory: &str,
    size_mb: u64,
    allowed: &[String],
) -> Result<PathBuf, FaultError> {
    // Checked again: the directory may have changed since the plan.
    let real = fill_directory(directory, allowed)?;
    match planned_fills().remove(&(directory.to_string(), size_mb)) {
        Some(path) if path.parent() == Some(real.as_path()) => Ok(path),
        _ => hog::disk_fill_path(&real),
    }
}

/// Where a disk fill in `directory` really lands: the directory with every symbolic link
/// resolved, which must still be inside one of the policy's directories (each resolved
/// too). The policy's check compares the text of the path only, so a link under an
/// allowed directory would otherwise send the fill anywhere the agent may write.
fn fill_directory(directory: &str, allowed: &[String]) -> Result<PathBuf, FaultError> {
    let real = std::fs::canonicalize(directory)
        .map_err(|e| FaultError::NotFound(format!("directory {directory}: {e}")))?;
    let inside = allowed
        .iter()
        .filter_map(|a| std::fs::canonicalize(a).ok())
        .any(|a| real.starts_with(a));
    if !inside {
        return Err(FaultError::NotAllowed(format!(
            "directory {directory:?} resolves to {} (through a symbolic link), outside the policy's directories",
            real.display()
        )));
    }
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iohr_domain::faults::fault::DiskFill;

    fn allowing(dir: &Path) -> Policy {
        Policy {
            directories: vec![dir.display().to_string()],
            max_disk_mb: 8,
            ..Policy::default()
        }
    }

    #[test]
    fn a_disk_fill_writes_the_file_its_plan_named() {
        let root = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(root.path()).unwrap();
        let fault = Fault::DiskFill(DiskFill {
            directory: dir.display().to_string(),
            size_mb: 3,
        });
        let policy = allowing(&dir);
        let Undo::RemoveFile { path } = plan(&fault, &policy).unwrap() else {
            panic!("a disk fill is undone by removing its file");
        };
        assert!(path.starts_with(&dir));
        let text = dir.display().to_string();
        assert_eq!(
            take_planned_fill(&text, 3, &policy.directories).unwrap(),
            path
        );
        assert_ne!(
            take_planned_fill(&text, 3, &policy.directories).unwrap(),
            path
        );
    }

    #[test]
    fn a_fill_through_a_symbolic_link_out_of_the_allowed_directory_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let allowed = root.path().join("allowed");
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&allowed).unwrap();
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, allowed.join("link")).unwrap();
        let policy = allowing(&allowed);
        let through = Fault::DiskFill(DiskFill {
            directory: allowed.join("link").display().to_string(),
            size_mb: 1,
        });
        // The text of the path is inside the policy's directory ...
        assert_eq!(policy.check(&through, 0), Ok(()));
        // ... where it lands is not: refused before anything is written.
        let refused = plan(&through, &policy).unwrap_err();
        assert!(matches!(refused, FaultError::NotAllowed(_)), "{refused}");
        assert!(refused.to_string().contains("symbolic link"), "{refused}");
        let Undo::RemoveFile { path } = plan(
            &Fault::DiskFill(DiskFill {
                directory: allowed.display().to_string(),
                size_mb: 1,
            }),
            &policy,
        )
        .unwrap() else {
            panic!("a disk fill is undone by removing its file");
        };
        assert!(path.starts_with(std::fs::canonicalize(&allowed).unwrap()));
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }

    #[test]
    fn a_placeholder_hog_undo_stops_nothing() {
        let report = undo_blocking(&Undo::StopChild {
            pid: 0,
            start_time: 0,
        })
        .unwrap();
        assert!(!report.undone, "{report:?}");
    }
}
