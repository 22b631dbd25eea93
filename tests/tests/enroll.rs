//! Agent enrollment against real processes: `iohr-controller agent-token create`, then
//! `iohr-agent enroll` makes its key, pins the controller's CA and gets its certificate,
//! and `iohr-agent run` works with what it wrote. A token is good once and until it
//! expires; a forged one, a bad request and a wrong pin are refused, the last before the
//! token is sent; enrolling again replaces the agent's certificate (how an agent whose
//! certificate expired while offline comes back); a stream without a certificate is
//! refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime};

use iohr_proto::link::agent_link_client::AgentLinkClient;
use iohr_proto::link::enrollment_client::EnrollmentClient;
use iohr_proto::link::{AgentMessage, EnrollRequest};
use iohr_tests::process::{AgentOptions, bin};
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target, on_both_stores};
use serde_json::json;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

const LIMIT: Duration = Duration::from_secs(30);

/// `iohr-agent enroll` into `dir`, bounded.
async fn enroll(controller: &Controller, token: &str, dir: &Path, pin: Option<&str>) -> Output {
    let mut command = tokio::process::Command::new(bin("iohr-agent"));
    command
        .arg("enroll")
        .args(["--controller", &controller.link_url(), "--token", token])
        .arg("--identity")
        .arg(dir)
        .kill_on_drop(true);
    if let Some(pin) = pin {
        command.args(["--ca-fingerprint", pin]);
    }
    tokio::time::timeout(LIMIT, command.output())
        .await
        .expect("enroll within the limit")
        .expect("run iohr-agent enroll")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_enrolled(output: &Output) {
    assert!(
        output.status.success(),
        "enroll failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        stderr(output)
    );
}

fn assert_refused(output: &Output, code: &str) {
    assert!(
        !output.status.success(),
        "enrolled, but {code} was expected"
    );
    assert!(stderr(output).contains(code), "{code}: {}", stderr(output));
}

/// A channel to the agent link trusting the controller's CA, with no client certificate.
async fn anonymous_channel(install: &Installation, controller: &Controller) -> Channel {
    let ca = std::fs::read(install.ca_cert()).unwrap();
    Channel::from_shared(controller.link_url())
        .unwrap()
        .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)))
        .unwrap()
        .connect()
        .await
        .expect("a handshake without a client certificate")
}

fn ca_fingerprint(install: &Installation) -> String {
    iohr_certs::fingerprint_pem_file(&install.ca_cert()).unwrap()
}

