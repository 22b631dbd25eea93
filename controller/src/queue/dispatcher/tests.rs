//! The dispatcher driven by hand against a real SQLite store, on tokio's paused clock:
//! each round is what its loop does after a wake-up (take every waiting command, then
//! place), and a tick is called when the test moves the clock, so every choice is seen
//! one round at a time. Agents are a session's half of the link: the offers and cancels
//! the dispatcher puts on their stream, their answers sent as the session sends them.

use std::time::Duration;

use iohr_domain::{Executor, RunKind};
use iohr_proto::link::{CancelLease, ControllerMessage, LeaseOffer, controller_message};
use serde_json::json;

use super::*;
use crate::store::{Account, Declaration, Ending, NewRun, PlanChange};

/// Nothing but offers lapses on its own here: agents are never suspected silent and lost
/// leases wait an hour, so a test that moves the clock sees only what it is about.
fn timing() -> Timing {
    let hour = Duration::from_secs(3600);
    Timing {
        suspect_after: hour,
        lease_ttl: hour,
        lease_grace: hour,
        ..Timing::default()
    }
}

/// Holds the paused clock still while the store works on its own threads: tokio does not
/// auto-advance the clock while a blocking task runs (see `tokio::time::pause`), and
/// otherwise would at every wait for SQLite, firing the pool's own timeouts. Only the
/// test's `advance` moves it. The task ends when this is dropped.
struct ClockHold {
    _release: std::sync::mpsc::Sender<()>,
}

fn hold_clock() -> ClockHold {
    let (release, released) = std::sync::mpsc::channel::<()>();
    tokio::task::spawn_blocking(move || {
        let _ = released.recv();
    });
    ClockHold { _release: release }
}

struct Bench {
    _clock: ClockHold,
    dispatcher: Dispatcher,
    handle: DispatcherHandle,
    store: Store,
    account: Account,
    /// The store tests' seeded run: every run here is of its scenario, environment and
    /// target. It stays queued in the store unannounced, so the dispatcher never sees it.
    template: RunRow,
}

struct TestAgent {
    session: SessionId,
    rx: mpsc::Receiver<ControllerMessage>,
}

impl TestAgent {
    /// What the dispatcher put on this agent's stream since the last look.
    fn received(&mut self) -> Vec<controller_message::Body> {
        std::iter::from_fn(|| self.rx.try_recv().ok())
            .filter_map(|m| m.body)
            .collect()
    }

    fn offers(&mut self) -> Vec<LeaseOffer> {
        self.received()
            .into_iter()
            .filter_map(|body| match body {
                controller_message::Body::Offer(offer) => Some(offer),
                _ => None,
            })
            .collect()
    }
}

fn guard_of(offer: &LeaseOffer) -> LeaseGuard {
    LeaseGuard {
        lease_id: offer.lease_id.clone(),
        epoch: offer.epoch,
    }
}

fn run_ids(offers: &[LeaseOffer]) -> Vec<&str> {
    offers.iter().map(|o| o.run_id.as_str()).collect()
}

impl Bench {
    /// An account whose plan lets `max_running` runs run at once.
    async fn new(max_running: i64) -> Bench {
        let clock = hold_clock();
        let store = crate::store::tests::sqlite_store().await;
        let (account, template) = crate::store::tests::seed(&store).await;
        let plan = PlanChange {
            max_running: Some(max_running),
            ..PlanChange::default()
        };
        let account = store.set_plan(&account.id, &plan).await.expect("plan");
        let (dispatcher, handle) = Dispatcher::new(store.clone(), FrameHub::default(), timing());
        Bench {
            _clock: clock,
            dispatcher,
            handle,
            store,
            account,
            template,
        }
    }

