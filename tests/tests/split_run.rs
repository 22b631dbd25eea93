//! One load run over three agents (`"agents": 3`): three real agents each send a third of
//! the schedule, and the run people see is their whole. Its histogram is the three
//! shares' added (not averaged percentiles), its achieved rate the asked rate within 1%,
//! its stream the shares' frames relayed without a gap, each naming its share. A cancel
//! of the split run stops every share; a bad `agents` is refused with nothing stored.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::collections::BTreeSet;
use std::time::Duration;

use iohr_domain::histogram::decode;
use iohr_tests::history::assert_gapless;
use iohr_tests::setup::Fleet;
use iohr_tests::{Backend, Target, on_both_stores};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(90);
const RATE: f64 = 300.0;

async fn fleet(backend: Backend, agents: usize) -> Fleet {
    Fleet::start(backend, agents).await
}

fn load(target: &Target, duration: &str, agents: u32) -> Value {
    json!({"kind": "load", "environment": "staging", "target": target.url(), "agents": agents,
        "spec": {"operations": [{"path": "/"}], "model": "open", "rate": RATE,
                 "duration": duration, "warmup": "1s", "connections": 12,
                 "thresholds": ["p99 < 2s"]}})
}

/// Waits on run `id`'s stream for its first measured second, merged from every share's.
async fn measured_a_second(fleet: &Fleet, id: &str) {
    let mut stream = fleet.api.events(id, None).await;
    loop {
        let event = stream.next(LIMIT).await.expect("a frame");
        let data = &event.data["data"];
        if event.event == "load" && data["phase"] == "measure" {
            assert_eq!(data["shares"], 2, "{data}");
            return;
        }
    }
}

/// A result's slow seconds' slowest requests: (second, trace id, latency).
fn slowest_of(result: &Value) -> Vec<(u64, String, u64)> {
    let mut out = Vec::new();
    for second in result["slow_seconds"].as_array().expect("slow seconds") {
        let n = second["second"].as_u64().expect("second");
        for e in second["exemplars"]["slowest"].as_array().expect("slowest") {
            let id = e["trace_id"].as_str().expect("trace id").to_string();
            out.push((n, id, e["latency_us"].as_u64().expect("latency")));
        }
    }
    out
}

