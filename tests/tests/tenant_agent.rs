//! What a tenant's run may reach on an agent (issue 38), through real processes: a run
//! reads only the environment variables the agent's operator grants (`--secret-env`), a
//! platform agent none at all; an agent with the deny-list on (`--deny-private`, and every
//! platform agent) refuses loopback, link-local, metadata, private, unique-local and
//! unspecified targets and names resolving to them before connecting, and an
//! `--allow-target` lets one through; the controller refuses a cloud run whose target is a
//! literal denied address when it is created. A disk fill through a symbolic link out of
//! the policy's directories is refused. Nothing is ever sent outside 127.0.0.0/8: denied
//! targets are refused before any connection is made.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::recorder::Recorder;
use iohr_tests::setup::OneAgent;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);
const SECRET: &str = "tenant-must-not-see-4f2a9c";

fn checks(target: &str, executor: &str, headers: Value) -> Value {
    json!({"kind": "checks", "environment": "staging", "target": target, "executor": executor,
        "spec": {"checks": [{"path": "/probe", "headers": headers}]}})
}

async fn run_to_end(api: &Api, body: &Value) -> Value {
    let record = api.create_run(body).await;
    api.wait_ended(record["id"].as_str().expect("id"), LIMIT)
        .await
}

async fn run_ids(api: &Api) -> Vec<String> {
    let (status, page) = api.get("/v1/reliability/runs").await;
    assert_eq!(status, 200, "{page}");
    page["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_string())
        .collect()
}

async fn start_agent(
    install: &Installation,
    account: &str,
    name: &str,
    controller: &Controller,
    options: AgentOptions<'_>,
) -> Agent {
    let identity = install.agent_identity(account, name);
    Agent::start(install, name, &identity, &controller.link_url(), options).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_read_only_the_secrets_and_reach_only_the_targets_an_operator_allows() {
    let install = Installation::new(Backend::Sqlite).await;
    install.create_account("platform", 100, true);
    let controller = Controller::start(&install, 200, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let secret_env: &[(&str, &str)] = &[("SOME_SECRET", SECRET)];
    // An operator's own agent granting nothing (the default), one granting SOME_*, one
    // with the deny-list on and nothing allowed, and a platform agent that also "grants"
    // SOME_* and allows only 127.0.0.1.
    let mut agents = vec![
        start_agent(
            &install,
            "default",
            "plain",
            &controller,
            AgentOptions {
                env: secret_env,
                ..AgentOptions::default()
            },
        )
        .await,
        start_agent(
            &install,
            "default",
            "granting",
            &controller,
            AgentOptions {
                env: secret_env,
                extra: &["--secret-env", "SOME_*"],
                ..AgentOptions::default()
            },
        )
        .await,
        start_agent(
            &install,
            "default",
            "strict",
            &controller,
            AgentOptions {
                extra: &["--deny-private"],
                allow_targets: &[],
                ..AgentOptions::default()
            },
        )
        .await,
        start_agent(
            &install,
            "platform",
            "cloud-1",
            &controller,
            AgentOptions {
                env: secret_env,
                extra: &["--secret-env", "SOME_*"],
                allow_targets: &["127.0.0.1"],
                ..AgentOptions::default()
            },
        )
        .await,
    ];
    for name in ["plain", "granting", "strict"] {
        api.wait_online(name, LIMIT).await;
    }
    Api::new(
        &controller.api_url(),
        &install.token("platform", &["reliability:read"], None),
    )
    .wait_online("cloud-1", LIMIT)
    .await;
    let recorder = Recorder::start().await;
    let leak = json!({"X-Leak": "${env:SOME_SECRET}"});

    // Not granted: the check is not sent, and the run says which flag would grant it.
    let refused = run_to_end(&api, &checks(&recorder.url(), "agent:plain", leak.clone())).await;
    let text = refused.to_string();
    assert_ne!(refused["status"], "passed", "{refused}");
    assert!(
        text.contains("SOME_SECRET") && text.contains("--secret-env"),
        "the run names the variable and the flag: {refused}"
    );
    assert!(!text.contains(SECRET), "{refused}");
    let home = run_to_end(
        &api,
        &checks(
            &recorder.url(),
            "agent:plain",
            json!({"X-Home": "${env:HOME}"}),
        ),
    )
    .await;
    assert!(home.to_string().contains("--secret-env"), "{home}");
    assert!(
        recorder.heads().is_empty(),
        "nothing was sent: {:?}",
        recorder.heads()
    );

    // Granted by the operator: sent.
    let granted = run_to_end(
        &api,
        &checks(&recorder.url(), "agent:granting", leak.clone()),
    )
    .await;
    assert_eq!(granted["status"], "passed", "{granted}");
    let heads = recorder.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0]
            .to_ascii_lowercase()
            .contains(&format!("x-leak: {SECRET}")),
        "{heads:?}"
    );
    assert!(
        !granted.to_string().contains(SECRET),
        "never in the record: {granted}"
    );

    // The deny-list: every class refused before connecting, with the reason.
    let port = recorder.port;
    let denied = [
        format!("http://127.0.0.1:{port}"),
        format!("http://127.0.0.2:{port}"),
        "http://169.254.169.254".to_string(),
        "http://10.1.2.3:8080".to_string(),
        "http://[fd00::1]".to_string(),
        format!("http://0.0.0.0:{port}"),
        format!("http://[::1]:{port}"),
        // A name the agent's resolver turns into 127.0.0.1.
        format!("http://127.1:{port}"),
    ];
    for target in &denied {
        let record = run_to_end(&api, &checks(target, "agent:strict", json!({}))).await;
        assert_eq!(record["status"], "error", "{target}: {record}");
        let reason = record["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("is denied by this agent's target policy")
                && reason.contains("--allow-target"),
            "{target}: {record}"
        );
    }
    assert_eq!(
        recorder.heads().len(),
        1,
        "no denied target reached the listener"
    );

    // A cloud run whose target is a literal denied address is refused when it is
    // created, naming the address's class; nothing is stored. (The harness's controller
    // allows 127.0.0.0/8 with --allow-cloud-target, as its platform agents do.)
    let before = run_ids(&api).await;
    for (target, class) in [
        ("http://169.254.169.254", "a cloud metadata address"),
        (
            "http://[::ffff:169.254.169.254]:80",
            "a cloud metadata address",
        ),
        ("http://10.1.2.3:8080", "a private address (RFC 1918)"),
        ("http://[fd00::1]", "a unique-local IPv6 address"),
        ("http://0.0.0.0:22", "an unspecified address"),
        ("http://[::1]:8080", "a loopback address"),
    ] {
        let (status, body) = api
            .post(
                "/v1/reliability/runs",
                &checks(target, "cloud", json!({"Metadata-Flavor": "Google"})),
            )
            .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (422, Some("target_not_allowed")),
            "{target}: {body}"
        );
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(class) && message.contains("--allow-cloud-target"),
            "{target}: {body}"
        );
    }
    assert_eq!(run_ids(&api).await, before, "nothing stored");
    // The same targets on an operator's own agent are that agent's decision.
    let own = api
        .create_run(&checks("http://169.254.169.254", "agent:strict", json!({})))
        .await;
    let own = api.wait_ended(own["id"].as_str().expect("id"), LIMIT).await;
    assert!(
        own["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("a cloud metadata address"),
        "{own}"
    );

    // A platform agent: the deny-list without asking, its allow-list lets 127.0.0.1
    // through, and no environment variable is read whatever its flags say.
    let other_loopback = run_to_end(
        &api,
        &checks(&format!("http://127.0.0.2:{port}"), "cloud", json!({})),
    )
    .await;
    assert_eq!(other_loopback["status"], "error", "{other_loopback}");
    let allowed = run_to_end(&api, &checks(&recorder.url(), "cloud", json!({}))).await;
    assert_eq!(
        allowed["status"], "passed",
        "--allow-target lets it through: {allowed}"
    );
    assert_eq!(allowed["agent"], "cloud-1");
    assert_eq!(recorder.heads().len(), 2);
    let platform_leak = run_to_end(&api, &checks(&recorder.url(), "cloud", leak)).await;
    let text = platform_leak.to_string();
    assert_ne!(platform_leak["status"], "passed", "{platform_leak}");
    assert!(text.contains("platform"), "{platform_leak}");
    assert!(!text.contains(SECRET), "{platform_leak}");
    assert_eq!(recorder.heads().len(), 2, "the platform agent sent nothing");

    for agent in agents.drain(..) {
        agent.kill().await;
    }
}

