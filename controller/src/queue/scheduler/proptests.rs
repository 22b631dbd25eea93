//! Property test of the agent index: after any sequence of agents connecting (again),
//! leaving, leases attached and detached and runs placed, `best_agent` picks exactly the
//! session the scan it replaced picks, for any run (accounts, environments, kinds,
//! executors, refusals, lapses) and any set of sessions already taken; and once every
//! agent has left the index is empty.

use proptest::prelude::*;
use proptest::test_runner::RngSeed;

use super::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x5c4e_d01e),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The choice as it was made before the index: every agent, the least
/// `(lapsed, leases, session)` among those that can take the run.
fn reference(s: &Scheduler, run: &QueuedRun, taken: &HashSet<SessionId>) -> Option<SessionId> {
    s.agents
        .values()
        .filter(|slot| !taken.contains(&slot.session) && slot.can_take(run))
        .min_by_key(|slot| {
            (
                run.lapsed_with.contains(&slot.session),
                slot.leases.len(),
                slot.session,
            )
        })
        .map(|slot| slot.session)
}

// Few of each, so that agents and runs meet often.
const SESSIONS: SessionId = 8;
const ACCOUNTS: [&str; 3] = ["a", "b", "platform"];
const ENVIRONMENTS: [&str; 3] = ["staging", "production", "dev"];
const NAMES: [&str; 3] = ["edge-0", "edge-1", "edge-2"];

#[derive(Debug, Clone)]
enum Op {
    Add(AgentSlot),
    Remove(SessionId),
    Attach(SessionId, u8, RunKind),
    Detach(SessionId, u8),
    /// Enqueues the run and places what can go (leases attached by the scheduler).
    Place(QueuedRun),
}

fn kind() -> impl Strategy<Value = RunKind> {
    prop::sample::select(RunKind::ALL.to_vec())
}

fn sessions() -> impl Strategy<Value = BTreeSet<SessionId>> {
    prop::collection::btree_set(0..SESSIONS, 0..5)
}

fn agent() -> impl Strategy<Value = AgentSlot> {
    (
        0..SESSIONS,
        prop::sample::select(ACCOUNTS.to_vec()),
        prop::sample::select(NAMES.to_vec()),
        any::<bool>(),
        prop::sample::subsequence(ENVIRONMENTS.to_vec(), 0..=3),
        prop::sample::subsequence(RunKind::ALL.to_vec(), 0..=RunKind::ALL.len()),
        0usize..4,
        prop::collection::vec((0u8..6, kind()), 0..3),
    )
        .prop_map(
            |(session, account, name, is_platform, environments, kinds, max_jobs, leases)| {
                AgentSlot {
                    session,
                    agent_id: format!("agent-{session}"),
                    name: name.to_string(),
                    account_id: account.to_string(),
                    is_platform,
                    environments: environments.into_iter().map(String::from).collect(),
                    kinds: kinds.into_iter().collect(),
                    max_jobs,
                    // Connecting with leases it reported (possibly more than max_jobs).
                    leases: leases
                        .into_iter()
                        .map(|(run, kind)| (format!("r{run}"), kind))
                        .collect(),
                }
            },
        )
}

fn queued_run() -> impl Strategy<Value = QueuedRun> {
    let executor = prop_oneof![
        Just(Executor::Any),
        prop::sample::select(NAMES.to_vec()).prop_map(|n| Executor::Agent(n.to_string())),
        Just(Executor::Cloud),
    ];
    (
        0u8..6,
        prop::sample::select(ACCOUNTS.to_vec()),
        prop::sample::select(ENVIRONMENTS.to_vec()),
        executor,
        kind(),
        sessions(),
        sessions(),
    )
        .prop_map(
            |(id, account, environment, executor, kind, refused_by, lapsed_with)| QueuedRun {
                refused_by,
                lapsed_with,
                ..super::tests::queued(&format!("r{id}"), account, environment, executor, kind)
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => agent().prop_map(Op::Add),
        1 => (0..SESSIONS).prop_map(Op::Remove),
        3 => (0..SESSIONS, 0u8..6, kind()).prop_map(|(s, r, k)| Op::Attach(s, r, k)),
        3 => (0..SESSIONS, 0u8..6).prop_map(|(s, r)| Op::Detach(s, r)),
        2 => queued_run().prop_map(Op::Place),
    ]
}

fn apply(s: &mut Scheduler, op: Op) {
    match op {
        Op::Add(slot) => s.add_agent(slot),
        Op::Remove(session) => {
            s.remove_agent(session);
        }
        Op::Attach(session, run, kind) => s.attach_lease(session, &format!("r{run}"), kind),
        Op::Detach(session, run) => s.detach_lease(session, &format!("r{run}")),
        Op::Place(run) => {
            s.enqueue(run);
            s.next_placements();
        }
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn the_index_picks_what_the_scan_of_every_agent_picks(
        ops in prop::collection::vec(op(), 1..40),
        probes in prop::collection::vec((queued_run(), sessions()), 1..8),
    ) {
        let mut s = Scheduler::default();
        for op in ops {
            apply(&mut s, op);
            for (run, taken) in &probes {
                let taken: HashSet<SessionId> = taken.iter().copied().collect();
                prop_assert_eq!(
                    s.best_agent(run, &taken),
                    reference(&s, run, &taken),
                    "run {:?}, taken {:?}, agents {:?}", run, taken, s.agents
                );
            }
        }
        for session in 0..SESSIONS {
            s.remove_agent(session);
        }
        prop_assert!(
            s.index.candidates(&probes[0].0).next().is_none(),
            "no agent left, none listed"
        );
        prop_assert_eq!(format!("{:?}", s.index), format!("{:?}", AgentIndex::default()));
    }
}
