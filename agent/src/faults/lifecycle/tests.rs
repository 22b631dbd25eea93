//! The lifecycle's branches, with a scripted driver, a real ledger in a temporary
//! directory, and tokio's paused clock behind the injected [`Clock`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use iohr_domain::faults::JournalStatus;
use iohr_domain::faults::fault::CpuHog;
use iohr_domain::faults::journal::ActivityStatus;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use super::super::ledger::LedgerEntry;
use super::*;
use crate::kinds::FrameSender;

/// Virtual time from tokio's paused clock, starting at a fixed epoch; a wall clock that a
/// test may step ([`TestClock::step_wall`]); seeded randomness.
struct TestClock {
    base_ms: u64,
    start: tokio::time::Instant,
    /// How far the wall clock was stepped, milliseconds (negative: back).
    stepped_ms: std::sync::atomic::AtomicI64,
    rng: Mutex<ChaCha8Rng>,
}

impl TestClock {
    fn new() -> TestClock {
        TestClock {
            base_ms: 1_700_000_000_000,
            start: tokio::time::Instant::now(),
            stepped_ms: std::sync::atomic::AtomicI64::new(0),
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(7)),
        }
    }

    /// Milliseconds since the run's start.
    fn elapsed(&self, at: u64) -> u64 {
        at - self.base_ms
    }

    /// Steps the wall clock by `by_ms` (an NTP step); the monotonic clock goes on.
    fn step_wall(&self, by_ms: i64) {
        self.stepped_ms
            .fetch_add(by_ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        let stepped = self.stepped_ms.load(std::sync::atomic::Ordering::SeqCst);
        (self.base_ms + self.start.elapsed().as_millis() as u64).saturating_add_signed(stepped)
    }

    fn monotonic(&self) -> tokio::time::Instant {
        tokio::time::Instant::now()
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(duration)
    }

    fn random(&self) -> f64 {
        use rand::Rng;
        self.rng.lock().unwrap().random::<f64>()
    }
}

/// A driver that follows a script and logs every call. Faults are CPU hogs whose worker
/// count is their id; probes are HTTP probes answered by path.
#[derive(Default)]
struct Scripted {
    log: Mutex<Vec<String>>,
    /// Per path, the statuses its probes answer in turn (200 when the list runs out).
    statuses: Mutex<HashMap<String, VecDeque<u16>>>,
    /// Faults whose apply fails.
    apply_fails: HashSet<u32>,
    /// Per fault, how many undos fail before one succeeds (u32::MAX: never).
    undo_fails: Mutex<HashMap<u32, u32>>,
    /// Cancelled when this fault is applied.
    cancel_on_apply: Option<(u32, CancellationToken)>,
    /// How long each probe takes.
    probe_time: Duration,
    /// This fault's apply never answers.
    apply_hangs: Option<u32>,
}

impl Scripted {
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    fn answer(&self, path: &str, statuses: &[u16]) {
        self.statuses
            .lock()
            .unwrap()
            .insert(path.to_string(), statuses.iter().copied().collect());
    }
}

fn id_of(fault: &Fault) -> u32 {
    match fault {
        Fault::CpuHog(h) => h.workers,
        _ => 0,
    }
}

impl Driver for Scripted {
    fn plan(&self, fault: &Fault) -> impl Future<Output = Result<Undo, FaultError>> + Send {
        let id = id_of(fault);
        self.log.lock().unwrap().push(format!("plan {id}"));
        std::future::ready(Ok(Undo::Nothing {
            why: format!("planned {id}"),
        }))
    }

