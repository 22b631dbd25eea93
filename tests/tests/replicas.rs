//! Controller replicas on the real PostgreSQL (`serve --replica`): several serve one store
//! at once. Runs POSTed on any replica are placed on agents connected to others; a viewer
//! on one replica sees, in order and without gaps, the frames of a run whose agent is on
//! another; a cancel reaches the agent wherever it is; the plan's concurrency holds
//! across replicas under concurrent POSTs; and a replica SIGKILLed mid-run loses nothing:
//! its agent reconnects to another, the run finishes with every frame, placed once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::future::join_all;
use iohr_tests::process::AgentOptions;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);
const ENDED: &[&str] = &["passed", "failed", "error", "cancelled"];

/// Every frame of the run, read through `api`, numbered 1..=n once each, ending `finished`.
async fn assert_gapless(api: &Api, id: &str) -> Vec<iohr_tests::api::Event> {
    iohr_tests::history::assert_gapless(api, id, LIMIT).await
}

fn load_body(target: &Target, rate: u32, duration: &str) -> Value {
    json!({"kind": "load", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "model": "open", "rate": rate,
                 "duration": duration, "warmup": "0s"}})
}

/// Replicas A, B and C of the installation's store, each with an API client.
async fn three_replicas(install: &Installation) -> [(Controller, Api); 3] {
    let token = install.full_token();
    let mut replicas = Vec::new();
    for name in ["replica-a", "replica-b", "replica-c"] {
        let replica = Controller::replica(install, name, 1000, None).await;
        let api = Api::new(&replica.api_url(), &token);
        replicas.push((replica, api));
    }
    replicas
        .try_into()
        .unwrap_or_else(|_| panic!("three replicas"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_runs_frames_viewers_and_cancels() {
    let install = Installation::new(Backend::Postgres).await;
    let [(a, api_a), (b, api_b), (c, api_c)] = three_replicas(&install).await;
    // One agent on A, one on B, none on C.
    let one_job = || AgentOptions {
        max_jobs: 1,
        ..AgentOptions::default()
    };
    let _edge_1 = Agent::enrol(&install, &api_a, "edge-1", &a.link_url(), one_job()).await;
    let _edge_2 = Agent::enrol(&install, &api_b, "edge-2", &b.link_url(), one_job()).await;
    let target = Target::start().await;

    // Checks runs POSTed on C, which has no agent: they run on both others. Each holds its
    // agent (one job each) 2 s, twice the replicas' look at the store, so while one agent
    // is busy the other's replica places a run on it even if every notice is late: with
    // runs of a few milliseconds, B placed all six on edge-2 once, beside a busy loop.
    let checks = json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "spec": {"checks": [{"name": "slow", "path": "/slow?ms=2000"}],
                 "timeout_ms": 30000}});
    let created = join_all((0..6).map(|_| api_c.create_run(&checks))).await;
    let mut agents = BTreeSet::new();
    for record in &created {
        let id = record["id"].as_str().unwrap();
        let done = api_c.wait_status(id, ENDED, LIMIT).await;
        assert_eq!(done["status"], "passed", "{done}\n{}", c.log_tail());
        agents.insert(done["agent"].as_str().unwrap().to_string());
        assert_gapless(&api_c, id).await;
    }
    assert_eq!(
        agents,
        BTreeSet::from(["edge-1".to_string(), "edge-2".to_string()]),
        "runs spread over the agents of both replicas"
    );

    // A load run watched live on C while its agent is on A or B.
    let run = api_c.create_run(&load_body(&target, 50, "3s")).await;
    let id = run["id"].as_str().unwrap().to_string();
    // Read live, from the first frame, on a replica without the agent.
    let live = assert_gapless(&api_c, &id).await;
    assert_eq!(live.iter().filter(|e| e.event == "load").count(), 3);
    let done = api_a.run(&id).await;
    assert_eq!(done["status"], "passed", "{done}");
    assert_eq!(done["result"]["requests"], 150, "{done}");

    // A cancel asked on C stops a run whose agent is elsewhere, at once.
    let long = api_b.create_run(&load_body(&target, 20, "10m")).await;
    let id = long["id"].as_str().unwrap().to_string();
    let mut watching = api_c.events(&id, None).await;
    loop {
        if watching.next(LIMIT).await.expect("a frame").event == "load" {
            break;
        }
    }
    // GET /agents on C, which holds no agent link: both agents online, the long run's
    // lease shown on the agent running it.
    let (status, listed) = api_c.get("/v1/reliability/agents").await;
    assert_eq!(status, 200, "{listed}");
    let agents = listed["agents"].as_array().expect("agents");
    assert!(agents.iter().all(|a| a["online"] == true), "{listed}");
    let holders: Vec<&Value> = agents
        .iter()
        .filter(|a| {
            a["running"].as_array().is_some_and(|r| {
                r.iter()
                    .any(|l| l["run_id"] == id.as_str() && l["state"] == "running")
            })
        })
        .collect();
    assert_eq!(holders.len(), 1, "one agent holds the run: {listed}");
    let asked = std::time::Instant::now();
    let (status, cancelled) = api_c
        .post(
            &format!("/v1/reliability/runs/{id}/cancel"),
            &json!({"reason": "enough"}),
        )
        .await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["reason"], "enough");
    assert!(asked.elapsed() < Duration::from_secs(5), "stopped promptly");
    assert!(
        cancelled["result"]["requests"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
    assert_gapless(&api_a, &id).await;
}

/// Milliseconds of an RFC 3339 time as the API shows it.
fn ms(text: &Value) -> u128 {
    let at = humantime::parse_rfc3339(text.as_str().expect("a time")).expect("RFC 3339");
    at.duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// The most intervals `[start, end)` that overlap at one instant.
fn most_at_once(intervals: &[(u128, u128)]) -> usize {
    let mut edges: BTreeMap<u128, i64> = BTreeMap::new();
    for (start, end) in intervals {
        *edges.entry(*start).or_default() += 1;
        *edges.entry(*end).or_default() -= 1;
    }
    let (mut now, mut most) = (0i64, 0i64);
    for delta in edges.values() {
        now += delta;
        most = most.max(now);
    }
    most as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_posts_across_replicas_keep_the_plan_and_the_agents_limits() {
    let install = Installation::new(Backend::Postgres).await;
    install.ctl2(
        "account",
        &["set-plan", "--name", "default", "--max-running", "3"],
    );
    let a = Controller::replica(&install, "replica-a", 1000, None).await;
    let b = Controller::replica(&install, "replica-b", 1000, None).await;
    let token = install.full_token();
    let apis = [
        Api::new(&a.api_url(), &token),
        Api::new(&b.api_url(), &token),
    ];
    let two_jobs = || AgentOptions {
        max_jobs: 2,
        ..AgentOptions::default()
    };
    let _agents = [
        Agent::enrol(&install, &apis[0], "edge-1", &a.link_url(), two_jobs()).await,
        Agent::enrol(&install, &apis[0], "edge-2", &a.link_url(), two_jobs()).await,
        Agent::enrol(&install, &apis[1], "edge-3", &b.link_url(), two_jobs()).await,
        Agent::enrol(&install, &apis[1], "edge-4", &b.link_url(), two_jobs()).await,
    ];
    // Each run takes about 300 ms (three checks of 100 ms): they overlap.
    let target = Target::start_with(&["--service-ms", "100"]).await;
    let body = json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "spec": {"checks": [{"name": "a", "path": "/"}, {"name": "b", "path": "/"},
                            {"name": "c", "path": "/"}]}});
    let created = join_all((0..24).map(|i| apis[i % 2].create_run(&body))).await;
    let mut intervals = Vec::new();
    let mut by_agent: BTreeMap<String, Vec<(u128, u128)>> = BTreeMap::new();
    for record in &created {
        let id = record["id"].as_str().unwrap();
        let done = apis[0].wait_status(id, ENDED, LIMIT).await;
        assert_eq!(done["status"], "passed", "{done}");
        let span = (ms(&done["started_at"]), ms(&done["ended_at"]));
        intervals.push(span);
        by_agent
            .entry(done["agent"].as_str().unwrap().to_string())
            .or_default()
            .push(span);
    }
    let most = most_at_once(&intervals);
    let mut spans: Vec<_> = by_agent
        .iter()
        .flat_map(|(a, s)| s.iter().map(move |s| (s.0, s.1, a.clone())))
        .collect();
    spans.sort();
    assert!(
        most <= 3,
        "the plan's 3 at once across replicas, saw {most}: {spans:?}"
    );
    assert!(most >= 2, "runs did run side by side ({most})");
    for (agent, spans) in &by_agent {
        assert!(most_at_once(spans) <= 2, "{agent} ran more than its 2 jobs");
    }
    assert!(
        by_agent.len() >= 3,
        "both replicas' agents took runs: {by_agent:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_run_loses_no_run_and_no_frame() {
    let install = Installation::new(Backend::Postgres).await;
    let a = Controller::replica(&install, "replica-a", 1000, None).await;
    let b = Controller::replica(&install, "replica-b", 1000, None).await;
    let token = install.full_token();
    let api_b = Api::new(&b.api_url(), &token);
    let both = format!("{},{}", a.link_url(), b.link_url());
    let identity = install.agent_identity("default", "edge-1");
    let _agent = Agent::start(
        &install,
        "edge-1",
        &identity,
        &both,
        AgentOptions::default(),
    )
    .await;
    let api_a = Api::new(&a.api_url(), &token);
    api_a.wait_online("edge-1", LIMIT).await;
    let target = Target::start().await;
    let run = api_b.create_run(&load_body(&target, 50, "8s")).await;
    let id = run["id"].as_str().unwrap().to_string();
    // Two seconds of load watched on B, then A (the agent's replica) dies.
    let mut live = api_b.events(&id, None).await;
    let mut seconds = 0;
    while seconds < 2 {
        if live.next(LIMIT).await.expect("the run goes on").event == "load" {
            seconds += 1;
        }
    }
    let a_log = a.log.clone();
    a.kill().await;
    let done = api_b.wait_status(&id, ENDED, LIMIT).await;
    assert_eq!(done["status"], "passed", "{done}\n{}", b.log_tail());
    assert_eq!(done["result"]["requests"], 400, "{done}");
    assert_gapless(&api_b, &id).await;
    let log = std::fs::read_to_string(&b.log).unwrap();
    assert!(
        log.contains("took over a lease its agent brought from another replica")
            || log.contains("took over the lease of a replica that stopped"),
        "{}",
        b.log_tail()
    );
    // Placed once: one offer in both replicas' logs together.
    let offers: usize = [&a_log, &b.log]
        .iter()
        .map(|log| {
            std::fs::read_to_string(log)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("lease offered") && l.contains(&format!("run={id}")))
                .count()
        })
        .sum();
    assert_eq!(offers, 1, "the run was offered once");
    // B now also runs what runs once per store.
    iohr_tests::wait_for("B to take the store's claim", LIMIT, || async {
        std::fs::read_to_string(&b.log)
            .unwrap_or_default()
            .contains("took over the store's claim")
            .then_some(())
    })
    .await;
}

/// An agent whose first controller died moves to the next; once the first answers again
/// it moves back (`--return-after-secs`), but not while it holds a run: agents spread
/// over the replicas again after a lost one returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_moves_back_to_its_first_replica_once_idle() {
    let install = Installation::new(Backend::Postgres).await;
    let a = Controller::replica(&install, "replica-a", 1000, None).await;
    let b = Controller::replica(&install, "replica-b", 1000, None).await;
    let (a_url, b_url, a_port) = (a.link_url(), b.link_url(), a.agent_link.port());
    let api_b = Api::new(&b.api_url(), &install.full_token());
    let identity = install.agent_identity("default", "edge-1");
    let agent = Agent::start(
        &install,
        "edge-1",
        &identity,
        &format!("{a_url},{b_url}"),
        AgentOptions {
            extra: &["--return-after-secs", "1"],
            ..AgentOptions::default()
        },
    )
    .await;
    // The agent's log, and the lines where it connected to `url`.
    let log = || std::fs::read_to_string(&agent.log).unwrap_or_default();
    let connected_to = |url: &str| -> Vec<usize> {
        let needle = format!("controller={url}");
        log()
            .lines()
            .enumerate()
            .filter(|(_, l)| l.contains(" connected ") && l.contains(&needle))
            .map(|(i, _)| i)
            .collect()
    };
    let on = |url: String, times: usize| {
        let connected_to = &connected_to;
        async move {
            iohr_tests::wait_for(
                &format!("the agent connected to {url} {times}x"),
                LIMIT,
                || {
                    let n = connected_to(&url).len();
                    async move { (n >= times).then_some(()) }
                },
            )
            .await
        }
    };
    on(a_url.clone(), 1).await;
    a.kill().await;
    on(b_url.clone(), 1).await;
    api_b.wait_online("edge-1", LIMIT).await;

    // A run held on B keeps the agent there, though A is back for most of it.
    let target = Target::start().await;
    let run = api_b.create_run(&load_body(&target, 20, "5s")).await;
    let id = run["id"].as_str().unwrap().to_string();
    api_b.wait_status(&id, &["running"], LIMIT).await;
    let _a_again = Controller::replica(&install, "replica-a2", 1000, Some(a_port)).await;
    let done = api_b.wait_ended(&id, LIMIT).await;
    assert_eq!(done["status"], "passed", "{done}");
    assert_gapless(&api_b, &id).await;

    // Then, idle, it goes home.
    on(a_url.clone(), 2).await;
    let lines: Vec<String> = log().lines().map(str::to_string).collect();
    let position = |needle: &str| lines.iter().position(|l| l.contains(needle));
    let moved = position("moving back to it").expect("the agent said it moved back");
    let run_id = format!("run={id}");
    let done_at = lines
        .iter()
        .position(|l| l.contains("run done") && l.contains(&run_id))
        .expect("the agent logged its run's end");
    assert!(
        done_at < moved && moved < connected_to(&a_url)[1],
        "moved back only once the run was done, and then connected to A: {lines:#?}"
    );
}

/// A split run whose agents are linked to different replicas: no one replica has two,
/// so the shares are leased across replicas at once (`store/pooled.rs`), each offered by
/// its agent's replica, and the run measures as one, watched on a replica with neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_run_is_placed_over_agents_of_different_replicas() {
    let install = Installation::new(Backend::Postgres).await;
    let [(a, api_a), (b, api_b), (_c, api_c)] = three_replicas(&install).await;
    let _edge_1 = Agent::enrol(
        &install,
        &api_a,
        "edge-1",
        &a.link_url(),
        AgentOptions::default(),
    )
    .await;
    let _edge_2 = Agent::enrol(
        &install,
        &api_b,
        "edge-2",
        &b.link_url(),
        AgentOptions::default(),
    )
    .await;
    api_c.wait_online("edge-1", LIMIT).await;
    api_c.wait_online("edge-2", LIMIT).await;
    let target = Target::start().await;
    let mut body = load_body(&target, 100, "3s");
    body["agents"] = json!(2);
    let created = api_c.create_run(&body).await;
    let id = created["id"].as_str().unwrap().to_string();
    let events = assert_gapless(&api_c, &id).await;
    let done = api_c.wait_ended(&id, LIMIT).await;
    assert_eq!(
        done["status"],
        "passed",
        "{done}\n{}\n{}",
        a.log_tail(),
        b.log_tail()
    );
    let (status, run) = api_c.get(&format!("/v1/reliability/runs/{id}")).await;
    assert_eq!(status, 200, "{run}");
    let agents: BTreeSet<String> = run["shares"]
        .as_array()
        .expect("shares")
        .iter()
        .map(|s| s["agent"].as_str().expect("agent").to_string())
        .collect();
    assert_eq!(
        agents,
        BTreeSet::from(["edge-1".to_string(), "edge-2".to_string()]),
        "one share on each replica's agent: {run}"
    );
    // Every arrival sent once, by one of the two shares; the live seconds are the whole's.
    assert_eq!(run["result"]["intended"], 300, "{run}");
    assert_eq!(run["result"]["sent"], 300, "{run}");
    let seconds: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "load")
        .map(|e| &e.data["data"])
        .collect();
    // (A share may have a trailing 4th second, its last answers or send just after the
    // 3rd second's window: see docs/load.md.)
    let whole: Vec<u64> = seconds
        .iter()
        .filter(|s| s["phase"] == "measure" && s["shares"] == 2)
        .filter_map(|s| s["second"].as_u64())
        .collect();
    assert_eq!(
        whole,
        vec![1, 2, 3],
        "each measured second merged from both shares: {seconds:#?}"
    );
}
