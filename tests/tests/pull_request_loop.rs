//! Issue 33's loop, end to end on real processes: a controller, an agent and the sample
//! target; GitHub played by a stateful fake forge behind Prism's validating proxy with
//! GitHub's published description (`@octokit/openapi`), so a request GitHub would refuse
//! fails the test; deliveries are GitHub's own example payloads signed as
//! `@octokit/webhooks-methods` signs them.
//!
//! 1. A signed `push` to `main` starts the base branch's run: the baseline.
//! 2. A signed `pull_request` (opened) starts the after-run for `octo/hello#7` with the
//!    trigger as its starter; its baseline is found; the pull request gets one comment
//!    with the comparison and the head commit a `success` status `iohr/reliability`.
//! 3. The target is made slower; a `synchronize` delivery (a new head commit) starts the
//!    next after-run; the same comment is edited (never a second one) to say it
//!    regressed, and the new head commit's status is `failure`.
//!
//! The comment as posted and as edited is printed (`--nocapture`) for the session note.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::fake_forge::{FakeForge, Prism};
use iohr_tests::forge::{github_example, github_sign};
use iohr_tests::process::AgentOptions;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(90);
const BASE_SHA: &str = "89abcdef0123456789abcdef0123456789abcdef";
const HEAD_1: &str = "1111111111111111111111111111111111111111";
const HEAD_2: &str = "2222222222222222222222222222222222222222";
const PR: &str = "octo/hello#7";

async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn deliver(api: &Api, trigger: &str, secret: &str, event: &str, id: &str, payload: &Value) {
    let body = serde_json::to_vec(payload).unwrap();
    let signature = github_sign(secret, &body);
    let headers = [
        ("x-github-event", event),
        ("x-github-delivery", id),
        ("x-hub-signature-256", signature.as_str()),
        ("user-agent", "GitHub-Hookshot/test"),
    ];
    let (status, answer) = api
        .with_token(None)
        .post_raw(
            &format!("/v1/reliability/triggers/{trigger}/deliveries"),
            &body,
            &headers,
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["code"], "started", "{answer}");
}

fn pull_request(action: &str, head: &str) -> Value {
    let mut payload = github_example("pull_request", Some(action));
    payload["action"] = json!(action);
    payload["number"] = json!(7);
    payload["repository"]["full_name"] = json!("octo/hello");
    payload["pull_request"]["number"] = json!(7);
    payload["pull_request"]["head"]["ref"] = json!("faster-home");
    payload["pull_request"]["head"]["sha"] = json!(head);
    payload["pull_request"]["base"]["ref"] = json!("main");
    payload["pull_request"]["base"]["sha"] = json!(BASE_SHA);
    payload
}

