//! Account secrets for cloud runs (issue 38), through real processes: a person with
//! `reliability:admin` stores a secret (write-only: listed by name, never shown), a cloud
//! checks run names it as `${secret:NAME}` in a header, and the platform agent sends the
//! value to a loopback listener; the value is in no record, frame, event, audit line or
//! log, nor anywhere in the SQLite file's bytes. Another account cannot name it, and a run
//! whose secret was deleted after it was queued ends with the secret named.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::recorder::Recorder;
use iohr_tests::setup::iohr_with_env;
use iohr_tests::{Agent, Api, Backend, Controller, Installation};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);
const VALUE: &str = "sk-live-7d1e9b2c-only-for-the-target";

fn cloud_checks(target: &str) -> Value {
    json!({"kind": "checks", "environment": "staging", "target": target, "executor": "cloud",
    "spec": {"checks": [{"path": "/probe", "headers": {
        "Authorization": "${secret:API_KEY}",
        "X-Also": "${secret:API_KEY}"
    }}]}})
}

async fn put_secret(api: &Api, name: &str, value: &str) -> (u16, Value) {
    let body = json!({ "value": value }).to_string();
    api.call(
        hyper::Method::PUT,
        &format!("/v1/reliability/secrets/{name}"),
        Some((body.into(), "application/json")),
    )
    .await
}

