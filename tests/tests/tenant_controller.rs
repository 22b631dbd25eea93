//! Issue 38, the controller's side: a tenant reaches only what is theirs.
//!
//! - Webhooks are no port scanner: with the default policy every denied class is refused
//!   at creation (422 `target_not_allowed`), a name that resolves to loopback passes
//!   creation and is refused when a delivery connects (nothing reaches the listener), and
//!   the delivery log shows a class, never the OS's error text.
//! - With loopback allowed (as the test harness and the quickstart do), the classes
//!   `connect_failed`, `timeout`, `tls` and `http_status`; the controller's own address
//!   stays refused.
//! - Files as private as what they hold: under umask 000 the data dir is 0700, the store
//!   files and the secrets key 0600; a copy of the database holds no webhook secret;
//!   wider modes found at start-up are narrowed with a warning.
//! - Fair shares: one account holding its share of the event feeds leaves the rest to
//!   the others.
//!
//! Everything listens and connects on 127.0.0.1 only.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response};
use iohr_tests::{Api, Backend, Controller, Installation, wait_for};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

/// Test-sized deliveries: one attempt, a short timeout, a fast poll.
const FAST: &[&str] = &[
    "--webhook-retry-schedule",
    "0s",
    "--events-poll-ms",
    "50",
    "--webhook-timeout-ms",
    "500",
];

/// A receiver on 127.0.0.1 that counts requests: `/500` answers 500, anything else 204.
async fn receiver() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let seen = got.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<_>| {
                    let path = request.uri().path().to_string();
                    seen.lock().unwrap().push(path.clone());
                    let status = if path == "/500" { 500 } else { 204 };
                    async move {
                        Ok::<_, hyper::Error>(
                            Response::builder()
                                .status(status)
                                .body(Full::new(Bytes::new()))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, got)
}

/// A listener that accepts and never answers (held open for the test's life).
async fn silent() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    (addr, task)
}

/// A port nothing listens on: bound, then closed.
async fn closed_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

async fn subscribe(api: &Api, url: &str) -> (u16, Value) {
    api.post(
        "/v1/reliability/webhooks",
        &json!({"url": url, "events": ["reliability.run.finished"]}),
    )
    .await
}

/// One `reliability.run.finished`: a run queued (no agent serves it) and cancelled.
async fn one_event(api: &Api) {
    let run = api
        .create_run(&json!({"kind": "checks", "environment": "staging",
            "target": "http://127.0.0.1:9", "spec": {"checks": [{"name": "home", "path": "/"}]}}))
        .await;
    let id = run["id"].as_str().unwrap();
    let (status, body) = api
        .post(&format!("/v1/reliability/runs/{id}/cancel"), &json!({}))
        .await;
    assert!(status < 300, "{status} {body}");
    api.wait_status(id, &["cancelled"], LIMIT).await;
}