async fn an_enrolled_agent_serves_runs_and_its_token_is_spent(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 200, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let target = Target::start().await;

    let (token, printed) = install.enrollment_token("default", "edge-1", "10m");
    assert!(
        printed.contains(&format!(
            "controller CA sha256:{}",
            ca_fingerprint(&install)
        )),
        "{printed}"
    );
    let dir = install.path("enrolled/edge-1");
    // Two enrollments racing with one token: one wins, the other is told it is used.
    let other = install.path("enrolled/twin");
    let (first, second) = tokio::join!(
        enroll(&controller, &token, &dir, None),
        enroll(&controller, &token, &other, None)
    );
    let (won, lost, dir) = if first.status.success() {
        (first, second, dir)
    } else {
        (second, first, other)
    };
    assert_enrolled(&won);
    assert_refused(&lost, "enrollment_token_used");

    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("agent.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the key is its owner's only");
    assert_eq!(
        std::fs::read_to_string(dir.join("agent.name")).unwrap(),
        "edge-1"
    );
    assert_eq!(
        std::fs::read(dir.join("ca.pem")).unwrap(),
        std::fs::read(install.ca_cert()).unwrap()
    );
    assert!(!dir.join("agent.key.enrolling").exists());

    let _agent = Agent::start(
        &install,
        "edge-1",
        &dir,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    api.wait_online("edge-1", LIMIT).await;
    let run = api
        .create_run(&json!({
            "kind": "checks",
            "environment": "staging",
            "target": target.url(),
            "executor": "agent:edge-1",
            "spec": {"checks": [{"path": "/health", "expect_text": "ok"}]}
        }))
        .await;
    let id = run["id"].as_str().expect("id");
    let done = api
        .wait_status(id, &["passed", "failed", "error"], LIMIT)
        .await;
    assert_eq!(done["status"], "passed", "{done}");

    // Spent: a third try is refused too.
    assert_refused(
        &enroll(&controller, &token, &install.path("enrolled/late"), None).await,
        "enrollment_token_used",
    );
}

async fn bad_tokens_requests_and_pins_are_refused(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 200, None).await;
    let (token, _) = install.enrollment_token("default", "edge-1", "10m");
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 4, "{token}");

    // Forged: the right id with another secret, and an id that was never made.
    let forged = format!("{}.{}.{}.{}", parts[0], parts[1], "0".repeat(64), parts[3]);
    let unknown = format!(
        "{}.{}.{}.{}",
        parts[0], "0192f3a4-0000-7000-8000-000000000000", parts[2], parts[3]
    );
    for bad in [&forged, &unknown] {
        assert_refused(
            &enroll(&controller, bad, &install.path("forged"), None).await,
            "enrollment_token_invalid",
        );
    }

    // Another controller's CA pinned: refused before anything is sent.
    let elsewhere = Installation::new(Backend::Sqlite).await;
    let foreign_pin = ca_fingerprint(&elsewhere);
    let pinned_elsewhere = enroll(
        &controller,
        &token,
        &install.path("pinned"),
        Some(&foreign_pin),
    )
    .await;
    assert_refused(&pinned_elsewhere, "pinned fingerprint");
    assert!(stderr(&pinned_elsewhere).contains("nothing was sent"));
    let swapped = format!("{}.{}.{}.{foreign_pin}", parts[0], parts[1], parts[2]);
    assert_refused(
        &enroll(&controller, &swapped, &install.path("pinned"), None).await,
        "pinned fingerprint",
    );

    // A request that is not a CSR, with the good token: refused, and the token kept.
    let mut client = EnrollmentClient::new(anonymous_channel(&install, &controller).await);
    for csr in [
        "",
        "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
    ] {
        let refused = client
            .enroll(EnrollRequest {
                token: token.clone(),
                csr_pem: csr.to_string(),
            })
            .await
            .expect_err("not a CSR");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert!(
            refused.message().starts_with("invalid_csr: "),
            "{refused:?}"
        );
    }
    // A request larger than the enroll bound is refused by the transport.
    let huge = client
        .enroll(EnrollRequest {
            token: token.clone(),
            csr_pem: "A".repeat(64 * 1024),
        })
        .await
        .expect_err("too large");
    assert!(
        matches!(
            huge.code(),
            tonic::Code::OutOfRange | tonic::Code::ResourceExhausted
        ),
        "{huge:?}"
    );

    // None of that consumed the token: it still enrolls, pinned as it says.
    let dir = install.path("enrolled/edge-1");
    assert_enrolled(
        &enroll(
            &controller,
            &token,
            &dir,
            Some(&format!("sha256:{}", parts[3])),
        )
        .await,
    );

    // Expired: made with the shortest ttl, used once the clock has passed its expiry.
    let (short, printed) = install.enrollment_token("default", "edge-2", "1s");
    let expiry = printed
        .split("expires ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("an expiry in the output");
    let expiry = humantime::parse_rfc3339(expiry).expect("an RFC 3339 expiry");
    iohr_tests::wait_for("the token's expiry", Duration::from_secs(5), || async {
        (SystemTime::now() > expiry).then_some(())
    })
    .await;
    assert_refused(
        &enroll(&controller, &short, &install.path("late"), None).await,
        "enrollment_token_expired",
    );

    // The agent link without a client certificate: the handshake is taken (enrollment
    // needs it), the session is not.
    let (_tx, rx) = tokio::sync::mpsc::channel::<AgentMessage>(1);
    let refused = AgentLinkClient::new(anonymous_channel(&install, &controller).await)
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect_err("no session without a certificate");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    assert!(
        refused.message().starts_with("client_certificate_required"),
        "{refused:?}"
    );

    // A revoked token is listed no more and enrolls nothing.
    let (revoked, printed) = install.enrollment_token("default", "edge-9", "10m");
    let id = printed
        .split_whitespace()
        .nth(2)
        .expect("the token's id in `enrollment token ID for ...`")
        .to_string();
    let listed = install.ctl2("agent-token", &["list", "--account", "default"]);
    assert!(
        listed.contains(&id) && listed.contains("unused"),
        "{listed}"
    );
    assert!(
        !listed.contains(revoked.split('.').nth(2).unwrap()),
        "no secret: {listed}"
    );
    install.ctl2(
        "agent-token",
        &["revoke", "--account", "default", "--id", &id],
    );
    let listed = install.ctl2("agent-token", &["list", "--account", "default", "--json"]);
    assert!(!listed.contains(&id), "{listed}");
    assert_refused(
        &enroll(&controller, &revoked, &install.path("revoked"), None).await,
        "enrollment_token_invalid",
    );
}

async fn wait_offline(api: &Api, agent: &str) {
    iohr_tests::wait_for(&format!("{agent} offline"), LIMIT, || async {
        let (_, body) = api.get("/v1/reliability/agents").await;
        body["agents"]
            .as_array()?
            .iter()
            .any(|a| a["name"] == agent && a["online"] == false)
            .then_some(())
    })
    .await;
}

fn copy_dir(from: &Path, to: &Path) -> PathBuf {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
    to.to_path_buf()
}

async fn enrolling_again_replaces_the_certificate(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 200, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());

    // An agent whose certificate expired while it was offline: refused, then enrolled
    // again into the same identity dir.
    let dir = install.path("agents/edge-1");
    let dir_text = dir.display().to_string();
    install.ctl(&[
        "agent-cert",
        "--account",
        "default",
        "--agent",
        "edge-1",
        "--out",
        &dir_text,
        "--valid-days",
        "-1",
    ]);
    let stale = Agent::start(
        &install,
        "edge-1",
        &dir,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    stale.refused("link failed", LIMIT).await;
    stale.kill().await;
    let (token, _) = install.enrollment_token("default", "edge-1", "10m");
    assert_enrolled(&enroll(&controller, &token, &dir, None).await);
    let first = copy_dir(&dir, &install.path("agents/edge-1-first"));
    let agent = Agent::start(
        &install,
        "edge-1",
        &dir,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    api.wait_online("edge-1", LIMIT).await;
    agent.kill().await;
    wait_offline(&api, "edge-1").await;

    // Enrolled once more (a new host, say): the previous certificate is refused.
    let (token, _) = install.enrollment_token("default", "edge-1", "10m");
    let second = install.path("agents/edge-1-second");
    assert_enrolled(&enroll(&controller, &token, &second, None).await);
    let old = Agent::start(
        &install,
        "edge-1-old",
        &first,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    old.refused("belongs to no agent", LIMIT).await;
    old.kill().await;
    let _new = Agent::start(
        &install,
        "edge-1",
        &second,
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    api.wait_online("edge-1", LIMIT).await;
}

on_both_stores!(
    an_enrolled_agent_serves_runs_and_its_token_is_spent,
    bad_tokens_requests_and_pins_are_refused,
    enrolling_again_replaces_the_certificate,
);
