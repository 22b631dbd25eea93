use super::*;

/// A queued run of the scheduler's tests: what decides placement given, the rest fixed.
pub(super) fn queued(
    id: &str,
    account: &str,
    environment: &str,
    executor: Executor,
    kind: RunKind,
) -> QueuedRun {
    QueuedRun {
        run_id: id.to_string(),
        account_id: account.to_string(),
        kind,
        environment: environment.to_string(),
        executor,
        target: "http://127.0.0.1:9".to_string(),
        scenario_id: "s".to_string(),
        scenario_version: "sha256:0".to_string(),
        confirmed_by: None,
        refused_by: BTreeSet::new(),
        lapsed_with: BTreeSet::new(),
        reason: None,
        share: None,
    }
}

fn run(id: &str, account: &str, kind: RunKind) -> QueuedRun {
    queued(id, account, "staging", Executor::Any, kind)
}

fn agent(session: SessionId, account: &str, max_jobs: usize) -> AgentSlot {
    AgentSlot {
        session,
        agent_id: format!("agent-{session}"),
        name: format!("edge-{session}"),
        account_id: account.to_string(),
        is_platform: false,
        environments: ["staging".to_string()].into(),
        kinds: RunKind::ALL.into_iter().collect(),
        max_jobs,
        leases: HashMap::new(),
    }
}

#[test]
fn max_concurrent_jobs_bounds_each_agent() {
    let mut s = Scheduler::default();
    s.add_agent(agent(1, "a", 2));
    for i in 0..5 {
        s.enqueue(run(&format!("r{i}"), "a", RunKind::Checks));
    }
    let placed = s.next_placements();
    assert_eq!(
        placed
            .iter()
            .map(|p| p.run.run_id.as_str())
            .collect::<Vec<_>>(),
        ["r0", "r1"]
    );
    assert!(s.next_placements().is_empty());
    s.detach_lease(1, "r0");
    s.release_active("a");
    assert_eq!(s.next_placements()[0].run.run_id, "r2", "in order");
}

#[test]
fn exclusive_kinds_never_share_an_agent() {
    let mut s = Scheduler::default();
    s.add_agent(agent(1, "a", 8));
    s.enqueue(run("r0", "a", RunKind::Load));
    s.enqueue(run("r1", "a", RunKind::Faults));
    s.enqueue(run("r2", "a", RunKind::Checks));
    s.enqueue(run("r3", "a", RunKind::Capacity));
    let placed: Vec<_> = s
        .next_placements()
        .into_iter()
        .map(|p| p.run.run_id)
        .collect();
    assert_eq!(
        placed,
        ["r0", "r2"],
        "checks go beside a load run, faults and capacity wait"
    );
    s.detach_lease(1, "r0");
    s.release_active("a");
    let placed: Vec<_> = s
        .next_placements()
        .into_iter()
        .map(|p| p.run.run_id)
        .collect();
    assert_eq!(placed, ["r1"]);
}

#[test]
fn the_plan_bounds_an_account_across_agents() {
    let mut s = Scheduler::default();
    s.set_max_running("a", 3);
    for session in 1..=4 {
        s.add_agent(agent(session, "a", 4));
    }
    for i in 0..10 {
        s.enqueue(run(&format!("r{i:02}"), "a", RunKind::Checks));
    }
    assert_eq!(s.next_placements().len(), 3);
    assert_eq!(s.active("a"), 3);
}

#[test]
fn accounts_take_turns_on_shared_cloud_agents() {
    let mut s = Scheduler::default();
    let mut cloud = agent(1, "platform", 1);
    cloud.is_platform = true;
    s.add_agent(cloud);
    for i in 0..1000 {
        let mut r = run(&format!("a{i:04}"), "a", RunKind::Checks);
        r.executor = Executor::Cloud;
        s.enqueue(r);
    }
    let first = s.next_placements();
    assert_eq!(first.len(), 1);
    let mut lonely = run("b0000", "b", RunKind::Checks);
    lonely.executor = Executor::Cloud;
    s.enqueue(lonely);
    s.detach_lease(1, &first[0].run.run_id);
    s.release_active("a");
    let second = s.next_placements();
    assert_eq!(
        second[0].run.run_id, "b0000",
        "b's one run goes before a's 999 others"
    );
}

