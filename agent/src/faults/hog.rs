//! Host faults: a CPU hog, a memory hog and a disk fill, each in a child process.
//!
//! The child is the agent's own binary run as `iohr-agent hog cpu|memory|disk ...` (a hidden
//! subcommand; the caller passes the program, the agent `std::env::current_exe()`). Every
//! child
//! - dies with the agent: `PR_SET_PDEATHSIG(SIGKILL)`, set before exec, and it also polls
//!   `getppid()`. The death signal fires when the *thread* that forked exits, so children are
//!   forked by one spawner thread that lives as long as the process, never by a tokio
//!   thread that may end;
//! - stops by itself at its deadline, an absolute Unix time it is given (a disk fill then
//!   removes its file);
//! - leads a process group of its own, which the undo ([`Undo::StopChild`]) kills.
//!
//! A child is spawned idle and starts only when told to ([`Hog::go`]), so the ledger can hold
//! its undo (pid and start time) before the fault is applied.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use super::due::Due;
use super::host::UndoReport;
use super::process;
use super::{FaultError, Undo};

/// Every disk fill file starts with this, so an undo never removes a file the agent did not
/// write, whatever a damaged ledger says.
pub const DISK_FILL_PREFIX: &str = "iohr-disk-fill-";

/// How long a killed hog gets to disappear before the undo says it did not.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// How often a child looks at its deadline and its parent.
const CHILD_TICK: Duration = Duration::from_millis(50);

/// The CPU hog's duty cycle: busy for `load_percent` of each period, asleep for the rest.
const CPU_PERIOD: Duration = Duration::from_millis(100);

/// The disk fill writes in chunks of this size.
const DISK_CHUNK: usize = 1 << 20;

const MB: u64 = 1 << 20;

/// What a hog child does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HogSpec {
    /// `workers` threads, each busy `load_percent` (1..=100) of the time.
    Cpu { workers: u32, load_percent: u8 },
    /// `size_mb` megabytes allocated and every page touched, so the RSS shows them.
    Memory { size_mb: u64 },
    /// One file of `size_mb` megabytes at `path` (see [`disk_fill_path`]).
    Disk { path: PathBuf, size_mb: u64 },
}

/// The hidden `iohr-agent hog` subcommand: one hog in this process until `until_unix_ms`.
/// It starts when it reads `go` on stdin and prints `ready` (or `error: ...`) on stdout.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum HogCommand {
    Cpu {
        #[arg(long)]
        workers: u32,
        #[arg(long)]
        load_percent: u8,
        #[arg(long)]
        until_unix_ms: u64,
    },
    Memory {
        #[arg(long)]
        size_mb: u64,
        #[arg(long)]
        until_unix_ms: u64,
    },
    Disk {
        #[arg(long)]
        path: PathBuf,
        #[arg(long)]
        size_mb: u64,
        #[arg(long)]
        until_unix_ms: u64,
    },
}

impl HogSpec {
    fn args(&self, until_unix_ms: u64) -> Vec<String> {
        let until = until_unix_ms.to_string();
        match self {
            HogSpec::Cpu {
                workers,
                load_percent,
            } => vec![
                "cpu".into(),
                "--workers".into(),
                workers.to_string(),
                "--load-percent".into(),
                load_percent.to_string(),
                "--until-unix-ms".into(),
                until,
            ],
            HogSpec::Memory { size_mb } => vec![
                "memory".into(),
                "--size-mb".into(),
                size_mb.to_string(),
                "--until-unix-ms".into(),
                until,
            ],
            HogSpec::Disk { path, size_mb } => vec![
                "disk".into(),
                "--path".into(),
                path.display().to_string(),
                "--size-mb".into(),
                size_mb.to_string(),
                "--until-unix-ms".into(),
                until,
            ],
        }
    }
}

