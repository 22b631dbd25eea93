//! The agent link's rules, exercised by an agent that speaks the protocol by hand: an
//! offer that is not accepted in time returns to the queue; answers, frames and
//! completions naming a stale lease are refused; the controller acknowledges the highest
//! contiguous frame, stores each frame once, and takes a completion only when every frame
//! before it is stored.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_proto::link::{
    Completion, Frame, FrameBatch, LeaseAnswer, agent_message, controller_message,
};
use iohr_tests::process::AgentOptions;
use iohr_tests::raw_agent::RawAgent;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target, on_both_stores};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(30);

fn frames(numbers: &[u64]) -> Vec<Frame> {
    numbers
        .iter()
        .map(|n| Frame {
            number: *n,
            kind: "phase".into(),
            payload_json: json!({"n": n}).to_string(),
        })
        .collect()
}

/// A controller, a hand-driven agent, and a run offered to it.
struct Offered {
    _install: Installation,
    _controller: Controller,
    api: Api,
    agent: RawAgent,
    id: String,
    offer: iohr_proto::link::LeaseOffer,
}

async fn offered(backend: Backend, name: &str) -> Offered {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 1000, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let identity = install.agent_identity("default", name);
    let mut agent = RawAgent::connect(&controller.link_url(), &identity, name, &["staging"])
        .await
        .expect("connect");
    let run = api
        .create_run(
            &json!({"kind": "checks", "environment": "staging", "target": "http://127.0.0.1:9",
            "spec": {"checks": [{"path": "/"}]}}),
        )
        .await;
    let id = run["id"].as_str().expect("id").to_string();
    let controller_message::Body::Offer(offer) = agent.next(LIMIT).await else {
        panic!("an offer")
    };
    Offered {
        _install: install,
        _controller: controller,
        api,
        agent,
        id,
        offer,
    }
}

