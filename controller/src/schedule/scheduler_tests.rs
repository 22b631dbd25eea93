//! The scheduler on a test clock, against both stores and a real dispatcher (no agents:
//! a fired run stays queued until the test ends it).

use std::sync::Arc;
use std::time::Duration;

use iohr_domain::RunStatus;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Scheduler, TestClock};
use crate::Shared;
use crate::compare_pool::ComparePool;
use crate::hub::FrameHub;
use crate::queue::Dispatcher;
use crate::resources::schedules::cron::format_utc;
use crate::store::tests::{postgres_store, sqlite_store};
use crate::store::{Account, Fire, NewSchedule, ScheduleChange, Store, StoreError};
use crate::timing::Timing;

/// Sunday 2030-03-31 00:00 UTC: Europe's clocks go forward at 01:00 UTC that day. Far
/// ahead of the real clock, so the dispatcher (which lapses confirmations on real time)
/// never lapses a confirmation these tests made.
const SPRING_SUNDAY: i64 = 1_901_145_600_000;
/// Sunday 2030-10-27 00:00 UTC: Europe's clocks go back at 01:00 UTC.
const AUTUMN_SUNDAY: i64 = 1_919_289_600_000;
const MINUTE: i64 = 60_000;

struct Setup {
    shared: Shared,
    account: Account,
    clock: TestClock,
}

impl Setup {
    async fn on(store: Store) -> Setup {
        let account = store.create_account("acme", 2, false).await.unwrap();
        store
            .add_environment(&account.id, "staging", false)
            .await
            .unwrap();
        store
            .add_environment(&account.id, "production", true)
            .await
            .unwrap();
        let hub = FrameHub::default();
        let shutdown = CancellationToken::new();
        let timing = Timing::from_heartbeat(Duration::from_millis(200));
        let (dispatcher, _task) =
            Dispatcher::start(store.clone(), hub.clone(), timing, shutdown.clone())
                .await
                .unwrap();
        let shared = Shared {
            store,
            hub,
            compares: ComparePool::new(1, 0, 1),
            dispatcher,
            timing,
            shutdown,
            feed: Default::default(),
            egress: Default::default(),
            requests: crate::limits::Limits::default().requests(),
        };
        Setup {
            shared,
            account,
            clock: TestClock::at(SPRING_SUNDAY),
        }
    }

    /// A scheduler of this controller, or of a restarted one (same store, same clock).
    fn scheduler(&self) -> Scheduler {
        Scheduler::new(self.shared.clone(), Arc::new(self.clock.clone()))
    }

    async fn schedule(
        &self,
        kind: &str,
        environment: &str,
        spec: serde_json::Value,
        cron: &str,
    ) -> String {
        let scenario = self
            .shared
            .store
            .put_scenario(&self.account.id, "s", kind, &spec)
            .await
            .unwrap();
        let new = NewSchedule {
            account_id: self.account.id.clone(),
            name: "nightly".into(),
            kind: kind.into(),
            scenario_id: scenario.id,
            scenario_version: scenario.version,
            environment: environment.into(),
            target: "http://127.0.0.1:9".into(),
            executor: "any".into(),
            change: None,
            confirm_within: None,
            agents: None,
            cron: cron.into(),
            enabled: true,
            created_by: "person:ada".into(),
        };
        let row = self
            .shared
            .store
            .insert_schedule(&new, self.clock.now())
            .await
            .unwrap();
        row.id
    }

    async fn checks_schedule(&self, cron: &str) -> String {
        self.schedule(
            "checks",
            "staging",
            json!({"checks": [{"path": "/"}]}),
            cron,
        )
        .await
    }