async fn three_agents_measure_one_run_whose_histogram_is_their_sum(backend: Backend) {
    let fleet = fleet(backend, 3).await;
    let target = Target::start().await;
    let created = fleet.api.create_run(&load(&target, "4s", 3)).await;
    let id = created["id"].as_str().expect("id").to_string();
    assert_eq!(created["agents"], 3, "{created}");
    let done = fleet.api.wait_ended(&id, LIMIT).await;
    assert_eq!(done["status"], "passed", "{done}");
    let (status, run) = fleet.api.get(&format!("/v1/reliability/runs/{id}")).await;
    assert_eq!(status, 200, "{run}");
    let shares = run["shares"].as_array().expect("shares").clone();
    assert_eq!(shares.len(), 3, "{run}");
    let agents: BTreeSet<String> = shares
        .iter()
        .map(|s| s["agent"].as_str().expect("agent").to_string())
        .collect();
    assert_eq!(agents.len(), 3, "each share on an agent of its own: {run}");

    // The merged histogram is the three shares' added, count for count.
    let mut sum = None;
    let mut requests = 0;
    let mut share_exemplars: Vec<(u64, String, u64)> = Vec::new();
    for (index, share) in shares.iter().enumerate() {
        assert_eq!(share["index"], index);
        assert_eq!(share["status"], "passed", "{share}");
        let (_, record) = fleet
            .api
            .get(&format!(
                "/v1/reliability/runs/{}",
                share["run"].as_str().unwrap()
            ))
            .await;
        assert_eq!(record["share_of"]["run"], id.as_str(), "{record}");
        assert_eq!(record["share_of"]["count"], 3);
        requests += record["result"]["requests"].as_u64().expect("requests");
        share_exemplars.extend(slowest_of(&record["result"]));
        let histogram = decode(record["result"]["latency"]["histogram"].as_str().unwrap())
            .expect("share histogram");
        match &mut sum {
            None => sum = Some(histogram),
            Some(sum) => sum.add(&histogram).expect("add"),
        }
    }
    let sum = sum.expect("three shares");
    let result = &run["result"];
    let merged =
        decode(result["latency"]["histogram"].as_str().expect("histogram")).expect("merged");
    assert_eq!(merged.len(), sum.len(), "every share's latencies, once");
    for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
        assert_eq!(
            merged.value_at_quantile(q),
            sum.value_at_quantile(q),
            "quantile {q}"
        );
    }
    assert_eq!(result["requests"].as_u64(), Some(requests), "{result}");
    // Exemplars: the whole keeps the shares' slowest requests: each one a share named,
    // and in each second it keeps, the slowest any share named in that second.
    let merged_exemplars = slowest_of(result);
    assert!(!merged_exemplars.is_empty(), "{result}");
    assert!(
        merged_exemplars.iter().all(|e| share_exemplars.contains(e)),
        "{merged_exemplars:?} of {share_exemplars:?}"
    );
    let slowest_in = |list: &[(u64, String, u64)], second: u64| {
        list.iter().filter(|e| e.0 == second).map(|e| e.2).max()
    };
    for (second, _, _) in &merged_exemplars {
        assert_eq!(
            slowest_in(&merged_exemplars, *second),
            slowest_in(&share_exemplars, *second),
            "second {second}"
        );
    }

    // The shares interleave into the asked schedule: the whole's rate within 1%.
    let achieved = result["achieved_rate"].as_f64().expect("achieved_rate");
    let intended = result["intended_rate"].as_f64().expect("intended_rate");
    assert!(
        (intended - RATE).abs() / RATE < 0.01,
        "intended {intended}/s: {result}"
    );
    assert!(
        (achieved - RATE).abs() / RATE < 0.01,
        "achieved {achieved}/s of {RATE}/s: {result}"
    );
    // The measure's 4 s at 300/s, every arrival sent once by exactly one share.
    assert_eq!(
        result["intended"].as_u64(),
        Some((RATE as u64) * 4),
        "{result}"
    );
    assert_eq!(result["sent"].as_u64(), Some((RATE as u64) * 4), "{result}");

    // One stream: the shares' frames relayed, numbered without a gap, each with its share;
    // their seconds merged, one `load` frame per second of the whole.
    let events = assert_gapless(&fleet.api, &id, LIMIT).await;
    let started: BTreeSet<u64> = events
        .iter()
        .filter(|e| e.event == "started")
        .map(|e| e.data["data"]["share"].as_u64().expect("share"))
        .collect();
    assert_eq!(
        started,
        BTreeSet::from([0, 1, 2]),
        "each share's start, relayed"
    );
    // Offered in one round, the shares wait for one instant before their clocks start:
    // each started frame says how long its share waited (at most the controller's 500 ms).
    for event in events.iter().filter(|e| e.event == "started") {
        let wait = event.data["data"]["start_after_ms"].as_u64();
        assert!(wait.is_some_and(|ms| ms <= 500), "{:?}", event.data);
    }
    let seconds: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "load")
        .map(|e| &e.data["data"])
        .collect();
    for second in &seconds {
        assert!(second.get("share").is_none(), "{second}");
        // A share may have a trailing second after the 4 s measure (answers to its last
        // sends completing late, or its last send itself when its timer fired a few ms
        // after the 4th second's window was taken, as on a loaded machine): merged at the
        // ending from the shares that had it. Every other second holds all three; the
        // sum below still holds every send once.
        let trailing = second["phase"] == "measure"
            && second["second"].as_u64() == Some(5)
            && second["sent"].as_u64().is_some_and(|sent| sent <= 3);
        if !trailing {
            assert_eq!(second["shares"], 3, "a second of the whole: {second}");
        }
    }
    let phase_seconds = |phase: &str| -> Vec<u64> {
        let of_phase = seconds
            .iter()
            .filter(|s| s["phase"] == phase && s["shares"] == 3);
        of_phase
            .map(|s| s["second"].as_u64().expect("second"))
            .collect()
    };
    assert_eq!(phase_seconds("warmup"), vec![1]);
    assert_eq!(phase_seconds("measure"), vec![1, 2, 3, 4]);
    let measured = seconds.iter().filter(|s| s["phase"] == "measure");
    let sent: u64 = measured.map(|s| s["sent"].as_u64().expect("sent")).sum();
    assert_eq!(
        Some(sent),
        result["sent"].as_u64(),
        "the seconds add up to the whole"
    );
    assert_eq!(events.last().map(|e| e.event.as_str()), Some("finished"));

    // The list shows the run people asked for, not its shares.
    let (_, list) = fleet.api.get("/v1/reliability/runs?kind=load").await;
    let listed: Vec<&str> = list["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(listed, [id.as_str()], "{list}");
    target.stop().await;
    drop(fleet.agents);
    drop(fleet.controller);
    drop(fleet.install);
}

