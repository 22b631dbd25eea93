//! The warden process itself: `iohr-agent warden --ledger-dir D --id ID --owner-pid P
//! --owner-start-time T` (hidden; started by the agent). It reads its fault's entry from
//! the ledger, says `ready` once it watches the agent, and undoes the fault when the agent
//! dies (its pidfd becomes readable), at [`GRACE`] past the deadline, or on SIGTERM or
//! SIGINT, whichever comes first, unless the entry was closed or claimed by a live process
//! meanwhile. A watchdog thread ends it at [`HARD_STOP`] past the deadline whatever it does.
//!
//! The ledger's deadline is wall-clock time; it is converted once, at start, into a [`Due`]
//! on the boot clock, and every wait and bound here reads that clock only: a wall clock
//! stepped back while the warden waits does not hold the fault longer.

use std::io::Write;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::SignalFd;

use super::admin::now_ms;
use super::claim::{self, Claim, Claimant};
use super::{ARMED, GRACE, HARD_STOP, Pin, WardenError, file, outlives_agent};
use crate::faults::due::Due;
use crate::faults::host;
use crate::faults::ledger::{self, LedgerEntry};

/// The hidden `iohr-agent warden` subcommand's arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct WardenArgs {
    #[arg(long)]
    pub ledger_dir: PathBuf,
    #[arg(long)]
    pub id: String,
    #[arg(long)]
    pub owner_pid: u32,
    #[arg(long)]
    pub owner_start_time: u64,
}

/// Why a warden acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    OwnerGone,
    Deadline,
    Signalled,
}

/// Without a pidfd (a kernel before 5.3) the owner's pin is polled this often.
const POLL_OWNER: Duration = Duration::from_millis(100);

/// The subcommand's body.
pub fn run(args: WardenArgs) -> Result<(), WardenError> {
    // First, before any other thread exists: SIGTERM and SIGINT are read from a signalfd,
    // and a hangup does not end the warden.
    let mut mask = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        mask.add(signal);
    }
    mask.thread_block()
        .map_err(|e| WardenError::Failed(format!("blocking signals: {e}")))?;
    let mut wanted = SigSet::empty();
    wanted.add(Signal::SIGTERM);
    wanted.add(Signal::SIGINT);
    let signals =
        SignalFd::new(&wanted).map_err(|e| WardenError::Failed(format!("signalfd: {e}")))?;

    let entry = match find_open(&args.ledger_dir, &args.id) {
        Ok(Some(entry)) => entry,
        Ok(None) => return refuse(format!("no open ledger entry {}", args.id)),
        Err(e) => return refuse(e.to_string()),
    };
    // Converted once, before `ready`; from here on the wall clock only stamps the close.
    let deadline = Due::at_unix_ms(entry.deadline);
    let hard_stop = deadline.plus(HARD_STOP);
    std::thread::spawn(move || watchdog(hard_stop));
    let owner = Pin {
        pid: args.owner_pid,
        start_time: args.owner_start_time,
    };
    let pidfd = pidfd_open(owner.pid);
    // Opened, then checked: the pidfd is of the process that had the pid at the check.
    let owner_alive = owner.alive();
    println!("ready");
    let _ = std::io::stdout().flush();
    let why = if owner_alive {
        wait(&owner, pidfd.as_ref(), &signals, deadline.plus(GRACE))
    } else {
        Why::OwnerGone
    };
    tracing::info!(ledger_id = %args.id, why = ?why, owner = owner.pid, "warden acts");
    act(&args.ledger_dir, &args.id, why, hard_stop)
}

/// Not started: the agent reads why on stdout.
fn refuse(why: String) -> Result<(), WardenError> {
    println!("error: {why}");
    let _ = std::io::stdout().flush();
    Err(WardenError::Failed(why))
}

fn find_open(ledger_dir: &Path, id: &str) -> Result<Option<LedgerEntry>, WardenError> {
    Ok(ledger::read_open(ledger_dir)
        .map_err(|e| WardenError::Failed(e.to_string()))?
        .into_iter()
        .find(|e| e.id == id))
}

