//! Process, host and netem faults on real processes, measured from outside: process states
//! and CPU time in `/proc/PID/stat`, resident memory in `/proc/PID/status`, file sizes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

use iohr_agent::faults::hog::{self, HogSpec};
use iohr_agent::faults::host::{self, UndoReport, undo_blocking as undo};
use iohr_agent::faults::netem::{self, Tc};
use iohr_agent::faults::process::{self, Pinned};
use iohr_agent::faults::{FaultError, Undo};
use iohr_domain::faults::fault::{NetemFault, ProcessAction};

/// Said on stderr even when the test passes (libtest captures only the print macros), so a
/// run shows whether netem was tested or found unsupported.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

const WITHIN: Duration = Duration::from_secs(5);

/// Polls `check` until it holds, at most `within`; says whether it did.
fn poll(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A child the test started, killed and reaped however the test ends.
struct Target(Child);

impl Target {
    fn sleep() -> Self {
        Target(
            Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("sleep starts"),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Polled: a child spawned with vfork may show its parent's name for a moment after
    /// `spawn` returns (the kernel renames it later in exec).
    fn pinned(&self) -> Pinned {
        let mut found = None;
        poll(WITHIN, || {
            found = process::find("sleep", Some(self.pid()), None).ok();
            found.is_some()
        });
        found.expect("the sleep is found")
    }

    fn state(&self) -> char {
        process::stat(self.pid())
            .unwrap()
            .expect("still there")
            .state
    }

    /// The exit status, waiting at most `WITHIN`.
    fn exit(&mut self) -> Option<ExitStatus> {
        let mut status = None;
        poll(WITHIN, || {
            status = self.0.try_wait().unwrap();
            status.is_some()
        });
        status
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "iohr-host-faults-{name}-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Gone, a zombie, or another process by now: the pinned process no longer runs.
fn gone(pid: u32, start_time: u64) -> bool {
    process::check_pinned(pid, start_time).is_err()
}

fn cpu_ticks(pid: u32) -> u64 {
    process::stat(pid)
        .unwrap()
        .map(|s| s.utime + s.stime)
        .unwrap_or(0)
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn agent() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_iohr-agent"))
}

#[test]
fn a_paused_process_is_stopped_until_the_undo_resumes_it() {
    let target = Target::sleep();
    let pinned = target.pinned();
    let resume = process::undo_for(ProcessAction::Pause, &pinned, None);
    assert_eq!(
        resume,
        Undo::Resume {
            pid: pinned.pid,
            start_time: pinned.start_time
        }
    );
    process::apply(ProcessAction::Pause, &pinned, None).unwrap();
    assert!(poll(WITHIN, || target.state() == 'T'), "paused: state T");

    let report = undo(&resume).unwrap();
    assert!(report.undone, "{report:?}");
    assert!(
        poll(WITHIN, || target.state() == 'S'),
        "running again: back asleep in sleep(1)"
    );
}

#[test]
fn a_reused_pid_is_never_signalled() {
    let mut target = Target::sleep();
    let real = target.pinned();
    assert!(
        poll(WITHIN, || target.state() == 'S'),
        "settled in sleep(1)"
    );
    // The same pid with another start time: what a pid the kernel handed to a new process
    // looks like to a pin taken earlier.
    let stale = Pinned {
        start_time: real.start_time + 1,
        ..real.clone()
    };
    for action in [
        ProcessAction::Pause,
        ProcessAction::Terminate,
        ProcessAction::Kill,
    ] {
        let err = process::apply(action, &stale, None).unwrap_err();
        assert!(
            matches!(&err, FaultError::NotFound(why) if why.contains("not signalled")),
            "{action:?}: {err}"
        );
    }
    assert_eq!(target.state(), 'S', "neither stopped");
    assert!(target.0.try_wait().unwrap().is_none(), "nor ended");

    // A stale undo does not resume either.
    process::apply(ProcessAction::Pause, &real, None).unwrap();
    assert!(poll(WITHIN, || target.state() == 'T'));
    let report = undo(&Undo::Resume {
        pid: stale.pid,
        start_time: stale.start_time,
    })
    .unwrap();
    assert!(!report.undone, "{report:?}");
    assert!(report.message.contains("another process"), "{report:?}");
    assert_eq!(target.state(), 'T', "still paused");

    // And once the process is gone, its pin signals nothing.
    process::apply(ProcessAction::Kill, &real, None).unwrap();
    assert_eq!(target.exit().and_then(|s| s.signal()), Some(9));
    let report = undo(&Undo::Resume {
        pid: real.pid,
        start_time: real.start_time,
    })
    .unwrap();
    assert!(!report.undone, "{report:?}");
}

#[test]
fn terminate_and_kill_end_the_process() {
    for (action, signal) in [(ProcessAction::Terminate, 15), (ProcessAction::Kill, 9)] {
        let mut target = Target::sleep();
        let pinned = target.pinned();
        assert!(matches!(
            process::undo_for(action, &pinned, None),
            Undo::Nothing { .. }
        ));
        assert_eq!(
            process::undo_for(action, &pinned, Some("true")),
            Undo::Restart {
                command: "true".into()
            }
        );
        process::apply(action, &pinned, None).unwrap();
        assert_eq!(
            target.exit().and_then(|s| s.signal()),
            Some(signal),
            "{action:?}"
        );
    }
}

#[test]
fn restart_terminates_the_process_and_runs_the_restart_command() {
    let dir = scratch_dir("restart");
    let marker = dir.join("restarted");
    let command = format!("echo restarted > '{}'", marker.display());
    let mut target = Target::sleep();
    let pinned = target.pinned();

    let done = process::apply(ProcessAction::Restart, &pinned, Some(&command)).unwrap();
    assert!(done.contains("restart command done"), "{done}");
    assert_eq!(target.exit().and_then(|s| s.signal()), Some(15));
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap().trim(),
        "restarted"
    );

    // Without a command there is no restart, and nothing is signalled.
    let other = Target::sleep();
    let err = process::apply(ProcessAction::Restart, &other.pinned(), None).unwrap_err();
    assert!(matches!(err, FaultError::NotAllowed(_)), "{err}");
    assert!(process::check_pinned(other.pinned().pid, other.pinned().start_time).is_ok());

    // The undo of a terminate or a kill runs the same command.
    std::fs::remove_file(&marker).unwrap();
    let report = undo(&Undo::Restart { command }).unwrap();
    assert!(report.undone, "{report:?}");
    assert!(marker.exists());
    let failing = undo(&Undo::Restart {
        command: "exit 3".into(),
    });
    assert!(matches!(failing, Err(FaultError::Failed(_))), "{failing:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_process_is_found_by_its_name_only_when_it_is_the_only_one() {
    let dir = scratch_dir("find");
    // The name a process gets is its program's file name: a script of a unique name.
    let name = format!("iohr-t{}", std::process::id() % 100_000);
    let script = dir.join(&name);
    std::fs::write(&script, "#!/bin/sh\nread line\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let start = || Target(Command::new(&script).stdin(Stdio::piped()).spawn().unwrap());

    assert!(matches!(
        process::find(&name, None, None),
        Err(FaultError::NotFound(_))
    ));
    let one = start();
    let mut found = None;
    assert!(poll(WITHIN, || {
        found = process::find(&name, None, None).ok();
        found.is_some()
    }));
    assert_eq!(found.unwrap().pid, one.pid());

    let two = start();
    assert!(poll(WITHIN, || matches!(
        process::find(&name, None, None),
        Err(FaultError::Failed(why)) if why.contains("name one by its pid")
    )));
    assert_eq!(
        process::find(&name, Some(two.pid()), None).unwrap().pid,
        two.pid()
    );
    assert!(matches!(
        process::find("not-this-name", Some(two.pid()), None),
        Err(FaultError::NotFound(_))
    ));
    drop((one, two));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_cpu_hog_burns_cpu_until_the_undo() {
    let deadline = SystemTime::now() + Duration::from_secs(60);
    let spec = HogSpec::Cpu {
        workers: 1,
        load_percent: 100,
    };
    let mut hog = hog::spawn(agent(), &spec, deadline).unwrap();
    let (pid, start_time) = (hog.pid(), hog.start_time());
    assert_eq!(hog.undo(), Undo::StopChild { pid, start_time });
    hog.go(WITHIN).unwrap();
    // 30 ticks of 10 ms: the hog has burnt 0.3 s of CPU.
    assert!(
        poll(WITHIN, || cpu_ticks(pid) >= 30),
        "CPU time {} ticks",
        cpu_ticks(pid)
    );

    let report = undo(&hog.undo()).unwrap();
    assert!(report.undone, "{report:?}");
    assert!(poll(WITHIN, || gone(pid, start_time)), "the hog is gone");
    let again = undo(&hog.undo()).unwrap();
    assert!(!again.undone, "a second undo finds nothing: {again:?}");
}

#[test]
fn the_memory_hog_holds_its_size_until_the_undo() {
    let deadline = SystemTime::now() + Duration::from_secs(60);
    let mut hog = hog::spawn(agent(), &HogSpec::Memory { size_mb: 64 }, deadline).unwrap();
    let (pid, start_time) = (hog.pid(), hog.start_time());
    hog.go(WITHIN).unwrap();
    assert!(
        poll(WITHIN, || rss_kb(pid) >= 64 * 1024),
        "RSS {} kB",
        rss_kb(pid)
    );
    assert!(undo(&hog.undo()).unwrap().undone);
    assert!(poll(WITHIN, || gone(pid, start_time)));
}

#[test]
fn the_disk_fill_writes_its_size_and_the_undo_removes_it() {
    let dir = scratch_dir("fill");
    let path = hog::disk_fill_path(&dir).unwrap();
    assert!(path.starts_with(&dir));
    let deadline = SystemTime::now() + Duration::from_secs(60);
    let spec = HogSpec::Disk {
        path: path.clone(),
        size_mb: 8,
    };
    let mut hog = hog::spawn(agent(), &spec, deadline).unwrap();
    let (pid, start_time) = (hog.pid(), hog.start_time());
    assert_eq!(hog.undo(), Undo::RemoveFile { path: path.clone() });
    hog.go(WITHIN).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8 << 20);

    let report = undo(&hog.undo()).unwrap();
    assert!(report.undone, "{report:?}");
    assert!(!path.exists());
    assert!(poll(WITHIN, || gone(pid, start_time)), "the writer is gone");
    assert_eq!(
        undo(&hog.undo()).unwrap(),
        UndoReport::nothing_left(format!("{} was already removed", path.display()))
    );

    // A file that is not a disk fill of the agent's is never removed.
    let foreign = dir.join("data.db");
    std::fs::write(&foreign, b"keep").unwrap();
    let refused = undo(&Undo::RemoveFile {
        path: foreign.clone(),
    });
    assert!(
        matches!(refused, Err(FaultError::NotAllowed(_))),
        "{refused:?}"
    );
    assert!(foreign.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hogs_stop_by_themselves_at_their_deadline() {
    let dir = scratch_dir("deadline");
    let path = hog::disk_fill_path(&dir).unwrap();
    let deadline = SystemTime::now() + Duration::from_millis(2500);
    let mut cpu = hog::spawn(
        agent(),
        &HogSpec::Cpu {
            workers: 1,
            load_percent: 10,
        },
        deadline,
    )
    .unwrap();
    let mut disk = hog::spawn(
        agent(),
        &HogSpec::Disk {
            path: path.clone(),
            size_mb: 1,
        },
        deadline,
    )
    .unwrap();
    cpu.go(WITHIN).unwrap();
    disk.go(WITHIN).unwrap();
    assert!(path.exists(), "written");
    assert!(poll(WITHIN, || gone(cpu.pid(), cpu.start_time())));
    assert!(poll(WITHIN, || gone(disk.pid(), disk.start_time())));
    assert!(!path.exists(), "the fill removed its file at its deadline");
    assert!(
        SystemTime::now() >= deadline,
        "not before the deadline either"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_hog_that_is_never_started_ends_when_dropped() {
    let hog = hog::spawn(
        agent(),
        &HogSpec::Memory { size_mb: 1 },
        SystemTime::now() + Duration::from_secs(60),
    )
    .unwrap();
    let (pid, start_time) = (hog.pid(), hog.start_time());
    drop(hog);
    assert!(poll(WITHIN, || gone(pid, start_time)));
}

const PIN_MARK: &str = "IOHR-HOG-PIN";

/// Not a test of its own: the parent process of `a_hog_dies_with_its_parent`, which runs
/// this test binary again with `IOHR_HOG_PARENT` set. It starts a hog, prints its pin and
/// waits to be killed.
#[test]
fn hog_parent_helper() {
    if std::env::var_os("IOHR_HOG_PARENT").is_none() {
        return;
    }
    let mut hog = hog::spawn(
        agent(),
        &HogSpec::Cpu {
            workers: 1,
            load_percent: 5,
        },
        SystemTime::now() + Duration::from_secs(60),
    )
    .unwrap();
    hog.go(WITHIN).unwrap();
    // libtest may have written "test NAME ... " on the same line before it.
    println!("{PIN_MARK} {} {}", hog.pid(), hog.start_time());
    // Killed by the test long before this ends.
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

#[test]
fn a_hog_dies_with_its_parent() {
    let mut parent = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "hog_parent_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("IOHR_HOG_PARENT", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(parent.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    // Read on a thread so that the wait for the pin is bounded.
    std::thread::spawn(move || {
        let pin = stdout.lines().map_while(Result::ok).find_map(|line| {
            let (_, rest) = line.split_once(PIN_MARK)?;
            let mut w = rest.split_whitespace();
            Some((
                w.next()?.parse::<u32>().ok()?,
                w.next()?.parse::<u64>().ok()?,
            ))
        });
        let _ = tx.send(pin);
    });
    let Ok(Some((pid, start_time))) = rx.recv_timeout(WITHIN * 2) else {
        let _ = parent.kill();
        panic!("the parent printed no hog: {:?}", parent.wait());
    };
    assert!(!gone(pid, start_time), "the hog runs");
    parent.kill().unwrap();
    assert_eq!(parent.wait().unwrap().signal(), Some(9));
    assert!(
        poll(WITHIN, || gone(pid, start_time)),
        "the hog died with its parent"
    );
}

#[test]
fn netem_is_applied_where_the_kernel_has_it_and_said_unsupported_where_not() {
    let fault = NetemFault {
        delay_ms: 100,
        jitter_ms: 10,
        loss_percent: 1.0,
        interface: None,
    };
    assert_eq!(
        netem::undo_for(&fault),
        Undo::RemoveQdisc {
            interface: "lo".into()
        }
    );
    let support = netem::support();
    match &support {
        Ok(()) => say!("netem: supported on this host; applying it in a private namespace"),
        Err(FaultError::Unsupported(why)) => say!("netem: unsupported on this host: {why}"),
        Err(e) => panic!("netem support detection failed: {e}"),
    }
    // Never on the host's own interfaces: in a network namespace of a process of ours.
    // Entered with `nsenter --net`, which takes root: elsewhere only detection is checked.
    let holder = Command::new("unshare")
        .args(["--net", "--", "sleep", "30"])
        .stderr(Stdio::null())
        .spawn();
    let Ok(holder) = holder else {
        say!("netem: no unshare binary to make a private namespace; detection checked only");
        return;
    };
    let mut holder = Target(holder);
    let own_ns = std::fs::read_link("/proc/self/ns/net").unwrap();
    let mut ended = None;
    let in_own_ns = poll(WITHIN, || {
        ended = holder.0.try_wait().unwrap();
        ended.is_some()
            || std::fs::read_link(format!("/proc/{}/ns/net", holder.pid()))
                .is_ok_and(|ns| ns != own_ns)
    }) && ended.is_none();
    if !in_own_ns {
        say!("netem: unshare could not make a namespace here ({ended:?}); detection checked only");
        return;
    }
    let tc = Tc::in_namespace_of(holder.pid());
    let applied = netem::apply(&tc, &fault);
    match support {
        Ok(()) => {
            applied.unwrap();
            let root = tc.root_qdisc("lo").unwrap();
            assert!(root.starts_with("qdisc netem 504d:"), "{root}");
            assert!(root.contains("delay 100ms"), "{root}");
            let again = netem::apply(&tc, &fault).unwrap_err();
            assert!(again.to_string().contains("never replaces"), "{again}");
            let report = netem::remove(&tc, "lo").unwrap();
            assert!(report.undone, "{report:?}");
            assert!(!tc.root_qdisc("lo").unwrap().contains("netem"));
            say!("netem: applied (delay 100ms seen on lo) and removed");
        }
        Err(_) => {
            let err = applied.unwrap_err();
            assert!(matches!(err, FaultError::Unsupported(_)), "{err}");
            say!("netem: apply said so too: {err}");
            let report = netem::remove(&tc, "lo").unwrap();
            assert!(!report.undone, "nothing to remove: {report:?}");
        }
    }
}

#[test]
fn proxy_faults_are_not_undone_here() {
    let err = undo(&Undo::ProxyFault {
        proxy: "p".into(),
        id: 1,
    })
    .unwrap_err();
    assert!(err.to_string().contains("not a host fault"), "{err}");
    let nothing = undo(&Undo::Nothing { why: "why".into() }).unwrap();
    assert_eq!(nothing, UndoReport::nothing_left("why"));
}

#[tokio::test]
async fn the_entry_point_plans_applies_and_undoes_within_the_policy() {
    use iohr_domain::faults::{Fault, Policy};
    let dir = scratch_dir("entry");
    let target = Target::sleep();
    assert!(poll(WITHIN, || target.state() == 'S'));
    let pause: Fault = serde_json::from_value(serde_json::json!({
        "fault": "process", "action": "pause", "name": "sleep", "pid": target.pid()
    }))
    .unwrap();
    let deadline_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 60_000;

    // Outside the policy nothing is touched.
    let refused = host::apply(&pause, &Policy::default(), agent(), deadline_ms).await;
    assert!(
        matches!(refused, Err(FaultError::NotAllowed(_))),
        "{refused:?}"
    );
    assert_eq!(target.state(), 'S');

    let policy = Policy::parse(
        &serde_json::json!({
            "processes": [{"name": "sleep"}],
            "directories": [dir.display().to_string()],
            "max_memory_mb": 16, "max_disk_mb": 2
        })
        .to_string(),
    )
    .unwrap();
    let planned = host::plan(&pause, &policy).unwrap();
    let applied = host::apply(&pause, &policy, agent(), deadline_ms)
        .await
        .unwrap();
    assert_eq!(planned, applied);
    assert!(poll(WITHIN, || target.state() == 'T'));
    host::undo(&applied).await.unwrap();
    assert!(poll(WITHIN, || target.state() == 'S'));

    let memory: Fault =
        serde_json::from_value(serde_json::json!({"fault": "memory_hog", "size_mb": 16})).unwrap();
    let Undo::StopChild { pid, start_time } = host::apply(&memory, &policy, agent(), deadline_ms)
        .await
        .unwrap()
    else {
        panic!("a hog is undone by stopping its child");
    };
    assert!(rss_kb(pid) >= 16 * 1024, "RSS {} kB", rss_kb(pid));
    host::undo(&Undo::StopChild { pid, start_time })
        .await
        .unwrap();
    assert!(poll(WITHIN, || gone(pid, start_time)));

    // The file the ledger holds from the plan is the one written.
    let fill: Fault = serde_json::from_value(serde_json::json!({
        "fault": "disk_fill", "directory": dir.display().to_string(), "size_mb": 2
    }))
    .unwrap();
    let planned = host::plan(&fill, &policy).unwrap();
    let applied = host::apply(&fill, &policy, agent(), deadline_ms)
        .await
        .unwrap();
    assert_eq!(planned, applied);
    let Undo::RemoveFile { path } = &applied else {
        panic!("a disk fill is undone by removing its file");
    };
    assert_eq!(std::fs::metadata(path).unwrap().len(), 2 << 20);
    host::undo(&applied).await.unwrap();
    assert!(!path.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