async fn a_cancelled_split_run_stops_every_share(backend: Backend) {
    let fleet = fleet(backend, 2).await;
    let target = Target::start().await;
    let created = fleet.api.create_run(&load(&target, "60s", 2)).await;
    let id = created["id"].as_str().expect("id").to_string();
    fleet.api.wait_status(&id, &["running"], LIMIT).await;
    let (status, answer) = fleet
        .api
        .post(
            &format!("/v1/reliability/runs/{id}/cancel"),
            &json!({"reason": "enough"}),
        )
        .await;
    assert!(status == 200 || status == 202, "{status} {answer}");
    let done = fleet.api.wait_ended(&id, LIMIT).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    assert_eq!(done["reason"], "enough", "{done}");
    let (_, run) = fleet.api.get(&format!("/v1/reliability/runs/{id}")).await;
    for share in run["shares"].as_array().expect("shares") {
        assert_eq!(share["status"], "cancelled", "{run}");
    }
    target.stop().await;
    drop(fleet.agents);
}

/// An agent killed mid-run: its share ends `error` (agent lost), the other share is
/// cancelled, and the split run ends `error`, naming the share and its agent, with what
/// both shares measured merged.
async fn a_lost_agent_ends_the_split_run_with_what_the_shares_measured(backend: Backend) {
    let mut fleet = fleet(backend, 2).await;
    let target = Target::start().await;
    let created = fleet.api.create_run(&load(&target, "60s", 2)).await;
    let id = created["id"].as_str().expect("id").to_string();
    // Both shares have measured a second before one agent goes.
    measured_a_second(&fleet, &id).await;
    let doomed = fleet.agents.pop().expect("agent");
    let doomed_name = doomed.name.clone();
    doomed.kill().await;
    let done = fleet.api.wait_ended(&id, LIMIT).await;
    assert_eq!(done["status"], "error", "{done}");
    let reason = done["reason"].as_str().expect("reason");
    assert!(
        reason.contains(&format!("(agent {doomed_name}) ended error"))
            && reason.contains("agent lost"),
        "{reason}"
    );
    let (_, run) = fleet.api.get(&format!("/v1/reliability/runs/{id}")).await;
    let statuses: BTreeSet<&str> = run["shares"]
        .as_array()
        .expect("shares")
        .iter()
        .filter_map(|s| s["status"].as_str())
        .collect();
    assert_eq!(statuses, BTreeSet::from(["cancelled", "error"]), "{run}");
    assert!(
        run["result"]["requests"].as_u64().unwrap_or(0) > 0,
        "what the shares measured is kept: {run}"
    );
    target.stop().await;
}

