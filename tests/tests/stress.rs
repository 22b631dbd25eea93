//! The generator's own verdict with real processes: an agent held by a cgroup quota to a
//! fifth or less of the CPU the same load took on an unconstrained agent runs it, its
//! result says `generator_saturated` (the CPU at its share), the CLI says so, and compare
//! refuses to call its difference from the healthy run's `regressed` or `improved`; the
//! unconstrained agent is not marked and streams a `stress` frame a second.
//!
//! Why the quota is measured, not fixed: what one request costs the agent depends on the
//! processor. A fixed 5% of a CPU starved the agent on one machine and not on a faster
//! one, so the test first measures the unconstrained agent's CPU at the load's rate and
//! gives the starved agent at most a fifth of it: starved on any machine, by the agent's
//! own measure.
//!
//! Needs a writable cgroup CPU controller (v2's `cpu.max`, or v1's `cpu.cfs_quota_us`):
//! the test fails, naming it, where there is none. One store (SQLite): the verdict is the
//! agent's and compare's, and the store only keeps the result.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::path::{Path, PathBuf};
use std::time::Duration;

use iohr_tests::process::{Agent, AgentOptions};
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Installation, Target};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(90);
/// The starved agent's share of one CPU is the largest of these at or under a fifth of
/// what the healthy agent used: round figures, so the verdict's text is known.
const SHARES: [f64; 6] = [0.05, 0.02, 0.01, 0.005, 0.002, 0.001];
/// How much less than it needs the starved agent gets, at least.
const STARVED_BY: f64 = 5.0;
/// The cgroup's quota may not be under 1 ms a period, nor the period over 1 s: the
/// smallest share is 0.001 of a CPU, and a share under 0.01 takes a longer period.
const MIN_QUOTA_US: u64 = 1_000;
const PERIOD_US: u64 = 100_000;

/// A cgroup with a CPU quota, removed (once empty) when dropped.
struct Quota {
    dir: PathBuf,
    procs: PathBuf,
    /// The file that sets the quota, and what lifts it.
    limit: PathBuf,
    unlimited: String,
}

impl Quota {
    /// A cgroup that lets its processes use `share` of one CPU.
    fn new(share: f64) -> Quota {
        let quota_us = ((share * PERIOD_US as f64).round() as u64).max(MIN_QUOTA_US);
        let period_us = (quota_us as f64 / share).round() as u64;
        assert!(
            period_us <= 1_000_000,
            "{share} of a CPU is under the cgroup's least"
        );
        let name = format!("iohr-stress-test.{}", std::process::id());
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers");
        if v2.exists() {
            let root = Path::new("/sys/fs/cgroup");
            // The cpu controller must be enabled for the children of the root.
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu");
            let dir = root.join(&name);
            std::fs::create_dir(&dir).unwrap_or_else(|e| {
                panic!("this test needs a writable cgroup v2 at {root:?} (root): {e}")
            });
            std::fs::write(dir.join("cpu.max"), format!("{quota_us} {period_us}"))
                .expect("cpu.max");
            return Quota {
                procs: dir.join("cgroup.procs"),
                limit: dir.join("cpu.max"),
                unlimited: format!("max {period_us}"),
                dir,
            };
        }
        let mounts = std::fs::read_to_string("/proc/mounts").expect("/proc/mounts");
        let mount = mounts
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.len() > 3 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "cpu"))
            .map(|f| PathBuf::from(f[1]))
            .expect("this test needs a cgroup CPU controller (v2, or v1's cpu hierarchy)");
        let dir = mount.join(&name);
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("this test needs a writable {mount:?} (root): {e}"));
        std::fs::write(dir.join("cpu.cfs_period_us"), period_us.to_string()).expect("period");
        std::fs::write(dir.join("cpu.cfs_quota_us"), quota_us.to_string()).expect("quota");
        Quota {
            procs: dir.join("cgroup.procs"),
            limit: dir.join("cpu.cfs_quota_us"),
            unlimited: "-1".to_string(),
            dir,
        }
    }

    /// Lifts the quota: what a starved agent does after its measure is not under test,
    /// and at a hundredth of a CPU its ending alone would take minutes.
    fn lift(&self) {
        std::fs::write(&self.limit, &self.unlimited).expect("lift the quota");
    }

    /// Moves a process (all its threads) into the cgroup.
    fn hold(&self, pid: u32) {
        std::fs::write(&self.procs, pid.to_string()).expect("move the agent into the cgroup");
        let held = std::fs::read_to_string(&self.procs).expect("cgroup.procs");
        assert!(
            held.lines().any(|l| l.trim() == pid.to_string()),
            "{pid} in {held}"
        );
    }
}