#[test]
fn executors_pick_their_agents() {
    let mut s = Scheduler::default();
    s.add_agent(agent(1, "a", 4));
    s.add_agent(agent(2, "a", 4));
    s.add_agent(agent(3, "b", 4));
    let mut named = run("r0", "a", RunKind::Checks);
    named.executor = Executor::Agent("edge-2".to_string());
    s.enqueue(named);
    let mut prod = run("r1", "a", RunKind::Checks);
    prod.environment = "production".to_string();
    s.enqueue(prod);
    let placed = s.next_placements();
    assert_eq!(placed.len(), 1);
    assert_eq!(
        (placed[0].run.run_id.as_str(), placed[0].session),
        ("r0", 2)
    );
    assert!(s.is_queued("a", "r1"), "no agent of a serves production");
}

#[test]
fn a_refused_run_goes_to_another_agent_and_keeps_its_place() {
    let mut s = Scheduler::default();
    s.add_agent(agent(1, "a", 1));
    s.enqueue(run("r1", "a", RunKind::Checks));
    let mut back = run("r0", "a", RunKind::Checks);
    back.refused_by.insert(1);
    s.enqueue(back);
    let placed = s.next_placements();
    assert_eq!(
        placed[0].run.run_id, "r1",
        "r0 is not offered to the agent that refused it"
    );
    s.add_agent(agent(2, "a", 1));
    assert_eq!(s.next_placements()[0].run.run_id, "r0");
}

#[test]
fn a_lapsed_offer_goes_elsewhere_first_and_back_when_nowhere_else() {
    let mut s = Scheduler::default();
    s.add_agent(agent(1, "a", 1));
    s.add_agent(agent(2, "a", 1));
    let mut lapsed = run("r0", "a", RunKind::Checks);
    lapsed.lapsed_with.insert(1);
    s.enqueue(lapsed.clone());
    assert_eq!(s.next_placements()[0].session, 2, "the other agent first");
    let mut alone = Scheduler::default();
    alone.add_agent(agent(1, "a", 1));
    alone.enqueue(lapsed);
    assert_eq!(
        alone.next_placements()[0].session,
        1,
        "the lone agent gets it again"
    );
}

#[test]
fn a_long_blocked_stretch_does_not_hide_a_run_that_can_go() {
    let mut s = Scheduler::default();
    s.add_agent(agent(1, "a", 4));
    for i in 0..1000 {
        let mut waiting = run(&format!("r{i:04}"), "a", RunKind::Checks);
        waiting.executor = Executor::Agent("offline".to_string());
        s.enqueue(waiting);
    }
    s.enqueue(run("r9999", "a", RunKind::Checks));
    let placed = s.next_placements();
    assert_eq!(placed.len(), 1);
    assert_eq!(placed[0].run.run_id, "r9999");
}

fn share(id: &str, parent: &str, index: u32, count: u32) -> QueuedRun {
    QueuedRun {
        share: Some((parent.to_string(), Share::new(index, count).expect("share"))),
        ..run(id, "a", RunKind::Load)
    }
}

/// A split run's shares go together, each on an agent of its own, or wait together: two
/// free agents never start two shares of a three-agent run, and the plan's room must
/// hold them all; a plain run behind them is placed meanwhile.
#[test]
fn a_split_runs_shares_are_placed_together_or_not_at_all() {
    let mut s = Scheduler::default();
    s.set_max_running("a", 4);
    s.add_agent(agent(1, "a", 4));
    s.add_agent(agent(2, "a", 4));
    for i in 0..3 {
        s.enqueue(share(&format!("s{i}"), "p", i, 3));
    }
    s.enqueue(run("c", "a", RunKind::Checks));
    let placed: Vec<_> = s
        .next_placements()
        .into_iter()
        .map(|p| p.run.run_id)
        .collect();
    assert_eq!(placed, ["c"], "two agents for three shares: none of them");

    s.add_agent(agent(3, "a", 4));
    let placed = s.next_placements();
    let mut sessions: Vec<_> = placed.iter().map(|p| p.session).collect();
    sessions.sort_unstable();
    assert_eq!(sessions, [1, 2, 3], "each share on its own agent");
    assert_eq!(s.active("a"), 4);

    // Room for one more run: a two-agent run waits, whole.
    let mut s2 = Scheduler::default();
    s2.set_max_running("a", 1);
    s2.add_agent(agent(1, "a", 4));
    s2.add_agent(agent(2, "a", 4));
    s2.enqueue(share("t0", "q", 0, 2));
    s2.enqueue(share("t1", "q", 1, 2));
    assert!(
        s2.next_placements().is_empty(),
        "the plan holds one, not two"
    );
}
