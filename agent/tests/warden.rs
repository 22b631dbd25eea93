//! The fault warden with real processes: `iohr-agent exec` killed or stopped in the middle of
//! a fault, nothing started again, and the fault undone by its warden all the same; wardens
//! started by hand for the pid-reuse and already-undone cases; `iohr-agent faults list|undo`.
//! Each victim is a copy of `sleep` under a name of its own (`/proc/PID/comm`), so a
//! policy can name it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use iohr_agent::faults::Undo;
use iohr_agent::faults::ledger::{self, Ledger, LedgerEntry};
use iohr_agent::faults::process;
use iohr_domain::faults::Fault;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(10);
/// Debian's libfaketime (tests/run installs it), preloaded into one warden only.
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Said on stderr even when the test passes, for the figures in docs/benchmarks.md.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

fn agent() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_iohr-agent"))
}

/// Polls `check` every millisecond (the figures' resolution) until it holds, at most `within`; says whether it did.
fn poll(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "iohr-warden-{name}-{}-{}",
        std::process::id(),
        now_ms()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A process killed and reaped however the test ends.
struct Proc(Child);

impl Proc {
    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn state(&self) -> Option<char> {
        process::stat(self.pid()).unwrap().map(|s| s.state)
    }

    fn start_time(&self) -> u64 {
        process::stat(self.pid()).unwrap().unwrap().start_time
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.pid() as i32), signal).unwrap();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sleep` under the name `name` in `dir`, sleeping 1000 s, once it shows its name.
fn victim(dir: &Path, name: &str) -> Proc {
    let sleep = ["/bin/sleep", "/usr/bin/sleep"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("a sleep binary");
    // A symbolic link, not a copy: the name execve is given becomes the process's comm,
    // and no file is open for writing that a test forking beside it could inherit
    // (a copy failed with ETXTBSY when another test's fork held it).
    let copy = dir.join(name);
    std::os::unix::fs::symlink(sleep, &copy).unwrap();
    let p = Proc(Command::new(&copy).arg("1000").spawn().unwrap());
    assert!(
        poll(WITHIN, || {
            std::fs::read_to_string(format!("/proc/{}/comm", p.pid()))
                .is_ok_and(|c| c.trim() == name)
                && p.state() == Some('S')
        }),
        "the victim {name} runs"
    );
    p
}

/// A port nobody answers on, for runs whose experiment sends no probe.
fn quiet_target() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}

/// `iohr-agent exec --kind faults` of `experiment` with `policy`, on state dir `state`;
/// stdout piped (its JSON), stderr to `dir/exec.log`.
fn exec(dir: &Path, state: &Path, policy: &Value, experiment: &Value) -> Proc {
    let policy_path = dir.join("policy.json");
    std::fs::write(&policy_path, policy.to_string()).unwrap();
    let spec = dir.join("experiment.json");
    std::fs::write(&spec, experiment.to_string()).unwrap();
    let (listener, url) = quiet_target();
    std::mem::forget(listener);
    let log = std::fs::File::create(dir.join("exec.log")).unwrap();
    Proc(
        Command::new(agent())
            .args(["exec", "--kind", "faults", "--json", "--target", &url])
            .arg("--policy")
            .arg(&policy_path)
            .arg("--state-dir")
            .arg(state)
            .arg(&spec)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

fn one_fault(provider: Value, after_s: u64) -> Value {
    json!({
        "title": "warden", "description": "one fault held while the method waits",
        "method": [{"type": "action", "name": "fault", "provider": provider,
            "pauses": {"after": after_s}}],
    })
}

/// `iohr-agent faults ARGS --state-dir STATE --json`: its exit status and object.
fn faults(args: &[&str], state: &Path) -> (i32, Value) {
    let out = Command::new(agent())
        .arg("faults")
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .arg("--json")
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("faults {args:?} printed no JSON ({e}): {text}"));
    (out.status.code().unwrap_or(-1), value)
}

fn listing(state: &Path) -> Value {
    let (code, value) = faults(&["list"], state);
    assert_eq!(code, 0, "{value}");
    value
}

fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("exec.log")).unwrap_or_default()
}

/// The scenario: a victim paused for 60 s, the method waiting 30 s, the exec
/// SIGKILLed in the middle, nothing started again: the victim runs again within 2 s.
#[test]
fn an_exec_killed_in_the_middle_of_a_pause_leaves_its_victim_running() {
    let dir = scratch("exec-kill");
    let state = dir.join("state");
    let victim = victim(&dir, "victimproc");
    let mut exec = exec(
        &dir,
        &state,
        &json!({"processes": [{"name": "victimproc"}]}),
        &one_fault(
            json!({"type": "iohr", "fault": "process", "action": "pause",
                "name": "victimproc", "duration": "60s"}),
            30,
        ),
    );
    assert!(
        poll(WITHIN, || victim.state() == Some('T')),
        "paused: {}",
        log_of(&dir)
    );
    // Seen from outside before the kill: the entry and its warden, both watching.
    let before = listing(&state);
    assert_eq!(before["open"].as_array().unwrap().len(), 1, "{before}");
    let warden = &before["wardens"][0];
    assert_eq!(warden["owner"]["pid"], exec.pid(), "{before}");
    assert_eq!(
        (
            warden["warden_alive"].clone(),
            warden["owner_alive"].clone()
        ),
        (json!(true), json!(true)),
        "{before}"
    );
    let warden_pid = warden["warden"]["pid"].as_u64().unwrap() as u32;
    let warden_start = warden["warden"]["start_time"].as_u64().unwrap();

    exec.signal(Signal::SIGKILL);
    let killed = Instant::now();
    let _ = exec.0.wait();
    assert!(
        poll(Duration::from_secs(2), || victim.state() != Some('T')),
        "the victim still paused 2 s after the kill: {}",
        log_of(&dir)
    );
    say!(
        "warden: victim running again {:?} after the SIGKILL of exec",
        killed.elapsed()
    );
    assert!(
        poll(WITHIN, || {
            process::check_pinned(warden_pid, warden_start).is_err()
        }),
        "the warden ended"
    );
    let after = listing(&state);
    assert_eq!(
        after["open"],
        json!([]),
        "the warden closed the entry: {after}"
    );
    assert_eq!(after["wardens"], json!([]), "{after}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_exec_killed_in_the_middle_of_a_disk_fill_leaves_no_file() {
    let dir = scratch("fill-kill");
    let state = dir.join("state");
    let fill = dir.join("fill");
    std::fs::create_dir_all(&fill).unwrap();
    let files = || std::fs::read_dir(&fill).unwrap().count();
    let mut exec = exec(
        &dir,
        &state,
        &json!({"directories": [fill.display().to_string()], "max_disk_mb": 4}),
        &one_fault(
            json!({"type": "iohr", "fault": "disk_fill", "directory": fill.display().to_string(),
                "size_mb": 4, "duration": "60s"}),
            30,
        ),
    );
    // Applied once the warden is listed (armed before the fill) and the file is whole.
    assert!(
        poll(WITHIN, || {
            listing(&state)["wardens"]
                .as_array()
                .is_some_and(|w| w.len() == 1)
                && std::fs::read_dir(&fill)
                    .unwrap()
                    .filter_map(Result::ok)
                    .any(|f| f.metadata().is_ok_and(|m| m.len() == 4 << 20))
        }),
        "filled: {}",
        log_of(&dir)
    );
    exec.signal(Signal::SIGKILL);
    let killed = Instant::now();
    let _ = exec.0.wait();
    assert!(
        poll(Duration::from_secs(2), || files() == 0),
        "the fill's file still there 2 s after the kill: {}",
        log_of(&dir)
    );
    say!(
        "warden: disk fill removed {:?} after the SIGKILL of exec",
        killed.elapsed()
    );
    assert!(poll(WITHIN, || listing(&state)["open"] == json!([])));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An agent alive but stuck (SIGSTOP): the warden undoes the fault at its deadline, within
/// the second after it; the agent, let go again, finds it undone by the warden and does not
/// undo it twice.
#[test]
fn a_stuck_agents_fault_is_undone_at_its_deadline() {
    let dir = scratch("stuck");
    let state = dir.join("state");
    let victim = victim(&dir, "victimstop");
    let exec = exec(
        &dir,
        &state,
        &json!({"processes": [{"name": "victimstop"}]}),
        &one_fault(
            json!({"type": "iohr", "fault": "process", "action": "pause",
                "name": "victimstop", "duration": "2s"}),
            4,
        ),
    );
    assert!(
        poll(WITHIN, || victim.state() == Some('T')),
        "paused: {}",
        log_of(&dir)
    );
    exec.signal(Signal::SIGSTOP);
    let open = listing(&state);
    let deadline = open["open"][0]["deadline"].as_u64().expect("a deadline");
    assert!(
        poll(WITHIN, || victim.state() != Some('T')),
        "resumed while the agent is stopped"
    );
    let resumed = now_ms();
    say!(
        "warden: a stopped agent's fault undone {} ms after its deadline",
        resumed as i64 - deadline as i64
    );
    assert!(
        resumed >= deadline && resumed <= deadline + 1000,
        "undone {} ms after the deadline",
        resumed as i64 - deadline as i64
    );
    exec.signal(Signal::SIGCONT);
    let mut exec = exec;
    let mut out = String::new();
    let mut stdout = BufReader::new(exec.0.stdout.take().unwrap());
    stdout.read_line(&mut out).unwrap();
    let status = exec.0.wait().unwrap();
    let journal: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(status.code(), Some(0), "{journal}");
    let record = &journal["result"]["ledger"][0];
    assert_eq!(record["undone_by"], "warden", "{journal}");
    assert!(listing(&state)["open"] == json!([]));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The undo of a pause of `victim`.
fn resume(victim: &Proc) -> Undo {
    Undo::Resume {
        pid: victim.pid(),
        start_time: victim.start_time(),
    }
}

/// A ledger in `state/ledger` with one open entry whose undo is `undo`.
fn ledger_with(state: &Path, undo: Undo, deadline: u64) -> (Ledger, LedgerEntry) {
    let ledger = Ledger::open(&state.join("ledger")).unwrap();
    let entry = LedgerEntry {
        id: ledger::new_id(now_ms(), rand_id()),
        run_id: "by-hand".into(),
        fault: serde_json::from_value::<Fault>(
            json!({"fault": "process", "action": "pause", "name": "victim"}),
        )
        .unwrap(),
        undo,
        applied_at: now_ms(),
        deadline,
    };
    ledger.record(&entry).unwrap();
    (ledger, entry)
}

fn rand_id() -> u32 {
    (now_ms() as u32) ^ std::process::id()
}

/// `iohr-agent warden` started by hand for `entry`, watching `owner`; once it is ready.
fn start_warden(state: &Path, entry: &LedgerEntry, owner_pid: u32, owner_start: u64) -> Proc {
    start_warden_with(state, entry, owner_pid, owner_start, &[])
}

/// [`start_warden`] with `env` added to its environment.
fn start_warden_with(
    state: &Path,
    entry: &LedgerEntry,
    owner_pid: u32,
    owner_start: u64,
    env: &[(&str, &str)],
) -> Proc {
    let mut child = Command::new(agent())
        .envs(env.iter().copied())
        .arg("warden")
        .arg("--ledger-dir")
        .arg(state.join("ledger"))
        .args(["--id", &entry.id])
        .args(["--owner-pid", &owner_pid.to_string()])
        .args(["--owner-start-time", &owner_start.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    Proc(child)
}

fn sleeper() -> Proc {
    let p = Proc(Command::new("sleep").arg("1000").spawn().unwrap());
    assert!(poll(WITHIN, || p.state() == Some('S')));
    p
}

#[test]
fn a_warden_never_signals_a_pid_now_given_to_another_process() {
    let dir = scratch("reuse");
    let state = dir.join("state");
    let victim = victim(&dir, "victimreuse");
    victim.signal(Signal::SIGSTOP);
    assert!(poll(WITHIN, || victim.state() == Some('T')));
    // The victim's pid with another start time: what a pid the kernel handed to a new
    // process looks like to the pin the fault took.
    let (ledger, entry) = ledger_with(
        &state,
        Undo::Resume {
            pid: victim.pid(),
            start_time: victim.start_time() + 1,
        },
        now_ms() + 60_000,
    );
    let owner = sleeper();
    let mut warden = start_warden(&state, &entry, owner.pid(), owner.start_time());
    drop(owner);
    let ended = poll(WITHIN, || warden.0.try_wait().unwrap().is_some());
    assert!(ended, "the warden acted on its owner's death and ended");
    assert_eq!(victim.state(), Some('T'), "never signalled");
    // It tried, found another process on the pid, and closed the entry: nothing is left.
    assert!(ledger.open_entries().unwrap().is_empty());

    // The owner's pid given to another process is no owner: its warden acts at once.
    let (ledger2, entry) = {
        drop(ledger);
        ledger_with(
            &state,
            Undo::Resume {
                pid: victim.pid(),
                start_time: victim.start_time(),
            },
            now_ms() + 60_000,
        )
    };
    let other = sleeper();
    let _warden = start_warden(&state, &entry, other.pid(), other.start_time() + 1);
    assert!(
        poll(WITHIN, || victim.state() != Some('T')),
        "resumed at once: its owner is gone"
    );
    assert_eq!(other.state(), Some('S'), "the other process untouched");
    drop(ledger2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The agent undid the fault itself (claimed, undone, closed); later the victim is stopped
/// by someone else, then the agent dies: the warden does nothing.
#[test]
fn a_warden_for_a_fault_the_agent_undid_does_nothing() {
    let dir = scratch("undid");
    let state = dir.join("state");
    let victim = victim(&dir, "victimundid");
    victim.signal(Signal::SIGSTOP);
    assert!(poll(WITHIN, || victim.state() == Some('T')));
    let undo = Undo::Resume {
        pid: victim.pid(),
        start_time: victim.start_time(),
    };
    let (ledger, entry) = ledger_with(&state, undo, now_ms() + 60_000);
    let owner = sleeper();
    let mut warden = start_warden(&state, &entry, owner.pid(), owner.start_time());
    // The agent's undo: claimed first, then done, then the entry closed.
    assert_eq!(
        ledger.claim(&entry.id).unwrap(),
        iohr_agent::faults::warden::Claim::Ours
    );
    victim.signal(Signal::SIGCONT);
    ledger.close(&entry.id, now_ms()).unwrap();
    assert!(poll(WITHIN, || victim.state() == Some('S')));
    // A later stop, not the fault's.
    victim.signal(Signal::SIGSTOP);
    assert!(poll(WITHIN, || victim.state() == Some('T')));
    drop(owner);
    assert!(
        poll(WITHIN, || warden.0.try_wait().unwrap().is_some()),
        "the warden ended"
    );
    assert_eq!(victim.state(), Some('T'), "the warden did not resume it");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn faults_list_shows_entries_and_wardens_and_faults_undo_undoes_them() {
    let dir = scratch("admin");
    let state = dir.join("state");
    let victim = victim(&dir, "victimadmin");
    victim.signal(Signal::SIGSTOP);
    assert!(poll(WITHIN, || victim.state() == Some('T')));
    // This test process is the agent: its ledger, with wardens.
    let ledger = Ledger::open(&state.join("ledger"))
        .unwrap()
        .with_wardens(agent())
        .unwrap();
    let entry = LedgerEntry {
        id: ledger::new_id(now_ms(), 1),
        run_id: "admin".into(),
        fault: serde_json::from_value(
            json!({"fault": "process", "action": "pause", "name": "victimadmin"}),
        )
        .unwrap(),
        undo: Undo::Resume {
            pid: victim.pid(),
            start_time: victim.start_time(),
        },
        applied_at: now_ms(),
        deadline: now_ms() + 60_000,
    };
    ledger.record(&entry).unwrap();
    let proxy_entry = LedgerEntry {
        id: ledger::new_id(now_ms(), 2),
        undo: Undo::ProxyFault {
            proxy: "127.0.0.1:9".into(),
            id: 1,
        },
        ..entry.clone()
    };
    ledger.record(&proxy_entry).unwrap();

    let list = listing(&state);
    let open: Vec<&str> = list["open"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        open,
        [proxy_entry.id.as_str(), entry.id.as_str()],
        "newest first: {list}"
    );
    let wardens = list["wardens"].as_array().unwrap();
    assert_eq!(wardens.len(), 1, "only the pause has a warden: {list}");
    assert_eq!(wardens[0]["ledger_id"], entry.id.as_str());
    assert_eq!(wardens[0]["owner"]["pid"], std::process::id());
    assert_eq!(wardens[0]["warden_alive"], true);
    let warden_pid = wardens[0]["warden"]["pid"].as_u64().unwrap() as u32;
    let warden_start = wardens[0]["warden"]["start_time"].as_u64().unwrap();
    // The lines a person reads say the same.
    let lines = Command::new(agent())
        .args(["faults", "list", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&lines.stdout);
    assert!(lines.contains("open ledger entries: 2"), "{lines}");
    assert!(
        lines.contains(&format!("warden process {warden_pid} (running)")),
        "{lines}"
    );

    // While this "agent" holds the ledger: the pause is undone, its warden ended, and the
    // proxy fault is left to the agent.
    let (code, out) = faults(&["undo"], &state);
    assert_eq!(code, 0, "{out}");
    let outcomes = out["undo"].as_array().unwrap();
    let of = |id: &str| {
        outcomes
            .iter()
            .find(|o| o["ledger_id"] == id)
            .map(|o| o["outcome"].clone())
    };
    assert_eq!(of(&entry.id), Some(json!("undone")), "{out}");
    assert_eq!(of(&proxy_entry.id), Some(json!("left")), "{out}");
    assert!(poll(WITHIN, || victim.state() == Some('S')), "resumed");
    assert!(
        poll(WITHIN, || process::check_pinned(warden_pid, warden_start)
            .is_err()),
        "its warden ended"
    );
    let list = listing(&state);
    assert_eq!(list["open"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["wardens"], json!([]), "{list}");

    // With no agent, the proxy fault went with it: closed.
    drop(ledger);
    let (code, out) = faults(&["undo"], &state);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["undo"][0]["outcome"], "nothing_left", "{out}");
    assert_eq!(listing(&state)["open"], json!([]));
    let (code, out) = faults(&["undo"], &state);
    assert_eq!((code, out["undo"].clone()), (0, json!([])));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A healthy agent undoes its fault at the deadline itself and ends the fault's warden.
#[test]
fn an_agent_that_undoes_its_fault_itself_ends_its_warden() {
    let dir = scratch("healthy");
    let state = dir.join("state");
    let victim = victim(&dir, "victimwell");
    let mut exec = exec(
        &dir,
        &state,
        &json!({"processes": [{"name": "victimwell"}]}),
        &one_fault(
            json!({"type": "iohr", "fault": "process", "action": "pause",
                "name": "victimwell", "duration": "1s"}),
            2,
        ),
    );
    assert!(
        poll(WITHIN, || victim.state() == Some('T')),
        "paused: {}",
        log_of(&dir)
    );
    let armed = listing(&state);
    let warden = &armed["wardens"][0];
    let warden_pid = warden["warden"]["pid"].as_u64().expect("a warden") as u32;
    let warden_start = warden["warden"]["start_time"].as_u64().unwrap();
    let deadline = armed["open"][0]["deadline"].as_u64().unwrap();
    assert!(poll(WITHIN, || victim.state() == Some('S')), "resumed");
    // Ended by the agent with the undo, before the warden would act (0.5 s after the
    // deadline) and find the entry closed.
    assert!(
        poll(WITHIN, || process::check_pinned(warden_pid, warden_start)
            .is_err()),
        "the warden ended"
    );
    let gone = now_ms();
    assert!(
        gone < deadline + 500,
        "the warden ended {} ms after the deadline: by itself, not by the agent",
        gone as i64 - deadline as i64
    );
    let mut out = String::new();
    BufReader::new(exec.0.stdout.take().unwrap())
        .read_line(&mut out)
        .unwrap();
    assert_eq!(exec.0.wait().unwrap().code(), Some(0), "{out}");
    let journal: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        journal["result"]["ledger"][0]["undone_by"], "deadline",
        "{journal}"
    );
    assert_eq!(victim.state(), Some('S'));
    let after = listing(&state);
    assert_eq!(
        (after["open"].clone(), after["wardens"].clone()),
        (json!([]), json!([]))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Says (for docs/benchmarks.md) and asserts that `what` happened at `at_ms`, between a
/// warden's grace (0.5 s) and its hard stop (1 s) past `deadline`.
fn between_grace_and_hard_stop(what: &str, at_ms: u64, deadline: u64) {
    let late = at_ms as i64 - deadline as i64;
    say!("warden: {what} {late} ms after the deadline");
    assert!(
        (500..=1000).contains(&late),
        "{what} {late} ms after the deadline"
    );
}

/// A warden whose fault another live process is undoing (here: this test claimed it) leaves
/// it to that process and still ends within a second of the deadline.
#[test]
fn a_warden_ends_within_a_second_of_its_deadline() {
    let dir = scratch("hard-stop");
    let state = dir.join("state");
    let victim = victim(&dir, "victimhard");
    victim.signal(Signal::SIGSTOP);
    assert!(poll(WITHIN, || victim.state() == Some('T')));
    let deadline = now_ms() + 1000;
    let (ledger, entry) = ledger_with(&state, resume(&victim), deadline);
    assert_eq!(
        ledger.claim(&entry.id).unwrap(),
        iohr_agent::faults::warden::Claim::Ours
    );
    let owner = sleeper();
    let mut warden = start_warden(&state, &entry, owner.pid(), owner.start_time());
    assert!(
        poll(WITHIN, || warden.0.try_wait().unwrap().is_some()),
        "the warden ended"
    );
    between_grace_and_hard_stop(
        "a warden left its claimed fault and ended",
        now_ms(),
        deadline,
    );
    assert_eq!(victim.state(), Some('T'), "left to the claimant");
    assert_eq!(ledger.open_entries().unwrap().len(), 1, "and open");
    drop(owner);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A warden whose wall clock is stepped an hour back while it waits (an NTP step, an
/// operator's `date -s`; libfaketime preloaded into the warden alone, its offset read from a
/// file this test rewrites, its monotonic and boot clocks left alone as a step leaves them):
/// it still undoes its fault between its grace and its hard stop past the deadline, as the
/// victim's state in /proc shows; its close record, stamped with its own wall clock, shows
/// the step took.
#[test]
fn a_warden_keeps_its_deadline_when_its_wall_clock_steps_back() {
    assert!(
        Path::new(FAKETIME).exists(),
        "{FAKETIME} is missing: the clock test needs Debian's libfaketime \
         (`apt-get install -y faketime`, as tests/run does)"
    );
    let dir = scratch("clock-step");
    let state = dir.join("state");
    let victim = victim(&dir, "victimstep");
    victim.signal(Signal::SIGSTOP);
    assert!(poll(WITHIN, || victim.state() == Some('T')));
    let offset = dir.join("faketime-offset");
    let set_offset = |seconds: i64| {
        // Written whole, then renamed: the warden never reads half a line.
        let next = offset.with_extension("next");
        std::fs::write(&next, format!("{seconds:+}\n")).unwrap();
        std::fs::rename(&next, &offset).unwrap();
    };
    set_offset(0);
    let deadline = now_ms() + 1500;
    let (ledger, entry) = ledger_with(&state, resume(&victim), deadline);
    let owner = sleeper();
    let offset_text = offset.display().to_string();
    let _warden = start_warden_with(
        &state,
        &entry,
        owner.pid(),
        owner.start_time(),
        &[
            ("LD_PRELOAD", FAKETIME),
            ("FAKETIME_TIMESTAMP_FILE", offset_text.as_str()),
            ("FAKETIME_NO_CACHE", "1"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    set_offset(-3600);
    assert!(now_ms() < deadline, "stepped before the deadline");
    assert!(
        poll(WITHIN, || victim.state() != Some('T')),
        "still paused: its warden's clock went an hour back and it waited for that hour"
    );
    let resumed = now_ms();
    between_grace_and_hard_stop(
        "its clock stepped an hour back, a fault undone",
        resumed,
        deadline,
    );
    // The warden's close of the entry is stamped with its own clock: an hour behind.
    let text = std::fs::read_to_string(state.join("ledger/ledger.jsonl")).unwrap();
    let closed_at = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["op"] == "close" && r["id"] == entry.id.as_str())
        .and_then(|r| r["at"].as_u64())
        .expect("the warden closed the entry");
    let behind = resumed as i64 - closed_at as i64;
    assert!(
        (3_599_000..=3_601_000).contains(&behind),
        "the warden's clock was {behind} ms behind, not an hour"
    );
    drop((ledger, owner));
    std::fs::remove_dir_all(&dir).unwrap();
}
