//! The service's promises when PostgreSQL goes away (issue 34, scenario 3), on a private
//! cluster of the test's own (tests/src/pg_cluster.rs; never the shared server):
//!
//! 1. A replica cut from PostgreSQL while its agents stay connected to it: replica A runs
//!    in a network namespace (tests/src/partition.rs) and its path to the cluster's port is
//!    dropped, while replica B, the agents and the test still reach A.
//! 2. PostgreSQL stopped (`pg_ctl stop -m fast`, every session ended) and started again in
//!    the middle of load runs on two replicas.
//!
//! What the product does (docs/guarantees.md): a controller on PostgreSQL checks its seat
//! (its advisory lock's connection) every second and stops when it cannot (within 3 s),
//! so that nothing is done twice once another replica may adopt its leases; its agents
//! dial their next `--controller`, which takes their leases over. Until it stops, its API
//! answers 503 `store_unavailable` within the store's bound
//! (`POSTGRES_ACQUIRE_TIMEOUT`, 5 s) instead of hanging. A supervisor starts it again,
//! which this test does as soon as it has stopped (and, for the restart, once PostgreSQL
//! is back). Asserted: no request hangs; every run acknowledged (201) ends `passed` or
//! lost with its agent; the restarted replicas serve again. Each test writes a history
//! (tests/src/history.rs) that the checker (tests/src/checker.rs) holds to every promise:
//! each run ends exactly once and the target gets none of its requests after that, its
//! frames gapless on both replicas, it still exists; no exclusive run executed by two
//! agents and no agent executing two, by the target's own log and by the controller's
//! leases.
//!
//! Agent edge-1 runs inside the test's namespace and edge-2 on the host; the target and
//! the host's replicas listen on the namespace's host address, which both reach. So the
//! target's log tells them apart by address: edge-1's requests come from the namespace's
//! address, edge-2's from the host's.
//!
//! H = 1 s here (TTL 3 s).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

mod partition_support;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use iohr_tests::checker::{Promise, check};
use iohr_tests::history::{History, Leases, Recorder, Request};
use iohr_tests::partition::{Cut, Netns, replica};
use iohr_tests::pg_cluster::PgCluster;
use iohr_tests::process::AgentOptions;
use iohr_tests::setup::Installation;
use iohr_tests::{Agent, Api, Controller, Target, wait_for};
use partition_support::{BOUNDS, load};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);
const HEARTBEAT_MS: u64 = 1000;
const ENDED: &[&str] = &["passed", "failed", "error", "cancelled"];
/// How long a replica that cannot reach its store may take to say so (503) or stop: the
/// store's bound on waiting for a connection (5 s) plus slack for a loaded machine.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// Agent edge-1 (inside `netns`) linked to replica A and edge-2 (on the host) to B (one
/// job each: each exclusive run goes to an agent of its own), each given the other
/// replica as its next `--controller`.
async fn two_agents(
    install: &Installation,
    netns: &Netns,
    (a, api_a): (&Controller, &Api),
    (b, api_b): (&Controller, &Api),
) -> [Agent; 2] {
    let (link_a, link_b) = (a.link_url(), b.link_url());
    let allowed = ["10.232.0.0/14"];
    let options = |netns| AgentOptions {
        max_jobs: 1,
        allow_targets: &allowed,
        netns,
        ..AgentOptions::default()
    };
    let both = format!("{link_a},{link_b}");
    let edge_1 = Agent::enrol(install, api_a, "edge-1", &both, options(Some(netns))).await;
    let both = format!("{link_b},{link_a}");
    let edge_2 = Agent::enrol(install, api_b, "edge-2", &both, options(None)).await;
    [edge_1, edge_2]
}

/// Where the host's replicas listen for agents: the namespace's host address, which
/// edge-1 inside reaches over the veth pair and edge-2 on the host directly.
fn link_on(netns: &Netns, port: u16) -> Option<SocketAddr> {
    Some(SocketAddr::new(IpAddr::V4(netns.host_ip), port))
}

