//! Findings with the real stack: a checks run whose check fails against the sample target
//! creates findings; later runs of the same scenario and target see them again (same ids,
//! counted), a closed one seen again reopens; both run records list them; filters,
//! scopes, other accounts and bad queries; compare names a finding new to the after run;
//! the CLI lists and closes them; a load run's operation over its error-rate threshold is
//! a finding too.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Api, Backend, Target, on_both_stores};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

async fn finished(api: &Api, body: &Value, status: &str) -> Value {
    let run = api.create_run(body).await;
    let id = run["id"].as_str().expect("id").to_string();
    let done = api
        .wait_status(&id, &["passed", "failed", "error"], LIMIT)
        .await;
    assert_eq!(done["status"], status, "{done}");
    done
}

/// `(id, seen)` of each finding a run record lists, by title.
fn listed(record: &Value) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = record["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["title"].as_str().expect("title").to_string(),
                f["id"].as_str().expect("id").to_string(),
                f["seen"].as_str().expect("seen").to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

async fn ids(api: &Api, query: &str) -> Vec<String> {
    let (status, page) = api.get(&format!("/v1/reliability/findings{query}")).await;
    assert_eq!(status, 200, "{query}: {page}");
    page["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["id"].as_str().expect("id").to_string())
        .collect()
}

/// `iohr ARGS`: exit status and stdout.
fn cli(stack: &OneAgent, args: &[&str]) -> (i32, String) {
    let out = stack.iohr(None, args);
    (out.code, out.stdout)
}

async fn findings_are_seen_again_closed_and_reopened(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;
    let checks = json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "scenario_name": "smoke",
        "spec": {"checks": [{"name": "home", "path": "/"}, {"name": "broken", "path": "/status/500"}],
                 "invariants": [{"rule": "no_5xx"}]}});

    let first = finished(api, &checks, "failed").await;
    let created = listed(&first);
    assert_eq!(
        created
            .iter()
            .map(|(title, _, seen)| (title.as_str(), seen.as_str()))
            .collect::<Vec<_>>(),
        [
            ("check broken failed", "new"),
            ("invariant no 5xx broken", "new")
        ],
        "{first}"
    );
    let first_id = first["id"].as_str().expect("id");
    let events = api.events(first_id, None).await.collect(LIMIT).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        kinds[kinds.len() - 3..],
        ["finding", "finding", "finished"],
        "a finding frame per finding, before finished: {kinds:?}"
    );

    // The same scenario against the same target: the same findings, seen again.
    let second = finished(api, &checks, "failed").await;
    let again = listed(&second);
    for ((title, id, seen), (title1, id1, _)) in again.iter().zip(&created) {
        assert_eq!((title, id, seen.as_str()), (title1, id1, "seen_again"));
    }
    let second_id = second["id"].as_str().expect("id");
    let check_id = created[0].1.clone();
    let (status, finding) = api
        .get(&format!("/v1/reliability/findings/{check_id}"))
        .await;
    assert_eq!(status, 200, "{finding}");
    assert_eq!(
        (
            &finding["status"],
            &finding["times_seen"],
            &finding["kind"],
            &finding["first_run"],
            &finding["last_run"],
            &finding["scenario"]
        ),
        (
            &json!("open"),
            &json!(2),
            &json!("check_failed"),
            &json!(first_id),
            &json!(second_id),
            &json!("smoke")
        ),
        "{finding}"
    );
    assert_eq!(
        finding["runs"],
        json!([{"run": second_id, "seen": "seen_again"}, {"run": first_id, "seen": "new"}])
    );
    assert_eq!(finding["detail"], "status 500, expected 200");

    // Filters.
    assert_eq!(ids(api, "?status=open").await.len(), 2);
    assert_eq!(
        ids(api, "?scenario=smoke&environment=staging").await.len(),
        2
    );
    assert!(ids(api, "?scenario=other").await.is_empty());
    assert!(ids(api, "?environment=production").await.is_empty());
    assert!(ids(api, "?status=closed").await.is_empty());
    for bad in ["?status=resolved", "?limit=0", "?colour=red", "?scenario="] {
        let (status, body) = api.get(&format!("/v1/reliability/findings{bad}")).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_query")),
            "{bad}: {body}"
        );
        assert!(body["error"]["message"].is_string());
    }

    // Scopes: reading needs read, closing needs run.
    let install = &stack.install;
    let read_only = api.with_token(Some(&install.token("default", &["reliability:read"], None)));
    let run_only = api.with_token(Some(&install.token("default", &["reliability:run"], None)));
    let close_path = format!("/v1/reliability/findings/{check_id}/close");
    let (status, body) = read_only.post(&close_path, &json!({})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("insufficient_scope"))
    );
    let (status, _) = run_only.get("/v1/reliability/findings").await;
    assert_eq!(status, 403);
    let (status, _) = api.with_token(None).get("/v1/reliability/findings").await;
    assert_eq!(status, 401);

    // Close, idempotently; unknown ids and other accounts' findings are 404.
    let (status, closed) = api.post(&close_path, &json!({})).await;
    assert_eq!(status, 200, "{closed}");
    assert_eq!(closed["status"], "closed");
    assert!(
        closed["closed_by"]
            .as_str()
            .is_some_and(|b| b.starts_with("token:"))
    );
    let (status, twice) = api.post(&close_path, &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(
        twice["closed_at"], closed["closed_at"],
        "the first close stands"
    );
    assert_eq!(ids(api, "?status=closed").await, vec![check_id.clone()]);
    for path in [
        "/v1/reliability/findings/no-such-finding".to_string(),
        "/v1/reliability/findings/no-such-finding/close".to_string(),
    ] {
        let (status, body) = if path.ends_with("close") {
            api.post(&path, &json!({})).await
        } else {
            api.get(&path).await
        };
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (404, Some("not_found"))
        );
    }
    install.create_account("other", 1, false);
    let other = api.with_token(Some(&install.token(
        "other",
        &["reliability:run", "reliability:read"],
        None,
    )));
    let (status, _) = other
        .get(&format!("/v1/reliability/findings/{check_id}"))
        .await;
    assert_eq!(status, 404);
    let (status, _) = other.post(&close_path, &json!({})).await;
    assert_eq!(status, 404);
    assert!(ids(&other, "").await.is_empty());

    // Seen again while closed: open again, and the run's record says so.
    let third = finished(api, &checks, "failed").await;
    let seen: Vec<(String, String)> = listed(&third)
        .into_iter()
        .map(|(title, _, seen)| (title, seen))
        .collect();
    assert_eq!(
        seen,
        [
            ("check broken failed".to_string(), "reopened".to_string()),
            (
                "invariant no 5xx broken".to_string(),
                "seen_again".to_string()
            )
        ]
    );
    let (_, finding) = api
        .get(&format!("/v1/reliability/findings/{check_id}"))
        .await;
    assert_eq!(
        (
            &finding["status"],
            &finding["times_seen"],
            &finding["closed_at"]
        ),
        (&json!("open"), &json!(3), &Value::Null)
    );
    // The earlier runs' records still say what they saw.
    let first_again = api.run(first_id).await;
    assert_eq!(listed(&first_again), created);

    // The command line lists and closes them.
    let (code, text) = cli(
        &stack,
        &[
            "reliability",
            "findings",
            "--scenario",
            "smoke",
            "--status",
            "open",
        ],
    );
    assert_eq!(code, 0, "{text}");
    assert!(text.starts_with("ID  "), "{text}");
    assert!(
        text.contains("check broken failed") && text.contains("invariant no 5xx broken"),
        "{text}"
    );
    let (code, text) = cli(
        &stack,
        &["--json", "reliability", "findings", "close", &check_id],
    );
    assert_eq!(code, 0, "{text}");
    let closed: Value = serde_json::from_str(&text).expect("one JSON value");
    assert_eq!(closed["status"], "closed");
    let (code, text) = cli(&stack, &["reliability", "runs", "show", first_id]);
    assert_eq!(code, 0);
    assert!(
        text.contains("findings     2 new\n") && text.contains("  new  check broken failed"),
        "{text}"
    );
    let (code, _) = cli(&stack, &["reliability", "findings", "close", "nope"]);
    assert_eq!(code, 2, "an API error exits 2");
}

