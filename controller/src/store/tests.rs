//! Every store test runs against both stores: a fresh SQLite file and a fresh database on
//! the PostgreSQL server of this machine (`IOHR_TEST_POSTGRES`, default
//! `postgres://postgres@127.0.0.1:5432/test`). A missing server fails the test loudly.

use iohr_domain::{Executor, RunKind, RunStatus, StartedBy};
use serde_json::json;

use super::*;
use crate::runs::relay::AppendOutcome;

pub(crate) async fn sqlite_store() -> Store {
    let dir = std::env::temp_dir().join(format!("iohr-store-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    Store::open(&sqlite_url(&dir)).await.expect("open sqlite")
}

pub(crate) async fn postgres_store() -> Store {
    let base = std::env::var("IOHR_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    install_default_drivers();
    let name = format!("iohr_t_{}", uuid::Uuid::new_v4().simple());
    let admin = AnyPoolOptions::new()
        .max_connections(1)
        .connect(&base)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {base} is required for store tests: {e}"));
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await
        .expect("create test database");
    admin.close().await;
    let (prefix, _) = base.rsplit_once('/').expect("database in URL");
    Store::open(&format!("{prefix}/{name}"))
        .await
        .expect("open postgres")
}

pub(crate) async fn both() -> Vec<Store> {
    vec![sqlite_store().await, postgres_store().await]
}

/// An account with `staging`, a checks scenario and one queued run of it (also the
/// API tests' fixture).
pub(crate) async fn seed(store: &Store) -> (Account, RunRow) {
    let account = store
        .create_account("acme", 2, false)
        .await
        .expect("account");
    store
        .add_environment(&account.id, "staging", false)
        .await
        .expect("env");
    let scenario = store
        .put_scenario(
            &account.id,
            "home",
            "checks",
            &json!({"checks": [{"path": "/"}]}),
        )
        .await
        .expect("scenario");
    let mut new = checks_run(&account.id, &scenario);
    new.started_by.change = Some("core#212".into());
    let run = crate::runs::start::insert_run(store, &new, "token:t1")
        .await
        .expect("run");
    (account, run)
}

/// A new checks run of `scenario` in `staging` against `http://127.0.0.1:9`, started by
/// token `t1`, reserving 1 unit (the store tests' usual run; callers change what they need).
pub(crate) fn checks_run(account_id: &str, scenario: &Scenario) -> NewRun {
    NewRun {
        account_id: account_id.to_string(),
        kind: RunKind::Checks,
        scenario_id: scenario.id.clone(),
        scenario_version: scenario.version.clone(),
        environment: "staging".into(),
        target: "http://127.0.0.1:9".into(),
        executor: Executor::Any,
        started_by: StartedBy {
            kind: "token".into(),
            id: "t1".into(),
            change: None,
            commit: None,
            base: None,
            forge: None,
        },
        units_reserved: 1,
        reason: None,
        confirmation: None,
        faults: None,
        agents: 1,
        abort_on: Vec::new(),
        baseline_run: None,
    }
}

/// A new run like `row`: its account, kind, scenario version, environment, target,
/// executor and starter, reserving 1 unit.
pub(crate) fn run_like(row: &RunRow) -> NewRun {
    NewRun {
        account_id: row.account_id.clone(),
        kind: row.kind,
        scenario_id: row.scenario_id.clone(),
        scenario_version: row.scenario_version.clone(),
        environment: row.environment.clone(),
        target: row.target.clone(),
        executor: row.executor.clone(),
        started_by: row.started_by.clone(),
        units_reserved: 1,
        reason: None,
        confirmation: None,
        faults: None,
        agents: 1,
        abort_on: Vec::new(),
        baseline_run: None,
    }
}

#[tokio::test]
async fn tokens_are_found_by_secret_only_while_live() {
    for store in both().await {
        let account = store
            .create_account("acme", 2, false)
            .await
            .expect("account");
        let (info, secret) = store
            .create_token(&account, &[Scope::Run, Scope::Read], Some("ada"))
            .await
            .expect("token");
        let found = store
            .token_by_secret(&secret)
            .await
            .expect("lookup")
            .expect("found");
        assert_eq!(found.id, info.id);
        assert!(found.has(Scope::Run) && found.has(Scope::Read));
        assert_eq!(found.person.as_deref(), Some("ada"));
        assert!(
            store
                .token_by_secret("iohr_wrong")
                .await
                .expect("lookup")
                .is_none()
        );
        store.revoke_token(&info.id).await.expect("revoke");
        assert!(
            store
                .token_by_secret(&secret)
                .await
                .expect("lookup")
                .is_none()
        );
        assert!(matches!(
            store.create_account("acme", 1, false).await,
            Err(StoreError::Conflict(_))
        ));
    }
}

#[tokio::test]
async fn a_lease_fences_frames_and_completion() {
    for store in both().await {
        let (_, run) = seed(&store).await;
        assert_eq!(run.status, RunStatus::Queued);
        let agent_account = store
            .account_by_name("acme")
            .await
            .expect("q")
            .expect("acme");
        let agent_id = store
            .register_agent_cert(&agent_account.id, "edge-1", "fp1")
            .await
            .expect("agent");
        let first = store
            .offer_lease(&run.id, &agent_id)
            .await
            .expect("offer")
            .expect("offered");
        assert!(
            store
                .offer_lease(&run.id, &agent_id)
                .await
                .expect("offer")
                .is_none(),
            "one offer at a time"
        );
        assert!(
            store
                .withdraw_offer(&run.id, &first)
                .await
                .expect("withdraw")
        );
        let lease = store
            .offer_lease(&run.id, &agent_id)
            .await
            .expect("offer")
            .expect("offered");
        assert_eq!(lease.epoch, first.epoch + 1);
        assert!(
            !store
                .accept_lease(&run.id, &first)
                .await
                .expect("stale accept")
        );
        assert!(store.accept_lease(&run.id, &lease).await.expect("accept"));

        let frame = |n: u64| (n, "check".to_string(), json!({"n": n}));
        assert_eq!(
            crate::runs::relay::append_frames(&store, &run.id, &first, &[frame(1)])
                .await
                .expect("append"),
            AppendOutcome::Stale
        );
        let AppendOutcome::Stored {
            contiguous_through,
            new,
            ..
        } = crate::runs::relay::append_frames(&store, &run.id, &lease, &[frame(1), frame(3)])
            .await
            .expect("append")
        else {
            panic!("current lease refused")
        };
        assert_eq!((contiguous_through, new.len()), (1, 2));
        let AppendOutcome::Stored {
            contiguous_through,
            new,
            ..
        } = crate::runs::relay::append_frames(
            &store,
            &run.id,
            &lease,
            &[frame(1), frame(2), frame(3)],
        )
        .await
        .expect("append")
        else {
            panic!("current lease refused")
        };
        assert_eq!(contiguous_through, 3, "the gap closed");
        assert_eq!(
            new.iter().map(|f| f.number).collect::<Vec<_>>(),
            [2],
            "duplicates dropped"
        );

        let ending = Ending {
            status: RunStatus::Passed,
            reason: None,
            result: Some(json!({"passed": true})),
            units_spent: Some(1),
        };
        assert!(matches!(
            crate::runs::ending::finish_run(&store, &run.id, Some(&lease), Some(4), &ending).await,
            Err(StoreError::Conflict(_))
        ));
        assert!(
            crate::runs::ending::finish_run(&store, &run.id, Some(&first), Some(3), &ending)
                .await
                .expect("stale")
                .is_none()
        );
        let finished =
            crate::runs::ending::finish_run(&store, &run.id, Some(&lease), Some(3), &ending)
                .await
                .expect("finish")
                .expect("frame");
        assert_eq!((finished.number, finished.kind.as_str()), (4, "finished"));
        assert!(
            crate::runs::ending::finish_run(&store, &run.id, None, None, &ending)
                .await
                .expect("again")
                .is_none(),
            "ends once"
        );
        let frames = store.frames_after(&run.id, 0, 100).await.expect("frames");
        assert_eq!(
            frames.iter().map(|f| f.number).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        // `?after=` and `Last-Event-ID` are any u64: past every frame, not wrapped to -1.
        let none = store
            .frames_after(&run.id, u64::MAX, 100)
            .await
            .expect("frames");
        assert!(none.is_empty(), "{:?}", none.len());
        let record = store
            .run(&run.id)
            .await
            .expect("q")
            .expect("run")
            .to_record();
        assert_eq!(record.status, RunStatus::Passed);
        assert_eq!(record.agent.as_deref(), Some("edge-1"));
        assert_eq!(record.started_by.change.as_deref(), Some("core#212"));
        assert!(record.started_at.is_some() && record.ended_at.is_some());
        assert_eq!(
            crate::runs::relay::append_frames(&store, &run.id, &lease, &[frame(5)])
                .await
                .expect("late"),
            AppendOutcome::Stale
        );
    }
}

#[tokio::test]
async fn runs_list_newest_first_with_filters_and_cursor() {
    for store in both().await {
        let (account, first) = seed(&store).await;
        let mut ids = vec![first.id.clone()];
        for _ in 0..4 {
            let run = store.run(&first.id).await.expect("q").expect("run");
            let again = crate::runs::start::insert_run(&store, &run_like(&run), "token:t1")
                .await
                .expect("run");
            ids.push(again.id);
        }
        ids.reverse();
        let filter = RunFilter {
            limit: 2,
            ..RunFilter::default()
        };
        let (page, next) = store.list_runs(&account.id, &filter).await.expect("page");
        assert_eq!(
            page.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
            ids[..2]
        );
        let (page2, _) = store
            .list_runs(
                &account.id,
                &RunFilter {
                    cursor: next,
                    ..filter.clone()
                },
            )
            .await
            .expect("page 2");
        assert_eq!(
            page2.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
            ids[2..4]
        );
        let running = RunFilter {
            status: Some(RunStatus::Running),
            limit: 10,
            ..RunFilter::default()
        };
        assert!(
            store
                .list_runs(&account.id, &running)
                .await
                .expect("filter")
                .0
                .is_empty()
        );
        let other = store
            .create_account("other", 1, false)
            .await
            .expect("other");
        assert!(
            store
                .run_of_account(&other.id, &first.id)
                .await
                .expect("q")
                .is_none()
        );
        assert!(
            store
                .list_runs(&other.id, &filter)
                .await
                .expect("q")
                .0
                .is_empty()
        );
    }
}

#[tokio::test]
async fn removed_agents_lose_every_certificate() {
    for store in both().await {
        let account = store
            .create_account("acme", 2, true)
            .await
            .expect("account");
        store
            .register_agent_cert(&account.id, "edge-1", "fpA")
            .await
            .expect("cert");
        store
            .register_agent_cert(&account.id, "edge-1", "fpB")
            .await
            .expect("second cert");
        let who = store
            .agent_by_fingerprint("fpB")
            .await
            .expect("q")
            .expect("known");
        assert_eq!((who.name.as_str(), who.is_platform), ("edge-1", true));
        store
            .remove_agent(&account.id, "edge-1")
            .await
            .expect("remove");
        assert!(
            store
                .agent_by_fingerprint("fpA")
                .await
                .expect("q")
                .is_none()
        );
        assert!(
            store
                .agent_by_fingerprint("fpB")
                .await
                .expect("q")
                .is_none()
        );
        store
            .record_hello(
                &who.agent_id,
                &Declaration {
                    kinds: vec!["checks".into()],
                    ..Declaration::default()
                },
            )
            .await
            .expect("hello");
        assert!(store.agents(&account.id).await.expect("list").is_empty());
        // Removed, or gone with its account: both are cut from the dispatcher.
        let live = store
            .register_agent_cert(&account.id, "edge-2", "fpC")
            .await
            .expect("cert");
        let asked = [who.agent_id.clone(), "gone".to_string(), live.clone()];
        assert_eq!(
            store.removed_among(&asked).await.expect("q"),
            [who.agent_id.clone(), "gone".to_string()]
        );
    }
}

#[tokio::test]
async fn audit_lines_stay_with_their_account() {
    for store in both().await {
        let (account, run) = seed(&store).await;
        let other = store
            .create_account("other", 1, false)
            .await
            .expect("other");
        let started = store.audit_lines(&account.id).await.expect("lines");
        assert_eq!(started.len(), 1, "a run's start is audited with the run");
        assert_eq!(
            (
                started[0].action.as_str(),
                started[0].actor.as_str(),
                started[0].run_id.as_deref()
            ),
            ("run.start", "token:t1", Some(run.id.as_str()))
        );
        assert_eq!(started[0].targets.as_deref(), Some(run.target.as_str()));
        let line = AuditLine {
            at: 0,
            actor: "person:ada".into(),
            action: "run.cancel".into(),
            run_id: Some(run.id.clone()),
            targets: Some(run.target.clone()),
            outcome: "cancelled".into(),
            ..Default::default()
        };
        store.audit(&account.id, &line).await.expect("audit");
        let lines = store.audit_lines(&account.id).await.expect("lines");
        assert_eq!(lines.len(), 2);
        assert!(lines[1].at > 0, "stamped when written");
        assert_eq!(lines[1].action, "run.cancel");
        assert!(
            store
                .audit_lines(&other.id)
                .await
                .expect("lines")
                .is_empty()
        );
    }
}

#[tokio::test]
async fn which_agents_serve_a_kind_and_environment() {
    for store in both().await {
        let account = store
            .create_account("acme", 2, false)
            .await
            .expect("account");
        let platform = store
            .create_account("platform", 2, true)
            .await
            .expect("platform");
        let edge = store
            .register_agent_cert(&account.id, "edge_1", "fp1")
            .await
            .expect("edge");
        let cloud = store
            .register_agent_cert(&platform.id, "cloud-1", "fp2")
            .await
            .expect("cloud");
        let declare = |envs: &[&str]| Declaration {
            kinds: vec!["checks".into()],
            environments: envs.iter().map(|e| e.to_string()).collect(),
            ..Declaration::default()
        };
        store
            .record_hello(&edge, &declare(&["staging", "100%_prod"]))
            .await
            .expect("hello");
        store
            .record_hello(&cloud, &declare(&[]))
            .await
            .expect("hello");
        let acme = AgentScope::Account(&account.id);
        assert!(
            store
                .agent_serves(acme, "checks", Some("staging"))
                .await
                .expect("q")
        );
        assert!(
            store
                .agent_serves(acme, "checks", Some("100%_prod"))
                .await
                .expect("q")
        );
        assert!(
            !store
                .agent_serves(acme, "checks", Some("100xxprod"))
                .await
                .expect("q"),
            "% and _ are literal"
        );
        assert!(
            !store
                .agent_serves(acme, "checks", Some("stag"))
                .await
                .expect("q"),
            "whole names only"
        );
        assert!(
            !store
                .agent_serves(acme, "load", Some("staging"))
                .await
                .expect("q")
        );
        assert!(
            store
                .agent_serves(AgentScope::Named(&account.id, "edge_1"), "checks", None)
                .await
                .expect("q")
        );
        assert!(
            !store
                .agent_serves(AgentScope::Named(&account.id, "edge-1"), "checks", None)
                .await
                .expect("q")
        );
        assert!(
            store
                .agent_serves(AgentScope::Platform, "checks", None)
                .await
                .expect("q")
        );
        assert!(store.agent_exists(&account.id, "edge_1").await.expect("q"));
        store
            .remove_agent(&account.id, "edge_1")
            .await
            .expect("remove");
        assert!(
            !store
                .agent_serves(acme, "checks", Some("staging"))
                .await
                .expect("q"),
            "removed agents serve nothing"
        );
    }
}

/// A run of `seed`'s scenario and target, taken by an agent: running under its lease.
pub(crate) async fn take_run(store: &Store, template: &RunRow) -> (RunRow, LeaseGuard) {
    let new = NewRun {
        executor: Executor::Any,
        ..run_like(template)
    };
    let run = crate::runs::start::insert_run(store, &new, "token:t1")
        .await
        .expect("run");
    let agent_id = store
        .register_agent_cert(&template.account_id, "edge-1", &format!("fp-{}", run.id))
        .await
        .expect("agent");
    let lease = store
        .offer_lease(&run.id, &agent_id)
        .await
        .expect("offer")
        .expect("offered");
    assert!(store.accept_lease(&run.id, &lease).await.expect("accept"));
    (run, lease)
}

/// Each of a split run's `shares` offered to and accepted by one agent of `account_id`
/// (registered with `fingerprint`): the shares' lease guards, in order.
pub(crate) async fn take_shares(
    store: &Store,
    account_id: &str,
    fingerprint: &str,
    shares: &[RunRow],
) -> Vec<LeaseGuard> {
    let agent = store
        .register_agent_cert(account_id, "edge-1", fingerprint)
        .await
        .expect("agent");
    let mut guards = Vec::new();
    for share in shares {
        let guard = store
            .offer_lease(&share.id, &agent)
            .await
            .expect("offer")
            .expect("offered");
        assert!(store.accept_lease(&share.id, &guard).await.expect("accept"));
        guards.push(guard);
    }
    guards
}

/// Asserts that none of `tables` holds a row of run `run_id` any more.
pub(crate) async fn assert_no_rows(store: &Store, run_id: &str, tables: &[&str]) {
    for table in tables {
        let left: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM {table} WHERE run_id = $1"
        )))
        .bind(run_id)
        .fetch_one(&store.pool)
        .await
        .expect("count");
        assert_eq!(left, 0, "{table} goes with the ending");
    }
}

/// Ends a taken run with `result`: the run as stored and the frames the ending wrote.
pub(crate) async fn end_run(
    store: &Store,
    (run, lease): (RunRow, LeaseGuard),
    status: RunStatus,
    result: serde_json::Value,
) -> (RunRow, Vec<StoredFrame>) {
    let ending = Ending {
        status,
        reason: None,
        result: Some(result),
        units_spent: Some(1),
    };
    let frames =
        crate::runs::ending::finish_run_with_findings(store, &run.id, Some(&lease), None, &ending)
            .await
            .expect("finish")
            .expect("ended");
    let run = store.run(&run.id).await.expect("q").expect("run");
    (run, frames)
}

pub(crate) async fn run_to_end(
    store: &Store,
    template: &RunRow,
    status: RunStatus,
    result: serde_json::Value,
) -> (RunRow, Vec<StoredFrame>) {
    let taken = take_run(store, template).await;
    end_run(store, taken, status, result).await
}

pub(crate) fn failing_checks() -> serde_json::Value {
    json!({"passed": false, "total": 1, "failed": 1,
        "checks": [{"name": "home", "method": "GET", "path": "/", "passed": false,
                    "status": 500, "latency_ms": 1.0, "failures": ["status 500, expected 200"]}],
        "invariants": [{"name": "no 5xx", "passed": false, "failures": ["home: status 500, 1.0 ms"]}]})
}
