//! Triggers on the real stack (a controller, an agent, the sample target): a signed
//! `pull_request` delivery (GitHub's own example payload, signed by
//! `@octokit/webhooks-methods`) starts the after-run with the change, commit, base and
//! the trigger as its starter, and its baseline is found; a redelivery, a forged
//! signature, an event not acted on and a fork's head ref that tries to leave the target
//! each get their documented answer with nothing started; a fresh baseline pairs the
//! runs; a GitLab merge request hook and a Standard Webhooks delivery each start one run;
//! the CLI lists triggers and compares and gates on `baseline`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use hyper::Method;
use hyper::body::Bytes;
use iohr_tests::forge::{github_example, github_sign};
use iohr_tests::process::AgentOptions;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Api, Backend, Target, on_both_stores};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);
const HEAD: &str = "0123456789abcdef0123456789abcdef01234567";
const BASE_SHA: &str = "89abcdef0123456789abcdef0123456789abcdef";

fn checks() -> Value {
    json!({"checks": [{"name": "home", "path": "/"}]})
}

async fn run_ids(api: &Api) -> Vec<String> {
    let (status, page) = api.get("/v1/reliability/runs?limit=100").await;
    assert_eq!(status, 200, "{page}");
    page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

async fn log(api: &Api, trigger: &str) -> Vec<Value> {
    let (status, body) = api
        .get(&format!("/v1/reliability/triggers/{trigger}/log"))
        .await;
    assert_eq!(status, 200, "{body}");
    body["deliveries"].as_array().unwrap().clone()
}

/// GitHub's `pull_request` example with the fields a test needs rewritten.
fn pull_request(action: &str, number: u64, head_ref: &str, base_ref: &str) -> Value {
    let mut payload = github_example("pull_request", Some(action));
    payload["action"] = json!(action);
    payload["number"] = json!(number);
    payload["repository"]["full_name"] = json!("octo/hello");
    payload["pull_request"]["number"] = json!(number);
    payload["pull_request"]["head"]["ref"] = json!(head_ref);
    payload["pull_request"]["head"]["sha"] = json!(HEAD);
    payload["pull_request"]["base"]["ref"] = json!(base_ref);
    payload["pull_request"]["base"]["sha"] = json!(BASE_SHA);
    payload
}

async fn deliver_github(
    api: &Api,
    trigger: &str,
    secret: &str,
    event: &str,
    delivery: &str,
    payload: &Value,
) -> (u16, Value) {
    let body = serde_json::to_vec(payload).unwrap();
    let signature = github_sign(secret, &body);
    let headers = [
        ("x-github-event", event),
        ("x-github-delivery", delivery),
        ("x-hub-signature-256", signature.as_str()),
        ("user-agent", "GitHub-Hookshot/test"),
    ];
    api.with_token(None)
        .post_raw(
            &format!("/v1/reliability/triggers/{trigger}/deliveries"),
            &body,
            &headers,
        )
        .await
}

async fn make_trigger(api: &Api, body: Value) -> (String, String, Value) {
    let (status, made) = api.post("/v1/reliability/triggers", &body).await;
    assert_eq!(status, 201, "{made}");
    let id = made["trigger"]["id"].as_str().unwrap().to_string();
    let secret = made["secret"].as_str().unwrap().to_string();
    assert!(
        made["url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/v1/reliability/triggers/{id}/deliveries")),
        "{made}"
    );
    (id, secret, made["trigger"].clone())
}