fn watchdog(hard_stop: Due) {
    loop {
        match hard_stop.left() {
            left if !left.is_zero() => std::thread::sleep(left.min(Duration::from_secs(1))),
            _ => {
                tracing::error!("warden: past its fault's deadline; ending");
                std::process::exit(4);
            }
        }
    }
}

/// `pidfd_open(2)`; `None` where the kernel has none (or the pid is already gone, which the
/// pin check then finds).
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: a plain system call with integer arguments; it returns a new fd or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let raw = i32::try_from(raw).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `raw` is a file descriptor the kernel just gave this process, owned by no one else.
    Some(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Waits for the first of: the owner's end, `fire_at`, SIGTERM or SIGINT.
fn wait(owner: &Pin, pidfd: Option<&OwnedFd>, signals: &SignalFd, fire_at: Due) -> Why {
    loop {
        let left = fire_at.left();
        if left.is_zero() {
            return Why::Deadline;
        }
        // Re-read the boot clock at least each second (poll's timeout does not count a
        // suspend); without a pidfd, look at the owner's pin more often.
        let slice = left.min(if pidfd.is_some() {
            Duration::from_secs(1)
        } else {
            POLL_OWNER
        });
        let timeout = PollTimeout::try_from(slice).unwrap_or(PollTimeout::MAX);
        let mut fds = vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
        if let Some(pidfd) = pidfd {
            fds.push(PollFd::new(pidfd.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                tracing::warn!(error = %e, "warden: poll failed; watching the owner's pin");
                std::thread::sleep(POLL_OWNER);
            }
        }
        let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        if fds.first().is_some_and(ready) {
            return Why::Signalled;
        }
        if fds.get(1).is_some_and(ready) || !owner.alive() {
            return Why::OwnerGone;
        }
    }
}

/// Undoes the fault unless it was closed or another live process has it; closes the entry.
fn act(ledger_dir: &Path, id: &str, why: Why, hard_stop: Due) -> Result<(), WardenError> {
    let entry = loop {
        let Some(entry) = find_open(ledger_dir, id)? else {
            tracing::info!(ledger_id = id, "warden: the entry is closed; nothing to do");
            return Ok(());
        };
        if !outlives_agent(&entry.undo) {
            tracing::info!(
                ledger_id = id,
                "warden: the fault does not outlive the agent; nothing to do"
            );
            return Ok(());
        }
        match claim::claim(ledger_dir, id, Claimant::Warden)? {
            Claim::Ours => break entry,
            Claim::Undone { by } => {
                tracing::info!(
                    ledger_id = id,
                    by = by.as_str(),
                    "warden: already undone; nothing to do"
                );
                return Ok(());
            }
            Claim::Busy { by, pid } => {
                if hard_stop.left() <= Duration::from_millis(100) {
                    tracing::warn!(
                        ledger_id = id,
                        by = by.as_str(),
                        pid,
                        "warden: left to the live process undoing it"
                    );
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    let mut wait = Duration::from_millis(100);
    let mut attempts = 0;
    loop {
        attempts += 1;
        match host::undo_blocking(&entry.undo) {
            Ok(report) => {
                claim::settle(ledger_dir, id, true)?;
                let now = now_ms();
                if let Err(e) = ledger::append_close(ledger_dir, id, now) {
                    // Claimed undone: whoever opens the ledger next closes it.
                    tracing::warn!(ledger_id = id, error = %e, "warden: closing the entry failed");
                }
                if let Ok(path) = file(ledger_dir, id, ARMED) {
                    let _ = std::fs::remove_file(path);
                }
                tracing::warn!(ledger_id = id, run = %entry.run_id, fault = entry.fault.name(), why = ?why, undone = report.undone, message = %report.message, "warden undid a fault");
                return Ok(());
            }
            Err(e) if wait < hard_stop.left() => {
                tracing::warn!(ledger_id = id, attempt = attempts, error = %e, "warden: undo failed; again");
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                // Given up: the claim is released, so the agent or its next start may try.
                claim::settle(ledger_dir, id, false)?;
                tracing::error!(ledger_id = id, run = %entry.run_id, error = %e, attempts, "ALERT: the warden could not undo a fault; its ledger entry stays open");
                return Err(e.into());
            }
        }
    }
}
