//! The service's promises under a broken network (issue 34), scenarios 1 and 2: an agent
//! in its own network namespace (tests/src/partition.rs) is cut from its controller's
//! agent link (its port only: the target stays reachable) in the middle of an exclusive
//! load run, then healed.
//!
//! The bounds are the link's (docs/architecture.md, "A lost agent"): with heartbeat H, an
//! agent that has not heard from its controller for one lease TTL (3 H) stops its
//! exclusive runs; the controller ends such a run `error` ("agent lost") once the agent
//! has been silent for 3 H and then one TTL plus a grace (3 H each) more. Here H = 1 s.
//!
//! 1. Cut for longer than that: the run ends `error` ("agent lost") with gapless frames;
//!    the target, by its own count, gets no request of it later than TTL plus 2 s of slack
//!    after the cut began; after the heal the agent is back and its slot serves a new run.
//! 2. Cut for less than the TTL: the run goes on and passes with every request sent, its
//!    frames gapless with none repeated.
//!
//! Each writes a history (tests/src/history.rs: the target's own request log, the run's
//! statuses, its stream) that the checker (tests/src/checker.rs) holds to every promise;
//! scenario 1's real history, doctored, shows the checker catching each kind of
//! violation it can hold.
//!
//! Both on SQLite and PostgreSQL. Everything on addresses the harness made.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

mod partition_support;

use std::time::Duration;

use iohr_tests::checker::{Promise, check};
use iohr_tests::history::{History, Request};
use iohr_tests::partition::Cut;
use iohr_tests::{Backend, on_both_stores};
use partition_support::{LIMIT, STOP, TTL, assert_gapless, cluster};

async fn cut_longer_than_the_ttl_ends_the_run_and_stops_its_load(backend: Backend) {
    let c = cluster(backend, &[]).await;
    let mut rec = c.recorder(&format!("partition-cut-longer-{backend:?}"));
    let id = c.running_load(&mut rec, "r1", 20, 60).await;

    let cut = c.netns.cut(Cut::Port(c.agent_port));
    let span = rec.cut("edge-1", Cut::Port(c.agent_port), true);
    let cut_at = tokio::time::Instant::now();
    tokio::time::sleep_until(cut_at + STOP).await;
    let stopped = c.requests().await;
    // Still cut, three seconds on: not one more request.
    tokio::time::sleep_until(cut_at + STOP + Duration::from_secs(3)).await;
    let later = c.requests().await;
    assert_eq!(
        later, stopped,
        "the cut agent's run sent requests {STOP:?} after the cut began"
    );
    // The controller ends the run only after 3 H of silence plus a TTL and a grace.
    let ended = c.api.wait_status(&id, &["error"], LIMIT).await;
    assert_eq!(ended["reason"], "agent lost", "{ended}");
    drop(cut);
    rec.healed(span);

    // Healed: the agent comes back and its exclusive slot serves a new run.
    let next = c.serves_again(&mut rec).await;
    assert_gapless(&c.api, &id).await;
    let history = rec.finish(&c.target_log, LIMIT).await;
    history.verify();
    c.controller.stop().await;
    the_checker_catches_this_history_doctored(&history, &id, &next);
}

/// The real history of scenario 1, each promise broken in it by hand: the checker names
/// exactly that promise.
fn the_checker_catches_this_history_doctored(history: &History, lost: &str, next: &str) {
    let cut = history.cuts[0].clone();
    let plant = |what: &str, promises: &[Promise], doctor: &dyn Fn(&mut History)| {
        let mut doctored = history.clone();
        doctor(&mut doctored);
        let mut found: Vec<Promise> = check(&doctored).iter().map(|v| v.promise).collect();
        found.sort();
        found.dedup();
        assert_eq!(found, promises, "{what}");
    };
    let request = |at_ms: u64, agent: &str, run: &str| Request {
        at_ms,
        agent: agent.to_string(),
        run: Some(run.to_string()),
    };
    plant(
        "the cut agent still sending past the bound, after the run ended",
        &[Promise::StopsInBound, Promise::OneEnding],
        &|h| {
            h.requests.push(request(
                cut.from_ms + STOP.as_millis() as u64 + 500,
                "edge-1",
                lost,
            ))
        },
    );
    plant(
        "the new run on another agent while the first runs it",
        &[Promise::Exclusive],
        &|h| {
            let during = h
                .requests
                .iter()
                .rev()
                .find(|r| r.run.as_deref() == Some(next));
            let at = during.expect("the new run's requests").at_ms;
            h.requests.push(request(at, "edge-9", next));
        },
    );
    plant("a frame repeated", &[Promise::Frames], &|h| {
        let stream = &mut h.runs[0].streams[0];
        let again = stream.frames[1].clone();
        stream.frames.insert(2, again);
    });
    plant("a second ending", &[Promise::OneEnding], &|h| {
        let last = h.runs[0].statuses.last().expect("a status").clone();
        h.runs[0].statuses.push(iohr_tests::history::Seen {
            at_ms: last.at_ms + 1,
            status: "passed".to_string(),
            ..last
        });
    });
    // The agent sends for a TTL after its last message heard, so requests follow.
    plant(
        "the run ended `agent lost` just after the cut, while its agent still sent",
        &[Promise::StopsInBound, Promise::OneEnding],
        &|h| {
            let ending = h.runs[0].statuses.last_mut().expect("a status");
            ending.at_ms = cut.from_ms + 1;
        },
    );
    plant("an acknowledged run gone", &[Promise::Acknowledged], &|h| {
        h.runs[1].exists_after = false;
    });
    plant("a fault left behind", &[Promise::FaultBound], &|h| {
        h.faults.push(iohr_tests::history::Fault {
            run: lost.to_string(),
            agent: "edge-1".to_string(),
            applied_ms: cut.from_ms - 1_000,
            deadline_ms: cut.from_ms + 60_000,
            undone_ms: None,
        });
    });
}

async fn cut_shorter_than_the_ttl_loses_nothing(backend: Backend) {
    let c = cluster(backend, &[]).await;
    let mut rec = c.recorder(&format!("partition-cut-shorter-{backend:?}"));
    let id = c.running_load(&mut rec, "r1", 50, 6).await;

    let cut = c.netns.cut(Cut::Port(c.agent_port));
    let span = rec.cut("edge-1", Cut::Port(c.agent_port), true);
    // Half the TTL: neither side may give the run up.
    tokio::time::sleep(TTL / 2).await;
    drop(cut);
    rec.healed(span);

    let done = c
        .api
        .wait_status(&id, &["passed", "failed", "error"], LIMIT)
        .await;
    assert_eq!(done["status"], "passed", "{done}");
    assert_eq!(
        done["result"]["requests"], 300,
        "every request sent: {done}"
    );
    assert_gapless(&c.api, &id).await;
    let history = rec.finish(&c.target_log, LIMIT).await;
    history.verify();
    // The target's own log agrees: every request of the run, each from the agent.
    let logged = history
        .requests
        .iter()
        .filter(|r| r.run.as_deref() == Some(id.as_str()) && r.agent == "edge-1")
        .count();
    assert_eq!(logged, 300, "the target logged every request of the run");
    c.controller.stop().await;
}

on_both_stores!(
    cut_longer_than_the_ttl_ends_the_run_and_stops_its_load,
    cut_shorter_than_the_ttl_loses_nothing,
);
