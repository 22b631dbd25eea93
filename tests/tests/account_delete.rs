//! `iohr-controller account delete` deletes all of an account: every table's rows of it
//! are counted before and after, on both stores, from the schema itself (a table the test
//! does not know how to attribute fails it), while another account keeps all of its
//! rows; the record of the deletion names who; the account's tokens and its agent are
//! refused; without `--yes` and without a terminal nothing is deleted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::collections::BTreeMap;
use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Backend, Installation, Target, on_both_stores};
use serde_json::json;
use sqlx::{AnyPool, AssertSqlSafe, Row};

const LIMIT: Duration = Duration::from_secs(60);

/// Tables without an `account_id` column, and how their rows belong to an account.
const CHILDREN: &[(&str, &str)] = &[
    (
        "frames",
        "run_id IN (SELECT id FROM runs WHERE account_id = $1)",
    ),
    (
        "run_findings",
        "run_id IN (SELECT id FROM runs WHERE account_id = $1)",
    ),
    (
        "split_measures",
        "run_id IN (SELECT id FROM runs WHERE account_id = $1)",
    ),
    (
        "split_seconds",
        "run_id IN (SELECT id FROM runs WHERE account_id = $1)",
    ),
    (
        "split_step_points",
        "run_id IN (SELECT id FROM runs WHERE account_id = $1)",
    ),
    (
        "split_steps",
        "run_id IN (SELECT id FROM runs WHERE account_id = $1)",
    ),
    (
        "agent_certs",
        "agent_id IN (SELECT id FROM agents WHERE account_id = $1)",
    ),
    (
        "schedule_fires",
        "schedule_id IN (SELECT id FROM schedules WHERE account_id = $1)",
    ),
    (
        "webhook_deliveries",
        "webhook_id IN (SELECT id FROM webhooks WHERE account_id = $1)",
    ),
    (
        "trigger_deliveries",
        "trigger_id IN (SELECT id FROM triggers WHERE account_id = $1)",
    ),
    ("accounts", "id = $1"),
];

/// Tables that hold no account's rows.
const NOT_AN_ACCOUNTS: &[&str] = &["_sqlx_migrations", "account_deletions"];

async fn pool(install: &Installation) -> AnyPool {
    sqlx::any::install_default_drivers();
    let url = match &install.database_url {
        Some(url) => url.clone(),
        None => format!("sqlite://{}", install.data_dir.join("iohr.db").display()),
    };
    AnyPool::connect(&url).await.expect("the store")
}

/// Every table of the store with the account's row count in it.
async fn rows_of(pool: &AnyPool, backend: Backend, account_id: &str) -> BTreeMap<String, i64> {
    let (tables, columns) = match backend {
        Backend::Sqlite => (
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
            "SELECT COUNT(*) FROM pragma_table_info($1) WHERE name = 'account_id'",
        ),
        Backend::Postgres => (
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public'",
            "SELECT COUNT(*) FROM information_schema.columns
             WHERE table_schema = 'public' AND table_name = $1 AND column_name = 'account_id'",
        ),
    };
    let names: Vec<String> = sqlx::query(tables)
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<String, _>(0))
        .collect();
    let mut counts = BTreeMap::new();
    for table in names {
        if NOT_AN_ACCOUNTS.contains(&table.as_str()) {
            continue;
        }
        let has_account: i64 = sqlx::query(columns)
            .bind(&table)
            .fetch_one(pool)
            .await
            .unwrap()
            .get(0);
        let condition = if has_account > 0 {
            "account_id = $1"
        } else {
            CHILDREN
                .iter()
                .find(|(t, _)| *t == table)
                .map(|(_, c)| *c)
                .unwrap_or_else(|| panic!("table {table}: how do its rows belong to an account?"))
        };
        let count: i64 = sqlx::query(AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM {table} WHERE {condition}"
        )))
        .bind(account_id)
        .fetch_one(pool)
        .await
        .unwrap()
        .get(0);
        counts.insert(table, count);
    }
    counts
}

