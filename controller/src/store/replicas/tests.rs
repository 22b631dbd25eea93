//! Replicas on the real PostgreSQL (see `store/tests.rs`): numbers and liveness, the
//! plan counted across replicas, leases taken over, cancels asked across.

use iohr_domain::RunKind;
use serde_json::json;

use super::super::tests::{checks_run, postgres_store, sqlite_store};
use super::super::{RunRow, Store, StoreError};
use super::ReplicaOffer;

/// Two replicas of one fresh store, an account allowing `max_running`, its agent and
/// `count` queued runs.
async fn two_replicas(
    max_running: i64,
    count: usize,
) -> (
    (Store, Store),
    String,
    Vec<RunRow>,
    Vec<super::super::Claim>,
) {
    let store = postgres_store().await;
    let (a, claim_a) = store.join_replicas().await.expect("replica a");
    let (b, claim_b) = store.join_replicas().await.expect("replica b");
    let account = a
        .create_account("acme", max_running, false)
        .await
        .expect("account");
    let scenario = a
        .put_scenario(
            &account.id,
            "home",
            "checks",
            &json!({"checks": [{"path": "/"}]}),
        )
        .await
        .expect("scenario");
    let agent = a
        .register_agent_cert(&account.id, "edge-1", "fp-1")
        .await
        .expect("agent");
    // Room for every run the tests offer it: the store counts an agent's leases.
    let declaration = crate::store::Declaration {
        version: "test".into(),
        kinds: vec!["checks".into()],
        environments: vec!["staging".into()],
        labels: Default::default(),
        max_concurrent_jobs: 8,
    };
    a.record_hello(&agent, &declaration).await.expect("hello");
    let mut runs = Vec::new();
    for _ in 0..count {
        let new = checks_run(&account.id, &scenario);
        runs.push(
            crate::runs::start::insert_run(&a, &new, "token:t1")
                .await
                .expect("run"),
        );
    }
    ((a, b), agent, runs, vec![claim_a, claim_b])
}