impl Drop for Quota {
    fn drop(&mut self) {
        // A killed process leaves its cgroup a moment after it is reaped: bounded retries.
        for _ in 0..200 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        eprintln!("could not remove the cgroup {:?}", self.dir);
    }
}

/// Raises every thread of process `pid` to nice -10 (Linux sets the nice value per
/// thread, and new threads take their creator's).
fn favour(pid: u32) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the agent's threads");
    for task in tasks {
        let tid: u32 = task
            .expect("a thread")
            .file_name()
            .to_string_lossy()
            .parse()
            .expect("a thread id");
        // SAFETY: setpriority reads its three integer arguments only.
        let done = unsafe { nix::libc::setpriority(nix::libc::PRIO_PROCESS, tid, -10) };
        assert_eq!(
            done,
            0,
            "renice thread {tid}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The largest of [`SHARES`] at which an agent that needs `used` CPUs is starved by
/// [`STARVED_BY`]; fails, saying so, where even the least share would not starve it.
fn starved_share(used: f64) -> f64 {
    SHARES
        .into_iter()
        .find(|share| share * STARVED_BY <= used)
        .unwrap_or_else(|| {
            panic!(
                "the load took only {used:.4} CPUs of the healthy agent, under {STARVED_BY} \
                 times the least share a cgroup grants (0.001): raise the test's rate"
            )
        })
}

fn load(target: &Target, agent: &str) -> Value {
    json!({"kind": "load", "environment": "staging", "target": target.url(),
        "executor": format!("agent:{agent}"),
        "spec": {"operations": [{"path": "/"}], "model": "open", "rate": 400,
                 "duration": "4s", "warmup": "1s", "connections": 16}})
}

async fn finished(stack: &OneAgent, body: &Value) -> Value {
    stack
        .api
        .run_until(body, &["passed", "failed"], LIMIT)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starved_agent_is_marked_saturated_and_its_compare_refused() {
    // A heartbeat of 20 s (a lease lives three, 60 s): the starved agent's link answers
    // it, where it misses the tests' usual 200 ms. With 5 s (a 15 s lease), an agent held
    // to half a hundredth of a CPU on a machine busy with builds heard nothing for 15.6 s
    // and, as it must, stopped its exclusive run itself.
    let install = Installation::new(Backend::Sqlite).await;
    let stack = OneAgent::start_beating(install, AgentOptions::default(), 20_000).await;
    let target = Target::start().await;

    // The unconstrained agent: not marked, and a stress frame a second. Unconstrained
    // also on a machine busy with other work (a build, a CPU hog): every thread of it
    // and of the target's runs at nice -10, so the scheduler serves them first, and
    // neither the generator nor the target is made late by other work.
    favour(stack.agent.pid().expect("the agent's pid"));
    favour(target.pid().expect("the target's pid"));
    let healthy = finished(&stack, &load(&target, "edge-1")).await;
    let healthy_id = healthy["id"].as_str().expect("id").to_string();
    assert!(
        healthy["result"]["generator_saturated"].is_null(),
        "a healthy run is not marked: {}",
        healthy["result"]["generator_saturated"]
    );
    let events = stack
        .api
        .events(&healthy_id, None)
        .await
        .collect(LIMIT)
        .await;
    let stress: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "stress")
        .map(|e| &e.data["data"])
        .collect();
    // A 1 s warm-up and a 4 s measure: at least four seconds sampled.
    assert!(stress.len() >= 4, "{stress:?}");
    for s in &stress {
        for field in [
            "cpu_host_percent",
            "cpu_agent_percent",
            "cpus_allowed",
            "memory_used_bytes",
            "agent_memory_bytes",
            "agent_sockets",
            "host_tcp_sockets",
            "lag_ms",
        ] {
            assert!(s[field].as_f64().is_some(), "{field} in {s}");
        }
        assert_eq!(s["load_average"].as_array().map(Vec::len), Some(3), "{s}");
        assert!(s.get("cmd").is_none() && s.get("environ").is_none(), "{s}");
    }
    let measured: Vec<u64> = stress
        .iter()
        .filter_map(|s| s["measure_second"].as_u64())
        .collect();
    assert!(
        measured.contains(&1) && measured.contains(&3),
        "stress seconds name the measure's: {measured:?}"
    );
    // The agent holds its 16 connections to the target and one to the controller.
    assert!(
        stress
            .iter()
            .any(|s| s["agent_sockets"].as_u64() >= Some(17)),
        "{stress:?}"
    );

    // What the load took of the healthy agent's CPU over its measured seconds (the
    // median, in CPUs), and the starved agent's share: a fifth of that or less.
    let mut used: Vec<f64> = stress
        .iter()
        .filter(|s| s["measure_second"].as_u64().is_some())
        .filter_map(|s| s["cpu_agent_percent"].as_f64())
        .map(|percent| percent / 100.0)
        .collect();
    used.sort_by(f64::total_cmp);
    let used = used[used.len() / 2];
    let share = starved_share(used);
    eprintln!("the healthy agent used {used:.4} CPUs; the starved one may use {share}");

    // A second agent, held to that share before it takes any run.
    let quota = Quota::new(share);
    let starved = Agent::enrol(
        &stack.install,
        &stack.api,
        "edge-2",
        &stack.controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    quota.hold(starved.pid().expect("the agent's pid"));
    let run = stack.api.create_run(&load(&target, "edge-2")).await;
    let id = run["id"].as_str().expect("id").to_string();
    // Starved until its last measured second is sampled (or its stream ends first).
    let mut stream = stack.api.events(&id, None).await;
    let deadline = tokio::time::Instant::now() + LIMIT;
    while let Some(event) = stream
        .next(deadline.saturating_duration_since(tokio::time::Instant::now()))
        .await
    {
        if event.event == "stress" && event.data["data"]["measure_second"].as_u64() >= Some(3) {
            break;
        }
    }
    quota.lift();
    let saturated = stack
        .api
        .wait_status(&id, &["passed", "failed"], LIMIT)
        .await;
    let saturated_id = saturated["id"].as_str().expect("id").to_string();
    let verdict = &saturated["result"]["generator_saturated"];
    assert_eq!(verdict["basis"], "measure", "{verdict}");
    let count = verdict["count"].as_u64().expect("a count");
    assert!(count >= 1, "{verdict}");
    let seconds = verdict["seconds"].as_array().expect("seconds");
    assert_eq!(seconds.len() as u64, count, "{verdict}");
    let causes: Vec<&str> = verdict["reasons"]
        .as_array()
        .expect("reasons")
        .iter()
        .filter_map(|r| r["cause"].as_str())
        .collect();
    assert!(causes.contains(&"cpu"), "the quota binds: {verdict}");
    let cpu = verdict["reasons"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["cause"] == "cpu"))
        .expect("the cpu reason");
    assert!(
        cpu["text"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("of the {share} CPUs it may use")),
        "{cpu}"
    );

    // Compare refuses, either way round, over REST and the CLI.
    for (before, after) in [(&healthy_id, &saturated_id), (&saturated_id, &healthy_id)] {
        let (status, body) = stack
            .api
            .get(&format!(
                "/v1/reliability/compare?before={before}&after={after}"
            ))
            .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (409, Some("generator_saturated")),
            "{body}"
        );
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!(
                "the measurement is not trustworthy: run {saturated_id}'s generator saturated for {count} s (agent CPU up to"
            )),
            "{message}"
        );
    }
    let out = stack.iohr(
        None,
        &["reliability", "compare", &healthy_id, &saturated_id],
    );
    assert_eq!(out.code, 2, "a refusal exits 2: {out:?}");
    assert!(out.stderr.contains("not trustworthy"), "{out:?}");

    // `runs show` says it, and `runs events` prints the stress seconds as lines.
    let show = stack.iohr(None, &["reliability", "runs", "show", &saturated_id]);
    assert_eq!(show.code, 0, "{show:?}");
    assert!(
        show.stdout.contains(&format!(
            "generator saturated for {count} s (agent CPU up to"
        )),
        "{}",
        show.stdout
    );
    let healthy_show = stack.iohr(None, &["reliability", "runs", "show", &healthy_id]);
    assert!(
        !healthy_show.stdout.contains("saturated"),
        "{healthy_show:?}"
    );
    let lines = stack.iohr(None, &["reliability", "runs", "events", &healthy_id]);
    assert_eq!(lines.code, 0, "{lines:?}");
    assert!(
        lines
            .stdout
            .lines()
            .any(|l| l.starts_with("stress ") && l.contains("agent cpu")),
        "{}",
        lines.stdout
    );
    let raw = stack.iohr(
        None,
        &["reliability", "runs", "events", &healthy_id, "--raw"],
    );
    assert!(
        raw.stdout.contains("\"cpu_agent_percent\""),
        "--raw keeps the frames"
    );
    starved.kill().await;
    drop(quota);
}
