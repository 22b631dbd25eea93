//! Pooled placement on the real PostgreSQL, with two replicas of one store: a split run's
//! shares leased at once to free agents on both, or to none.

use std::collections::BTreeMap;

use iohr_domain::{Executor, RunKind};
use serde_json::json;

use super::{PoolAsk, Pooled};
use crate::store::tests::{checks_run, postgres_store};
use crate::store::{Declaration, NewRun, Store};

fn serving(kinds: &[&str], max_concurrent_jobs: u32) -> Declaration {
    Declaration {
        version: "test".into(),
        kinds: kinds.iter().map(|k| k.to_string()).collect(),
        environments: vec!["staging".into()],
        labels: BTreeMap::new(),
        max_concurrent_jobs,
    }
}

/// An agent of the account linked to `replica`, declaring `declaration`.
async fn agent_on(replica: &Store, account: &str, name: &str, declaration: &Declaration) -> String {
    let agent = replica
        .register_agent_cert(account, name, &format!("fp-{name}"))
        .await
        .expect("agent");
    replica
        .record_hello(&agent, declaration)
        .await
        .expect("hello");
    agent
}

async fn lease_states(store: &Store, runs: &[String]) -> Vec<Option<String>> {
    let mut states = Vec::new();
    for id in runs {
        states.push(store.run(id).await.expect("run").expect("row").lease_state);
    }
    states
}

/// Two replicas of a fresh store, an account "acme" allowing `max_running` in staging,
/// a load scenario, and a split run of it over `agents` agents on `executor`: the
/// replicas (with their claims), the account, the scenario and the shares' ids.
struct Split {
    a: Store,
    b: Store,
    _claims: Vec<crate::store::Claim>,
    live: Vec<i64>,
    account: crate::store::Account,
    scenario: crate::store::Scenario,
    share_ids: Vec<String>,
}

async fn split_on_two_replicas(max_running: i64, agents: u32, executor: Executor) -> Split {
    let store = postgres_store().await;
    let (a, claim_a) = store.join_replicas().await.expect("replica a");
    let (b, claim_b) = store.join_replicas().await.expect("replica b");
    let live = vec![a.replica(), b.replica()];
    let account = a
        .create_account("acme", max_running, false)
        .await
        .expect("account");
    a.add_environment(&account.id, "staging", false)
        .await
        .expect("env");
    let scenario = a
        .put_scenario(&account.id, "flat", "load", &json!({"load": {}}))
        .await
        .expect("scenario");
    let new = NewRun {
        kind: RunKind::Load,
        agents,
        executor,
        ..checks_run(&account.id, &scenario)
    };
    let (_, shares) = crate::runs::start::store_run(&a, &new, "token:t1", None)
        .await
        .expect("run");
    Split {
        share_ids: shares.iter().map(|s| s.id.clone()).collect(),
        a,
        b,
        _claims: vec![claim_a, claim_b],
        live,
        account,
        scenario,
    }
}