    /// An agent of the account connects, serving `staging` with `kinds`.
    async fn agent(&mut self, name: &str, kinds: &[RunKind], max_jobs: u32) -> TestAgent {
        let fingerprint = format!("fp-{name}");
        self.store
            .register_agent_cert(&self.account.id, name, &fingerprint)
            .await
            .expect("register");
        let identity = self
            .store
            .agent_by_fingerprint(&fingerprint)
            .await
            .expect("q")
            .expect("agent");
        let session = self.handle.new_session_id();
        let (tx, rx) = mpsc::channel(64);
        let up = AgentUp {
            session,
            identity,
            declaration: Declaration {
                kinds: kinds.iter().map(|k| k.as_str().to_string()).collect(),
                environments: vec!["staging".to_string()],
                max_concurrent_jobs: max_jobs,
                ..Declaration::default()
            },
            reported: Vec::new(),
            recovered: Vec::new(),
            incarnation: format!("{name}-1"),
            tx,
            last_heard: Arc::new(AtomicU64::new(self.handle.clock_ms())),
            close: CancellationToken::new(),
        };
        let (reply, answer) = oneshot::channel();
        self.dispatcher
            .handle(Command::AgentUp {
                up: Box::new(up),
                reply,
            })
            .await;
        let revoked = answer.await.expect("answered").expect("accepted");
        assert!(revoked.is_empty(), "it reported no leases");
        TestAgent { session, rx }
    }

    /// A run stored and announced as the API does it; its id.
    async fn queue(&mut self, kind: RunKind, executor: Executor) -> String {
        let slot = self.handle.reserve().expect("a place");
        let row = crate::runs::start::insert_run(
            &self.store,
            &NewRun {
                kind,
                executor,
                ..crate::store::tests::run_like(&self.template)
            },
            "token:t1",
        )
        .await
        .expect("run");
        slot.run_queued(&row, self.account.max_running);
        row.id
    }

    /// One turn of the loop: every waiting command, then placement.
    async fn round(&mut self) {
        while let Ok(command) = self.dispatcher.rx.try_recv() {
            self.dispatcher.handle(command).await;
        }
        self.dispatcher.dispatch().await;
    }

    /// The clock moves on and the tick looks at the deadlines, then a round follows.
    async fn tick_after(&mut self, elapsed: Duration) {
        tokio::time::advance(elapsed).await;
        self.dispatcher.on_tick().await;
        self.round().await;
    }

    /// The agent's answer to an offer, as its session hands it to the dispatcher.
    async fn answer(&mut self, agent: &TestAgent, offer: &LeaseOffer, accepted: bool) {
        let (reply, stored) = oneshot::channel();
        self.dispatcher
            .handle(Command::LeaseAnswer {
                session: agent.session,
                guard: guard_of(offer),
                accepted,
                retry_later: false,
                reason: "no".to_string(),
                reply,
            })
            .await;
        stored.await.expect("answered");
    }

    /// The agent's completion of a run: stored under its lease, then told to the
    /// dispatcher, as the agent's session does it.
    async fn complete(&mut self, offer: &LeaseOffer) {
        let guard = guard_of(offer);
        let ending = Ending {
            status: RunStatus::Passed,
            reason: None,
            result: Some(json!({})),
            units_spent: Some(1),
        };
        crate::runs::ending::finish_run(&self.store, &offer.run_id, Some(&guard), None, &ending)
            .await
            .expect("finish")
            .expect("ended under its lease");
        self.handle.lease_ended(&offer.run_id, guard).await;
    }

    async fn row(&self, run_id: &str) -> RunRow {
        self.store.run(run_id).await.expect("q").expect("run")
    }
}

/// Placement: each agent holds at most `max_concurrent_jobs` offers, the least busy agent
/// goes first (the older session on a tie), and a run no agent has room for waits queued.
#[tokio::test(start_paused = true)]
async fn max_concurrent_jobs_caps_each_agent_and_the_least_busy_goes_first() {
    let mut bench = Bench::new(10).await;
    let mut edge1 = bench.agent("edge-1", &[RunKind::Checks], 2).await;
    let mut edge2 = bench.agent("edge-2", &[RunKind::Checks], 1).await;
    let mut runs = Vec::new();
    for _ in 0..4 {
        runs.push(bench.queue(RunKind::Checks, Executor::Any).await);
    }
    bench.round().await;
    let (to1, to2) = (edge1.offers(), edge2.offers());
    assert_eq!(run_ids(&to1), [runs[0].as_str(), runs[2].as_str()]);
    assert_eq!(run_ids(&to2), [runs[1].as_str()]);
    let waiting = bench.row(&runs[3]).await;
    assert_eq!(waiting.status, RunStatus::Queued);
    assert_eq!(waiting.lease, None, "no agent had room for it");
    // The store agrees with what was sent: each offered run is leased to its agent.
    for (offer, name) in [
        (&to1[0], "edge-1"),
        (&to1[1], "edge-1"),
        (&to2[0], "edge-2"),
    ] {
        let row = bench.row(&offer.run_id).await;
        assert_eq!(row.agent_name.as_deref(), Some(name));
        assert_eq!(row.lease, Some(guard_of(offer)));
    }
    // Nothing changes until a slot frees.
    bench.round().await;
    assert!(edge1.offers().is_empty() && edge2.offers().is_empty());
}