    /// Ends a run through the dispatcher, as a cancel does, and waits until it is stored ended.
    async fn end(&self, run_id: &str) {
        self.shared.dispatcher.cancel(run_id, "test").await.unwrap();
        for _ in 0..500 {
            let run = self.shared.store.run(run_id).await.unwrap().unwrap();
            if run.status.is_finished() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("run {run_id} did not end");
    }

    async fn outcomes(&self, schedule: &str) -> Vec<(String, String)> {
        self.shared
            .store
            .fire_outcomes(schedule)
            .await
            .unwrap()
            .into_iter()
            .map(|(due, outcome, _)| (format_utc(due), outcome))
            .collect()
    }
}

impl TestClock {
    fn now(&self) -> i64 {
        super::Clock::now_ms(self)
    }
}

async fn both() -> Vec<Setup> {
    vec![
        Setup::on(sqlite_store().await).await,
        Setup::on(postgres_store().await).await,
    ]
}

#[tokio::test]
async fn a_fire_while_the_previous_run_is_unfinished_is_skipped_and_counted() {
    for s in both().await {
        let id = s.checks_schedule("*/5 * * * *").await;
        let scheduler = s.scheduler();
        assert_eq!(
            scheduler.tick().await.unwrap().started.len(),
            0,
            "nothing due yet"
        );
        s.clock.advance(5 * MINUTE);
        let report = scheduler.tick().await.unwrap();
        assert_eq!(report.started.len(), 1, "{report:?}");
        let first = report.started[0].clone();
        let run = s.shared.store.run(&first).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Queued);
        assert_eq!(
            (run.started_by.kind.as_str(), run.started_by.id.as_str()),
            ("schedule", id.as_str())
        );
        assert_eq!(run.units_reserved, 1, "charged like any run");
        assert_eq!(run.to_record().started_by.kind, "schedule");

        // Two fires fall due while it is queued: both skipped, counted, nothing stacked.
        for n in 1..=2 {
            s.clock.advance(5 * MINUTE);
            let report = scheduler.tick().await.unwrap();
            assert_eq!((report.started.len(), report.skipped), (0, 1), "{report:?}");
            let row = s
                .shared
                .store
                .schedule(&s.account.id, &id)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(row.skipped, n);
            assert_eq!(row.last_skipped_at, Some(s.clock.now()));
            assert_eq!(row.last_run_id.as_deref(), Some(first.as_str()));
        }
        s.end(&first).await;
        s.clock.advance(5 * MINUTE);
        let report = scheduler.tick().await.unwrap();
        assert_eq!(
            report.started.len(),
            1,
            "fires again once the run ended: {report:?}"
        );
        assert_eq!(
            s.outcomes(&id).await,
            vec![
                ("2030-03-31T00:05:00Z".to_string(), "started".to_string()),
                ("2030-03-31T00:10:00Z".to_string(), "skipped".to_string()),
                ("2030-03-31T00:15:00Z".to_string(), "skipped".to_string()),
                ("2030-03-31T00:20:00Z".to_string(), "started".to_string()),
            ]
        );
        let lines = s.shared.store.audit_lines(&s.account.id).await.unwrap();
        let fires: Vec<_> = lines
            .iter()
            .filter(|l| l.action == "schedule.fire")
            .map(|l| l.outcome.split(':').next().unwrap_or_default().to_string())
            .collect();
        assert_eq!(fires, ["started", "skipped", "skipped", "started"]);
        assert!(
            lines
                .iter()
                .all(|l| l.action != "schedule.fire"
                    || l.schedule_id.as_deref() == Some(id.as_str()))
        );
    }
}

#[tokio::test]
async fn fires_missed_while_the_controller_was_down_are_skipped() {
    for s in both().await {
        let id = s.checks_schedule("*/5 * * * *").await;
        // Down for an hour: twelve due times pass with no scheduler.
        s.clock.advance(60 * MINUTE + MINUTE);
        let restarted = s.scheduler();
        restarted.skip_missed().await.unwrap();
        let report = restarted.tick().await.unwrap();
        assert_eq!(report, Default::default(), "no burst after a restart");
        assert!(s.outcomes(&id).await.is_empty());
        // It fires at its next due time only.
        s.clock.advance(4 * MINUTE);
        assert_eq!(restarted.tick().await.unwrap().started.len(), 1);
        assert_eq!(
            s.outcomes(&id).await,
            vec![("2030-03-31T01:05:00Z".to_string(), "started".to_string())]
        );
    }
}

#[tokio::test]
async fn a_late_tick_fires_the_latest_due_time_only() {
    for s in both().await {
        let id = s.checks_schedule("*/5 * * * *").await;
        s.clock.advance(17 * MINUTE);
        let report = s.scheduler().tick().await.unwrap();
        assert_eq!(report.started.len(), 1, "{report:?}");
        assert_eq!(
            s.outcomes(&id).await,
            vec![("2030-03-31T00:15:00Z".to_string(), "started".to_string())]
        );
    }
}