async fn a_pull_request_starts_its_after_run_and_finds_its_baseline(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;

    // Refused precisely, nothing stored.
    let bad = [
        (json!({"source": "bitbucket"}), "invalid_source"),
        (json!({"window": "5s"}), "invalid_window"),
        (
            json!({"target": "http://127.0.0.1:9/{path}"}),
            "invalid_target",
        ),
    ];
    for (change, code) in bad {
        let mut body = json!({"name": "pr", "source": "github", "kind": "checks",
            "environment": "staging", "target": target.url(), "spec": checks()});
        body.as_object_mut()
            .unwrap()
            .extend(change.as_object().unwrap().clone());
        let (status, answer) = api.post("/v1/reliability/triggers", &body).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some(code)),
            "{answer}"
        );
    }
    let (_, listed) = api.get("/v1/reliability/triggers").await;
    assert_eq!(listed["triggers"], json!([]), "nothing half-stored");

    let (trigger, secret, record) = make_trigger(
        api,
        json!({"name": "pr checks", "source": "github", "kind": "checks",
               "environment": "staging", "target": target.url(), "spec": checks()}),
    )
    .await;
    assert_eq!(record["baseline"]["window"], "7days", "{record}");
    let (_, shown) = api
        .get(&format!("/v1/reliability/triggers/{trigger}"))
        .await;
    assert!(
        !shown.to_string().contains(&secret),
        "the secret is shown once"
    );

    // The base branch's run: what a baseline is.
    let base_run = api
        .run_until(
            &json!({"kind": "checks", "environment": "staging", "target": target.url(),
                    "scenario": record["scenario"], "change": "octo/hello@main"}),
            &["passed"],
            LIMIT,
        )
        .await;
    let before = run_ids(api).await;

    // A signed pull_request delivery starts the after-run.
    let payload = pull_request("opened", 7, "feature-1", "main");
    let (status, answer) =
        deliver_github(api, &trigger, &secret, "pull_request", "d-1", &payload).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (202, Some("started")),
        "{answer}"
    );
    let run_id = answer["run"].as_str().unwrap().to_string();
    let run = api.wait_ended(&run_id, LIMIT).await;
    assert_eq!(run["status"], "passed", "{run}");
    assert_eq!(
        run["started_by"],
        json!({"type": "trigger", "id": trigger, "change": "octo/hello#7", "commit": HEAD,
               "base": "octo/hello@main", "forge": "github"}),
        "{run}"
    );
    assert_eq!(run["target"], json!(target.url().trim_end_matches('/')));

    // Its baseline is the base branch's passed run.
    let (status, baseline) = api
        .get(&format!("/v1/reliability/runs/{run_id}/baseline"))
        .await;
    assert_eq!(status, 200, "{baseline}");
    assert_eq!(baseline["run"]["id"], base_run["id"], "{baseline}");
    assert_eq!(baseline["ended"], true);
    assert_eq!(baseline["rule"]["rule"], "latest_passed");
    assert_eq!(baseline["rule"]["base"], "octo/hello@main");
    let (status, comparison) = api
        .get(&format!(
            "/v1/reliability/compare?before=baseline&after={run_id}"
        ))
        .await;
    assert_eq!(status, 200, "{comparison}");
    assert_eq!(comparison["before"], base_run["id"]);

    // The same delivery again starts nothing.
    let (status, again) =
        deliver_github(api, &trigger, &secret, "pull_request", "d-1", &payload).await;
    assert_eq!(
        (status, again["code"].as_str()),
        (202, Some("duplicate_delivery")),
        "{again}"
    );
    assert_eq!(again["run"], json!(run_id));
    let after_one = run_ids(api).await;
    assert_eq!(after_one.len(), before.len() + 1);

    // A forged signature: 401, nothing stored.
    let logged = log(api, &trigger).await;
    let body = serde_json::to_vec(&pull_request("synchronize", 7, "feature-1", "main")).unwrap();
    let forged = github_sign("not the secret", &body);
    for signature in [forged.as_str(), "", "sha256=00"] {
        let (status, answer) = api
            .with_token(None)
            .post_raw(
                &format!("/v1/reliability/triggers/{trigger}/deliveries"),
                &body,
                &[
                    ("x-github-event", "pull_request"),
                    ("x-github-delivery", "d-forged"),
                    ("x-hub-signature-256", signature),
                ],
            )
            .await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (401, Some("bad_signature")),
            "{answer}"
        );
    }
    assert_eq!(
        log(api, &trigger).await,
        logged,
        "the delivery log is unchanged"
    );
    assert_eq!(run_ids(api).await, after_one, "no run");

    // An event it does not act on: 202 ignored, the reason in the log.
    let issue = github_example("issues", None);
    let (status, answer) =
        deliver_github(api, &trigger, &secret, "issues", "d-issue", &issue).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (202, Some("ignored")),
        "{answer}"
    );
    let logged = log(api, &trigger).await;
    let entry = logged
        .iter()
        .find(|d| d["delivery_id"] == "d-issue")
        .unwrap();
    assert_eq!(entry["outcome"], "ignored");
    assert!(
        entry["reason"]
            .as_str()
            .unwrap()
            .contains("\"issues\" is not acted on"),
        "{entry}"
    );

    // A fork's head ref that tries to leave the target: ignored, nothing runs.
    for (n, head_ref) in ["x@evil.example", "../../etc", "a:b"].iter().enumerate() {
        let delivery = format!("d-fork-{n}");
        let payload = pull_request("synchronize", 8, head_ref, "main");
        let (status, answer) =
            deliver_github(api, &trigger, &secret, "pull_request", &delivery, &payload).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (202, Some("ignored")),
            "{answer}"
        );
        assert!(
            answer["reason"].as_str().unwrap().contains("branch"),
            "{answer}"
        );
    }
    assert_eq!(run_ids(api).await, after_one, "no run against any address");

    // A pull request to a branch no run measured: no baseline, and the rule says why.
    let payload = pull_request("reopened", 9, "feature-2", "develop");
    let (_, answer) = deliver_github(api, &trigger, &secret, "pull_request", "d-2", &payload).await;
    let lonely = answer["run"].as_str().unwrap().to_string();
    let (status, missing) = api
        .get(&format!("/v1/reliability/runs/{lonely}/baseline"))
        .await;
    assert_eq!(
        (status, missing["error"]["code"].as_str()),
        (404, Some("no_baseline")),
        "{missing}"
    );
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("octo/hello@develop"),
        "{missing}"
    );
    let (status, gone) = api.get("/v1/reliability/runs/nope/baseline").await;
    assert_eq!(
        (status, gone["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    api.wait_ended(&lonely, LIMIT).await;

    // The CLI: the trigger listed, compare and gate on the found baseline.
    let out = stack.iohr(None, &["reliability", "triggers", "list"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains(&trigger) && !out.stdout.contains(&secret),
        "{out:?}"
    );
    let out = stack.iohr(
        None,
        &["reliability", "compare", "--before", "baseline", &run_id],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let out = stack.iohr(
        None,
        &[
            "reliability",
            "gate",
            "--before",
            "baseline",
            "--after",
            &run_id,
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let out = stack.iohr(
        None,
        &[
            "reliability",
            "gate",
            "--before",
            "baseline",
            "--after",
            &lonely,
        ],
    );
    assert_eq!(out.code, 3, "no baseline: {out:?}");
    let out = stack.iohr(
        None,
        &[
            "reliability",
            "gate",
            "--before",
            "baseline",
            "--after",
            &lonely,
            "--allow-no-baseline",
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("no baseline"), "{out:?}");

    // Paused: answered as an unknown trigger, nothing started.
    let bytes = Bytes::from(json!({"enabled": false}).to_string());
    let (status, paused) = api
        .call(
            Method::PATCH,
            &format!("/v1/reliability/triggers/{trigger}"),
            Some((bytes, "application/json")),
        )
        .await;
    assert_eq!(
        (status, &paused["enabled"]),
        (200, &json!(false)),
        "{paused}"
    );
    let payload = pull_request("synchronize", 7, "feature-1", "main");
    let (status, answer) =
        deliver_github(api, &trigger, &secret, "pull_request", "d-3", &payload).await;
    let (unknown_status, unknown) = deliver_github(
        api,
        "no-such-trigger",
        &secret,
        "pull_request",
        "d-3",
        &payload,
    )
    .await;
    assert_eq!((status, unknown_status), (404, 404), "{answer} {unknown}");
    assert_eq!(answer["error"]["code"], unknown["error"]["code"]);

    let (status, _) = api
        .call(
            Method::DELETE,
            &format!("/v1/reliability/triggers/{trigger}"),
            None,
        )
        .await;
    assert_eq!(status, 204);
}

async fn fresh_baselines_gitlab_and_generic_deliveries(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;

    // A fresh baseline: a before-run on the base branch beside the after-run.
    let (trigger, secret, _) = make_trigger(
        api,
        json!({"name": "paired", "source": "github", "kind": "checks", "environment": "staging",
               "target": target.url(), "spec": checks(), "fresh_baseline": true, "window": "1d"}),
    )
    .await;
    let payload = pull_request("opened", 11, "feature-3", "main");
    let (status, answer) =
        deliver_github(api, &trigger, &secret, "pull_request", "f-1", &payload).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (202, Some("started")),
        "{answer}"
    );
    let after = answer["run"].as_str().unwrap().to_string();
    let before = answer["baseline_run"].as_str().unwrap().to_string();
    let before_run = api.wait_ended(&before, LIMIT).await;
    assert_eq!(
        before_run["started_by"],
        json!({"type": "trigger", "id": trigger, "change": "octo/hello@main", "commit": BASE_SHA,
               "forge": "github"}),
        "{before_run}"
    );
    api.wait_ended(&after, LIMIT).await;
    let (status, baseline) = api
        .get(&format!("/v1/reliability/runs/{after}/baseline"))
        .await;
    assert_eq!(status, 200, "{baseline}");
    assert_eq!(baseline["run"]["id"], json!(before));
    assert_eq!(baseline["rule"]["rule"], "fresh_baseline");

    // GitLab: a merge request hook with the secret token starts one run.
    let (gitlab, token, _) = make_trigger(
        api,
        json!({"name": "mr", "source": "gitlab", "kind": "checks", "environment": "staging",
               "target": target.url(), "spec": checks()}),
    )
    .await;
    let hook = json!({"object_kind": "merge_request", "event_type": "merge_request",
        "project": {"path_with_namespace": "group/hello"},
        "object_attributes": {"iid": 3, "action": "open", "source_branch": "feature-4",
            "target_branch": "main", "last_commit": {"id": HEAD}}});
    let body = serde_json::to_vec(&hook).unwrap();
    let path = format!("/v1/reliability/triggers/{gitlab}/deliveries");
    let anonymous = api.with_token(None);
    let headers = |token: &str| {
        vec![
            ("x-gitlab-event", "Merge Request Hook".to_string()),
            ("idempotency-key", "g-1".to_string()),
            ("x-gitlab-token", token.to_string()),
        ]
    };
    let send = |token: &str| {
        let headers = headers(token);
        let anonymous = anonymous.clone();
        let (path, body) = (path.clone(), body.clone());
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            anonymous.post_raw(&path, &body, &headers).await
        }
    };
    let (status, answer) = send("wrong").await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (401, Some("bad_signature"))
    );
    let (status, answer) = send(&token).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (202, Some("started")),
        "{answer}"
    );
    let run = api.wait_ended(answer["run"].as_str().unwrap(), LIMIT).await;
    assert_eq!(
        run["started_by"],
        json!({"type": "trigger", "id": gitlab, "change": "group/hello#3", "commit": HEAD,
               "base": "group/hello@main", "forge": "gitlab"}),
        "{run}"
    );

    // Generic: a Standard Webhooks delivery starts one run.
    let (generic, whsec, _) = make_trigger(
        api,
        json!({"name": "ci", "source": "generic", "kind": "checks", "environment": "staging",
               "target": target.url(), "spec": checks()}),
    )
    .await;
    let body = json!({"repository": "octo/hello", "branch": "main", "commit": HEAD}).to_string();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let signature = standardwebhooks::Webhook::new(&whsec)
        .unwrap()
        .sign("msg_1", now, body.as_bytes())
        .unwrap();
    let now = now.to_string();
    let path = format!("/v1/reliability/triggers/{generic}/deliveries");
    let (status, answer) = anonymous
        .post_raw(
            &path,
            body.as_bytes(),
            &[
                ("webhook-id", "msg_1"),
                ("webhook-timestamp", &now),
                ("webhook-signature", &signature),
            ],
        )
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (202, Some("started")),
        "{answer}"
    );
    let run = api.wait_ended(answer["run"].as_str().unwrap(), LIMIT).await;
    assert_eq!(run["started_by"]["change"], "octo/hello@main", "{run}");
    let (status, stale) = anonymous
        .post_raw(
            &path,
            body.as_bytes(),
            &[
                ("webhook-id", "msg_1"),
                ("webhook-timestamp", "1000"),
                ("webhook-signature", &signature),
            ],
        )
        .await;
    assert_eq!(
        (status, stale["error"]["code"].as_str()),
        (401, Some("bad_signature"))
    );
}

on_both_stores!(
    a_pull_request_starts_its_after_run_and_finds_its_baseline,
    fresh_baselines_gitlab_and_generic_deliveries
);