/// A target on the namespace's host address logging every request, its log, and a
/// recorder of the test's history that knows each agent by the address it sends from.
async fn recorded(
    install: &Installation,
    netns: &Netns,
    test: &str,
) -> (Target, std::path::PathBuf, Recorder) {
    let log = install.root.join("target-requests.jsonl");
    let target = Target::start_at(
        &format!("{}:0", netns.host_ip),
        &["--request-log", &log.display().to_string()],
    )
    .await;
    let recorder = Recorder::new(test, BOUNDS);
    recorder.agent("edge-1", netns.ns_ip);
    recorder.agent("edge-2", netns.host_ip);
    (target, log, recorder)
}

/// What a replica did with a request: answered, or was gone (refused or closed the
/// connection: it stopped).
#[derive(Debug)]
enum Answer {
    Status(u16, Value),
    Gone,
}

/// `GET` (or `POST` `body` to) `path` on `api`, within [`ANSWER_WITHIN`]: a replica that
/// neither answers nor goes away within it fails the test (it hangs).
async fn ask(api: &Api, path: &str, body: Option<Value>) -> Answer {
    let (api, path) = (api.clone(), path.to_string());
    let asked = std::time::Instant::now();
    // Api panics on a refused or broken connection: in its own task, that is `Gone`.
    let call = tokio::spawn(async move {
        match body {
            Some(body) => api.post(&path, &body).await,
            None => api.get(&path).await,
        }
    });
    let answer = match tokio::time::timeout(ANSWER_WITHIN, call).await {
        Err(_) => panic!("a replica without its store hung for {ANSWER_WITHIN:?}"),
        Ok(Ok((status, body))) => Answer::Status(status, body),
        Ok(Err(_)) => Answer::Gone,
    };
    eprintln!("without its store: {answer:?} in {:?}", asked.elapsed());
    answer
}

/// A replica that cannot reach its store answers a read and a new run 503
/// `store_unavailable`, or has stopped; a run it acknowledges anyway (201) is returned,
/// to be held to its promise.
async fn assert_unavailable_or_gone(api: &Api, run: &str, body: &Value) -> Option<String> {
    for (path, body) in [
        (format!("/v1/reliability/runs/{run}"), None),
        ("/v1/reliability/runs".to_string(), Some(body.clone())),
    ] {
        match ask(api, &path, body).await {
            Answer::Gone => {}
            Answer::Status(201, record) => return Some(record["id"].as_str()?.to_string()),
            Answer::Status(status, answer) => {
                assert_eq!(status, 503, "{path} without the store: {answer}");
                assert_eq!(answer["error"]["code"], "store_unavailable", "{answer}");
            }
        }
    }
    None
}

/// Waits until the replica behind `api` has stopped (its seat lost).
async fn wait_gone(api: &Api, what: &str) {
    wait_for(&format!("{what} to stop"), LIMIT, || async {
        matches!(ask(api, "/v1/reliability/agents", None).await, Answer::Gone).then_some(())
    })
    .await;
    eprintln!("{what} has stopped");
}

/// A 2 s load run tagged `tag` asked of the replica `on` (its API and name), its stream
/// watched there and on `other` too.
async fn one_more_run(
    rec: &mut Recorder,
    target: &Target,
    tag: &str,
    on: (&Api, &str),
    other: (&Api, &str),
) -> String {
    let body = load(target, tag, 20, 2);
    let id = rec.create_run(on.0, on.1, tag, true, &body).await;
    rec.watch(other.0, other.1, &id);
    id
}