/// A new, unused file name of the agent's own in `directory`, which must exist.
pub fn disk_fill_path(directory: &Path) -> Result<PathBuf, FaultError> {
    let meta = std::fs::metadata(directory)
        .map_err(|e| FaultError::NotFound(format!("directory {}: {e}", directory.display())))?;
    if !meta.is_dir() {
        return Err(FaultError::NotFound(format!(
            "{} is not a directory",
            directory.display()
        )));
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    Ok(directory.join(format!(
        "{DISK_FILL_PREFIX}{}-{nanos}.fill",
        std::process::id()
    )))
}

/// A spawned hog child, idle until [`Hog::go`].
#[derive(Debug)]
pub struct Hog {
    pid: u32,
    start_time: u64,
    undo: Undo,
    stdin: Option<ChildStdin>,
    said: mpsc::Receiver<String>,
}

impl Hog {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn start_time(&self) -> u64 {
        self.start_time
    }

    /// What undoes this hog, for the ledger: the process group for a CPU or memory hog, the
    /// file (and its writer, while this agent runs it) for a disk fill.
    pub fn undo(&self) -> Undo {
        self.undo.clone()
    }

    /// Starts the hog and waits (at most `within`) until it is in full effect: the memory
    /// touched, the file written. Blocks: call it off the async runtime. A hog that does
    /// not get there in time is stopped.
    pub fn go(&mut self, within: Duration) -> Result<(), FaultError> {
        let told = self
            .stdin
            .take()
            .ok_or_else(|| FaultError::Failed("the hog was already started".into()))
            .and_then(|mut stdin| stdin.write_all(b"go\n").map_err(FaultError::from));
        let outcome = told.and_then(|()| match self.said.recv_timeout(within) {
            Ok(line) if line.trim() == "ready" => Ok(()),
            Ok(line) => Err(FaultError::Failed(format!(
                "hog process {}: {}",
                self.pid,
                line.trim().trim_start_matches("error: ")
            ))),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(FaultError::Failed(format!(
                "hog process {} was not ready within {} ms",
                self.pid,
                within.as_millis()
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(FaultError::Failed(format!(
                "hog process {} ended before it was ready",
                self.pid
            ))),
        });
        if outcome.is_err() {
            let _ = stop_child(self.pid, self.start_time);
            if let Undo::RemoveFile { path } = &self.undo {
                let _ = remove_fill(path);
            }
        }
        outcome
    }
}

/// Spawns a hog child of `program` (the agent's binary) that will stop by itself at
/// `deadline`. It is idle until [`Hog::go`]; dropping the [`Hog`] before that ends it.
pub fn spawn(program: &Path, spec: &HogSpec, deadline: SystemTime) -> Result<Hog, FaultError> {
    let until_unix_ms = deadline
        .duration_since(UNIX_EPOCH)
        .map_err(|_| FaultError::Failed("the hog's deadline is before 1970".into()))?
        .as_millis();
    let until_unix_ms = u64::try_from(until_unix_ms)
        .map_err(|_| FaultError::Failed("the hog's deadline is too far away".into()))?;
    let mut cmd = Command::new(program);
    cmd.arg("hog")
        .args(spec.args(until_unix_ms))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0);
    let parent = nix::unistd::getpid();
    // SAFETY: only async-signal-safe calls (prctl, getppid) and no allocation happen
    // between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The agent may have died before the death signal was armed.
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(
                    nix::errno::Errno::ESRCH as i32,
                ));
            }
            Ok(())
        });
    }
    let mut child = spawn_from_long_lived_thread(cmd)?;
    let pid = child.id();
    let start_time = match process::stat(pid) {
        Ok(Some(s)) => s.start_time,
        other => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(FaultError::Failed(format!(
                "the hog process {pid} could not be read right after it started: {other:?}"
            )));
        }
    };
    let undo = match spec {
        HogSpec::Disk { path, .. } => {
            lock_writers().insert(path.clone(), (pid, start_time));
            Undo::RemoveFile { path: path.clone() }
        }
        _ => Undo::StopChild { pid, start_time },
    };
    let stdin = child.stdin.take();
    let said = watch_child(child, spec);
    tracing::info!(pid, start_time, ?spec, until_unix_ms, "hog spawned");
    Ok(Hog {
        pid,
        start_time,
        undo,
        stdin,
        said,
    })
}