#[tokio::test]
async fn a_split_runs_shares_are_leased_across_replicas_all_or_none() {
    let Split {
        a,
        b,
        _claims,
        live,
        account,
        scenario,
        share_ids,
    } = split_on_two_replicas(5, 3, Executor::Any).await;
    let load = serving(&["checks", "load"], 2);
    let here = agent_on(&a, &account.id, "edge-a", &load).await;
    let there = agent_on(&b, &account.id, "edge-b1", &load).await;
    // Serves checks only: not a candidate for a load share.
    agent_on(&b, &account.id, "edge-b-checks", &serving(&["checks"], 4)).await;
    let ask = PoolAsk {
        account_id: &account.id,
        executor: &Executor::Any,
        environment: "staging",
        kind: RunKind::Load,
    };

    let pooled = a
        .offer_pooled(ask, &share_ids, &[Some(here.clone())], &live)
        .await
        .expect("pool");
    assert_eq!(
        pooled,
        Pooled::TooFewAgents(2),
        "one here and one there serve it"
    );
    assert_eq!(
        lease_states(&a, &share_ids).await,
        vec![None, None, None],
        "nothing is leased when not every share can be"
    );

    // A second agent on b, busy with an exclusive run: not free for a load share.
    let busy = agent_on(&b, &account.id, "edge-b2", &load).await;
    let exclusive = NewRun {
        kind: RunKind::Load,
        ..checks_run(&account.id, &scenario)
    };
    let other = crate::runs::start::insert_run(&a, &exclusive, "token:t1")
        .await
        .expect("run");
    b.offer_lease(&other.id, &busy)
        .await
        .expect("offer")
        .expect("offered");
    let pooled = a
        .offer_pooled(ask, &share_ids, &[Some(here.clone())], &live)
        .await
        .expect("pool");
    assert_eq!(
        pooled,
        Pooled::TooFewAgents(2),
        "an agent running a load run is not free for another"
    );

    // An agent whose jobs are all held (checks runs, not exclusive) is not free either.
    let full = agent_on(
        &b,
        &account.id,
        "edge-b-full",
        &serving(&["checks", "load"], 1),
    )
    .await;
    let checks =
        crate::runs::start::insert_run(&a, &checks_run(&account.id, &scenario), "token:t1")
            .await
            .expect("run");
    b.offer_lease(&checks.id, &full)
        .await
        .expect("offer")
        .expect("offered");

    // An agent linked to a replica that is not live is not a candidate either.
    let gone = agent_on(&b, &account.id, "edge-gone", &load).await;
    sqlx::query("UPDATE agents SET connected_replica = 63 WHERE id = $1")
        .bind(&gone)
        .execute(&a.pool)
        .await
        .expect("move");

    let third = agent_on(&b, &account.id, "edge-b3", &load).await;
    let Pooled::Leased(leased) = a
        .offer_pooled(ask, &share_ids, &[Some(here.clone())], &live)
        .await
        .expect("pool")
    else {
        panic!("every share should be leased");
    };
    let placed: Vec<(&str, &str, i64)> = leased
        .iter()
        .map(|l| (l.run_id.as_str(), l.agent_id.as_str(), l.replica))
        .collect();
    assert_eq!(
        placed[0],
        (share_ids[0].as_str(), here.as_str(), a.replica())
    );
    let mut elsewhere: Vec<&str> = placed[1..].iter().map(|p| p.1).collect();
    elsewhere.sort();
    let mut expected = vec![there.as_str(), third.as_str()];
    expected.sort();
    assert_eq!(
        elsewhere, expected,
        "shares 1 and 2 go to b's two free load agents"
    );
    assert!(placed[1..].iter().all(|p| p.2 == b.replica()));
    assert_eq!(
        lease_states(&a, &share_ids).await,
        vec![Some("offered".to_string()); 3]
    );

    // b finds the two shares leased to its agents (it tracks the other runs' offers);
    // a tracks share 0 itself.
    let mut found = b
        .untracked_offers(|id| id == other.id || id == checks.id)
        .await
        .expect("untracked");
    found.sort();
    let mut want = share_ids[1..].to_vec();
    want.sort();
    assert_eq!(found, want);
    let share0 = share_ids[0].clone();
    assert!(
        a.untracked_offers(|id| id == share0)
            .await
            .expect("untracked")
            .is_empty()
    );

    // The waiting reason's count: load agents linked to live replicas, busy or full or
    // not (not the checks-only one, nor the one on a replica that is gone).
    assert_eq!(
        b.agents_serving_everywhere(ask, &live)
            .await
            .expect("count"),
        5
    );

    // The plan (5) is full with the three shares and the two other runs: nothing more.
    let pooled = b
        .offer_pooled(ask, &share_ids, &[None, None, None], &live)
        .await
        .expect("pool");
    assert_eq!(pooled, Pooled::AccountFull);
}

/// The cloud's agents serve every environment: a cloud split run is pooled onto them
/// whatever environments they declare, as the scheduler places cloud runs.
#[tokio::test]
async fn a_cloud_split_run_is_pooled_onto_platform_agents_of_any_environment() {
    let Split {
        a,
        b,
        _claims,
        live,
        account,
        share_ids,
        ..
    } = split_on_two_replicas(4, 2, Executor::Cloud).await;
    let cloud = a
        .create_account("cloud", 100, true)
        .await
        .expect("platform");
    let mut everywhere = serving(&["load"], 1);
    everywhere.environments = vec!["eu-west".into()];
    let p1 = agent_on(&b, &cloud.id, "cloud-1", &everywhere).await;
    let p2 = agent_on(&b, &cloud.id, "cloud-2", &everywhere).await;
    let ask = PoolAsk {
        account_id: &account.id,
        executor: &Executor::Cloud,
        environment: "staging",
        kind: RunKind::Load,
    };
    assert_eq!(
        a.agents_serving_everywhere(ask, &live)
            .await
            .expect("count"),
        2
    );
    let Pooled::Leased(leased) = a
        .offer_pooled(ask, &share_ids, &[None, None], &live)
        .await
        .expect("pool")
    else {
        panic!("both shares should be leased to the cloud's agents");
    };
    let mut agents: Vec<String> = leased.iter().map(|l| l.agent_id.clone()).collect();
    agents.sort();
    let mut expected = vec![p1, p2];
    expected.sort();
    assert_eq!(agents, expected);
}
