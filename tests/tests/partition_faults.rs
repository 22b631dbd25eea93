//! Issue 34, scenario 7: a faults run whose agent is cut from its controller after the
//! fault is applied and before its rollback. The fault (a pause of a victim process, held
//! 30 s with the method waiting 30 s after it) must be undone by the agent's dead man's
//! switch: within the stop bound of the cut plus the fault bound, long before its deadline,
//! as the victim itself shows (its state in /proc, not the agent's word). The run ends
//! exactly once, its stream gapless, and stays ended after the heal, when the agent comes
//! back and reports what it has left.
//!
//! Cut both ways (`Cut::Port`), and one way (`Cut::PortOut`: the agent's messages do not
//! get out, the controller's get in until its TCP, never acknowledged, stalls): whoever is
//! cut from whom, the fault does not outlive the bound.
//!
//! And the fault's own deadline inside the cut (a pause held 2 s, the agent cut at once):
//! undone by its deadline plus the fault bound while the agent is still cut, whichever of
//! its deadline and the dead man's switch comes first.
//!
//! Both on SQLite and PostgreSQL; the history goes through the checker.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

mod partition_support;

use std::path::Path;
use std::time::Duration;

use iohr_tests::history::{Fault, now_ms};
use iohr_tests::partition::Cut;
use iohr_tests::victim::{named_sleeper, process_state};
use iohr_tests::{Backend, on_both_stores, wait_for};
use partition_support::{FAULT, LIMIT, STOP, cluster};
use serde_json::json;

/// The ledger's open entry: (applied_at, deadline), ms since the epoch.
fn ledger_entry(ledger: &Path) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(ledger.join("ledger.jsonl")).ok()?;
    text.lines().find_map(|line| {
        let record: serde_json::Value = serde_json::from_str(line).ok()?;
        (record["op"] == "open").then(|| {
            (
                record["entry"]["applied_at"].as_u64().unwrap(),
                record["entry"]["deadline"].as_u64().unwrap(),
            )
        })
    })
}