/// Placement: exclusive kinds (load, faults, capacity, replay) never share an agent with
/// another exclusive run; a checks run still goes beside one, and the waiting exclusive
/// run is placed once the agent's exclusive run ends.
#[tokio::test(start_paused = true)]
async fn an_exclusive_run_waits_until_its_agent_runs_no_other() {
    let mut bench = Bench::new(10).await;
    let mut edge = bench
        .agent("edge-1", &[RunKind::Checks, RunKind::Load], 4)
        .await;
    let first = bench.queue(RunKind::Load, Executor::Any).await;
    let second = bench.queue(RunKind::Load, Executor::Any).await;
    let checks = bench.queue(RunKind::Checks, Executor::Any).await;
    bench.round().await;
    let offers = edge.offers();
    assert_eq!(run_ids(&offers), [first.as_str(), checks.as_str()]);
    assert_eq!(offers[0].kind, "load");
    assert_eq!(bench.row(&second).await.lease, None, "waits for the agent");

    bench.answer(&edge, &offers[0], true).await;
    bench.answer(&edge, &offers[1], true).await;
    assert_eq!(bench.row(&first).await.status, RunStatus::Running);
    // The checks run ending frees a slot, but not the exclusive one.
    bench.complete(&offers[1]).await;
    bench.round().await;
    assert!(edge.offers().is_empty(), "the first load run still runs");
    bench.complete(&offers[0]).await;
    bench.round().await;
    assert_eq!(run_ids(&edge.offers()), [second.as_str()]);
}

/// Placement: a run pinned to a named agent goes to that agent only, even when another is
/// idle and would be chosen first; pinned to an agent not connected, it waits and says so.
#[tokio::test(start_paused = true)]
async fn a_run_pinned_to_an_agent_goes_to_that_agent_only() {
    let mut bench = Bench::new(10).await;
    let mut edge1 = bench.agent("edge-1", &[RunKind::Checks], 4).await;
    let mut edge2 = bench.agent("edge-2", &[RunKind::Checks], 4).await;
    let pinned = bench
        .queue(RunKind::Checks, Executor::Agent("edge-2".into()))
        .await;
    let absent = bench
        .queue(RunKind::Checks, Executor::Agent("edge-3".into()))
        .await;
    bench.round().await;
    assert!(edge1.offers().is_empty(), "edge-1 is idle but not named");
    assert_eq!(run_ids(&edge2.offers()), [pinned.as_str()]);
    assert_eq!(bench.row(&absent).await.lease, None);
    assert_eq!(
        bench.handle.waiting_reason(
            &bench.account.id,
            &Executor::Agent("edge-3".into()),
            "staging",
            RunKind::Checks
        ),
        Some("agent edge-3 is not connected".to_string())
    );
    // An unpinned run still goes to the least busy agent: edge-1.
    let any = bench.queue(RunKind::Checks, Executor::Any).await;
    bench.round().await;
    assert_eq!(run_ids(&edge1.offers()), [any.as_str()]);
    assert!(edge2.offers().is_empty());
}