/// `abort_on_fail` judged on the whole: a 2-agent run whose every answer takes 30 ms
/// crosses `p99 < 5ms` on its merged seconds, its shares are cancelled for it, and it
/// ends `failed` with why, long before its 60 s, its result the shares' merged.
async fn a_split_run_aborts_on_its_merged_seconds(backend: Backend) {
    let fleet = fleet(backend, 2).await;
    let target = Target::start().await;
    let body = json!({"kind": "load", "environment": "staging", "target": target.url(),
        "agents": 2,
        "spec": {"operations": [{"path": "/slow?ms=30"}], "model": "open", "rate": 100,
                 "duration": "60s", "connections": 12, "thresholds": ["p99 < 5ms"],
                 "abort_on_fail": true}});
    let created = fleet.api.create_run(&body).await;
    let id = created["id"].as_str().expect("id").to_string();
    let done = fleet.api.wait_ended(&id, LIMIT).await;
    assert_eq!(done["status"], "failed", "{done}");
    let reason = done["reason"].as_str().expect("reason");
    assert!(
        reason.starts_with("threshold p99 < 5ms crossed after ") && reason.ends_with("aborted"),
        "{reason}"
    );
    let (_, run) = fleet.api.get(&format!("/v1/reliability/runs/{id}")).await;
    assert_eq!(run["result"]["aborted"], reason, "{run}");
    let measured = run["result"]["measured_seconds"]
        .as_f64()
        .expect("measured_seconds");
    assert!(measured < 30.0, "stopped early, not at 60 s: {measured}");
    assert!(run["result"]["requests"].as_u64().unwrap_or(0) > 0, "{run}");
    for share in run["shares"].as_array().expect("shares") {
        assert_eq!(share["status"], "cancelled", "{run}");
    }
    target.stop().await;
    drop(fleet.agents);
}

/// A schedule with `"agents": 2` fires split runs; a schedule whose runs cannot split is
/// refused as such a POSTed run is, with nothing stored.
async fn a_schedule_fires_split_runs(backend: Backend) {
    let fleet = fleet(backend, 2).await;
    let target = Target::start().await;
    let path = "/v1/reliability/schedules";
    let schedule = |agents: u32| {
        let mut run = load(&target, "2s", agents);
        run["name"] = json!("split");
        run["cron"] = json!("*/2 * * * * *");
        run
    };
    for agents in [0, 65] {
        let (status, answer) = fleet.api.post(path, &schedule(agents)).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["code"], "invalid_agents", "{answer}");
    }
    let (_, listed) = fleet.api.get(path).await;
    assert_eq!(listed["schedules"], json!([]), "nothing half-stored");

    let (status, made) = fleet.api.post(path, &schedule(2)).await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["agents"], 2, "{made}");
    let id = made["id"].as_str().unwrap().to_string();
    let run = iohr_tests::wait_for("a split run the schedule fired", LIMIT, || async {
        let (_, runs) = fleet.api.get("/v1/reliability/runs?kind=load").await;
        runs["runs"]
            .as_array()?
            .iter()
            .find(|r| r["started_by"] == json!({"type": "schedule", "id": id}))
            .cloned()
    })
    .await;
    let run_id = run["id"].as_str().unwrap().to_string();
    let (status, _) = fleet
        .api
        .call(hyper::Method::DELETE, &format!("{path}/{id}"), None)
        .await;
    assert_eq!(status, 204);
    let done = fleet.api.wait_ended(&run_id, LIMIT).await;
    assert_eq!(done["status"], "passed", "{done}");
    assert_eq!(done["agents"], 2, "{done}");
    let (_, record) = fleet
        .api
        .get(&format!("/v1/reliability/runs/{run_id}"))
        .await;
    let shares = record["shares"].as_array().expect("shares");
    assert_eq!(shares.len(), 2, "{record}");
    for share in shares {
        let (_, share) = fleet
            .api
            .get(&format!(
                "/v1/reliability/runs/{}",
                share["run"].as_str().unwrap()
            ))
            .await;
        assert_eq!(share["status"], "passed", "{:?}", share["reason"]);
    }

    // The CLI asks for a split run with --agents and shows its shares.
    let spec = fleet.install.path("split.json");
    std::fs::write(&spec, load(&target, "2s", 2)["spec"].to_string()).expect("spec");
    let cli = |args: &[&str]| {
        let out = iohr_tests::setup::iohr(&fleet.controller, &fleet.install.full_token(), args);
        (Some(out.code), out.stdout)
    };
    let spec = spec.to_str().expect("path");
    let (code, out) = cli(&[
        "--json",
        "reliability",
        "run",
        "--kind",
        "load",
        "--environment",
        "staging",
        "--target",
        &target.url(),
        "--spec",
        spec,
        "--agents",
        "2",
        "--wait",
    ]);
    assert_eq!(code, Some(0), "{out}");
    let ran: Value = serde_json::from_str(out.lines().last().unwrap_or("")).expect("json");
    let ran_id = ran["id"].as_str().expect("id");
    let (code, shown) = cli(&["reliability", "runs", "show", ran_id]);
    assert_eq!(code, Some(0), "{shown}");
    let lines: Vec<Vec<&str>> = shown
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(lines.iter().any(|l| l[..] == ["agents", "2"]), "{shown}");
    let shares = lines
        .iter()
        .filter(|l| l.first() == Some(&"share") && l.get(3) == Some(&"passed"))
        .count();
    assert_eq!(shares, 2, "{shown}");
    target.stop().await;
    drop(fleet.agents);
}

