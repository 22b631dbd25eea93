//! The partition soak (issue 34): exclusive load runs back to back on one agent in its own
//! network namespace while, every cycle, a fault drawn at random from the scenarios' cuts
//! hits its link to the controller: a full cut longer than the lease TTL, one shorter
//! than it, a one-way cut either way (`PortIn`, `PortOut`), 10% loss, or nothing. The
//! whole history (the target's own request log, every run's statuses and stream, the
//! cuts) goes to the checker (tests/src/checker.rs) at the end.
//!
//! In the suite it runs one cycle (about 20 s, SQLite). `bench/partition-soak.sh` runs it
//! for 30 minutes with a fault every 20 s and prints the checker's verdict:
//!
//! - `IOHR_PARTITION_SOAK_SECS`: how long (default 20; each cycle is whole);
//! - `IOHR_PARTITION_SOAK_EVERY`: a cycle's length in seconds (default 20, at least 16);
//! - `IOHR_PARTITION_SOAK_SEED`: the faults' seed (default 34; the script draws one and
//!   prints it).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

mod partition_support;

use std::time::Duration;

use iohr_tests::Backend;
use iohr_tests::partition::Cut;
use partition_support::{LIMIT, STOP, TTL, cluster_lasting, load};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One cycle's fault on the agent's link to its controller.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// A full cut of the link's port held past the point where the run is lost.
    Long,
    /// A full cut for half the TTL: the run must go on.
    Short,
    /// The controller's packets dropped: the agent hears nothing.
    OneWayIn,
    /// The agent's packets dropped.
    OneWayOut,
    /// 10% of the link's packets dropped, both ways.
    Loss,
    None,
}

const FAULTS: [Fault; 6] = [
    Fault::Long,
    Fault::Short,
    Fault::OneWayIn,
    Fault::OneWayOut,
    Fault::Loss,
    Fault::None,
];

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: a whole number is expected")),
        Err(_) => default,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_partitions_keep_every_promise() {
    let total = Duration::from_secs(env_u64("IOHR_PARTITION_SOAK_SECS", 20));
    let every = Duration::from_secs(env_u64("IOHR_PARTITION_SOAK_EVERY", 20).max(16));
    // A fixed seed in the suite, so that a run there is the same on every machine.
    let seed = env_u64("IOHR_PARTITION_SOAK_SEED", 34);
    eprintln!("partition soak: seed {seed} (IOHR_PARTITION_SOAK_SEED replays it)");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);

    // Its target serves the whole soak and a few minutes more, then stops by itself.
    let c = cluster_lasting(Backend::Sqlite, &[], total + Duration::from_secs(300)).await;
    let mut rec = c.recorder("partition-soak");
    let started = tokio::time::Instant::now();
    let mut cycle = 0u32;
    let mut seen: Vec<(u32, Fault, String)> = Vec::new();
    while cycle == 0 || started.elapsed() + every <= total {
        cycle += 1;
        let begun = tokio::time::Instant::now();
        c.api.wait_online("edge-1", LIMIT).await;
        // 20 requests a second for 12 s: the run outlasts any cut below by its start.
        let tag = format!("c{cycle}");
        let body = load(&c.target, &tag, 20, 12);
        let id = rec
            .create_run(&c.api, "controller", &tag, true, &body)
            .await;
        c.api.wait_status(&id, &["running"], LIMIT).await;

        let fault = FAULTS[rng.random_range(0..FAULTS.len())];
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..3_000))).await;
        let (cut, hold, silences) = match fault {
            Fault::Long => (Some(Cut::Port(c.agent_port)), STOP, true),
            Fault::Short => (Some(Cut::Port(c.agent_port)), TTL / 2, true),
            Fault::OneWayIn => (Some(Cut::PortIn(c.agent_port)), STOP, true),
            Fault::OneWayOut => (Some(Cut::PortOut(c.agent_port)), STOP, false),
            Fault::Loss => (Some(Cut::Loss(10)), STOP, false),
            Fault::None => (None, Duration::ZERO, false),
        };
        if let Some(what) = cut {
            let rule = c.netns.cut(what);
            let span = rec.cut("edge-1", what, silences);
            tokio::time::sleep(hold).await;
            drop(rule);
            rec.healed(span);
        }
        // Whatever the fault, the run ends (passed, or `error` when its agent was lost).
        let ended = c
            .api
            .wait_status(&id, &["passed", "failed", "error", "canceled"], LIMIT)
            .await;
        let status = ended["status"].as_str().unwrap_or_default().to_string();
        eprintln!("partition soak: cycle {cycle}: {fault:?}: run {id} {status}");
        seen.push((cycle, fault, status));
        // The next cycle starts on its beat (a pace, not a wait for anything).
        tokio::time::sleep_until(begun + every).await;
    }

    let history = rec.finish(&c.target_log, LIMIT).await;
    let path = history.write_artifact();
    let violations = iohr_tests::checker::check(&history);
    eprintln!(
        "partition soak: {} cycles in {:.0} s, seed {seed}; checker: {} violation(s); history: {}",
        seen.len(),
        started.elapsed().as_secs_f64(),
        violations.len(),
        path.display()
    );
    // A full cut past the bound loses the run; every other fault must leave it passing.
    for (cycle, fault, status) in &seen {
        if !matches!(fault, Fault::Long | Fault::OneWayIn | Fault::OneWayOut) {
            assert_eq!(status, "passed", "cycle {cycle} ({fault:?}): seed {seed}");
        }
    }
    history.verify();
    c.controller.stop().await;
}