/// One thread per child reads its first line (ready or why not), then reaps it, so a hog
/// that ended never lingers as a zombie.
fn watch_child(mut child: Child, spec: &HogSpec) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take();
    let path = match spec {
        HogSpec::Disk { path, .. } => Some(path.clone()),
        _ => None,
    };
    std::thread::spawn(move || {
        if let Some(stdout) = stdout {
            let mut line = String::new();
            if BufReader::new(stdout).read_line(&mut line).unwrap_or(0) > 0 {
                let _ = tx.send(line);
            }
        }
        drop(tx);
        let status = child.wait();
        tracing::info!(pid = child.id(), ?status, "hog ended");
        if let Some(path) = path {
            lock_writers().remove(&path);
        }
    });
    rx
}

/// The disk fill children this agent runs, by file, so removing the file stops its writer
/// first (a file removed while still open would keep its space).
fn lock_writers() -> std::sync::MutexGuard<'static, HashMap<PathBuf, (u32, u64)>> {
    static WRITERS: OnceLock<Mutex<HashMap<PathBuf, (u32, u64)>>> = OnceLock::new();
    WRITERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

struct SpawnRequest {
    command: Command,
    reply: mpsc::Sender<std::io::Result<Child>>,
}

/// Forks `command` on the one spawner thread, which never ends (its channel is held by a
/// static), so the children's death signal fires only when the agent itself ends.
fn spawn_from_long_lived_thread(command: Command) -> Result<Child, FaultError> {
    static SPAWNER: OnceLock<Result<mpsc::Sender<SpawnRequest>, String>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("iohr-hog-spawner".into())
            .spawn(move || {
                for mut request in rx {
                    let _ = request.reply.send(request.command.spawn());
                }
            })
            .map(|_| tx)
            .map_err(|e| e.to_string())
    });
    let spawner = spawner
        .as_ref()
        .map_err(|e| FaultError::Failed(format!("starting the hog spawner thread: {e}")))?;
    let (reply, answer) = mpsc::channel();
    spawner
        .send(SpawnRequest { command, reply })
        .map_err(|_| FaultError::Failed("the hog spawner thread is gone".into()))?;
    answer
        .recv()
        .map_err(|_| FaultError::Failed("the hog spawner thread is gone".into()))?
        .map_err(|e| FaultError::Failed(format!("starting the hog process: {e}")))
}

/// Undoes [`Undo::StopChild`]: kills the pinned child's process group, if that child still
/// runs, and waits (bounded) until it is gone.
pub fn stop_child(pid: u32, start_time: u64) -> Result<UndoReport, FaultError> {
    // A plan's placeholder (the hog was never spawned); never our own group nor init's.
    if pid <= 1 {
        return Ok(UndoReport::nothing_left("no hog process was started"));
    }
    if let Err(FaultError::NotFound(why)) = process::check_pinned(pid, start_time) {
        return Ok(UndoReport::nothing_left(format!("hog: {why}")));
    }
    let group =
        i32::try_from(pid).map_err(|_| FaultError::Failed(format!("pid {pid} is out of range")))?;
    match signal::killpg(Pid::from_raw(group), Signal::SIGKILL) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => {
            return Err(FaultError::Failed(format!(
                "killing hog process group {pid}: {e}"
            )));
        }
    }
    process::wait_gone(pid, start_time, STOP_WAIT)?;
    tracing::info!(pid, start_time, "hog stopped");
    Ok(UndoReport::undone(format!(
        "hog process group {pid} killed"
    )))
}

