//! The CA's rotation with an overlap, with real processes: `ca rotate`, a restart, and
//! agents of the old CA still connect; one renews and receives both CAs; one enrolls with
//! a token while the rotation overlaps; `ca finish`, a restart, and those two connect
//! while an agent that never renewed (the old CA only) is refused.
//!
//! One store (SQLite): the rotation is files in the data dir, and the store tests cover
//! the certificates' rows on both.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::path::Path;
use std::time::Duration;

use iohr_tests::process::{AgentOptions, bin};
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target, wait_for};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

fn pem_certificates(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap()
        .matches("-----BEGIN CERTIFICATE-----")
        .count()
}

/// `iohr-controller ca SUB --data-dir ...`: its exit status and what it printed.
fn ca(install: &Installation, sub: &str) -> (bool, String) {
    let output = std::process::Command::new(bin("iohr-controller"))
        .args(["ca", sub, "--data-dir"])
        .arg(&install.data_dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

async fn online(api: &Api, name: &str) -> bool {
    let (_, agents) = api.get("/v1/reliability/agents").await;
    agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["name"] == name && a["online"] == true)
}

async fn checks_pass_on(api: &Api, target: &Target, agent: &str) {
    let run = api
        .create_run(&json!({"kind": "checks", "environment": "staging",
            "target": target.url(), "executor": format!("agent:{agent}"),
            "spec": {"checks": [{"path": "/health"}]}}))
        .await;
    let done = api
        .wait_status(run["id"].as_str().unwrap(), &["passed"], LIMIT)
        .await;
    assert_eq!(done["status"], "passed", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ca_rotates_with_an_overlap() {
    let install = Installation::new(Backend::Sqlite).await;
    let controller = Controller::start(&install, 200, None).await;
    let port = controller.agent_link.port();
    let api = Api::new(&controller.api_url(), &install.full_token());
    let target = Target::start().await;
    let old_ca = iohr_certs::fingerprint_pem_file(&install.ca_cert()).unwrap();

    // Two agents of the old CA: one renews during the overlap, one never does.
    let stays = install.agent_identity("default", "stays");
    let renews = install.path("renews");
    install.ctl(&[
        "agent-cert",
        "--account",
        "default",
        "--agent",
        "renews",
        "--out",
        &renews.display().to_string(),
        "--valid-for",
        "15s",
    ]);
    let url = controller.link_url();
    let _stays_agent = Agent::start(&install, "stays", &stays, &url, AgentOptions::default()).await;
    let _renews_agent =
        Agent::start(&install, "renews", &renews, &url, AgentOptions::default()).await;
    api.wait_online("stays", LIMIT).await;
    api.wait_online("renews", LIMIT).await;

    let (ok, text) = ca(&install, "finish");
    assert!(!ok && text.contains("no CA rotation has begun"), "{text}");
    controller.stop().await;
    let (ok, text) = ca(&install, "rotate");
    assert!(ok, "{text}");
    assert_eq!(
        pem_certificates(&install.ca_cert()),
        2,
        "the new CA, then the old"
    );
    let (ok, text) = ca(&install, "rotate");
    assert!(!ok && text.contains("begun already"), "{text}");
    let controller = Controller::start(&install, 200, Some(port)).await;
    let api = Api::new(&controller.api_url(), &install.full_token());

    // The overlap: both old-CA agents are back, and the short-lived one renews.
    api.wait_online("stays", LIMIT).await;
    api.wait_online("renews", LIMIT).await;
    wait_for("renews to hold both CAs", LIMIT, || async {
        (pem_certificates(&renews.join("ca.pem")) == 2).then_some(())
    })
    .await;
    checks_pass_on(&api, &target, "stays").await;

    // A token made during the overlap pins the CA that signs the server's certificate.
    let (token, printed) = install.enrollment_token("default", "joins", "10m");
    assert!(
        printed.contains(&format!("controller CA sha256:{old_ca}")),
        "{printed}"
    );
    let joins = install.path("joins");
    let enrolled = tokio::process::Command::new(bin("iohr-agent"))
        .args([
            "enroll",
            "--controller",
            &controller.link_url(),
            "--token",
            &token,
        ])
        .arg("--identity")
        .arg(&joins)
        .output()
        .await
        .unwrap();
    assert!(
        enrolled.status.success(),
        "{}",
        String::from_utf8_lossy(&enrolled.stderr)
    );
    assert_eq!(pem_certificates(&joins.join("ca.pem")), 2);

    controller.stop().await;
    let (ok, text) = ca(&install, "finish");
    assert!(ok, "{text}");
    assert_eq!(pem_certificates(&install.ca_cert()), 1);
    let new_ca = iohr_certs::fingerprint_pem_file(&install.ca_cert()).unwrap();
    assert_ne!(new_ca, old_ca);
    let controller = Controller::start(&install, 200, Some(port)).await;
    let api = Api::new(&controller.api_url(), &install.full_token());

    // After: the renewed and the enrolled agent connect; the old CA's agent cannot.
    let _joins_agent = Agent::start(
        &install,
        "joins",
        &joins,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    api.wait_online("renews", LIMIT).await;
    api.wait_online("joins", LIMIT).await;
    checks_pass_on(&api, &target, "renews").await;
    checks_pass_on(&api, &target, "joins").await;
    let stays_log = install.logs_dir().join("agent-stays.log");
    let before = std::fs::read_to_string(&stays_log)
        .unwrap_or_default()
        .matches("link failed")
        .count();
    wait_for("stays to be refused", LIMIT, || async {
        let log = std::fs::read_to_string(&stays_log).unwrap_or_default();
        (log.matches("link failed").count() >= before + 3).then_some(())
    })
    .await;
    assert!(!online(&api, "stays").await, "the old CA's agent stays out");
    // A token now pins the new CA.
    let (_, printed) = install.enrollment_token("default", "later", "10m");
    assert!(
        printed.contains(&format!("controller CA sha256:{new_ca}")),
        "{printed}"
    );
}
