//! Process faults: pause, terminate, kill and restart a process on the agent's host.
//!
//! A process is found by its name (`/proc/PID/comm`) and optionally its pid, and pinned by
//! pid and start time (`/proc/PID/stat` field 22). Every signal, the undo's SIGCONT
//! included, is sent only after the pid is seen to still carry the pinned start time, so a
//! pid the kernel reused for another process is never hit.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use iohr_domain::faults::Policy;
use iohr_domain::faults::fault::ProcessAction;
use iohr_domain::request::{SpecError, spec_error};
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use super::{FaultError, Undo};

/// How long a terminated process gets to exit before `restart` gives up (and does not run
/// the restart command next to a process that is still there). With [`RESTART_WAIT`] it
/// keeps a restart within the lifecycle's 10 s bound on an apply.
pub const EXIT_WAIT: Duration = Duration::from_secs(5);

/// How long the restart command may run before it is left running as the restarted service.
pub const RESTART_WAIT: Duration = Duration::from_secs(3);

/// A process pinned by pid and start time (clock ticks since boot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    pub pid: u32,
    pub start_time: u64,
    pub name: String,
}

/// What `/proc/PID/stat` says about a process, the fields the faults and their tests read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `T` (stopped), `Z` (zombie), ...
    pub state: char,
    /// User and system CPU time in clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// Clock ticks since boot.
    pub start_time: u64,
    /// Resident pages.
    pub rss_pages: u64,
}

