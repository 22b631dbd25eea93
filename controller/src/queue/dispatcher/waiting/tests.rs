use std::collections::{BTreeSet, HashMap};

use iohr_domain::{Executor, RunKind};

use super::{Shape, Waiting, waiting};
use crate::queue::scheduler::AgentSlot;

fn agent(session: u64, name: &str, environments: &[&str], platform: bool) -> AgentSlot {
    AgentSlot {
        session,
        agent_id: format!("id-{name}"),
        name: name.to_string(),
        account_id: if platform { "platform" } else { "acme" }.to_string(),
        is_platform: platform,
        environments: environments.iter().map(|e| e.to_string()).collect(),
        kinds: [RunKind::Checks, RunKind::Faults].into(),
        max_jobs: 1,
        // Busy: a reason is about who could take a run, not who is free.
        leases: HashMap::from([("other".to_string(), RunKind::Faults)]),
    }
}

fn judge(agents: &[AgentSlot], executor: &Executor, kind: RunKind, refused: &[u64]) -> Waiting {
    judge_split(agents, executor, kind, refused, 1)
}

fn judge_split(
    agents: &[AgentSlot],
    executor: &Executor,
    kind: RunKind,
    refused: &[u64],
    needed: usize,
) -> Waiting {
    let shape = Shape {
        account_id: "acme",
        executor,
        environment: "production",
        kind,
        needed,
        everywhere: None,
    };
    let refused: BTreeSet<u64> = refused.iter().copied().collect();
    waiting(agents.iter(), &shape, &refused)
}

#[test]
fn a_run_no_connected_agent_serves_says_what_is_missing() {
    let none = |text: &str| Waiting::NoAgent(text.to_string());
    let staging = [agent(1, "edge-1", &["staging"], false)];
    assert_eq!(
        judge(&staging, &Executor::Any, RunKind::Faults, &[]),
        none("no connected agent of this account serves environment production with kind faults")
    );
    let production = [agent(2, "edge-2", &["staging", "production"], false)];
    assert_eq!(
        judge(&production, &Executor::Any, RunKind::Faults, &[]),
        Waiting::Served,
        "a busy agent that serves it: it waits its turn, no reason"
    );
    assert_eq!(
        judge(&production, &Executor::Any, RunKind::Load, &[]),
        none("no connected agent of this account serves environment production with kind load")
    );
    let named = |name: &str| Executor::Agent(name.to_string());
    assert_eq!(
        judge(&staging, &named("edge-1"), RunKind::Checks, &[]),
        none("agent edge-1 does not serve environment production with kind checks")
    );
    assert_eq!(
        judge(&staging, &named("edge-9"), RunKind::Checks, &[]),
        none("agent edge-9 is not connected")
    );
    assert_eq!(
        judge(&production, &named("edge-2"), RunKind::Checks, &[]),
        Waiting::Served
    );
    assert_eq!(
        judge(&staging, &Executor::Cloud, RunKind::Checks, &[]),
        none("no connected cloud agent runs kind checks")
    );
    let cloud = [agent(3, "cloud-1", &[], true)];
    assert_eq!(
        judge(&cloud, &Executor::Cloud, RunKind::Checks, &[]),
        Waiting::Served
    );
    assert_eq!(
        judge(&cloud, &Executor::Any, RunKind::Checks, &[]),
        none("no connected agent of this account serves environment production with kind checks"),
        "a cloud agent serves only runs sent to the cloud"
    );
}

#[test]
fn a_refusal_stays_the_reason_while_only_refusers_serve_the_run() {
    let two = [
        agent(1, "edge-1", &["production"], false),
        agent(2, "edge-2", &["production"], false),
    ];
    assert_eq!(
        judge(&two[..1], &Executor::Any, RunKind::Checks, &[1]),
        Waiting::Refused
    );
    assert_eq!(
        judge(&two, &Executor::Any, RunKind::Checks, &[1]),
        Waiting::Served
    );
    assert!(matches!(
        judge(&[], &Executor::Any, RunKind::Checks, &[1]),
        Waiting::NoAgent(_)
    ));
}

/// A run split over N agents waits, saying why, while fewer than N connected agents serve
/// it (busy or not); with N of them it waits its turn with no reason.
#[test]
fn a_split_run_says_it_waits_for_its_agents_all_at_once() {
    let fleet = [
        agent(1, "edge-1", &["production"], false),
        agent(2, "edge-2", &["production"], false),
        agent(3, "edge-3", &["staging"], false),
    ];
    assert_eq!(
        judge_split(&fleet, &Executor::Any, RunKind::Checks, &[], 3),
        Waiting::NoAgent(
            "split over 3 agents, placed all at once: 2 agent(s) connected to this controller \
             serve environment production with kind checks"
                .to_string()
        )
    );
    assert_eq!(
        judge_split(&fleet, &Executor::Any, RunKind::Checks, &[], 2),
        Waiting::Served
    );
    assert_eq!(
        judge_split(&fleet[2..], &Executor::Any, RunKind::Checks, &[], 2),
        Waiting::NoAgent(
            "no connected agent of this account serves environment production with kind checks"
                .to_string()
        ),
        "none at all: the usual reason"
    );
}

/// On replicas a split run counts the agents linked to every live replica (the store's
/// count), not only those here: its shares are placed over all of them.
#[test]
fn a_split_run_on_replicas_counts_every_replicas_agents() {
    let here = [agent(1, "edge-1", &["production"], false)];
    let split = |everywhere: usize| Shape {
        account_id: "acme",
        executor: &Executor::Any,
        environment: "production",
        kind: RunKind::Load,
        needed: 3,
        everywhere: Some(everywhere),
    };
    assert_eq!(
        waiting(here.iter(), &split(3), &BTreeSet::new()),
        Waiting::Served,
        "three across the replicas, one of them here"
    );
    assert_eq!(
        waiting([].iter(), &split(4), &BTreeSet::new()),
        Waiting::Served,
        "none here, four elsewhere"
    );
    assert_eq!(
        waiting(here.iter(), &split(2), &BTreeSet::new()),
        Waiting::NoAgent(
            "split over 3 agents, placed all at once: 2 agent(s) connected to the controllers \
             serve environment production with kind load"
                .to_string()
        )
    );
}