/// `on_agent_lost: continue`: an agent killed mid-run ends its share `error` (agent lost)
/// and the other share runs its whole course; the split run is judged on what they
/// measured (`passed` here), with a note naming the lost share.
async fn a_lost_agent_leaves_the_rest_running_when_the_spec_allows_it(backend: Backend) {
    let mut fleet = fleet(backend, 2).await;
    let target = Target::start().await;
    let mut body = load(&target, "8s", 2);
    body["spec"]["on_agent_lost"] = json!("continue");
    let created = fleet.api.create_run(&body).await;
    let id = created["id"].as_str().expect("id").to_string();
    measured_a_second(&fleet, &id).await;
    let doomed = fleet.agents.pop().expect("agent");
    let doomed_name = doomed.name.clone();
    doomed.kill().await;
    let done = fleet.api.wait_ended(&id, LIMIT).await;
    assert_eq!(done["status"], "passed", "{done}");
    let (_, run) = fleet.api.get(&format!("/v1/reliability/runs/{id}")).await;
    let mut statuses = Vec::new();
    for share in run["shares"].as_array().expect("shares") {
        let (_, record) = fleet
            .api
            .get(&format!(
                "/v1/reliability/runs/{}",
                share["run"].as_str().unwrap()
            ))
            .await;
        statuses.push((
            record["agent"].as_str().unwrap_or("").to_string(),
            record["status"].as_str().unwrap_or("").to_string(),
            record["result"]["measured_seconds"].as_f64(),
        ));
    }
    statuses.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        statuses,
        [
            ("edge-0".to_string(), "passed".to_string(), Some(8.0)),
            (doomed_name.clone(), "error".to_string(), None)
        ],
        "the survivor ran its whole course: {run}"
    );
    let notes = run["result"]["notes"].as_array().expect("notes");
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.contains(&format!("(agent {doomed_name}) was lost")))),
        "{notes:?}"
    );
    target.stop().await;
}

async fn a_run_that_cannot_split_is_refused_and_nothing_is_stored(backend: Backend) {
    let fleet = fleet(backend, 1).await;
    let target = Target::start().await;
    let checks = json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "agents": 2, "spec": {"checks": [{"name": "home", "path": "/"}]}});
    let mut named = load(&target, "2s", 2);
    named["executor"] = json!("agent:edge-0");
    let mut unknown_loss = load(&target, "2s", 2);
    unknown_loss["spec"]["on_agent_lost"] = json!("sometimes");
    let refused = [
        (checks, "invalid_agents"),
        // 12 connections over 13 agents: a share without a connection.
        (load(&target, "2s", 13), "invalid_agents"),
        (load(&target, "2s", 0), "invalid_agents"),
        (load(&target, "2s", 65), "invalid_agents"),
        // The plan runs 4 at a time.
        (load(&target, "2s", 5), "agents_not_placeable"),
        (named, "agents_not_placeable"),
        (unknown_loss, "invalid_spec"),
    ];
    for (body, code) in refused {
        let (status, answer) = fleet.api.post("/v1/reliability/runs", &body).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
    }
    let (_, list) = fleet.api.get("/v1/reliability/runs").await;
    assert_eq!(list["runs"].as_array().map(Vec::len), Some(0), "{list}");
    let _ = &fleet.install;
    target.stop().await;
}