impl Stat {
    /// A zombie or a dead task is no longer a process a fault can act on.
    pub fn alive(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Reads `/proc/PID/stat`; `None` when there is no such process.
pub fn stat(pid: u32) -> Result<Option<Stat>, FaultError> {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => parse_stat(&text).map(Some).ok_or_else(|| {
            FaultError::Failed(format!("/proc/{pid}/stat is not in the expected format"))
        }),
        Err(e) if is_gone(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn is_gone(e: &std::io::Error) -> bool {
    // ESRCH: the task went away between opening the file and reading it.
    e.kind() == std::io::ErrorKind::NotFound
        || e.raw_os_error() == Some(nix::errno::Errno::ESRCH as i32)
}

/// Parses the fields after the command name, which is in parentheses and may itself hold
/// spaces and parentheses, so the split starts after the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 of proc(5).
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    Some(Stat {
        state: fields.first()?.chars().next()?,
        utime: field(14)?,
        stime: field(15)?,
        start_time: field(22)?,
        rss_pages: field(24)?,
    })
}

/// The process's name as the kernel keeps it (at most 15 bytes).
fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim_end_matches('\n').to_string())
}

/// The kernel cuts `comm` to 15 bytes, so a longer name matches its first 15 bytes.
fn name_matches(comm: &str, name: &str) -> bool {
    comm == name || (name.len() > 15 && name.as_bytes().get(..15) == Some(comm.as_bytes()))
}

/// The user id owning process `pid`.
fn owner(pid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

/// Resolves each process rule's `user` to its uid, as the host's user database has it
/// when the policy is read; a name the host does not know refuses the policy.
pub fn resolve_users(policy: &mut Policy) -> Result<(), SpecError> {
    for (i, rule) in policy.processes.iter_mut().enumerate() {
        let Some(name) = &rule.user else { continue };
        let field = format!("policy.processes[{i}].user");
        match nix::unistd::User::from_name(name) {
            Ok(Some(user)) => rule.uid = Some(user.uid.as_raw()),
            Ok(None) => return Err(spec_error(field, format!("no user {name:?} on this host"))),
            Err(e) => return Err(spec_error(field, format!("looking up user {name:?}: {e}"))),
        }
    }
    Ok(())
}

/// Finds the process named `name` (and with `pid`, when given; owned by `uid`, when the
/// policy's rule names one) and pins it. Without a pid exactly one process may carry the
/// name; the agent itself and init are never candidates.
pub fn find(name: &str, pid: Option<u32>, uid: Option<u32>) -> Result<Pinned, FaultError> {
    let own = std::process::id();
    let pin = |pid: u32| -> Result<Option<Pinned>, FaultError> {
        // Never the agent itself, nor init.
        if pid == own || pid == 1 {
            return Ok(None);
        }
        let Some(c) = comm(pid).filter(|c| name_matches(c, name)) else {
            return Ok(None);
        };
        if uid.is_some() && owner(pid) != uid {
            return Ok(None);
        }
        Ok(stat(pid)?.filter(Stat::alive).map(|s| Pinned {
            pid,
            start_time: s.start_time,
            name: c,
        }))
    };
    if let Some(pid) = pid {
        return pin(pid)?
            .ok_or_else(|| FaultError::NotFound(format!("no live process {pid} named {name:?}")));
    }
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Some(pid) = entry?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(p) = pin(pid)? {
            found.push(p);
        }
    }
    match found.len() {
        0 => Err(FaultError::NotFound(format!("no process named {name:?}"))),
        1 => Ok(found.remove(0)),
        n => Err(FaultError::Failed(format!(
            "{n} processes are named {name:?} (pids {}); name one by its pid",
            found
                .iter()
                .map(|p| p.pid.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The undo written to the ledger before `action` is applied to a process.
/// A restart ends with the restart command, so nothing of it is left to undo.
pub fn undo_for(action: ProcessAction, target: &Pinned, restart_command: Option<&str>) -> Undo {
    match (action, restart_command) {
        (ProcessAction::Pause, _) => Undo::Resume {
            pid: target.pid,
            start_time: target.start_time,
        },
        (ProcessAction::Terminate | ProcessAction::Kill, Some(command)) => Undo::Restart {
            command: command.to_string(),
        },
        (ProcessAction::Terminate | ProcessAction::Kill, None) => Undo::Nothing {
            why: format!(
                "process {} ({}) was {} and the policy has no restart command for it",
                target.pid,
                target.name,
                if action == ProcessAction::Kill {
                    "killed"
                } else {
                    "terminated"
                }
            ),
        },
        (ProcessAction::Restart, _) => Undo::Nothing {
            why: format!(
                "process {} ({}) was restarted by the restart command",
                target.pid, target.name
            ),
        },
    }
}

/// Applies `action` to the pinned process and says what was done. `Restart` needs the
/// policy's restart command; it blocks (bounded by [`EXIT_WAIT`] and [`RESTART_WAIT`]),
/// so call it off the async runtime.
pub fn apply(
    action: ProcessAction,
    target: &Pinned,
    restart_command: Option<&str>,
) -> Result<String, FaultError> {
    match action {
        ProcessAction::Pause => signal_pinned(target.pid, target.start_time, Signal::SIGSTOP),
        ProcessAction::Terminate => signal_pinned(target.pid, target.start_time, Signal::SIGTERM),
        ProcessAction::Kill => signal_pinned(target.pid, target.start_time, Signal::SIGKILL),
        ProcessAction::Restart => {
            let Some(command) = restart_command else {
                return Err(FaultError::NotAllowed(format!(
                    "restarting {} needs a restart command in the agent's policy",
                    target.name
                )));
            };
            let sent = signal_pinned(target.pid, target.start_time, Signal::SIGTERM)?;
            wait_gone(target.pid, target.start_time, EXIT_WAIT).map_err(|_| {
                FaultError::Failed(format!(
                    "process {} did not exit within {} s of SIGTERM; the restart command was not run",
                    target.pid,
                    EXIT_WAIT.as_secs()
                ))
            })?;
            let ran = run_restart(command)?;
            Ok(format!("{sent}; {ran}"))
        }
    }
}

/// Sends `signal` to `pid` only if it still has `start_time`; a gone or reused pid is an
/// error that says the signal was not sent.
pub fn signal_pinned(pid: u32, start_time: u64, signal: Signal) -> Result<String, FaultError> {
    check_pinned(pid, start_time)?;
    let raw =
        i32::try_from(pid).map_err(|_| FaultError::Failed(format!("pid {pid} is out of range")))?;
    signal::kill(Pid::from_raw(raw), signal)
        .map_err(|e| FaultError::Failed(format!("{signal} to process {pid}: {e}")))?;
    tracing::info!(pid, start_time, signal = %signal, "signal sent");
    Ok(format!("{signal} sent to process {pid}"))
}

/// Ok when `pid` is alive with the pinned start time; otherwise why not, in words.
pub fn check_pinned(pid: u32, start_time: u64) -> Result<(), FaultError> {
    match stat(pid)? {
        Some(s) if s.start_time == start_time && s.alive() => Ok(()),
        Some(s) if s.start_time == start_time => Err(FaultError::NotFound(format!(
            "process {pid} has exited (state {}); not signalled",
            s.state
        ))),
        Some(s) => Err(FaultError::NotFound(format!(
            "pid {pid} now belongs to another process (start time {} instead of {start_time}); not signalled",
            s.start_time
        ))),
        None => Err(FaultError::NotFound(format!(
            "process {pid} is gone; not signalled"
        ))),
    }
}

/// Polls (bounded) until the pinned process is gone, a zombie, or its pid reused.
pub fn wait_gone(pid: u32, start_time: u64, within: Duration) -> Result<(), FaultError> {
    let until = Instant::now() + within;
    loop {
        if check_pinned(pid, start_time).is_err() {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(FaultError::Failed(format!(
                "process {pid} still runs after {} ms",
                within.as_millis()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `cmd`'s child in a session of its own (`setsid`), so that a signal to the
/// agent's process group (a terminal's Ctrl-C, a service manager's stop) does not reach it.
pub(crate) fn in_own_session(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
}

/// Runs the policy's restart command with `sh -c`, in a session of its own so that the
/// restarted service outlives the agent. A command still running after [`RESTART_WAIT`] is
/// taken to be the service itself and left running (a thread reaps it when it ends).
pub fn run_restart(command: &str) -> Result<String, FaultError> {
    let mut cmd = Command::new(Path::new("/bin/sh"));
    cmd.arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    in_own_session(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| FaultError::Failed(format!("starting the restart command: {e}")))?;
    let until = Instant::now() + RESTART_WAIT;
    loop {
        match child.try_wait()? {
            Some(status) if status.success() => {
                tracing::info!(command, "restart command done");
                return Ok("restart command done".to_string());
            }
            Some(status) => {
                return Err(FaultError::Failed(format!(
                    "the restart command failed: {status}"
                )));
            }
            None if Instant::now() >= until => {
                let pid = child.id();
                std::thread::spawn(move || child.wait());
                tracing::info!(command, pid, "restart command still running; left running");
                return Ok(format!(
                    "restart command still running as process {pid} after {} s; left running",
                    RESTART_WAIT.as_secs()
                ));
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_last_parenthesis() {
        let line = "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    7 3 0 0 20 0 1 0 987654 1000000 250 18446744073709551615";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.state, 'S');
        assert_eq!((s.utime, s.stime), (7, 3));
        assert_eq!(s.start_time, 987654);
        assert_eq!(s.rss_pages, 250);
        assert!(s.alive());
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn a_rule_with_an_owner_finds_only_that_users_processes() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        // The kernel closes the spawn's exec pipe before it renames the process, so
        // `comm` can still be the test's own name just after `spawn` returns: wait
        // (bounded) for the exec to finish before looking the process up by name.
        let until = Instant::now() + Duration::from_secs(10);
        while comm(pid).as_deref() != Some("sleep") {
            assert!(Instant::now() < until, "sleep never showed its name");
            std::thread::sleep(Duration::from_millis(5));
        }
        let mine = owner(pid).expect("owner");
        let found = find("sleep", Some(pid), Some(mine));
        let other = find("sleep", Some(pid), Some(mine.wrapping_add(1)));
        let any = find("sleep", Some(pid), None);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found.expect("found").pid, pid);
        assert!(matches!(other, Err(FaultError::NotFound(_))), "{other:?}");
        assert_eq!(any.expect("any owner").pid, pid);
    }

    #[test]
    fn long_names_match_the_kernels_cut() {
        assert!(name_matches("postgres", "postgres"));
        assert!(name_matches("a-very-long-ser", "a-very-long-service-name"));
        assert!(!name_matches("postgre", "postgres"));
    }

    #[test]
    fn a_rules_user_is_resolved_to_its_uid_and_an_unknown_one_refused() {
        let me = nix::unistd::getuid();
        let name = nix::unistd::User::from_uid(me)
            .expect("user database")
            .expect("the current user has a name")
            .name;
        let mut policy = Policy::parse(&format!(
            r#"{{"processes": [{{"name": "w", "user": "{name}"}}, {{"name": "c", "uid": 7}}]}}"#
        ))
        .unwrap();
        resolve_users(&mut policy).unwrap();
        assert_eq!(policy.process_owner("w"), Some(me.as_raw()));
        assert_eq!(policy.process_owner("c"), Some(7));
        let mut root = Policy::parse(r#"{"processes": [{"name": "w", "user": "root"}]}"#).unwrap();
        resolve_users(&mut root).unwrap();
        assert_eq!(root.process_owner("w"), Some(0));

        let mut unknown =
            Policy::parse(r#"{"processes": [{"name": "w", "user": "no-such-user-iohr38"}]}"#)
                .unwrap();
        let error = resolve_users(&mut unknown).unwrap_err();
        assert_eq!(error.field, "policy.processes[0].user");
        assert!(
            error.message.contains("no user \"no-such-user-iohr38\""),
            "{error}"
        );
        assert_eq!(unknown.process_owner("w"), None);
    }

    #[test]
    fn undo_follows_the_action_and_the_restart_command() {
        let p = Pinned {
            pid: 7,
            start_time: 9,
            name: "svc".into(),
        };
        assert_eq!(
            undo_for(ProcessAction::Pause, &p, None),
            Undo::Resume {
                pid: 7,
                start_time: 9
            }
        );
        assert_eq!(
            undo_for(ProcessAction::Kill, &p, Some("svc --daemon")),
            Undo::Restart {
                command: "svc --daemon".into()
            }
        );
        assert!(matches!(
            undo_for(ProcessAction::Terminate, &p, None),
            Undo::Nothing { why } if why.contains("no restart command")
        ));
        assert!(matches!(
            undo_for(ProcessAction::Restart, &p, Some("x")),
            Undo::Nothing { .. }
        ));
    }
}