/// Undoes [`Undo::RemoveFile`]: stops the file's writer if this agent still runs it, then
/// removes the file. Only a disk fill file of the agent's own (by its name) is removed.
pub fn remove_fill(path: &Path) -> Result<UndoReport, FaultError> {
    let ours = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(DISK_FILL_PREFIX));
    if !ours {
        return Err(FaultError::NotAllowed(format!(
            "{} is not a disk fill file of the agent's; not removed",
            path.display()
        )));
    }
    let writer = lock_writers().get(path).copied();
    if let Some((pid, start_time)) = writer {
        stop_child(pid, start_time)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "disk fill removed");
            Ok(UndoReport::undone(format!("removed {}", path.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(UndoReport::nothing_left(
            format!("{} was already removed", path.display()),
        )),
        Err(e) => Err(e.into()),
    }
}

// ---- the child side: `iohr-agent hog ...` ----

/// The hidden subcommand's body. Returns when the deadline passed or the parent is gone;
/// an error is also printed on stdout for the parent to read.
pub fn run_child(command: HogCommand) -> Result<(), FaultError> {
    let parent = nix::unistd::getppid();
    // Converted once, at once, to the boot clock (see `Due`): a wall clock stepped back
    // while the hog runs does not keep it running.
    let until = match &command {
        HogCommand::Cpu { until_unix_ms, .. }
        | HogCommand::Memory { until_unix_ms, .. }
        | HogCommand::Disk { until_unix_ms, .. } => Due::at_unix_ms(*until_unix_ms),
    };
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go)?;
    if go.trim() != "go" {
        // The parent dropped the hog before starting it.
        return Ok(());
    }
    // The memory hog's memory, held until the process ends.
    let started = match &command {
        HogCommand::Cpu {
            workers,
            load_percent,
            ..
        } => start_cpu(*workers, *load_percent).map(|()| Vec::new()),
        HogCommand::Memory { size_mb, .. } => hold_memory(*size_mb),
        HogCommand::Disk { path, size_mb, .. } => fill_disk(path, *size_mb).map(|()| Vec::new()),
    };
    let mut out = std::io::stdout().lock();
    let _held = match started {
        Ok(held) => held,
        Err(e) => {
            let _ = writeln!(out, "error: {e}");
            let _ = out.flush();
            return Err(e);
        }
    };
    writeln!(out, "ready")?;
    out.flush()?;
    drop(out);
    while !until.has_come() && nix::unistd::getppid() == parent {
        std::thread::sleep(CHILD_TICK);
    }
    if let HogCommand::Disk { path, .. } = &command {
        // At its deadline the fill ends by removing its file; an orphan leaves it to the
        // ledger of the agent's next start.
        if nix::unistd::getppid() == parent {
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(())
}

fn start_cpu(workers: u32, load_percent: u8) -> Result<(), FaultError> {
    let busy = CPU_PERIOD * u32::from(load_percent.clamp(1, 100)) / 100;
    for n in 0..workers {
        std::thread::Builder::new()
            .name(format!("cpu-hog-{n}"))
            .spawn(move || {
                loop {
                    let period_start = Instant::now();
                    let mut spins = 0u64;
                    while period_start.elapsed() < busy {
                        spins = std::hint::black_box(spins.wrapping_add(1));
                    }
                    if let Some(rest) = CPU_PERIOD.checked_sub(period_start.elapsed()) {
                        std::thread::sleep(rest);
                    }
                }
            })?;
    }
    Ok(())
}

fn hold_memory(size_mb: u64) -> Result<Vec<u8>, FaultError> {
    // The kernel's OOM killer takes the hog first, not the service under test.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    let size = usize::try_from(size_mb.saturating_mul(MB))
        .map_err(|_| FaultError::Failed(format!("{size_mb} MB does not fit in memory")))?;
    let mut memory = Vec::new();
    memory
        .try_reserve_exact(size)
        .map_err(|e| FaultError::Failed(format!("allocating {size_mb} MB: {e}")))?;
    // Non-zero bytes: every page is written, so every page is resident.
    memory.resize(size, 0xA5);
    Ok(std::hint::black_box(memory))
}

fn fill_disk(path: &Path, size_mb: u64) -> Result<(), FaultError> {
    // Never an existing file (nor a symbolic link, which create_new refuses too): it
    // would not be the agent's to fill or remove.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| FaultError::Failed(format!("creating {}: {e}", path.display())))?;
    let mut write = || -> std::io::Result<()> {
        let chunk = vec![0xA5u8; DISK_CHUNK];
        let mut left = size_mb.saturating_mul(MB);
        while left > 0 {
            let n = left.min(DISK_CHUNK as u64) as usize;
            file.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        file.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(path);
        FaultError::Failed(format!("writing {size_mb} MB to {}: {e}", path.display()))
    })
}