/// Two schedulers that read the schedule before either fired (a slow tick, a restart in
/// the middle of a fire, two controllers) start its fire once.
#[tokio::test]
async fn a_fire_starts_exactly_once_across_schedulers_and_restarts() {
    for s in both().await {
        let id = s.checks_schedule("*/5 * * * *").await;
        s.clock.advance(5 * MINUTE);
        let (a, b) = (s.scheduler(), s.scheduler());
        let (ra, rb) = tokio::join!(a.tick(), b.tick());
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert_eq!(ra.started.len() + rb.started.len(), 1, "{ra:?} {rb:?}");
        // A stale reader (the row as it was before the fire) tries the same fire again.
        let stale = s
            .shared
            .store
            .schedule(&s.account.id, &id)
            .await
            .unwrap()
            .unwrap();
        let stale = crate::store::ScheduleRow {
            fired_through: SPRING_SUNDAY,
            last_run_id: None,
            ..stale
        };
        let fire = Fire {
            schedule_id: id.clone(),
            due_at: SPRING_SUNDAY + 5 * MINUTE,
            at: s.clock.now(),
        };
        let mut report = Default::default();
        s.scheduler()
            .fire(&stale, &fire, &mut report)
            .await
            .unwrap();
        assert_eq!(report.taken, 1, "{report:?}");
        // A controller restarted right after the fire committed fires nothing again.
        let restarted = s.scheduler();
        restarted.skip_missed().await.unwrap();
        assert_eq!(restarted.tick().await.unwrap(), Default::default());
        let runs = s
            .shared
            .store
            .list_runs(
                &s.account.id,
                &crate::store::RunFilter {
                    limit: 100,
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .0;
        assert_eq!(runs.len(), 1, "one run for one fire");
        assert_eq!(s.outcomes(&id).await.len(), 1);
        // The store refuses the same fire's run outright.
        let again = crate::store::tests::run_like(&runs[0]);
        match crate::runs::start::store_run(&s.shared.store, &again, "schedule:x", Some(&fire))
            .await
        {
            Err(StoreError::Conflict(_)) => {}
            other => panic!("a second run for one fire: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_production_faults_fire_waits_for_a_person_and_lapses_as_a_posted_one() {
    for s in both().await {
        let experiment = json!({
            "title": "latency",
            "description": "100 ms more",
            "method": [{"type": "action", "name": "slow", "provider":
                {"type": "iohr", "fault": "network", "toxic": {"type": "latency", "latency_ms": 100}}}],
        });
        let id = s
            .schedule("faults", "production", experiment, "0 * * * *")
            .await;
        let scheduler = s.scheduler();
        s.clock.advance(60 * MINUTE);
        let report = scheduler.tick().await.unwrap();
        assert_eq!(report.started.len(), 1, "{report:?}");
        let run = s
            .shared
            .store
            .run(&report.started[0])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(run.status, RunStatus::Queued);
        let confirmation = run.confirmation.clone().expect("waits for a confirmation");
        assert!(confirmation.is_pending());
        // The deadline is the fire's time plus the default hour, on the scheduler's clock.
        assert_eq!(confirmation.deadline, s.clock.now() + 60 * MINUTE);
        assert!(
            run.reason
                .as_deref()
                .unwrap_or_default()
                .contains("confirmation")
        );
        // Lapses exactly as a POSTed one: the dispatcher's query finds it at its deadline.
        let store = s.shared.store.clone();
        let lapsed = |at: i64| {
            let store = store.clone();
            async move {
                let runs = store.lapsed_confirmations(at).await.unwrap();
                runs.into_iter().map(|r| r.id).collect::<Vec<_>>()
            }
        };
        assert!(lapsed(confirmation.deadline - 1).await.is_empty());
        assert_eq!(lapsed(confirmation.deadline).await, vec![run.id.clone()]);
        // While it waits, the next fire is skipped.
        s.clock.advance(60 * MINUTE);
        assert_eq!(scheduler.tick().await.unwrap().skipped, 1);
        assert_eq!(s.outcomes(&id).await.len(), 2);
    }
}

/// UTC has no daylight saving: on both days Europe changes its clocks, a schedule at
/// 01:30, 02:30 and 03:30 fires three times, at exactly those UTC times.
#[tokio::test]
async fn fires_on_daylight_saving_days_are_plain_utc() {
    for s in both().await {
        for day in [SPRING_SUNDAY, AUTUMN_SUNDAY] {
            s.clock.set(day);
            let id = s.checks_schedule("30 1,2,3 * * *").await;
            let scheduler = s.scheduler();
            // Ticks every 10 minutes through the day; each started run ends before the next.
            for _ in 0..(24 * 6) {
                s.clock.advance(10 * MINUTE);
                for run in scheduler.tick().await.unwrap().started {
                    s.end(&run).await;
                }
            }
            let date = &format_utc(day)[..10];
            assert_eq!(
                s.outcomes(&id).await,
                ["01:30", "02:30", "03:30"]
                    .iter()
                    .map(|t| (format!("{date}T{t}:00Z"), "started".to_string()))
                    .collect::<Vec<_>>()
            );
            s.shared
                .store
                .delete_schedule(&s.account.id, &id, "person:ada", day)
                .await
                .unwrap();
        }
    }
}

#[tokio::test]
async fn a_paused_schedule_does_not_fire_and_resumes_from_now() {
    for s in both().await {
        let id = s.checks_schedule("*/5 * * * *").await;
        let store = &s.shared.store;
        let pause = ScheduleChange {
            enabled: Some(false),
            ..Default::default()
        };
        store
            .update_schedule(
                &s.account.id,
                &id,
                &pause,
                "person:ada",
                "schedule.pause",
                s.clock.now(),
            )
            .await
            .unwrap();
        s.clock.advance(30 * MINUTE);
        assert_eq!(s.scheduler().tick().await.unwrap(), Default::default());
        let resume = ScheduleChange {
            enabled: Some(true),
            ..Default::default()
        };
        store
            .update_schedule(
                &s.account.id,
                &id,
                &resume,
                "person:ada",
                "schedule.resume",
                s.clock.now(),
            )
            .await
            .unwrap();
        assert_eq!(
            s.scheduler().tick().await.unwrap(),
            Default::default(),
            "what fell due while paused is not fired"
        );
        s.clock.advance(5 * MINUTE);
        assert_eq!(s.scheduler().tick().await.unwrap().started.len(), 1);
        let actions: Vec<_> = store
            .audit_lines(&s.account.id)
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.action)
            .collect();
        for action in [
            "schedule.create",
            "schedule.pause",
            "schedule.resume",
            "schedule.fire",
        ] {
            assert!(
                actions.iter().any(|a| a == action),
                "{action} in {actions:?}"
            );
        }
    }
}

#[tokio::test]
async fn an_account_has_at_most_a_bounded_number_of_schedules() {
    let s = Setup::on(sqlite_store().await).await;
    for _ in 0..crate::store::MAX_SCHEDULES {
        s.checks_schedule("0 * * * *").await;
    }
    let scenario = s
        .shared
        .store
        .schedules(&s.account.id)
        .await
        .unwrap()
        .remove(0);
    let new = NewSchedule {
        account_id: s.account.id.clone(),
        name: "one more".into(),
        kind: "checks".into(),
        scenario_id: scenario.scenario_id,
        scenario_version: scenario.scenario_version,
        environment: "staging".into(),
        target: "http://127.0.0.1:9".into(),
        executor: "any".into(),
        change: None,
        confirm_within: None,
        agents: None,
        cron: "0 * * * *".into(),
        enabled: true,
        created_by: "person:ada".into(),
    };
    assert!(matches!(
        s.shared.store.insert_schedule(&new, s.clock.now()).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        s.shared.store.schedules(&s.account.id).await.unwrap().len() as i64,
        crate::store::MAX_SCHEDULES
    );
}

#[tokio::test]
async fn another_accounts_schedule_is_not_found() {
    for s in both().await {
        let id = s.checks_schedule("0 * * * *").await;
        let store = &s.shared.store;
        let other = store.create_account("globex", 2, false).await.unwrap();
        assert!(store.schedule(&other.id, &id).await.unwrap().is_none());
        assert!(store.schedules(&other.id).await.unwrap().is_empty());
        let pause = ScheduleChange {
            enabled: Some(false),
            ..Default::default()
        };
        assert!(matches!(
            store
                .update_schedule(&other.id, &id, &pause, "person:eve", "schedule.pause", 0)
                .await,
            Err(StoreError::NotFound(_))
        ));
        assert!(matches!(
            store.delete_schedule(&other.id, &id, "person:eve", 0).await,
            Err(StoreError::NotFound(_))
        ));
        let row = store.schedule(&s.account.id, &id).await.unwrap().unwrap();
        assert!(row.enabled, "unchanged");
        assert!(
            store.audit_lines(&other.id).await.unwrap().is_empty(),
            "no line for a refused change"
        );
    }
}