async fn account_id(pool: &AnyPool, name: &str) -> String {
    sqlx::query("SELECT id FROM accounts WHERE name = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
        .get(0)
}

async fn deleting_an_account_deletes_all_of_it(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    stack.install.create_account("kept", 2, false);
    let api = &stack.api;
    let target = Target::start().await;

    // The doomed account ("default") gets a row in every table it can have.
    let (status, hook) = api
        .post(
            "/v1/reliability/webhooks",
            &json!({"url": "http://127.0.0.1:9/hook", "events": ["reliability.run.finished"]}),
        )
        .await;
    assert_eq!(status, 201, "{hook}");
    let checks = json!({"checks": [{"name": "broken", "path": "/status/500"}]});
    let run = api
        .create_run(&json!({"kind": "checks", "environment": "staging",
            "target": target.url(), "spec": checks}))
        .await;
    api.wait_status(run["id"].as_str().unwrap(), &["failed"], LIMIT)
        .await;
    let (status, schedule) = api
        .post(
            "/v1/reliability/schedules",
            &json!({"name": "nightly", "cron": "0 3 * * *", "kind": "checks",
                "environment": "staging", "target": target.url(), "spec": checks}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    // A trigger, and one delivery in its log (signed per Standard Webhooks, ignored).
    let (status, trigger) = api
        .post(
            "/v1/reliability/triggers",
            &json!({"name": "pr", "source": "generic", "kind": "checks",
                "environment": "staging", "target": target.url(), "spec": checks}),
        )
        .await;
    assert_eq!(status, 201, "{trigger}");
    let body = r#"{"repository": "octo/hello"}"#;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let signature = standardwebhooks::Webhook::new(trigger["secret"].as_str().unwrap())
        .unwrap()
        .sign("msg_1", now, body.as_bytes())
        .unwrap();
    let (status, answer) = api
        .with_token(None)
        .post_raw(
            &format!(
                "/v1/reliability/triggers/{}/deliveries",
                trigger["trigger"]["id"].as_str().unwrap()
            ),
            body.as_bytes(),
            &[
                ("webhook-id", "msg_1"),
                ("webhook-timestamp", &now.to_string()),
                ("webhook-signature", &signature),
            ],
        )
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (202, Some("ignored")),
        "{answer}"
    );
    let kept = api.with_token(Some(&stack.install.token(
        "kept",
        &["reliability:run", "reliability:read"],
        None,
    )));
    let (status, _) = kept
        .post(
            "/v1/reliability/scenarios",
            &json!({"name": "theirs", "kind": "checks", "spec": checks}),
        )
        .await;
    assert_eq!(status, 201);

    let pool = pool(&stack.install).await;
    let doomed = account_id(&pool, "default").await;
    let kept_id = account_id(&pool, "kept").await;
    // Deliveries are made as the run ends; wait until its one is logged.
    iohr_tests::wait_for("the webhook's delivery row", LIMIT, || async {
        (rows_of(&pool, backend, &doomed).await["webhook_deliveries"] > 0).then_some(())
    })
    .await;
    stack.install.enrollment_token("default", "edge-2", "1h");
    let before = rows_of(&pool, backend, &doomed).await;
    for table in [
        "accounts",
        "environments",
        "tokens",
        "agents",
        "agent_certs",
        "scenarios",
        "scenario_names",
        "runs",
        "frames",
        "findings",
        "run_findings",
        "audit",
        "schedules",
        "events",
        "event_counters",
        "webhooks",
        "webhook_deliveries",
        "triggers",
        "trigger_deliveries",
        "enrollment_tokens",
    ] {
        assert!(
            before[table] > 0,
            "{table} has rows of the account: {before:?}"
        );
    }
    let kept_before = rows_of(&pool, backend, &kept_id).await;

    // Without --yes and without a terminal: refused, nothing deleted.
    let mut command = std::process::Command::new(iohr_tests::process::bin("iohr-controller"));
    command.args(["account", "delete", "default"]);
    stack.install.add_store_args(&mut command);
    let refused = command.stdin(std::process::Stdio::null()).output().unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--yes"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(rows_of(&pool, backend, &doomed).await, before);

    let out = stack
        .install
        .ctl2("account", &["delete", "default", "--yes", "--by", "ada"]);
    assert!(out.contains("deleted account default"), "{out}");
    let after = rows_of(&pool, backend, &doomed).await;
    assert!(
        after.values().all(|n| *n == 0),
        "nothing of the account remains: {after:?}"
    );
    assert_eq!(
        rows_of(&pool, backend, &kept_id).await,
        kept_before,
        "the other account keeps all of its rows"
    );
    let record: (String, String) =
        sqlx::query_as("SELECT name, deleted_by FROM account_deletions WHERE account_id = $1")
            .bind(&doomed)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(record, ("default".to_string(), "ada".to_string()));
    let (status, body) = api.get("/v1/reliability/runs").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("unauthorized")),
        "its tokens are refused: {body}"
    );
    let (status, _) = kept.get("/v1/reliability/scenarios/theirs").await;
    assert_eq!(status, 200, "the other account still reads its own");
    // Its agent's certificate went with it: the live link is closed and every new one
    // refused, as when an agent is removed.
    stack.agent.refused("belongs to no agent", LIMIT).await;
}

on_both_stores!(deleting_an_account_deletes_all_of_it);
