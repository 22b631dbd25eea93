//! An agent whose clock jumps (issue 34, scenario 6): its wall clock steps 5 minutes
//! forward and then 10 minutes back (5 behind) during an exclusive load run, as a host's
//! clock does when NTP steps it, while its monotonic clock goes on (an NTP step moves only
//! `CLOCK_REALTIME`).
//!
//! How: Debian's libfaketime, preloaded into the agent only (`LD_PRELOAD`), reading its
//! offset from a file the test rewrites (`FAKETIME_TIMESTAMP_FILE`, `FAKETIME_NO_CACHE`),
//! with `FAKETIME_DONT_FAKE_MONOTONIC` so that only the wall clock jumps. tests/run
//! installs it (`faketime`); where it is missing the test fails with how to fix it.
//!
//! What the agent uses the wall clock for, and so what a jump can touch: the lease TTL,
//! heartbeats, reconnect backoff and the load's pacing are on tokio's monotonic clock; run
//! frames are stamped by the controller (`at_ms`, "the controller is the only clock");
//! certificates are checked against the wall clock only at a TLS handshake, and are issued
//! valid from an hour before their issue (certs/src/lib.rs), so a jump of minutes back
//! does not make them "not yet valid"; the renewal schedule reads the wall clock; the
//! faults ledger stores wall-clock deadlines, and its wardens wait for them on the monotonic (boot-time) clock (docs/guarantees.md).
//!
//! Asserted: the run passes with every request sent, its frames gapless, its `load`
//! frames one a second, every frame's time the controller's (within the run's real time,
//! in order, whatever the agent's clock said); the agent keeps its
//! link (it never reconnects) and its lease (the run never ends `agent lost`, no second
//! agent holds it); the agent's own log lines show the jumps (proof the clock did jump).
//! The test writes a history (tests/src/history.rs: the target's own request log, the
//! runs' statuses and streams, the controller's leases) that the checker
//! (tests/src/checker.rs) holds to every promise.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

mod partition_support;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use iohr_tests::history::{Recorder, assert_gapless};
use iohr_tests::process::AgentOptions;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target, on_both_stores};
use partition_support::{BOUNDS, load};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);
const HEARTBEAT_MS: u64 = 1000;
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
const JUMP: Duration = Duration::from_secs(300);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Sets the agent's clock offset (libfaketime's relative form: `+300`, `-300`, seconds).
fn set_offset(file: &Path, seconds: i64) {
    // Written whole, then renamed: the agent never reads half a line.
    let next = file.with_extension("next");
    std::fs::write(&next, format!("{seconds:+}\n")).unwrap();
    std::fs::rename(&next, file).unwrap();
}

/// The wall-clock times (ms) of the agent's log lines, in the order written.
fn log_times(log: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            // The line may start with colour codes: the time is the first RFC 3339 word.
            let word = line.split_whitespace().find(|w| w.contains('T'))?;
            let word: String = word.chars().filter(|c| !c.is_control()).collect();
            let word = word.trim_start_matches(|c: char| !c.is_ascii_digit());
            let word = word.split('\u{1b}').next()?;
            humantime::parse_rfc3339_weak(word.trim_end_matches('Z'))
                .ok()
                .map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64)
        })
        .collect()
}