async fn compare_names_a_finding_new_to_the_after_run(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;
    let addr = target.addr.to_string();
    let checks = json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "spec": {"checks": [{"name": "home", "path": "/"}]}});
    let good = finished(api, &checks, "passed").await;
    assert_eq!(good["findings"], json!([]));
    target.stop().await;
    let _broken = Target::start_at(&addr, &["--error-percent", "100"]).await;
    let bad = finished(api, &checks, "failed").await;
    let bad_again = finished(api, &checks, "failed").await;
    let compare = |before: &Value, after: &Value| {
        format!(
            "/v1/reliability/compare?before={}&after={}",
            before["id"].as_str().expect("id"),
            after["id"].as_str().expect("id")
        )
    };
    let (status, answer) = api.get(&compare(&good, &bad)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["verdict"], "regressed");
    let lines: Vec<&str> = answer["differences"]
        .as_array()
        .expect("differences")
        .iter()
        .filter_map(|d| d["line"].as_str())
        .collect();
    assert_eq!(
        lines,
        [
            "check home: passed -> failed (status 500, expected 200)",
            "new finding: check home failed (status 500, expected 200)"
        ]
    );
    // Seen by both runs: not new, and nothing else changed.
    let (status, answer) = api.get(&compare(&bad, &bad_again)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["verdict"], "unchanged", "{answer}");
    // Fixed: the after run lacks the finding, which is no difference of its own.
    let (_, answer) = api.get(&compare(&bad, &good)).await;
    assert_eq!(answer["verdict"], "improved", "{answer}");
}

async fn a_load_operation_over_its_error_rate_threshold_is_a_finding(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start_with(&["--error-percent", "10"]).await;
    let load = json!({"kind": "load", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "model": "open", "rate": 100, "duration": "1s",
                 "thresholds": ["error_rate < 5%"]}});
    let first = finished(api, &load, "failed").await;
    let found = first["findings"].as_array().expect("findings");
    assert_eq!(found.len(), 1, "{first}");
    assert_eq!(
        (&found[0]["kind"], &found[0]["subject"], &found[0]["seen"]),
        (&json!("operation_errors"), &json!("GET /"), &json!("new"))
    );
    assert_eq!(
        found[0]["detail"],
        "10 of 100 requests failed (10.00%: 5xx 10); limit error_rate < 5%"
    );
    let second = finished(api, &load, "failed").await;
    assert_eq!(second["findings"][0]["id"], found[0]["id"]);
    assert_eq!(second["findings"][0]["seen"], "seen_again");
}

on_both_stores!(
    findings_are_seen_again_closed_and_reopened,
    compare_names_a_finding_new_to_the_after_run,
    a_load_operation_over_its_error_rate_threshold_is_a_finding
);