/// A run split over more agents than are connected waits, and says so on the split run;
/// once enough agents are there it runs, and the reason goes.
async fn a_split_run_says_it_waits_for_its_agents(backend: Backend) {
    let mut fleet = fleet(backend, 1).await;
    let target = Target::start().await;
    let created = fleet.api.create_run(&load(&target, "2s", 2)).await;
    let id = created["id"].as_str().expect("id").to_string();
    let waiting = iohr_tests::wait_for("the split run to say why it waits", LIMIT, || async {
        let run = fleet.api.run(&id).await;
        let reason = run["reason"].as_str().map(str::to_string);
        reason.filter(|r| r.starts_with("split over 2 agents"))
    })
    .await;
    assert_eq!(
        waiting,
        "split over 2 agents, placed all at once: 1 agent(s) connected to this controller \
         serve environment staging with kind load"
    );
    assert_eq!(fleet.api.run(&id).await["status"], "queued");
    fleet.enrol("edge-9").await;
    let done = fleet.api.wait_ended(&id, LIMIT).await;
    assert_eq!(done["status"], "passed", "{done}");
    target.stop().await;
}

/// A share whose offer lapses (its agent never answers) goes to another agent, and the
/// share already running waits for it: both measure side by side, their first measured
/// seconds stored together, though one was accepted 5 s (the offer's window) before.
async fn a_lapsed_share_is_waited_for(backend: Backend) {
    let mut fleet = fleet(backend, 1).await;
    let wedged_id = fleet.install.agent_identity("default", "wedged");
    let mut wedged = iohr_tests::raw_agent::RawAgent::connect_serving(
        &fleet.controller.link_url(),
        &wedged_id,
        "wedged",
        &["staging"],
        &["load"],
    )
    .await
    .expect("connect");
    let target = Target::start().await;
    let created = fleet.api.create_run(&load(&target, "2s", 2)).await;
    let id = created["id"].as_str().expect("id").to_string();
    let iohr_proto::link::controller_message::Body::Offer(offer) = wedged.next(LIMIT).await else {
        panic!("an offer of one share")
    };
    // A healthy agent joins; the wedged one never answers, and its share goes there.
    fleet.enrol("edge-9").await;
    let done = fleet.api.wait_ended(&id, LIMIT).await;
    assert_eq!(done["status"], "passed", "{done}");
    let (_, run) = fleet.api.get(&format!("/v1/reliability/runs/{id}")).await;
    let shares = run["shares"].as_array().expect("shares").clone();
    let lapsed = shares
        .iter()
        .find(|s| s["run"] == offer.run_id.as_str())
        .expect("the wedged agent's share");
    assert_eq!(lapsed["agent"], "edge-9", "{run}");
    // When each share's first measured second was stored, in ms.
    let mut firsts = Vec::new();
    for share in &shares {
        let share_id = share["run"].as_str().expect("share id");
        let events = fleet.api.events(share_id, None).await.collect(LIMIT).await;
        let first = events
            .iter()
            .find(|e| e.event == "load" && e.data["data"]["phase"] == "measure")
            .expect("a measured second");
        let at = humantime::parse_rfc3339(first.data["at"].as_str().expect("at")).expect("at");
        let ms = at
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis();
        firsts.push(ms as i64);
    }
    let apart = (firsts[0] - firsts[1]).abs();
    assert!(
        apart < 1_000,
        "the shares' first seconds {apart} ms apart: one started without the other"
    );
    target.stop().await;
}

on_both_stores!(
    a_lapsed_share_is_waited_for,
    a_split_run_says_it_waits_for_its_agents,
    three_agents_measure_one_run_whose_histogram_is_their_sum,
    a_cancelled_split_run_stops_every_share,
    a_lost_agent_ends_the_split_run_with_what_the_shares_measured,
    a_split_run_aborts_on_its_merged_seconds,
    a_lost_agent_leaves_the_rest_running_when_the_spec_allows_it,
    a_schedule_fires_split_runs,
    a_run_that_cannot_split_is_refused_and_nothing_is_stored
);