async fn an_offer_not_accepted_in_time_goes_to_another_agent(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 1000, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let wedged_id = install.agent_identity("default", "wedged");
    let mut wedged = RawAgent::connect(&controller.link_url(), &wedged_id, "wedged", &["staging"])
        .await
        .expect("connect");
    assert_eq!(
        wedged.welcome.heartbeat_interval_ms, 1000,
        "the controller sets the interval"
    );
    let target = Target::start().await;
    let run = api
        .create_run(
            &json!({"kind": "checks", "environment": "staging", "target": target.url(),
            "spec": {"checks": [{"path": "/"}]}}),
        )
        .await;
    let id = run["id"].as_str().expect("id");
    let controller_message::Body::Offer(offer) = wedged.next(LIMIT).await else {
        panic!("an offer first")
    };
    assert_eq!(
        (offer.run_id.as_str(), offer.epoch, offer.accept_within_ms),
        (id, 1, 5000)
    );
    assert_eq!(offer.target, target.url());
    assert!(
        !offer.spec_json.contains(&target.url()),
        "a spec never contains its target"
    );

    // The wedged agent never answers; a healthy one joins and gets the run once the
    // offer lapses.
    let healthy_id = install.agent_identity("default", "healthy");
    let _healthy = Agent::start(
        &install,
        "healthy",
        &healthy_id,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    let done = api.wait_status(id, &["passed"], LIMIT).await;
    assert_eq!(done["agent"], "healthy");
    let controller_message::Body::Cancel(cancel) = wedged.next(LIMIT).await else {
        panic!("the offer withdrawn")
    };
    assert_eq!(
        (cancel.lease_id, cancel.reason.as_str()),
        (offer.lease_id.clone(), "offer not accepted in time")
    );

    // Its late acceptance is refused.
    wedged
        .send(agent_message::Body::LeaseAnswer(LeaseAnswer {
            lease_id: offer.lease_id.clone(),
            epoch: 1,
            accepted: true,
            reason: String::new(),
            retry_later: false,
        }))
        .await;
    let controller_message::Body::Cancel(late) = wedged.next(LIMIT).await else {
        panic!("the late answer refused")
    };
    assert_eq!(late.lease_id, offer.lease_id);
}

async fn stale_leases_are_refused_and_frames_are_stored_once_in_order(backend: Backend) {
    let Offered {
        _install,
        _controller,
        api,
        mut agent,
        id,
        offer,
    } = offered(backend, "raw").await;
    let (lease, epoch) = (offer.lease_id.clone(), offer.epoch);

    // An answer naming another epoch is not the answer to this offer.
    agent
        .send(agent_message::Body::LeaseAnswer(LeaseAnswer {
            lease_id: lease.clone(),
            epoch: epoch + 1,
            accepted: true,
            reason: String::new(),
            retry_later: false,
        }))
        .await;
    let controller_message::Body::Cancel(_) = agent.next(LIMIT).await else {
        panic!("a stale answer refused")
    };
    agent
        .send(agent_message::Body::LeaseAnswer(LeaseAnswer {
            lease_id: lease.clone(),
            epoch,
            accepted: true,
            reason: String::new(),
            retry_later: false,
        }))
        .await;
    api.wait_status(&id, &["running"], LIMIT).await;

    let batch = |epoch: u64, numbers: &[u64]| {
        agent_message::Body::Frames(FrameBatch {
            lease_id: lease.clone(),
            epoch,
            run_id: id.clone(),
            frames: frames(numbers),
        })
    };
    agent.send(batch(epoch + 1, &[1, 2])).await;
    let controller_message::Body::Cancel(stale) = agent.next(LIMIT).await else {
        panic!("stale frames refused")
    };
    assert_eq!(stale.reason, "stale lease");

    agent.send(batch(epoch, &[1, 2, 4])).await;
    let controller_message::Body::FrameAck(ack) = agent.next(LIMIT).await else {
        panic!("an ack")
    };
    assert_eq!(
        ack.contiguous_through, 2,
        "the highest contiguous frame, not the highest"
    );
    agent.send(batch(epoch, &[3, 2, 4])).await;
    let controller_message::Body::FrameAck(ack) = agent.next(LIMIT).await else {
        panic!("an ack")
    };
    assert_eq!(ack.contiguous_through, 4);

    let completion = |last_frame: u64| {
        agent_message::Body::Completion(Completion {
            lease_id: lease.clone(),
            epoch,
            run_id: id.clone(),
            status: "passed".into(),
            result_json: json!({"passed": true}).to_string(),
            last_frame,
            units_spent: 1,
            ..Completion::default()
        })
    };
    agent.send(completion(6)).await;
    let controller_message::Body::CompletionAck(early) = agent.next(LIMIT).await else {
        panic!("an answer")
    };
    assert!(
        !early.accepted && early.reason.contains("missing frames"),
        "{early:?}"
    );
    assert_eq!(api.run(&id).await["status"], "running");

    agent.send(batch(epoch, &[5, 6])).await;
    let controller_message::Body::FrameAck(ack) = agent.next(LIMIT).await else {
        panic!("an ack")
    };
    assert_eq!(ack.contiguous_through, 6);
    agent.send(completion(6)).await;
    let controller_message::Body::CompletionAck(done) = agent.next(LIMIT).await else {
        panic!("an answer")
    };
    assert!(done.accepted, "{done:?}");

    let record = api.run(&id).await;
    assert_eq!(
        (record["status"].as_str(), record["units"]["spent"].as_u64()),
        (Some("passed"), Some(1))
    );
    let events = api.events(&id, None).await.collect(LIMIT).await;
    let numbers: Vec<u64> = events.iter().filter_map(|e| e.id).collect();
    assert_eq!(
        numbers,
        [1, 2, 3, 4, 5, 6, 7],
        "each frame once, then finished"
    );
    assert_eq!(events[0].data["data"], json!({"n": 1}));
    assert_eq!(events[6].event, "finished");
}

async fn a_run_refused_for_good_says_so_in_its_record(backend: Backend) {
    let Offered {
        _install,
        _controller,
        api,
        agent,
        id,
        offer,
    } = offered(backend, "refuser").await;
    agent
        .send(agent_message::Body::LeaseAnswer(LeaseAnswer {
            lease_id: offer.lease_id,
            epoch: offer.epoch,
            accepted: false,
            reason: "cannot run this spec".into(),
            retry_later: false,
        }))
        .await;
    let record = iohr_tests::wait_for("the refusal in the record", LIMIT, || async {
        let record = api.run(&id).await;
        record["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("refused by agent"))
            .then_some(record)
    })
    .await;
    assert_eq!(record["status"], "queued");
    assert_eq!(
        record["reason"],
        "refused by agent refuser: cannot run this spec"
    );
}

on_both_stores!(
    an_offer_not_accepted_in_time_goes_to_another_agent,
    stale_leases_are_refused_and_frames_are_stored_once_in_order,
    a_run_refused_for_good_says_so_in_its_record,
);