/// The fault, held `held` seconds, across a cut made by `cut_of` (given the agent-link
/// port); `silences`: whether the cut alone keeps the agent from hearing its controller.
async fn fault_across_a_cut(
    backend: Backend,
    name: &str,
    cut_of: fn(u16) -> Cut,
    silences: bool,
    held: u64,
) {
    let victim_name = format!("victim{name}");
    let dir = std::env::temp_dir().join(format!("iohr-pfaults-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut victim = named_sleeper(&dir, &victim_name).await;
    let victim_pid = victim.id().expect("victim pid");
    let policy = dir.join("policy.json");
    // The target's port is not known yet: the policy allows every port of it that a
    // fault could name, which this experiment names none of.
    std::fs::write(
        &policy,
        json!({"target_ports": [], "processes": [{"name": victim_name}]}).to_string(),
    )
    .expect("policy");
    let policy = policy.display().to_string();
    let c = cluster(backend, &["--policy", &policy]).await;
    let mut rec = c.recorder(&format!("partition-faults-{name}-{backend:?}"));
    let experiment = json!({
        "title": "pause across a cut", "description": "a pause held while the agent is cut",
        "method": [{"type": "action", "name": "pause", "pauses": {"after": 30},
            "provider": {"type": "iohr", "fault": "process", "action": "pause",
                "name": victim_name, "pid": victim_pid, "duration": format!("{held}s")}}],
    });
    let id = rec
        .create_run(
            &c.api,
            "controller",
            "f1",
            true,
            &json!({"kind": "faults", "environment": "staging",
                    "target": c.target.url(), "spec": experiment}),
        )
        .await;
    wait_for("the victim paused", LIMIT, || async {
        (process_state(victim_pid) == Some('T')).then_some(())
    })
    .await;
    let ledger = c.install.root.join("agent-state-edge-1/ledger");
    let (applied_ms, deadline_ms) = wait_for("the ledger's entry", LIMIT, || async {
        ledger_entry(&ledger)
    })
    .await;

    // Cut from its controller after the apply, before the rollback (30 s away).
    let how = cut_of(c.agent_port);
    let cut = c.netns.cut(how);
    let span = rec.cut("edge-1", how, silences);
    let cut_at = tokio::time::Instant::now();
    assert!(
        now_ms() < deadline_ms,
        "cut {} ms after the fault's deadline: not a fault held across a cut",
        now_ms() - deadline_ms
    );
    // Polled every 10 ms from the victim's side, for at most the bounds and 5 s more.
    while process_state(victim_pid) == Some('T') {
        assert!(
            cut_at.elapsed() < STOP + FAULT + Duration::from_secs(5),
            "the victim still paused {:?} after its agent was cut",
            cut_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let undone_ms = now_ms();
    // Whatever undid it (its deadline, the dead man's switch), not later than its deadline
    // and the bound, while the agent is still cut.
    assert!(
        undone_ms <= deadline_ms + FAULT.as_millis() as u64,
        "undone {} ms after its deadline",
        undone_ms - deadline_ms
    );
    eprintln!(
        "partition faults {name}: victim running again {:?} after the cut, {} ms from its \
         deadline",
        cut_at.elapsed(),
        undone_ms as i64 - deadline_ms as i64
    );
    rec.fault(Fault {
        run: id.clone(),
        agent: "edge-1".to_string(),
        applied_ms,
        deadline_ms,
        undone_ms: Some(undone_ms),
    });
    // The controller, hearing nothing, ends the run once: `error`, the agent lost.
    let ended = c.api.wait_status(&id, &["error"], LIMIT).await;
    assert_eq!(ended["reason"], "agent lost", "{ended}");
    drop(cut);
    rec.healed(span);

    // Healed: the agent comes back; the run stays as it ended, and the agent's exclusive
    // slot, which the fenced faults run held, serves a load run in full.
    c.serves_again(&mut rec).await;
    let history = rec.finish(&c.target_log, LIMIT).await;
    history.verify();
    let run = history.run(&id).unwrap();
    assert_eq!(
        run.statuses.last().map(|s| s.status.as_str()),
        Some("error"),
        "{run:?}"
    );
    assert_eq!(process_state(victim_pid), Some('S'), "the victim runs on");
    // The agent closed its ledger entry: nothing is left to undo.
    wait_for("the ledger entry closed", LIMIT, || async {
        let text = std::fs::read_to_string(ledger.join("ledger.jsonl")).ok()?;
        text.lines()
            .any(|l| l.contains("\"op\":\"close\""))
            .then_some(())
    })
    .await;
    c.controller.stop().await;
    let _ = victim.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Cut both ways: neither side hears the other.
async fn a_fault_held_across_a_cut_is_undone_and_its_run_ends_once(backend: Backend) {
    fault_across_a_cut(backend, "cut", Cut::Port, true, 30).await;
}

/// Cut both ways, the fault's own deadline 2 s after its apply: it passes inside the cut.
async fn a_fault_whose_deadline_passes_inside_a_cut_is_undone_by_it(backend: Backend) {
    fault_across_a_cut(backend, "due", Cut::Port, true, 2).await;
}

/// The agent's messages cut, the controller's getting through (until the controller's
/// TCP, never acknowledged, stops sending new data).
async fn a_fault_held_across_a_one_way_cut_is_undone_and_its_run_ends_once(backend: Backend) {
    fault_across_a_cut(backend, "out", Cut::PortOut, false, 30).await;
}

on_both_stores!(
    a_fault_held_across_a_cut_is_undone_and_its_run_ends_once,
    a_fault_held_across_a_one_way_cut_is_undone_and_its_run_ends_once,
    a_fault_whose_deadline_passes_inside_a_cut_is_undone_by_it,
);