/// Each run ends `passed`, or `error` when its agent gave it up at its TTL ("lost contact
/// with the controller: the agent stopped the run", as the agent reports it on its
/// return) or never came back ("agent lost"); then the history goes to the checker, and,
/// doctored, shows it catching what only this scenario's history holds.
async fn assert_runs_end(rec: Recorder, target_log: &std::path::Path, runs: &[String], api: &Api) {
    for id in runs {
        let done = api.wait_status(id, ENDED, LIMIT).await;
        eprintln!(
            "run {id} on {}: {} {}",
            done["agent"], done["status"], done["reason"]
        );
        let reason = done["reason"].as_str().unwrap_or_default();
        assert!(
            done["status"] == "passed"
                || (done["status"] == "error"
                    && (reason == "agent lost"
                        || reason.starts_with("lost contact with the controller"))),
            "{done}"
        );
    }
    let history = rec.finish(target_log, LIMIT).await;
    // Each request known by its agent's address: exclusivity is judged on the target's
    // log, not only on the controller's leases.
    let senders: std::collections::BTreeSet<&str> =
        history.requests.iter().map(|r| r.agent.as_str()).collect();
    assert_eq!(
        senders,
        ["edge-1", "edge-2"].into(),
        "the target's log names both agents"
    );
    history.verify();
    // The last run: its agent runs nothing after it, which a late request would overlap.
    the_checker_catches_this_history_doctored(&history, runs.last().expect("a run"));
}