/// A disk fill whose directory is under the policy's allowed directory by its text but
/// reaches elsewhere through a symbolic link is refused before anything is written; the
/// same fill in the allowed directory itself is applied (the policy is not simply shut).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_fill_through_a_symbolic_link_out_of_the_policy_is_refused() {
    let root = std::env::temp_dir().join(format!("iohr-fill-link-{}", uuid::Uuid::new_v4()));
    let allowed = root.join("allowed");
    let elsewhere = root.join("elsewhere");
    std::fs::create_dir_all(&allowed).expect("allowed dir");
    std::fs::create_dir_all(&elsewhere).expect("elsewhere dir");
    std::os::unix::fs::symlink(&elsewhere, allowed.join("link")).expect("symlink");
    let policy = root.join("policy.json");
    std::fs::write(
        &policy,
        json!({"directories": [allowed.display().to_string()], "max_disk_mb": 4}).to_string(),
    )
    .expect("policy");
    let policy = policy.display().to_string();
    let extra = ["--policy", policy.as_str()];
    let stack = OneAgent::start(
        Backend::Sqlite,
        AgentOptions {
            extra: &extra,
            ..AgentOptions::default()
        },
    )
    .await;
    let target = Target::start().await;
    let fill = |directory: &std::path::Path| {
        json!({"kind": "faults", "environment": "staging", "target": target.url(),
            "spec": {"title": "fill", "description": "a disk fill",
                "method": [{"type": "action", "name": "fill", "provider":
                    {"type": "iohr", "fault": "disk_fill",
                     "directory": directory.display().to_string(),
                     "size_mb": 1, "duration": "1s"}}]}})
    };

    // The policy's check passes on the path's text; the agent refuses where it lands as
    // the action starts: the action fails with the refusal, nothing enters the ledger.
    let refused = run_to_end(&stack.api, &fill(&allowed.join("link"))).await;
    assert_eq!(refused["status"], "error", "{refused}");
    assert_eq!(
        refused["reason"], "action \"fill\" failed; the rest of the method was skipped",
        "{refused}"
    );
    let journal = &refused["result"];
    let exception = journal["run"][0]["exception"].as_str().unwrap_or_default();
    let real = std::fs::canonicalize(&elsewhere).expect("canonical");
    assert!(
        exception.starts_with("not allowed by the agent's policy")
            && exception.contains("through a symbolic link")
            && exception.contains(&real.display().to_string())
            && exception.contains("outside the policy's directories"),
        "{refused}"
    );
    assert_eq!(journal["ledger"], json!([]), "nothing applied: {refused}");
    let written = |dir: &std::path::Path| std::fs::read_dir(dir).expect("read dir").count();
    assert_eq!(
        written(&elsewhere),
        0,
        "nothing written at the link's destination"
    );

    let applied = run_to_end(&stack.api, &fill(&allowed)).await;
    assert_eq!(applied["status"], "passed", "{applied}");
    assert_eq!(written(&elsewhere), 0);
    // The fill's file is removed when it is undone: only the link is left.
    assert_eq!(written(&allowed), 1, "{applied}");

    target.stop().await;
    stack.agent.kill().await;
    let _ = std::fs::remove_dir_all(&root);
}