/// The newest run of `change`, once it has ended.
async fn ended_run_of(api: &Api, change: &str) -> Value {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let (status, page) = api.get("/v1/reliability/runs?limit=50").await;
        assert_eq!(status, 200, "{page}");
        let newest = page["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["started_by"]["change"] == change)
            .cloned();
        if let Some(run) = newest {
            return api.wait_ended(run["id"].as_str().unwrap(), LIMIT).await;
        }
        assert!(tokio::time::Instant::now() < deadline, "no run of {change}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn last_state(forge: &FakeForge, sha: &str) -> Option<String> {
    forge
        .statuses(sha)
        .iter()
        .rfind(|s| s.body["context"] == "iohr/reliability")
        .and_then(|s| s.body["state"].as_str().map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_carries_its_comparison_edited_on_every_push() {
    let forge = FakeForge::start().await;
    let install = Installation::new(Backend::Sqlite).await;
    let prism = Prism::start(&forge.url(), &install.logs_dir().join("prism.log")).await;
    let controller = Controller::start_with(
        &install,
        200,
        None,
        &[
            "--forge-retry-schedule",
            "0s,300ms,300ms,300ms",
            "--public-url",
            "https://iohr.example",
        ],
    )
    .await;
    let api = Api::new(
        &controller.api_url(),
        &install.token(
            "default",
            &["reliability:read", "reliability:run", "reliability:admin"],
            Some("ada"),
        ),
    );
    let _agent = Agent::enrol(
        &install,
        &api,
        "edge-1",
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    let (status, body) = api
        .call(
            hyper::Method::PUT,
            "/v1/reliability/forges/github",
            Some((
                json!({"token": "ghp_loop-test", "api_url": prism.url()})
                    .to_string()
                    .into(),
                "application/json",
            )),
        )
        .await;
    assert_eq!(status, 201, "{body}");

    let target = Target::start().await;
    let addr = target.addr.to_string();
    let (status, made) = api
        .post(
            "/v1/reliability/triggers",
            &json!({"name": "hello-pr", "source": "github", "kind": "load",
                    "environment": "staging", "target": target.url(),
                    "spec": {"operations": [{"path": "/"}], "model": "open",
                             "rate": 50, "duration": "3s"}}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let trigger = made["trigger"]["id"].as_str().unwrap().to_string();
    let secret = made["secret"].as_str().unwrap().to_string();

    // 1. The base branch's run, from a push to main.
    let mut push = github_example("push", None);
    push["ref"] = json!("refs/heads/main");
    push["after"] = json!(BASE_SHA);
    push["deleted"] = json!(false);
    push["repository"]["full_name"] = json!("octo/hello");
    deliver(&api, &trigger, &secret, "push", "delivery-push-1", &push).await;
    let base = ended_run_of(&api, "octo/hello@main").await;
    assert_eq!(base["status"], "passed", "{base}");

    // 2. The pull request opened: its after-run, compared with the base run.
    deliver(
        &api,
        &trigger,
        &secret,
        "pull_request",
        "delivery-pr-1",
        &pull_request("opened", HEAD_1),
    )
    .await;
    let first = ended_run_of(&api, PR).await;
    assert_eq!(first["status"], "passed", "{first}");
    assert_eq!(first["started_by"]["type"], "trigger", "{first}");
    assert_eq!(first["started_by"]["id"], trigger.as_str(), "{first}");
    assert_eq!(first["started_by"]["commit"], HEAD_1, "{first}");
    assert_eq!(first["started_by"]["base"], "octo/hello@main", "{first}");
    let (status, found) = api
        .get(&format!(
            "/v1/reliability/runs/{}/baseline",
            first["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["run"]["id"], base["id"], "{found}");
    until("the first head commit's final status", || {
        last_state(&forge, HEAD_1).is_some_and(|s| s != "pending")
    })
    .await;
    assert_eq!(
        last_state(&forge, HEAD_1).as_deref(),
        Some("success"),
        "{:?}",
        forge.statuses(HEAD_1)
    );
    let first_id = first["id"].as_str().unwrap().to_string();
    until("the comment comparing the first run", || {
        forge
            .comments(PR)
            .iter()
            .any(|c| c.body.contains(&first_id) && c.body.contains("against its baseline"))
    })
    .await;
    let posted = forge.comments(PR);
    assert_eq!(posted.len(), 1, "one comment: {posted:?}");
    assert!(
        posted[0].body.contains("**unchanged**") || posted[0].body.contains("**improved**"),
        "{}",
        posted[0].body
    );
    let comment_id = posted[0].id;
    eprintln!("--- the comment as posted:\n{}\n---", posted[0].body);

    // 3. The target made slower; a new push to the pull request.
    target.stop().await;
    let _slow = Target::start_at(&addr, &["--service-ms", "25"]).await;
    deliver(
        &api,
        &trigger,
        &secret,
        "pull_request",
        "delivery-pr-2",
        &pull_request("synchronize", HEAD_2),
    )
    .await;
    let second = loop {
        let run = ended_run_of(&api, PR).await;
        if run["id"] != first["id"] {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(second["started_by"]["commit"], HEAD_2, "{second}");
    let second_id = second["id"].as_str().unwrap().to_string();
    until("the second head commit's final status", || {
        last_state(&forge, HEAD_2).is_some_and(|s| s != "pending")
    })
    .await;
    assert_eq!(
        last_state(&forge, HEAD_2).as_deref(),
        Some("failure"),
        "a slower target regressed: {:?}",
        forge.statuses(HEAD_2)
    );
    until("the comment edited for the second run", || {
        forge
            .comments(PR)
            .iter()
            .any(|c| c.body.contains(&second_id) && c.body.contains("against its baseline"))
    })
    .await;
    let edited = forge.comments(PR);
    assert_eq!(edited.len(), 1, "still one comment: {edited:?}");
    assert_eq!(edited[0].id, comment_id, "the same comment, edited");
    assert!(edited[0].body.contains("regressed"), "{}", edited[0].body);
    eprintln!("--- the comment as edited:\n{}\n---", edited[0].body);

    // Every request GitHub would have got passed its published description.
    let (status, log) = api.get("/v1/reliability/forges/reports?limit=500").await;
    assert_eq!(status, 200, "{log}");
    let lines = log["reports"].as_array().unwrap();
    assert!(!lines.is_empty(), "{log}");
    assert!(
        !lines.iter().any(|l| l["status_code"] == 422),
        "Prism refused a request: {log}"
    );
    controller.stop().await;
}