#[tokio::test]
async fn replicas_take_distinct_numbers_and_are_alive_while_they_hold_them() {
    let ((a, b), _, _, claims) = two_replicas(2, 0).await;
    assert_eq!((a.replica(), b.replica()), (1, 2));
    let mut live = a.live_replicas().await.expect("live");
    live.sort();
    assert_eq!(live, vec![1, 2]);
    let mut claims = claims;
    claims.pop().expect("b's claim").release().await;
    let polls = 50;
    let mut now = Vec::new();
    for _ in 0..polls {
        now = a.live_replicas().await.expect("live");
        if now == vec![1] {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        now,
        vec![1],
        "replica 2's number is free once its claim is dropped"
    );
}

#[tokio::test]
async fn sqlite_has_no_replicas() {
    let store = sqlite_store().await;
    match store.join_replicas().await {
        Err(StoreError::Conflict(message)) => assert!(message.contains("PostgreSQL"), "{message}"),
        other => panic!(
            "expected a refusal, got {:?}",
            other.map(|(s, _)| s.replica())
        ),
    }
}

#[tokio::test]
async fn the_plan_holds_across_replicas_and_a_run_is_leased_once() {
    let ((a, b), agent, runs, _claims) = two_replicas(2, 4).await;
    let account = runs[0].account_id.clone();
    // Both replicas try every run at once.
    let offers: Vec<(String, String, RunKind)> = runs
        .iter()
        .map(|r| (r.id.clone(), agent.clone(), RunKind::Checks))
        .collect();
    let (from_a, from_b) = tokio::join!(
        a.offer_leases_as_replica(&account, &offers),
        b.offer_leases_as_replica(&account, &offers),
    );
    let answers: Vec<ReplicaOffer> = from_a
        .expect("a")
        .into_iter()
        .chain(from_b.expect("b"))
        .collect();
    let offered = answers
        .iter()
        .filter(|o| matches!(o, ReplicaOffer::Offered(_)))
        .count();
    assert_eq!(
        offered, 2,
        "the plan's 2 leases, whoever placed them: {answers:?}"
    );
    assert!(
        answers.iter().all(|o| !matches!(o, ReplicaOffer::Gone)),
        "a replica never saw another's lease as its own to place: {answers:?}"
    );
    let mut leased = 0;
    for run in &runs {
        let row = a.run(&run.id).await.expect("read").expect("run");
        if row.lease_state.is_some() {
            leased += 1;
            assert!(
                [1, 2].contains(&row.replica),
                "tracked by the replica that offered it"
            );
        }
    }
    assert_eq!(
        leased, offered,
        "every lease is one the store answered Offered"
    );
    // Full now, wherever asked.
    let again = b
        .offer_leases_as_replica(&account, &offers)
        .await
        .expect("b");
    assert_eq!(again, vec![ReplicaOffer::AccountFull; 4]);
}

/// An agent's room is counted in the store: a replica whose own view of an agent is out
/// of date (another replica leased it a split run's share) is refused the offer.
#[tokio::test]
async fn an_offer_past_the_agents_room_as_stored_is_refused() {
    let ((a, b), agent, runs, _claims) = two_replicas(8, 3).await;
    let account = runs[0].account_id.clone();
    let one_job = crate::store::Declaration {
        version: "test".into(),
        kinds: vec!["checks".into(), "load".into()],
        environments: vec!["staging".into()],
        labels: Default::default(),
        max_concurrent_jobs: 2,
    };
    b.record_hello(&agent, &one_job).await.expect("hello");
    let first = a
        .offer_leases_as_replica(
            &account,
            &[(runs[0].id.clone(), agent.clone(), RunKind::Checks)],
        )
        .await
        .expect("offer");
    assert!(matches!(first[0], ReplicaOffer::Offered(_)), "{first:?}");
    let offers: Vec<(String, String, RunKind)> = runs[1..]
        .iter()
        .map(|r| (r.id.clone(), agent.clone(), RunKind::Checks))
        .collect();
    let rest = b
        .offer_leases_as_replica(&account, &offers)
        .await
        .expect("offer");
    assert!(matches!(rest[0], ReplicaOffer::Offered(_)), "{rest:?}");
    assert_eq!(rest[1], ReplicaOffer::AgentTaken, "its 2 jobs are held");
    assert_eq!(
        b.run(&runs[2].id)
            .await
            .expect("run")
            .expect("row")
            .lease_state,
        None,
        "nothing leased"
    );
}

#[tokio::test]
async fn leases_of_a_stopped_replica_are_taken_over_and_fence_the_old_tracker() {
    let ((a, b), agent, runs, mut claims) = two_replicas(4, 2).await;
    let account = runs[0].account_id.clone();
    let offers = vec![(runs[0].id.clone(), agent.clone(), RunKind::Checks)];
    let guard = match b
        .offer_leases_as_replica(&account, &offers)
        .await
        .expect("offer")
        .remove(0)
    {
        ReplicaOffer::Offered(guard) => guard,
        other => panic!("{other:?}"),
    };
    assert!(b.accept_lease(&runs[0].id, &guard).await.expect("accept"));
    // Replica 2 stops: replica 1 takes its lease over.
    claims.pop().expect("b's claim").release().await;
    let mut adopted = Vec::new();
    for _ in 0..50 {
        let live = a.live_replicas().await.expect("live");
        adopted = a.adopt_orphans(&live).await.expect("adopt");
        if !adopted.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        adopted.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        vec![runs[0].id.as_str()]
    );
    assert_eq!(adopted[0].replica, 1);
    // The old tracker can no longer end it; the new one can.
    let ending = super::super::Ending {
        status: iohr_domain::RunStatus::Error,
        reason: Some("agent lost".into()),
        result: None,
        units_spent: None,
    };
    assert_eq!(
        crate::runs::ending::finish_run(&b, &runs[0].id, Some(&guard), None, &ending)
            .await
            .expect("b"),
        None
    );
    // Its agent reconnects to replica 1... which already tracks it; a third store
    // (replica 2's number, reused) takes it over by the agent's report.
    let (c, _claim_c) = a.join_replicas().await.expect("replica c");
    assert_eq!(c.replica(), 2, "the lowest free number");
    let taken = c
        .adopt_lease(&runs[0].id, &guard, &agent)
        .await
        .expect("adopt");
    assert_eq!(taken.map(|r| r.replica), Some(2));
    let stale = super::super::LeaseGuard {
        lease_id: guard.lease_id.clone(),
        epoch: guard.epoch + 1,
    };
    assert_eq!(
        c.adopt_lease(&runs[0].id, &stale, &agent)
            .await
            .expect("stale")
            .map(|r| r.id),
        None
    );
    assert!(
        crate::runs::ending::finish_run(&a, &runs[0].id, Some(&guard), None, &ending)
            .await
            .expect("a")
            .is_none()
    );
    let finished = crate::runs::ending::finish_run(&c, &runs[0].id, Some(&guard), None, &ending)
        .await
        .expect("c");
    assert!(finished.is_some(), "the tracking replica ends it");
}

#[tokio::test]
async fn a_cancel_asked_elsewhere_reaches_the_tracking_replica_only() {
    let ((a, b), agent, runs, _claims) = two_replicas(4, 2).await;
    let account = runs[0].account_id.clone();
    let offers = vec![(runs[0].id.clone(), agent.clone(), RunKind::Checks)];
    assert!(matches!(
        b.offer_leases_as_replica(&account, &offers)
            .await
            .expect("offer")[0],
        ReplicaOffer::Offered(_)
    ));
    assert!(
        a.request_cancel(&runs[0].id, "cancelled by ada")
            .await
            .expect("ask")
    );
    assert!(
        !a.request_cancel(&runs[1].id, "not leased")
            .await
            .expect("ask"),
        "an unleased run is the asker's to end"
    );
    assert_eq!(
        b.cancels_asked().await.expect("b"),
        vec![(runs[0].id.clone(), "cancelled by ada".to_string())]
    );
    assert!(a.cancels_asked().await.expect("a").is_empty());
    let unleased: Vec<String> = a
        .unleased_runs(10)
        .await
        .expect("unleased")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(unleased, vec![runs[1].id.clone()]);
    let counts = a.leases_by_account().await.expect("counts");
    assert_eq!(counts.get(&account), Some(&1));
}

#[tokio::test]
async fn a_listener_hears_runs_queued_frames_stored_and_cancels_asked() {
    let ((a, b), agent, _, _claims) = two_replicas(4, 0).await;
    let mut listener = b.listener().await.expect("listener");
    let account = a.accounts().await.expect("accounts").remove(0);
    let scenario = a
        .put_scenario(
            &account.id,
            "home",
            "checks",
            &json!({"checks": [{"path": "/"}]}),
        )
        .await
        .expect("scenario");
    let run = crate::runs::start::insert_run(&a, &checks_run(&account.id, &scenario), "token:t1")
        .await
        .expect("run");
    let heard = tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
        .await
        .expect("a notice within 10 s")
        .expect("notice");
    assert_eq!(
        (heard.channel(), heard.payload()),
        (super::QUEUE_CHANNEL, run.id.as_str())
    );
    // A lease, a frame, a cancel asked and an ending: each heard as its notice.
    let offered = a
        .offer_leases_as_replica(
            &account.id,
            &[(run.id.clone(), agent.clone(), RunKind::Checks)],
        )
        .await
        .expect("offer");
    let ReplicaOffer::Offered(guard) = &offered[0] else {
        panic!("{offered:?}");
    };
    assert!(a.accept_lease(&run.id, guard).await.expect("accept"));
    crate::runs::relay::append_frames(&a, &run.id, guard, &[(1, "check".into(), json!({}))])
        .await
        .expect("frames");
    assert!(b.request_cancel(&run.id, "enough").await.expect("cancel"));
    let ending = super::super::Ending {
        status: iohr_domain::RunStatus::Cancelled,
        reason: None,
        result: None,
        units_spent: None,
    };
    crate::runs::ending::finish_run(&a, &run.id, Some(guard), None, &ending)
        .await
        .expect("finish")
        .expect("finished by its replica");
    let mut heard = Vec::new();
    while heard.len() < 4 {
        let notice = tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
            .await
            .expect("a notice within 10 s")
            .expect("notice");
        heard.push((notice.channel().to_string(), notice.payload().to_string()));
    }
    assert_eq!(
        heard,
        vec![
            (
                super::FRAMES_CHANNEL.to_string(),
                format!("1 1 1 {}", run.id)
            ),
            (super::CANCELS_CHANNEL.to_string(), run.id.clone()),
            (
                super::FRAMES_CHANNEL.to_string(),
                format!("1 2 2 {}", run.id)
            ),
            (
                super::ENDED_CHANNEL.to_string(),
                format!("1 {}", account.id)
            ),
        ]
    );
}