/// The delivery log's one entry once it failed.
async fn failed_delivery(api: &Api, hook: &Value) -> Value {
    let id = hook["id"].as_str().unwrap();
    wait_for("a failed delivery", LIMIT, || async {
        let (status, page) = api
            .get(&format!("/v1/reliability/webhooks/{id}/deliveries"))
            .await;
        assert_eq!(status, 200, "{page}");
        page["deliveries"]
            .as_array()
            .unwrap()
            .first()
            .filter(|d| d["status"] == "failed")
            .cloned()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_refuse_the_controllers_network_by_default() {
    let install = Installation::new(Backend::Sqlite).await;
    let controller = Controller::start_default_policy(&install, FAST).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let own = controller.api;
    for url in [
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://169.254.1.1/".to_string(),
        "http://[fe80::1]/".to_string(),
        "http://10.1.2.3:8080/".to_string(),
        "http://172.16.0.1/".to_string(),
        "http://192.168.1.1/".to_string(),
        "http://[fd00::1]/".to_string(),
        "http://0.0.0.0:22/".to_string(),
        "http://[::]/".to_string(),
        "http://127.0.0.1:9000/hook".to_string(),
        "http://[::1]/".to_string(),
        // 127.0.0.1 mapped into IPv6 (the pattern takes the hex form of IPv6 only).
        "http://[::ffff:7f00:1]/".to_string(),
        "http://100.100.100.200/".to_string(),
        "http://metadata.google.internal/computeMetadata/v1/".to_string(),
        "http://localhost:8080/".to_string(),
        format!("http://{own}/v1/reliability/runs"),
        format!("http://{}/", controller.agent_link),
    ] {
        let (status, body) = subscribe(&api, &url).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (422, Some("target_not_allowed")),
            "{url}: {body}"
        );
    }
    let (_, list) = api.get("/v1/reliability/webhooks").await;
    assert_eq!(list["webhooks"], json!([]), "nothing half-stored");

    // A name getaddrinfo resolves to 127.0.0.1: judged on that address at connection.
    let (addr, got) = receiver().await;
    let (status, hook) = subscribe(&api, &format!("http://127.1:{}/ok", addr.port())).await;
    assert_eq!(status, 201, "{hook}");
    one_event(&api).await;
    let delivery = failed_delivery(&api, &hook).await;
    assert_eq!(delivery["last_error"], "denied", "{delivery}");
    assert_eq!(delivery["last_status_code"], Value::Null);
    assert!(
        got.lock().unwrap().is_empty(),
        "nothing reached the listener"
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_delivery_shows_its_class_not_the_error_text() {
    let install = Installation::new(Backend::Sqlite).await;
    let controller = Controller::start_with(&install, 200, None, FAST).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    // Loopback is allowed here; the controller's own addresses are not.
    let (status, body) = subscribe(&api, &format!("http://{}/", controller.api)).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("target_not_allowed")),
        "{body}"
    );

    let (addr, _) = receiver().await;
    let (quiet, _held) = silent().await;
    let closed = closed_port().await;
    let cases = [
        (format!("http://{closed}/"), "connect_failed"),
        (format!("http://{quiet}/"), "timeout"),
        (format!("https://{addr}/ok"), "tls"),
        (format!("http://{addr}/500"), "http_status"),
    ];
    let mut hooks = Vec::new();
    for (url, class) in &cases {
        let (status, hook) = subscribe(&api, url).await;
        assert_eq!(status, 201, "{url}: {hook}");
        hooks.push((hook, *class));
    }
    one_event(&api).await;
    for (hook, class) in hooks {
        let delivery = failed_delivery(&api, &hook).await;
        assert_eq!(delivery["last_error"], class, "{hook}: {delivery}");
    }
    controller.stop().await;
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// `iohr-controller init` under umask 000: nothing of the umask shows in the modes.
fn init_under_open_umask(install: &Installation) {
    let mut command = std::process::Command::new("sh");
    command
        .arg("-c")
        .arg("umask 000 && exec \"$0\" init --data-dir \"$1\"")
        .arg(iohr_tests::process::bin("iohr-controller"))
        .arg(&install.data_dir);
    let output = command.output().unwrap();
    assert!(output.status.success(), "{output:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_files_are_private_and_hold_no_webhook_secret() {
    let install = Installation::new(Backend::Sqlite).await;
    // A data dir of its own, made by init under the most open umask.
    let data = install.root.join("fresh");
    let fresh = Installation {
        root: install.root.clone(),
        data_dir: data.clone(),
        database_url: None,
        backend: Backend::Sqlite,
    };
    init_under_open_umask(&fresh);
    let db = data.join("iohr.db");
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(&data.join("pki/secrets.key")), 0o600);

    let controller = Controller::start_with(&fresh, 200, None, FAST).await;
    let api = Api::new(&controller.api_url(), &fresh.full_token());
    let (status, hook) = subscribe(&api, "https://hooks.example.com/x").await;
    assert_eq!(status, 201, "{hook}");
    let secret = hook["secret"].as_str().unwrap();
    let key_part = secret.trim_start_matches("whsec_");
    for suffix in ["", "-wal", "-shm"] {
        let file = data.join(format!("iohr.db{suffix}"));
        if file.exists() {
            assert_eq!(mode(&file), 0o600, "{}", file.display());
            let bytes = std::fs::read(&file).unwrap();
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                !text.contains(key_part),
                "{} holds the secret",
                file.display()
            );
        }
    }
    controller.stop().await;

    // Widened by hand: narrowed at the next start, with a warning.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let controller = Controller::start_with(&fresh, 200, None, &[]).await;
    assert_eq!((mode(&data), mode(&db)), (0o700, 0o600));
    let log = std::fs::read_to_string(&controller.log).unwrap();
    assert!(
        log.contains("readable by others: narrowed") && log.contains("755"),
        "{log}"
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_holding_its_feed_share_leaves_the_rest_to_others() {
    let install = Installation::new(Backend::Sqlite).await;
    install.create_account("other", 2, false);
    let controller = Controller::start_with(
        &install,
        200,
        None,
        &[
            "--max-event-feeds",
            "2",
            "--max-event-feeds-per-account",
            "1",
        ],
    )
    .await;
    let url = controller.api_url();
    let default = Api::new(&url, &install.full_token());
    let other = Api::new(&url, &install.token("other", &["reliability:read"], None));
    let _held = other.feed(None).await;
    let (status, body) = other.get("/v1/reliability/events").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("too_many_account_feeds")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("holds 1 event feeds"),
        "the account's own limit is named: {body}"
    );
    // `other` at its share: `default` still gets the process's other place.
    let _mine = default.feed(None).await;
    let (status, body) = default.get("/v1/reliability/events").await;
    assert_eq!(status, 429, "{body}");
    controller.stop().await;
}

/// The status line's code of a raw HTTP/1.1 POST to `/mcp` with these headers.
async fn mcp_status(api: SocketAddr, token: &str, origin: Option<&str>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let origin = origin.map_or(String::new(), |o| format!("origin: {o}\r\n"));
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {api}\r\nauthorization: Bearer {token}\r\n{origin}\
         content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(api).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(LIMIT, stream.read_exact(&mut head))
        .await
        .unwrap()
        .unwrap();
    let line = String::from_utf8_lossy(&head);
    line[9..12].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_refuses_other_origins_and_tls_answers_carry_hsts() {
    let install = Installation::new(Backend::Sqlite).await;
    let controller = Controller::start_with(
        &install,
        200,
        None,
        &["--mcp-allowed-origin", "https://console.example.com"],
    )
    .await;
    let token = install.full_token();
    let own = format!("http://{}", controller.api);
    assert_eq!(
        mcp_status(controller.api, &token, Some("http://evil.example")).await,
        403
    );
    for allowed in [
        None,
        Some(own.as_str()),
        Some("https://console.example.com"),
    ] {
        let status = mcp_status(controller.api, &token, allowed).await;
        assert_ne!(status, 403, "{allowed:?}");
        assert!(status < 500, "{allowed:?}: {status}");
    }
    controller.stop().await;

    let controller = Controller::start_with(&install, 200, None, &["--api-tls"]).await;
    let api = Api::with_ca(&controller.api_url(), &token, &install.ca_cert());
    let (status, headers, _) = api.get_head("/v1/reliability/runs").await;
    assert_eq!(status, 200);
    assert_eq!(
        headers
            .get("strict-transport-security")
            .map(|v| v.to_str().unwrap()),
        Some("max-age=31536000")
    );
    controller.stop().await;
}

/// The agent-link port takes connections without a certificate (enrollment): one that
/// never finishes its TLS handshake is closed when its time is up, and past the bound
/// the next connection waits for a place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_link_bounds_its_connections_and_their_handshakes() {
    use tokio_rustls::rustls::pki_types::ServerName;
    let install = Installation::new(Backend::Sqlite).await;
    let controller = Controller::start_with(
        &install,
        200,
        None,
        &[
            "--max-agent-connections",
            "1",
            "--agent-handshake-timeout-ms",
            "1000",
        ],
    )
    .await;
    let link = controller.agent_link;
    // A takes the one place and says nothing.
    let idle = tokio::net::TcpStream::connect(link).await.unwrap();
    // B's handshake can only be served once A's place is free.
    let config = iohr_tests::tls::client_config(&install.ca_cert(), &[b"h2"]);
    let handshake = tokio::spawn(async move {
        let tcp = tokio::net::TcpStream::connect(link).await.unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
    });
    let served = tokio::time::timeout(LIMIT, handshake)
        .await
        .expect("B served once A's handshake time was up")
        .unwrap();
    assert!(served.is_ok(), "{served:?}");
    // A was closed before B was served (its FIN went out before B's answer).
    let mut buf = [0u8; 16];
    match idle.try_read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("A still open when B was served: {other:?}"),
    }
    controller.stop().await;
}
