//! The scheduler's share of a placement with 10,000 connected agents, as in the dispatch
//! bench (`iohr-bench-dispatch --agents 10000`: one account, environment staging, kind
//! checks, 100 jobs each, runs held 1 s at 50/s, so about 50 running). A test of its own
//! (every run placed, the plan's count right) that is also counted under callgrind in a
//! release build, see docs/benchmarks.md ("Placement with 10,000 agents: the agent
//! index"); `connect` and `place` are the functions counted.

use super::*;

const AGENTS: SessionId = 10_000;
const RUNS: usize = 2_000;
const IN_FLIGHT: usize = 50;

fn run(i: usize) -> QueuedRun {
    super::tests::queued(
        &format!("r{i:06}"),
        "acct",
        "staging",
        Executor::Any,
        RunKind::Checks,
    )
}

/// Every agent connects.
#[inline(never)]
fn connect(s: &mut Scheduler, agents: Vec<AgentSlot>) {
    for slot in agents {
        s.add_agent(slot);
    }
}

/// Each run is queued and placed as its POST arrives, and the oldest running run ends
/// once more than `IN_FLIGHT` run: what the dispatcher asks of the scheduler per run.
#[inline(never)]
fn place(s: &mut Scheduler, runs: Vec<QueuedRun>) -> usize {
    let mut running = VecDeque::new();
    let mut placed = 0;
    for run in runs {
        s.enqueue(run);
        for p in s.next_placements() {
            placed += 1;
            running.push_back((p.session, p.run.run_id));
        }
        if running.len() > IN_FLIGHT
            && let Some((session, run_id)) = running.pop_front()
        {
            s.detach_lease(session, &run_id);
            s.release_active("acct");
        }
    }
    placed
}

#[test]
fn placements_with_10000_agents() {
    let agents = (0..AGENTS)
        .map(|session| AgentSlot {
            session,
            agent_id: format!("agent-{session}"),
            name: format!("sim-{session}"),
            account_id: "acct".to_string(),
            is_platform: false,
            environments: ["staging".to_string()].into(),
            kinds: [RunKind::Checks].into(),
            max_jobs: 100,
            leases: HashMap::new(),
        })
        .collect();
    let runs = (0..RUNS).map(run).collect();
    let mut s = Scheduler::default();
    connect(&mut s, agents);
    assert_eq!(place(&mut s, runs), RUNS);
    assert_eq!(s.active("acct"), IN_FLIGHT);
}
