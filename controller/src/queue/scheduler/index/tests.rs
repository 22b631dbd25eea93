use std::collections::HashMap;

use super::*;

fn slot(session: SessionId, account: &str, max_jobs: usize) -> AgentSlot {
    AgentSlot {
        session,
        agent_id: format!("agent-{session}"),
        name: format!("edge-{session}"),
        account_id: account.to_string(),
        is_platform: false,
        environments: ["staging".to_string(), "production".to_string()].into(),
        kinds: [RunKind::Checks, RunKind::Load].into(),
        max_jobs,
        leases: HashMap::new(),
    }
}

fn run(account: &str, environment: &str, executor: Executor, kind: RunKind) -> QueuedRun {
    super::super::tests::queued("r", account, environment, executor, kind)
}

fn candidates(index: &AgentIndex, run: &QueuedRun) -> Vec<SessionId> {
    index.candidates(run).collect()
}

fn is_empty(index: &AgentIndex) -> bool {
    index.any.is_empty() && index.named.is_empty() && index.cloud.is_empty()
}

#[test]
fn lists_are_by_account_environment_and_kind_least_busy_first() {
    let mut index = AgentIndex::default();
    let mut busy = slot(1, "a", 4);
    busy.leases.insert("x".to_string(), RunKind::Checks);
    index.insert(&busy);
    index.insert(&slot(2, "a", 4));
    index.insert(&slot(3, "b", 4));
    let checks = run("a", "staging", Executor::Any, RunKind::Checks);
    assert_eq!(candidates(&index, &checks), [2, 1], "fewer leases first");
    let elsewhere = run("a", "dev", Executor::Any, RunKind::Checks);
    assert!(
        candidates(&index, &elsewhere).is_empty(),
        "no agent serves dev"
    );
    let faults = run("a", "staging", Executor::Any, RunKind::Faults);
    assert!(
        candidates(&index, &faults).is_empty(),
        "no agent declares faults"
    );
    let named = run(
        "a",
        "staging",
        Executor::Agent("edge-1".into()),
        RunKind::Checks,
    );
    assert_eq!(candidates(&index, &named), [1]);
    let other_account = run(
        "b",
        "staging",
        Executor::Agent("edge-1".into()),
        RunKind::Checks,
    );
    assert!(candidates(&index, &other_account).is_empty());
}

#[test]
fn a_full_agent_is_in_no_list_and_an_exclusive_run_keeps_it_from_exclusive_lists() {
    let mut index = AgentIndex::default();
    let mut full = slot(1, "a", 1);
    full.leases.insert("x".to_string(), RunKind::Checks);
    index.insert(&full);
    assert!(is_empty(&index), "a full agent can take nothing");

    let mut loaded = slot(2, "a", 4);
    loaded.leases.insert("y".to_string(), RunKind::Load);
    index.insert(&loaded);
    let load = run("a", "staging", Executor::Any, RunKind::Load);
    let checks = run("a", "staging", Executor::Any, RunKind::Checks);
    assert!(
        candidates(&index, &load).is_empty(),
        "one exclusive run at a time"
    );
    assert_eq!(candidates(&index, &checks), [2], "checks beside a load run");
}

#[test]
fn platform_agents_serve_cloud_runs_of_any_account_and_environment() {
    let mut index = AgentIndex::default();
    let mut cloud = slot(7, "platform", 2);
    cloud.is_platform = true;
    index.insert(&cloud);
    let run_of_a = run("a", "anywhere", Executor::Cloud, RunKind::Checks);
    assert_eq!(candidates(&index, &run_of_a), [7]);
    let own = run("platform", "staging", Executor::Any, RunKind::Checks);
    assert_eq!(candidates(&index, &own), [7], "and its own account's runs");
}

#[test]
fn removing_what_was_inserted_leaves_nothing_behind() {
    let mut index = AgentIndex::default();
    let mut slots = Vec::new();
    for session in 0..5 {
        let mut s = slot(session, ["a", "b"][session as usize % 2], 3);
        s.is_platform = session == 4;
        if session == 3 {
            s.leases.insert("z".to_string(), RunKind::Load);
        }
        index.insert(&s);
        slots.push(s);
    }
    assert!(!is_empty(&index));
    for s in &slots {
        index.remove(s);
    }
    assert!(is_empty(&index), "{index:?}");
}