/// Every file under `dir`, as bytes: whether any holds `needle`.
fn files_holding(dir: &std::path::Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle)
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_run_sends_an_account_secret_that_is_nowhere_else() {
    let install = Installation::new(Backend::Sqlite).await;
    install.create_account("platform", 100, true);
    install.create_account("other", 10, false);
    let controller = Controller::start(&install, 200, None).await;
    let runner = Api::new(&controller.api_url(), &install.full_token());
    let admin_token = install.token(
        "default",
        &["reliability:read", "reliability:run", "reliability:admin"],
        Some("ada"),
    );
    let admin = Api::new(&controller.api_url(), &admin_token);

    // Writing needs reliability:admin; names and values are checked.
    let (status, body) = put_secret(&runner, "API_KEY", VALUE).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("insufficient_scope"))
    );
    let (status, body) = put_secret(&admin, "api-key", VALUE).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_name"))
    );
    let (status, body) = put_secret(&admin, "API_KEY", "").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_secret"))
    );
    let (status, body) = put_secret(&admin, "API_KEY", &"x".repeat(4097)).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_secret"))
    );

    // A run queued while the secret exists, whose secret is deleted before it is leased
    // (no platform agent yet): it ends, naming the secret.
    let (status, body) = put_secret(&admin, "API_KEY", "an-older-value").await;
    assert_eq!(status, 201, "{body}");
    let recorder = Recorder::start().await;
    let orphan = runner.create_run(&cloud_checks(&recorder.url())).await;
    let (status, _) = admin
        .call(
            hyper::Method::DELETE,
            "/v1/reliability/secrets/API_KEY",
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, body) = admin
        .call(
            hyper::Method::DELETE,
            "/v1/reliability/secrets/API_KEY",
            None,
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );

    let identity = install.agent_identity("platform", "cloud-1");
    let agent = Agent::start(
        &install,
        "cloud-1",
        &identity,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    let orphan = runner
        .wait_ended(orphan["id"].as_str().expect("id"), LIMIT)
        .await;
    assert_eq!(orphan["status"], "error", "{orphan}");
    let reason = orphan["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("account secret API_KEY does not exist"),
        "{orphan}"
    );
    assert!(recorder.heads().is_empty(), "{:?}", recorder.heads());

    // Stored again (replacing is a PUT as well), listed without its value.
    let (status, created) = put_secret(&admin, "API_KEY", "a-first-value").await;
    assert_eq!(status, 201, "{created}");
    let (status, replaced) = put_secret(&admin, "API_KEY", VALUE).await;
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(replaced["name"], "API_KEY");
    assert_eq!(replaced["updated_by"], "person:ada");
    let (status, listed) = runner.get("/v1/reliability/secrets").await;
    assert_eq!(status, 200);
    assert_eq!(listed["secrets"][0]["name"], "API_KEY", "{listed}");
    for answer in [&created, &replaced, &listed] {
        assert!(!answer.to_string().contains(VALUE), "{answer}");
        assert!(!answer.to_string().contains("first-value"), "{answer}");
    }

    // The CLI sets one from an environment variable (never its command line), lists the
    // names without a value, and deletes it.
    let set = iohr_with_env(
        &controller,
        &admin_token,
        &[
            "reliability",
            "secrets",
            "set",
            "CLI_KEY",
            "--from-env",
            "CLI_VALUE",
        ],
        &[("CLI_VALUE", "cli-only-value")],
    );
    assert_eq!(set.code, 0, "{set:?}");
    let list = iohr_with_env(
        &controller,
        &install.full_token(),
        &["reliability", "secrets", "list"],
        &[],
    );
    assert_eq!(list.code, 0, "{list:?}");
    assert!(
        list.stdout.contains("API_KEY") && list.stdout.contains("CLI_KEY"),
        "{list:?}"
    );
    assert!(
        !list.stdout.contains("cli-only-value") && !list.stdout.contains(VALUE),
        "{list:?}"
    );
    let refused = iohr_with_env(
        &controller,
        &install.full_token(),
        &["reliability", "secrets", "delete", "CLI_KEY"],
        &[],
    );
    assert_eq!(refused.code, 2, "an API token is not an admin: {refused:?}");
    let deleted = iohr_with_env(
        &controller,
        &admin_token,
        &["reliability", "secrets", "delete", "CLI_KEY"],
        &[],
    );
    assert_eq!(deleted.code, 0, "{deleted:?}");
    let (_, listed) = runner.get("/v1/reliability/secrets").await;
    assert_eq!(
        listed["secrets"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );

    // A cloud run names it: the platform agent sends it, and only to the target.
    let run = runner.create_run(&cloud_checks(&recorder.url())).await;
    let id = run["id"].as_str().expect("id").to_string();
    let record = runner.wait_ended(&id, LIMIT).await;
    assert_eq!(record["status"], "passed", "{record}");
    assert_eq!(record["agent"], "cloud-1");
    let heads = recorder.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    let head = heads[0].to_ascii_lowercase();
    assert!(
        head.contains(&format!("authorization: {VALUE}"))
            && head.contains(&format!("x-also: {VALUE}")),
        "{heads:?}"
    );

    // Nowhere else: the record, the run's frames, the account's event feed, the audit.
    assert!(!record.to_string().contains(VALUE), "{record}");
    let frames = runner.events(&id, None).await.collect(LIMIT).await;
    assert!(
        frames.iter().any(|f| f.event == "finished"),
        "the stream ran to its end: {frames:?}"
    );
    for frame in &frames {
        assert!(!frame.data.to_string().contains(VALUE), "{frame:?}");
    }
    let mut feed = runner.feed(None).await;
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|e: &iohr_tests::api::Event| e.data["data"]["run_id"] == id.as_str())
    {
        let event = feed.next(LIMIT).await.expect("the run's event");
        seen.push(event);
    }
    for event in &seen {
        assert!(!event.data.to_string().contains(VALUE), "{event:?}");
    }
    let audit_token = install.token("default", &["reliability:audit"], None);
    let (status, audit) = Api::new(&controller.api_url(), &audit_token)
        .get("/v1/reliability/audit")
        .await;
    assert_eq!(status, 200, "{audit}");
    let audit_text = audit.to_string();
    assert!(audit_text.contains("secret.create") && audit_text.contains("secret.update"));
    assert!(!audit_text.contains(VALUE), "{audit}");

    // Another account cannot name it: refused before anything is stored.
    let other = Api::new(
        &controller.api_url(),
        &install.token("other", &["reliability:read", "reliability:run"], None),
    );
    let (status, refused) = other
        .post("/v1/reliability/runs", &cloud_checks(&recorder.url()))
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "unknown_secret");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("API_KEY"),
        "{refused}"
    );
    let (_, scenarios) = other.get("/v1/reliability/scenarios").await;
    assert_eq!(
        scenarios["scenarios"],
        json!([]),
        "nothing stored: {scenarios}"
    );
    let (_, listed) = other.get("/v1/reliability/secrets").await;
    assert_eq!(listed["secrets"], json!([]), "{listed}");
    assert_eq!(recorder.heads().len(), 1);

    // Not in the store's bytes (the database and its WAL), nor in any log of the
    // controller or the agent.
    agent.kill().await;
    let needle = VALUE.as_bytes();
    let in_store = files_holding(&install.data_dir, needle);
    assert!(in_store.is_empty(), "in the data dir: {in_store:?}");
    let in_logs = files_holding(&install.logs_dir(), needle);
    assert!(in_logs.is_empty(), "in the logs: {in_logs:?}");
    assert!(
        !files_holding(&install.data_dir, b"API_KEY").is_empty(),
        "the search reads the store: the secret's name is there"
    );
    drop(controller);
}