    fn apply(
        &self,
        fault: &Fault,
        deadline: Deadline,
    ) -> impl Future<Output = Result<Undo, FaultError>> + Send {
        let id = id_of(fault);
        self.log.lock().unwrap().push(format!(
            "apply {id} for {} ms",
            deadline.remaining.as_millis()
        ));
        if let Some((at, token)) = &self.cancel_on_apply
            && *at == id
        {
            token.cancel();
        }
        let hangs = self.apply_hangs == Some(id);
        let out = if self.apply_fails.contains(&id) {
            Err(FaultError::Failed(format!("fault {id} would not apply")))
        } else {
            Ok(Undo::StopChild {
                pid: id,
                start_time: 0,
            })
        };
        async move {
            if hangs {
                std::future::pending::<()>().await;
            }
            out
        }
    }

    fn undo(&self, undo: &Undo) -> impl Future<Output = Result<(), FaultError>> + Send {
        let id = match undo {
            Undo::StopChild { pid, .. } => *pid,
            _ => 0,
        };
        let mut fails = self.undo_fails.lock().unwrap();
        let left = fails.entry(id).or_insert(0);
        let out = if *left > 0 {
            if *left != u32::MAX {
                *left -= 1;
            }
            self.log.lock().unwrap().push(format!("undo {id} failed"));
            Err(FaultError::Failed(format!("fault {id} would not go")))
        } else {
            self.log.lock().unwrap().push(format!("undo {id}"));
            Ok(())
        };
        std::future::ready(out)
    }

    fn probe(
        &self,
        provider: &Provider,
    ) -> impl Future<Output = Result<ProbeOutput, ProbeError>> + Send {
        let path = match provider {
            Provider::Http(h) => match &h.location {
                iohr_domain::faults::experiment::HttpLocation::Path(p) => p.clone(),
                iohr_domain::faults::experiment::HttpLocation::Url(u) => u.clone(),
            },
            _ => "load".to_string(),
        };
        self.log.lock().unwrap().push(format!("probe {path}"));
        let status = self
            .statuses
            .lock()
            .unwrap()
            .get_mut(&path)
            .and_then(VecDeque::pop_front)
            .unwrap_or(200);
        let time = self.probe_time;
        async move {
            tokio::time::sleep(time).await;
            if path == "/broken" {
                return Err(ProbeError("connect: connection refused".into()));
            }
            Ok(ProbeOutput::Http {
                status,
                latency_ms: time.as_secs_f64() * 1000.0,
                body: format!("{{\"healthy\": {}}}", status == 200),
            })
        }
    }
}

fn hog(name: &str, id: u32, duration: &str) -> Value {
    json!({"type": "action", "name": name,
           "provider": {"type": "iohr", "fault": "cpu_hog", "workers": id, "duration": duration}})
}

fn probe(name: &str, path: &str) -> Value {
    json!({"type": "probe", "name": name, "tolerance": 200,
           "provider": {"type": "http", "path": path}})
}

fn experiment(method: Vec<Value>) -> Experiment {
    Experiment::from_json(&json!({
        "title": "t", "description": "d",
        "steady-state-hypothesis": {"title": "up", "probes": [probe("health", "/health")]},
        "method": method,
        "rollbacks": [{"type": "action", "name": "tidy", "provider": {"type": "http", "path": "/tidy", "method": "POST"}}]
    }))
    .unwrap()
}

fn policy() -> Policy {
    Policy {
        max_cpu_workers: 100,
        ..Policy::for_exec(8080)
    }
}

struct Harness {
    clock: TestClock,
    ledger: Ledger,
    _dir: tempfile::TempDir,
    frames: Mutex<Vec<TimelineStep>>,
    cancel: CancellationToken,
}

