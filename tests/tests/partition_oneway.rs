//! Issue 34, scenario 4: an asymmetric partition of the agent's link, in the middle of an
//! exclusive load run, for longer than the lease TTL, then healed.
//!
//! - `PortIn`: the agent's packets reach the controller, the controller's (its messages,
//!   and the acknowledgements of the agent's) do not reach the agent. The agent hears
//!   nothing, so its dead man's switch stops the run's load within the stop bound; the
//!   controller may still get the agent's frames and completion for a while.
//! - `PortOut`: the controller's packets reach the agent, the agent's (its frames,
//!   heartbeats and acknowledgements) do not get out. The controller holds the agent lost
//!   and ends the run; the agent must have stopped sending load before that.
//!
//! Either way the run ends exactly once, its frames gapless, no request of it reaches the
//! target after it ended, and after the heal the agent serves a new run. The history goes
//! through the checker. Both on SQLite and PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

mod partition_support;

use std::time::Duration;

use iohr_tests::partition::Cut;
use iohr_tests::{Backend, on_both_stores};
use partition_support::{LIMIT, STOP, cluster};

const ENDED: &[&str] = &["passed", "failed", "error", "cancelled"];

async fn one_way(backend: Backend, name: &str, cut_of: fn(u16) -> Cut, silences: bool) {
    let c = cluster(backend, &[]).await;
    let mut rec = c.recorder(&format!("partition-oneway-{name}-{backend:?}"));
    let id = c.running_load(&mut rec, "r1", 20, 60).await;

    let how = cut_of(c.agent_port);
    let cut = c.netns.cut(how);
    let span = rec.cut("edge-1", how, silences);
    let cut_at = tokio::time::Instant::now();
    // Whichever side learns of it, the run ends, once, before the 60 s of load are up.
    let ended = c.api.wait_status(&id, ENDED, LIMIT).await;
    assert_eq!(ended["status"], "error", "{ended}");
    eprintln!(
        "partition one-way {name}: run ended {:?} after the cut: {}",
        cut_at.elapsed(),
        ended["reason"]
    );
    // Held a while past the stop bound: the agent sends nothing of it.
    tokio::time::sleep_until(cut_at + STOP + Duration::from_secs(2)).await;
    drop(cut);
    rec.healed(span);

    c.serves_again(&mut rec).await;
    let history = rec.finish(&c.target_log, LIMIT).await;
    history.verify();
    let cut_ms = history.cuts[0].from_ms;
    let last = history
        .requests
        .iter()
        .filter(|r| r.run.as_deref() == Some(id.as_str()))
        .map(|r| r.at_ms)
        .max()
        .unwrap();
    eprintln!(
        "partition one-way {name}: the run's last request reached the target {} ms after the cut",
        last as i64 - cut_ms as i64
    );
    // The run's status never moved after it ended, by the poller's record.
    let run = history.run(&id).unwrap();
    assert_eq!(
        run.statuses
            .last()
            .map(|s| (s.status.as_str(), s.reason.clone())),
        Some(("error", ended["reason"].as_str().map(str::to_string))),
        "{run:?}"
    );
    c.controller.stop().await;
}

async fn the_controllers_messages_cut_the_agents_get_through(backend: Backend) {
    one_way(backend, "in", Cut::PortIn, true).await;
}

async fn the_agents_messages_cut_the_controllers_get_through(backend: Backend) {
    one_way(backend, "out", Cut::PortOut, false).await;
}

on_both_stores!(
    the_controllers_messages_cut_the_agents_get_through,
    the_agents_messages_cut_the_controllers_get_through,
);