/// Offers: an offer carries the run's spec as stored (exact JSON), what the run targets,
/// the lease the store granted (its id and epoch) and how long the agent has to accept.
#[tokio::test(start_paused = true)]
async fn an_offer_carries_the_runs_spec_and_its_lease_epoch() {
    let mut bench = Bench::new(10).await;
    let mut edge = bench.agent("edge-1", &[RunKind::Checks], 1).await;
    let run_id = bench.queue(RunKind::Checks, Executor::Any).await;
    bench.round().await;
    let offers = edge.offers();
    let [offer] = offers.as_slice() else {
        panic!("one offer, got {offers:?}");
    };
    assert_eq!(offer.run_id, run_id);
    assert_eq!(offer.kind, "checks");
    assert_eq!(offer.spec_json, r#"{"checks":[{"path":"/"}]}"#, "as stored");
    assert_eq!(offer.scenario_id, bench.template.scenario_id);
    assert_eq!(offer.scenario_version, bench.template.scenario_version);
    assert_eq!(offer.target, "http://127.0.0.1:9");
    assert_eq!(offer.environment, "staging");
    assert_eq!(offer.accept_within_ms, 5000);
    assert_eq!(offer.confirmed_by, "");
    assert_eq!(offer.epoch, 1, "the run's first lease");
    let row = bench.row(&run_id).await;
    assert_eq!(row.lease, Some(guard_of(offer)));
    assert_eq!(row.lease_state.as_deref(), Some("offered"));
}

/// Offers: an offer not accepted within `offer_timeout` lapses: the agent is told to drop
/// it, the run goes back to the queue and is offered under a new epoch to another agent
/// first; the agent that let it lapse gets it again only when no other can take it.
#[tokio::test(start_paused = true)]
async fn an_unanswered_offer_lapses_and_goes_to_another_agent() {
    let mut bench = Bench::new(10).await;
    let mut edge1 = bench.agent("edge-1", &[RunKind::Checks], 1).await;
    let run_id = bench.queue(RunKind::Checks, Executor::Any).await;
    bench.round().await;
    let first = edge1.offers();
    assert_eq!(run_ids(&first), [run_id.as_str()]);
    // A second agent connects meanwhile; the offer is edge-1's until it lapses.
    let mut edge2 = bench.agent("edge-2", &[RunKind::Checks], 1).await;
    bench.tick_after(Duration::from_millis(4900)).await;
    assert!(edge1.received().is_empty() && edge2.received().is_empty());
    assert_eq!(
        bench.row(&run_id).await.lease_state.as_deref(),
        Some("offered")
    );

    bench.tick_after(Duration::from_millis(200)).await;
    let told = edge1.received();
    let [
        controller_message::Body::Cancel(CancelLease {
            run_id: cancelled,
            lease_id,
            epoch,
            reason,
        }),
    ] = told.as_slice()
    else {
        panic!("edge-1 is told to drop its offer, got {told:?}");
    };
    assert_eq!(
        (cancelled, lease_id, *epoch, reason.as_str()),
        (&run_id, &first[0].lease_id, 1, "offer not accepted in time")
    );
    let again = edge2.offers();
    assert_eq!(run_ids(&again), [run_id.as_str()], "another agent first");
    assert_eq!(again[0].epoch, 2, "a new lease");
    assert_eq!(bench.row(&run_id).await.lease, Some(guard_of(&again[0])));

    // Lapsed on edge-2 too: both let it lapse, so it goes to the older session again.
    bench.tick_after(Duration::from_millis(5100)).await;
    assert_eq!(edge2.received().len(), 1, "edge-2 is told to drop it");
    let third = edge1.offers();
    assert_eq!(run_ids(&third), [run_id.as_str()]);
    assert_eq!(third[0].epoch, 3);
    // Its old answer is stale now: the late acceptance of the first offer is refused.
    bench.answer(&edge1, &first[0], true).await;
    let told = edge1.received();
    assert!(
        matches!(told.as_slice(), [controller_message::Body::Cancel(c)] if c.reason == "offer withdrawn"),
        "edge-1 is told to drop it, got {told:?}"
    );
    assert_eq!(
        bench.row(&run_id).await.lease_state.as_deref(),
        Some("offered"),
        "the first lease no longer holds"
    );
}

/// Endings: a run's completion frees its agent's slot and the next queued run is placed
/// on it; the completion of a lease no longer tracked (a stale epoch) frees nothing.
#[tokio::test(start_paused = true)]
async fn a_lease_ending_frees_its_slot_for_the_next_queued_run() {
    let mut bench = Bench::new(10).await;
    let mut edge = bench.agent("edge-1", &[RunKind::Checks], 1).await;
    let first = bench.queue(RunKind::Checks, Executor::Any).await;
    let second = bench.queue(RunKind::Checks, Executor::Any).await;
    bench.round().await;
    let offers = edge.offers();
    assert_eq!(run_ids(&offers), [first.as_str()]);
    bench.answer(&edge, &offers[0], true).await;
    assert_eq!(bench.row(&first).await.status, RunStatus::Running);

    let stale = LeaseGuard {
        epoch: offers[0].epoch + 1,
        ..guard_of(&offers[0])
    };
    bench.handle.lease_ended(&first, stale).await;
    bench.round().await;
    assert!(edge.offers().is_empty(), "not the lease it holds");
    assert_eq!(bench.row(&second).await.lease, None);

    bench.complete(&offers[0]).await;
    bench.round().await;
    assert_eq!(bench.row(&first).await.status, RunStatus::Passed);
    let next = edge.offers();
    assert_eq!(run_ids(&next), [second.as_str()]);
    assert_eq!(
        bench.row(&second).await.agent_name.as_deref(),
        Some("edge-1")
    );
}

/// Endings: the account's plan (`max_running`) counts offered and running runs; one
/// ending lets the account's next run go, to whichever agent has room.
#[tokio::test(start_paused = true)]
async fn the_plans_concurrency_holds_runs_back_until_one_ends() {
    let mut bench = Bench::new(1).await;
    let mut edge1 = bench.agent("edge-1", &[RunKind::Checks], 4).await;
    let mut edge2 = bench.agent("edge-2", &[RunKind::Checks], 4).await;
    let first = bench.queue(RunKind::Checks, Executor::Any).await;
    let second = bench.queue(RunKind::Checks, Executor::Any).await;
    bench.round().await;
    let offers = edge1.offers();
    assert_eq!(run_ids(&offers), [first.as_str()]);
    assert!(edge2.offers().is_empty(), "the plan allows one at a time");
    bench.answer(&edge1, &offers[0], true).await;
    bench.complete(&offers[0]).await;
    bench.round().await;
    // Both agents are idle again: the older session, edge-1, takes it.
    assert_eq!(run_ids(&edge1.offers()), [second.as_str()]);
    assert!(edge2.offers().is_empty());
}

/// Split runs: the shares placed in one round are offered with one start instant, told
/// as the wait from the offer (the controller is the only clock); a whole run starts at
/// once.
#[tokio::test(start_paused = true)]
async fn the_shares_of_a_split_run_are_offered_one_start_instant() {
    let mut bench = Bench::new(10).await;
    let mut edges = Vec::new();
    for name in ["edge-1", "edge-2", "edge-3"] {
        edges.push(bench.agent(name, &[RunKind::Load], 1).await);
    }
    let slots: Vec<_> = (0..3)
        .map(|_| bench.handle.reserve().expect("a place"))
        .collect();
    let (_, shares) = crate::runs::start::store_run(
        &bench.store,
        &NewRun {
            kind: RunKind::Load,
            agents: 3,
            ..crate::store::tests::run_like(&bench.template)
        },
        "token:t1",
        None,
    )
    .await
    .expect("run");
    assert_eq!(shares.len(), 3);
    for (slot, share) in slots.into_iter().zip(&shares) {
        slot.run_queued(share, bench.account.max_running);
    }
    bench.round().await;
    let offers: Vec<LeaseOffer> = edges.iter_mut().flat_map(|e| e.offers()).collect();
    assert_eq!(offers.len(), 3, "every share offered in one round");
    let waits: Vec<u32> = offers.iter().map(|o| o.start_after_ms).collect();
    let split_start = Timing::default().split_start.as_millis() as u32;
    assert_eq!(
        waits,
        vec![split_start; 3],
        "one instant, the clock held still"
    );
    let mut indexes: Vec<u32> = offers.iter().map(|o| o.share_index).collect();
    indexes.sort_unstable();
    assert_eq!(indexes, vec![0, 1, 2]);

    let whole = bench.queue(RunKind::Load, Executor::Any).await;
    for offer in &offers {
        bench.complete(offer).await;
    }
    bench.round().await;
    let offers: Vec<LeaseOffer> = edges.iter_mut().flat_map(|e| e.offers()).collect();
    let [offer] = offers.as_slice() else {
        panic!("the whole run offered once, got {offers:?}");
    };
    assert_eq!(
        (offer.run_id.as_str(), offer.start_after_ms),
        (whole.as_str(), 0)
    );
}