async fn a_clock_jump_changes_no_lease_and_no_frame(backend: Backend) {
    assert!(
        Path::new(FAKETIME).exists(),
        "{FAKETIME} is missing: the clock test needs Debian's libfaketime \
         (`apt-get install -y faketime`, as tests/run does)"
    );
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, HEARTBEAT_MS, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let offset = install.path("faketime-offset");
    set_offset(&offset, 0);
    let offset_text = offset.display().to_string();
    let env = [
        ("LD_PRELOAD", FAKETIME),
        ("FAKETIME_TIMESTAMP_FILE", offset_text.as_str()),
        ("FAKETIME_NO_CACHE", "1"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let agent = Agent::enrol(
        &install,
        &api,
        "edge-1",
        &controller.link_url(),
        AgentOptions {
            env: &env,
            ..AgentOptions::default()
        },
    )
    .await;
    let target_log = install.path("target-requests.jsonl");
    let target = Target::start_with(&["--request-log", &target_log.display().to_string()]).await;
    let mut rec = Recorder::new(&format!("partition-clock-{backend:?}"), BOUNDS);
    rec.agent("edge-1", "127.0.0.1");
    rec.leases(&api);

    let began = now_ms();
    let body = load(&target, "r1", 20, 10);
    let id = rec.create_run(&api, "controller", "r1", true, &body).await;
    api.wait_status(&id, &["running"], LIMIT).await;
    // A checks run beside it now and then: the agent logs its lease, with its clock's time.
    let checks = json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "spec": {"checks": [{"name": "home", "path": "/"}]}});
    let mark = |expect_from: u64, expect_to: u64| {
        let (api, checks, log) = (api.clone(), checks.clone(), agent.log.clone());
        async move {
            api.run_until(&checks, &["passed"], LIMIT).await;
            let times = log_times(&log);
            let last = *times.last().expect("agent log lines");
            assert!(
                (expect_from..=expect_to).contains(&last),
                "the agent's clock: its last line at {last}, expected within \
                 {expect_from}..={expect_to}"
            );
        }
    };

    tokio::time::sleep(Duration::from_secs(2)).await;
    let jump = JUMP.as_millis() as u64;
    set_offset(&offset, JUMP.as_secs() as i64);
    let before = now_ms();
    mark(before + jump - 1000, now_ms() + jump + 30_000).await;
    eprintln!("{backend:?}: the agent's clock is 5 min ahead");
    tokio::time::sleep(Duration::from_secs(2)).await;
    set_offset(&offset, -(JUMP.as_secs() as i64));
    let before = now_ms();
    mark(before - jump - 1000, now_ms() - jump + 30_000).await;
    eprintln!("{backend:?}: the agent's clock is 5 min behind");

    let done = api
        .wait_status(&id, &["passed", "failed", "error", "cancelled"], LIMIT)
        .await;
    assert_eq!(done["status"], "passed", "{done}");
    assert_eq!(done["agent"], "edge-1", "{done}");
    assert_eq!(
        done["result"]["requests"], 200,
        "every request sent: {done}"
    );
    let events = assert_gapless(&api, &id, LIMIT).await;
    assert_eq!(
        events.iter().filter(|e| e.event == "load").count(),
        10,
        "one load frame a second"
    );
    // Frames carry the controller's timestamps: they never jump with the agent's clock.
    let ended = now_ms();
    let ats: Vec<u64> = events
        .iter()
        .map(|e| {
            let at = e.data["at"]
                .as_str()
                .unwrap_or_else(|| panic!("no `at`: {e:?}"));
            let at = humantime::parse_rfc3339_weak(at.trim_end_matches('Z')).unwrap();
            at.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
        })
        .collect();
    assert!(
        ats.windows(2).all(|w| w[0] <= w[1])
            && ats
                .iter()
                .all(|at| (began - 1000..=ended + 1000).contains(at)),
        "frame times within the run's real time, in order: {ats:?} ({began}..{ended})"
    );
    // The link was never lost: one connection in the agent's whole log.
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("iohr_agent::link: connected"))
            .count(),
        1,
        "the agent connected once: {}",
        agent.log_tail()
    );
    // Back to the real time: the same exclusive slot serves a new run.
    set_offset(&offset, 0);
    let short = load(&target, "r2", 20, 1);
    let next = rec.create_run(&api, "controller", "r2", true, &short).await;
    let next = api
        .wait_status(&next, &["passed", "failed", "error"], LIMIT)
        .await;
    assert_eq!(next["status"], "passed", "{next}");
    rec.finish(&target_log, LIMIT).await.verify();
    controller.stop().await;
}

on_both_stores!(a_clock_jump_changes_no_lease_and_no_frame);