impl Harness {
    fn new() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        Harness {
            clock: TestClock::new(),
            ledger: Ledger::open(dir.path()).unwrap(),
            _dir: dir,
            frames: Mutex::new(Vec::new()),
            cancel: CancellationToken::new(),
        }
    }

    async fn run(&self, driver: &Scripted, e: &Experiment, policy: &Policy, dry: bool) -> Journal {
        Run {
            run_id: "run-1".into(),
            driver,
            clock: &self.clock,
            ledger: &self.ledger,
            policy,
            target_port: 8080,
            target: "http://127.0.0.1:8080".into(),
            timeline: |step| self.frames.lock().unwrap().push(step),
            cancel: self.cancel.clone(),
            dry_run: dry,
            retry: Retry::default(),
            env: EnvVars::from_fn(|name| (name == "API_TOKEN").then(|| "s3cr3t".to_string())),
        }
        .execute(e)
        .await
    }

    fn steps(&self) -> Vec<String> {
        self.frames
            .lock()
            .unwrap()
            .iter()
            .map(|s| {
                format!(
                    "{} {} {}",
                    s.phase,
                    s.activity.as_deref().unwrap_or("-"),
                    s.status
                )
            })
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn faults_hold_until_the_rollbacks_undo_them_newest_first() {
    let h = Harness::new();
    let driver = Scripted::default();
    let e = experiment(vec![hog("one", 1, "30s"), hog("two", 2, "30s")]);
    let j = h.run(&driver, &e, &policy(), false).await;
    assert_eq!(j.status, JournalStatus::Completed, "{:?}", j.reason);
    assert!(!j.deviated);
    assert_eq!(
        driver.log(),
        [
            "probe /health",
            "plan 1",
            "apply 1 for 30000 ms",
            "plan 2",
            "apply 2 for 30000 ms",
            "probe /health",
            "undo 2",
            "undo 1",
            "probe /tidy",
        ]
    );
    assert!(j.steady_states.before.as_ref().unwrap().steady_state_met);
    assert!(j.steady_states.after.as_ref().unwrap().steady_state_met);
    assert_eq!(j.run.len(), 2);
    assert_eq!(j.rollbacks.len(), 3);
    assert_eq!(j.rollbacks[2].activity["name"], "tidy");
    assert_eq!(j.ledger.len(), 2);
    assert!(
        j.ledger
            .iter()
            .all(|r| r.undone_by.as_deref() == Some("rollback"))
    );
    assert!(h.ledger.open_entries().unwrap().is_empty());
    assert_eq!(
        j.targets,
        ["http://127.0.0.1:8080", "cpu 1 workers", "cpu 2 workers"]
    );
    assert_eq!(
        h.steps(),
        [
            "hypothesis_before - started",
            "hypothesis_before health met",
            "hypothesis_before - met",
            "method one started",
            "method one applied",
            "method two started",
            "method two applied",
            "hypothesis_after - started",
            "hypothesis_after health met",
            "hypothesis_after - met",
            "rollback two started",
            "rollback two undone",
            "rollback one started",
            "rollback one undone",
            "rollback tidy started",
            "rollback tidy succeeded",
            "end - completed",
        ]
    );
    // The journal keeps status and latency, never a body.
    let output = &j.steady_states.before.as_ref().unwrap().probes[0].output;
    assert_eq!(output.as_ref().unwrap().get("body"), None);
}

#[tokio::test(start_paused = true)]
async fn a_hypothesis_that_fails_before_the_method_injects_nothing() {
    let h = Harness::new();
    let driver = Scripted::default();
    driver.answer("/health", &[503]);
    let e = experiment(vec![hog("one", 1, "30s")]);
    let j = h.run(&driver, &e, &policy(), false).await;
    assert_eq!(j.status, JournalStatus::Failed);
    assert!(!j.deviated);
    assert_eq!(driver.log(), ["probe /health"]);
    assert!(j.run.is_empty() && j.rollbacks.is_empty() && j.ledger.is_empty());
    let probe = &j.steady_states.before.as_ref().unwrap().probes[0];
    assert_eq!(probe.tolerance_met, Some(false));
    assert_eq!(
        probe.exception.as_deref(),
        Some("not within the tolerance: expected 200, got 503")
    );
    assert!(j.steady_states.after.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_miss_after_the_method_deviates_and_the_rollbacks_still_run() {
    let h = Harness::new();
    let driver = Scripted::default();
    driver.answer("/health", &[200, 503]);
    let e = experiment(vec![hog("one", 1, "30s")]);
    let j = h.run(&driver, &e, &policy(), false).await;
    assert_eq!(j.status, JournalStatus::Failed);
    assert!(j.deviated);
    assert!(!j.steady_states.after.as_ref().unwrap().steady_state_met);
    assert!(driver.log().contains(&"undo 1".to_string()));
    assert!(h.ledger.open_entries().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_fault_that_fails_aborts_the_method_and_only_applied_faults_are_undone() {
    let h = Harness::new();
    let driver = Scripted {
        apply_fails: HashSet::from([2]),
        ..Scripted::default()
    };
    let e = experiment(vec![
        hog("one", 1, "30s"),
        hog("two", 2, "30s"),
        hog("three", 3, "30s"),
    ]);
    let j = h.run(&driver, &e, &policy(), false).await;
    assert_eq!(j.status, JournalStatus::Aborted);
    assert_eq!(
        driver.log(),
        [
            "probe /health",
            "plan 1",
            "apply 1 for 30000 ms",
            "plan 2",
            "apply 2 for 30000 ms",
            "undo 1",
            "probe /tidy",
        ]
    );
    assert_eq!(j.run[1].status, ActivityStatus::Failed);
    assert_eq!(
        j.run[1].exception.as_deref(),
        Some("fault 2 would not apply")
    );
    assert!(j.steady_states.after.is_none(), "skipped after an abort");
    // The failed fault's ledger entry was closed: nothing for a restart to undo.
    assert!(h.ledger.open_entries().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_failing_undo_is_retried_with_backoff_on_the_injected_clock() {
    let h = Harness::new();
    let driver = Scripted::default();
    driver.undo_fails.lock().unwrap().insert(1, 2);
    let e = experiment(vec![hog("one", 1, "30s")]);
    let j = h.run(&driver, &e, &policy(), false).await;
    assert_eq!(j.status, JournalStatus::Completed, "{:?}", j.reason);
    let undo = &j.rollbacks[0];
    assert_eq!(undo.attempts, Some(3));
    assert_eq!(undo.status, ActivityStatus::Succeeded);
    // Two waits, from the upper halves of 100 ms and 200 ms.
    let waited = undo.end - undo.start;
    assert!((150..=300).contains(&waited), "{waited}");
    assert!(h.steps().contains(&"rollback one retrying".to_string()));
    assert!(h.ledger.open_entries().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_undo_that_never_succeeds_gives_the_journal_its_own_status() {
    let h = Harness::new();
    let driver = Scripted::default();
    driver.undo_fails.lock().unwrap().insert(2, u32::MAX);
    let e = experiment(vec![hog("one", 1, "30s"), hog("two", 2, "30s")]);
    let j = h.run(&driver, &e, &policy(), false).await;
    assert_eq!(j.status, JournalStatus::RollbackFailed);
    assert!(j.reason.as_deref().unwrap().contains("two"));
    assert_eq!(j.rollbacks[0].attempts, Some(Retry::default().attempts));
    assert_eq!(j.rollbacks[0].status, ActivityStatus::Failed);
    // The other fault is still undone, and the extra rollbacks still run.
    assert!(
        driver
            .log()
            .ends_with(&["undo 1".to_string(), "probe /tidy".to_string()])
    );
    // Its ledger entry stays open for the next start to try again.
    let open = h.ledger.open_entries().unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(
        open[0].undo,
        Undo::StopChild {
            pid: 2,
            start_time: 0
        }
    );
    assert_eq!(j.open_faults().count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_cancel_mid_method_stops_it_and_rolls_back_what_was_applied() {
    let h = Harness::new();
    let driver = Scripted {
        cancel_on_apply: Some((2, h.cancel.clone())),
        ..Scripted::default()
    };
    let e = experiment(vec![
        hog("one", 1, "30s"),
        hog("two", 2, "30s"),
        hog("three", 3, "30s"),
    ]);
    let j = h.run(&driver, &e, &policy(), false).await;
    assert_eq!(j.status, JournalStatus::Interrupted);
    assert_eq!(
        driver.log(),
        [
            "probe /health",
            "plan 1",
            "apply 1 for 30000 ms",
            "plan 2",
            "apply 2 for 30000 ms",
            "undo 2",
            "undo 1",
            "probe /tidy",
        ]
    );
    assert!(j.steady_states.after.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_cancel_during_a_pause_or_a_probe_is_seen_at_once() {
    let h = Harness::new();
    let driver = Scripted {
        probe_time: Duration::from_secs(5),
        ..Scripted::default()
    };
    let mut slow = probe("slow", "/slow");
    slow["pauses"] = json!({"before": 60});
    let e = experiment(vec![hog("one", 1, "10m"), slow]);
    let cancel = h.cancel.clone();
    tokio::spawn(async move {
        // Inside the 60 s pause (after the 5 s hypothesis probe).
        tokio::time::sleep(Duration::from_secs(20)).await;
        cancel.cancel();
    });
    let j = h.run(&driver, &e, &policy(), false).await;
    assert_eq!(j.status, JournalStatus::Interrupted);
    // The undo starts the moment the cancel comes (then the 5 s rollback action runs).
    assert_eq!(h.clock.elapsed(j.rollbacks[0].start), 20_000);
    assert!(!driver.log().contains(&"probe /slow".to_string()));
    assert!(driver.log().contains(&"undo 1".to_string()));
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_lists_the_faults_and_their_undos_and_applies_nothing() {
    let h = Harness::new();
    let driver = Scripted::default();
    let e = experiment(vec![
        hog("one", 1, "30s"),
        probe("p", "/p"),
        hog("two", 2, "5s"),
    ]);
    let j = h.run(&driver, &e, &policy(), true).await;
    assert_eq!(j.status, JournalStatus::Completed);
    assert!(j.dry_run);
    assert_eq!(driver.log(), ["plan 1", "plan 2"]);
    assert_eq!(j.plan.len(), 2);
    assert_eq!(j.plan[0].activity, "one");
    assert_eq!(
        j.plan[0].fault,
        json!({"fault": "cpu_hog", "workers": 1, "load_percent": 100})
    );
    assert_eq!(
        j.plan[0].undo,
        json!({"undo": "nothing", "why": "planned 1"})
    );
    assert_eq!(j.plan[1].duration, 5.0);
    assert!(j.run.is_empty() && j.ledger.is_empty());
    assert!(h.ledger.open_entries().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_policy_refuses_before_anything_is_applied() {
    let h = Harness::new();
    let driver = Scripted::default();
    let e = experiment(vec![hog("one", 1, "30s")]);
    let j = h.run(&driver, &e, &Policy::for_exec(8080), false).await;
    assert_eq!(j.status, JournalStatus::Refused);
    assert!(j.reason.as_deref().unwrap().contains("method[0].provider"));
    assert!(driver.log().is_empty());
}

#[tokio::test(start_paused = true)]
async fn probe_errors_and_probe_tolerances_are_judged_not_raised() {
    let h = Harness::new();
    let driver = Scripted::default();
    driver.answer("/deep", &[503]);
    let e = Experiment::from_json(&json!({
        "title": "t", "description": "d",
        "steady-state-hypothesis": {"title": "up", "probes": [
            {"type": "probe", "name": "via", "provider": {"type": "http", "path": "/health"},
             "tolerance": {"type": "probe", "name": "deep", "provider": {"type": "http", "path": "/deep"}, "tolerance": [200, 299]}},
            probe("broken", "/broken")
        ]},
        "method": []
    }))
    .unwrap();
    let j = h.run(&driver, &e, &policy(), false).await;
    assert_eq!(j.status, JournalStatus::Failed);
    let probes = &j.steady_states.before.as_ref().unwrap().probes;
    assert_eq!(probes[0].tolerance_met, Some(false));
    assert_eq!(
        probes[0].exception.as_deref(),
        Some("not within the tolerance: status 503 outside [200, 299]")
    );
    assert_eq!(probes[1].status, ActivityStatus::Failed);
    assert_eq!(probes[1].tolerance_met, Some(false));
    assert_eq!(
        probes[1].exception.as_deref(),
        Some("connect: connection refused")
    );
    assert_eq!(
        driver.log(),
        ["probe /health", "probe /deep", "probe /broken"]
    );
}

#[tokio::test(start_paused = true)]
async fn recovery_undoes_open_entries_newest_first() {
    let h = Harness::new();
    for (id, workers) in [("a", 1), ("b", 2)] {
        h.ledger
            .record(&LedgerEntry {
                id: id.into(),
                run_id: "old".into(),
                fault: Fault::CpuHog(CpuHog {
                    workers,
                    load_percent: 100,
                }),
                undo: Undo::StopChild {
                    pid: workers,
                    start_time: 0,
                },
                applied_at: 1,
                deadline: 2,
            })
            .unwrap();
    }
    let driver = Scripted::default();
    let left = recover(&driver, &h.clock, &h.ledger, Retry::default())
        .await
        .unwrap();
    assert!(left.is_empty());
    assert_eq!(driver.log(), ["undo 2", "undo 1"]);
    assert!(h.ledger.open_entries().unwrap().is_empty());
}

#[test]
fn a_run_is_a_send_future_and_its_timeline_goes_out_as_frames() {
    fn assert_send<F: Future + Send>(_: &F) {}
    let h = Harness::new();
    let driver = Scripted::default();
    let e = experiment(vec![]);
    let policy = policy();
    let (tx, mut rx) = FrameSender::channel();
    let run = Run {
        run_id: "r".into(),
        driver: &driver,
        clock: &SystemClock,
        ledger: &h.ledger,
        policy: &policy,
        target_port: 8080,
        target: "http://127.0.0.1:8080".into(),
        timeline: timeline_frames(tx),
        cancel: CancellationToken::new(),
        dry_run: true,
        retry: Retry::default(),
        env: EnvVars::from_fn(|_| None),
    };
    let future = run.execute(&e);
    assert_send(&future);
    let journal = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future);
    assert!(journal.dry_run);
    let frame = rx.try_recv().unwrap();
    assert_eq!(frame.kind, iohr_domain::FrameKind::Timeline);
    assert_eq!(frame.data["phase"], "end");
    assert_eq!(frame.data["status"], "completed");
}

#[tokio::test(start_paused = true)]
async fn an_apply_that_never_answers_is_undone_as_a_precaution() {
    let h = Harness::new();
    let driver = Scripted {
        apply_hangs: Some(2),
        ..Scripted::default()
    };
    let e = experiment(vec![hog("one", 1, "30s"), hog("two", 2, "30s")]);
    let j = h.run(&driver, &e, &policy(), false).await;
    assert_eq!(j.status, JournalStatus::Aborted);
    assert_eq!(
        j.run[1].exception.as_deref(),
        Some("no answer within 10 s; undone as a precaution")
    );
    // Its planned undo, then the first fault's.
    let log = driver.log();
    assert_eq!(&log[log.len() - 3..], ["undo 0", "undo 1", "probe /tidy"]);
    assert!(h.ledger.open_entries().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_probe_that_never_answers_is_given_up_after_its_budget() {
    let h = Harness::new();
    let driver = Scripted {
        // Longer than the 5 s timeout plus the 5 s slack.
        probe_time: Duration::from_secs(3600),
        ..Scripted::default()
    };
    let e = experiment(vec![]);
    let j = h.run(&driver, &e, &policy(), false).await;
    assert_eq!(j.status, JournalStatus::Failed);
    let probe = &j.steady_states.before.as_ref().unwrap().probes[0];
    assert_eq!(probe.exception.as_deref(), Some("no answer within 10 s"));
    assert_eq!(probe.end - probe.start, 10_000);
}

mod deadline;
mod vars;