/// The real history, broken by hand where only this scenario's history can witness it
/// (the controller's leases; a request after the ending while the store was away): the
/// checker names exactly the promise broken.
fn the_checker_catches_this_history_doctored(history: &History, run: &str) {
    let plant = |what: &str, promise: Promise, doctor: &dyn Fn(&mut History)| {
        let mut doctored = history.clone();
        doctor(&mut doctored);
        let mut found: Vec<Promise> = check(&doctored).iter().map(|v| v.promise).collect();
        found.dedup();
        assert_eq!(found, [promise], "{what}");
    };
    let ended = history
        .run(run)
        .and_then(|r| r.statuses.last())
        .unwrap()
        .at_ms;
    // The agent the target saw sending the run.
    let agent = history
        .requests
        .iter()
        .find(|r| r.run.as_deref() == Some(run))
        .map(|r| r.agent.clone())
        .expect("the target saw the run");
    plant(
        "the run leased to both agents at once",
        Promise::Exclusive,
        &|h| {
            let both = vec![run.to_string()];
            let held = vec![
                ("edge-1".to_string(), both.clone()),
                ("edge-2".to_string(), both),
            ];
            h.leases.push(Leases { at_ms: ended, held });
        },
    );
    plant(
        "a request of the run after its ending",
        Promise::OneEnding,
        &|h| {
            h.requests.push(Request {
                at_ms: ended + 1_000,
                agent: agent.clone(),
                run: Some(run.to_string()),
            });
        },
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_from_postgres_stops_and_loses_nothing() {
    let netns = Netns::create();
    // The cluster listens on the namespace's host address: replica A inside reaches it over
    // the veth pair (which the cut drops); everything on the host reaches it directly.
    let cluster = PgCluster::start(&[IpAddr::V4(netns.host_ip)]);
    let names = [netns.ns_ip.to_string(), netns.host_ip.to_string()];
    let install = cluster.installation(&[&names[0], &names[1]]).await;
    let (a, api_a) = replica(&install, "replica-a", HEARTBEAT_MS, None, Some(&netns)).await;
    let (b, api_b) = replica(
        &install,
        "replica-b",
        HEARTBEAT_MS,
        link_on(&netns, 0),
        None,
    )
    .await;
    let _agents = two_agents(&install, &netns, (&a, &api_a), (&b, &api_b)).await;
    let (target, target_log, mut rec) = recorded(&install, &netns, "partition-postgres-cut").await;
    rec.leases(&api_b);

    // One 12 s load run on each agent (one job each: the second goes to the other agent).
    let mut runs = Vec::new();
    for tag in ["r1", "r2"] {
        let body = load(&target, tag, 20, 12);
        runs.push(rec.create_run(&api_b, "replica-b", tag, true, &body).await);
    }
    for id in &runs {
        api_b.wait_status(id, &["running"], LIMIT).await;
    }

    // Cut A from PostgreSQL: its agent link and API stay reachable.
    let cut = netns.cut(Cut::Port(cluster.port));
    let span = rec.cut("replica-a", Cut::Port(cluster.port), false);
    if let Some(id) =
        assert_unavailable_or_gone(&api_a, &runs[0], &load(&target, "r3", 20, 1)).await
    {
        rec.adopt(&api_b, "replica-b", "r3", true, &id);
        runs.push(id);
    }
    wait_gone(&api_a, "replica A").await;
    drop(a);
    // B serves on: a run asked there is acknowledged and must end.
    let during = load(&target, "r4", 20, 2);
    runs.push(
        rec.create_run(&api_b, "replica-b", "r4", true, &during)
            .await,
    );
    drop(cut);
    rec.healed(span);

    // Healed: A started again (as its supervisor would) serves and takes runs.
    let (a, api_a) = replica(
        &install,
        "replica-a-again",
        HEARTBEAT_MS,
        None,
        Some(&netns),
    )
    .await;
    for id in &runs {
        rec.watch(&api_a, "replica-a", id);
    }
    let after = one_more_run(
        &mut rec,
        &target,
        "r5",
        (&api_a, "replica-a"),
        (&api_b, "replica-b"),
    );
    runs.push(after.await);
    assert_runs_end(rec, &target_log, &runs, &api_b).await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_mid_run_loses_nothing() {
    // A namespace only to give edge-1 an address of its own; nothing is cut.
    let netns = Netns::create();
    let cluster = PgCluster::start(&[IpAddr::from([127, 0, 0, 1])]);
    let install = cluster.installation(&[&netns.host_ip.to_string()]).await;
    let (a, api_a) = replica(
        &install,
        "replica-a",
        HEARTBEAT_MS,
        link_on(&netns, 0),
        None,
    )
    .await;
    let (b, api_b) = replica(
        &install,
        "replica-b",
        HEARTBEAT_MS,
        link_on(&netns, 0),
        None,
    )
    .await;
    let _agents = two_agents(&install, &netns, (&a, &api_a), (&b, &api_b)).await;
    let (target, target_log, mut rec) =
        recorded(&install, &netns, "partition-postgres-restart").await;

    // Recorded once the replicas are back: the recorder reads through the API, which the
    // restart takes down.
    let tags = ["r1", "r2"];
    let mut runs = Vec::new();
    for tag in tags {
        let run = api_a.create_run(&load(&target, tag, 20, 10)).await;
        runs.push(run["id"].as_str().unwrap().to_string());
    }
    for id in &runs {
        api_a.wait_status(id, &["running"], LIMIT).await;
    }

    cluster.stop();
    for api in [&api_a, &api_b] {
        assert!(
            assert_unavailable_or_gone(api, &runs[0], &load(&target, "r0", 20, 1))
                .await
                .is_none(),
            "no run is acknowledged while the store is down"
        );
    }
    wait_gone(&api_a, "replica A").await;
    wait_gone(&api_b, "replica B").await;
    let (port_a, port_b) = (a.agent_link.port(), b.agent_link.port());
    drop((a, b));
    cluster.start_again();
    // Started again on their agent ports, as their supervisor would.
    let (a, api_a) = replica(
        &install,
        "replica-a-again",
        HEARTBEAT_MS,
        link_on(&netns, port_a),
        None,
    )
    .await;
    let (b, api_b) = replica(
        &install,
        "replica-b-again",
        HEARTBEAT_MS,
        link_on(&netns, port_b),
        None,
    )
    .await;
    rec.leases(&api_b);
    for (tag, id) in tags.iter().zip(&runs) {
        rec.adopt(&api_b, "replica-b", tag, true, id);
        rec.watch(&api_a, "replica-a", id);
    }
    // A run asked now is acknowledged and must end.
    let after = one_more_run(
        &mut rec,
        &target,
        "r3",
        (&api_b, "replica-b"),
        (&api_a, "replica-a"),
    );
    runs.push(after.await);
    assert_runs_end(rec, &target_log, &runs, &api_b).await;
    a.stop().await;
    b.stop().await;
}
