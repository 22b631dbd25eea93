//! Issue 38, fair shares: every per-process bound a caller can fill has a per-account
//! share below it, and an account at its share is answered 429 with its own limit named
//! while the other accounts go on.
//!
//! - Live viewers (`serve --max-viewers-per-account`): SSE, gRPC `WatchRun` and a
//!   WebSocket connection count in the account's share; past it, 429
//!   `too_many_account_viewers` (gRPC `RESOURCE_EXHAUSTED`).
//! - Comparisons (`serve --compares-per-account`): computing or waiting; past the share,
//!   429 `too_many_account_compares`. A comparison's place is held from outside by the one
//!   means a real controller offers: its store read waits on a PostgreSQL lock the test
//!   holds, and the test sees it waiting in `pg_stat_activity`.
//!
//! - API requests in flight (`serve --api-requests-per-account`): counted once the token
//!   is checked and until the answer's head; past the share, 429
//!   `too_many_account_requests` (gRPC `RESOURCE_EXHAUSTED`). A request is held in flight
//!   from outside by sending its head and not its body: the handler has taken its place
//!   and waits for the body.
//!
//! (Event feeds' share is in `tenant_controller.rs`.) Everything on 127.0.0.1 only.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::net::SocketAddr;
use std::time::Duration;

use iohr_tests::{Api, Backend, Controller, Installation, wait_for};
use serde_json::{Value, json};
use sqlx::Connection;
use tokio::io::AsyncWriteExt;

const LIMIT: Duration = Duration::from_secs(60);

/// A run no agent serves: it stays queued, and its viewers wait for live frames.
async fn queued_run(api: &Api) -> String {
    let record = api
        .create_run(&json!({
            "kind": "checks",
            "environment": "staging",
            "target": "http://127.0.0.1:9",
            "spec": {"checks": [{"path": "/"}]},
        }))
        .await;
    record["id"].as_str().expect("run id").to_string()
}

/// The refusal of one more SSE viewer: 429 with `Retry-After`, its code and message.
async fn refused_viewer(api: &Api, run: &str) -> (String, String) {
    let (status, headers, body) = api
        .get_head(&format!("/v1/reliability/runs/{run}/events"))
        .await;
    assert_eq!(status, 429, "{body}");
    assert!(headers.contains_key("retry-after"), "{headers:?}");
    (
        body["error"]["code"].as_str().unwrap().to_string(),
        body["error"]["message"].as_str().unwrap().to_string(),
    )
}

async fn watch_run(controller: &Controller, token: &str, id: &str) -> Result<(), tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(controller.api_url())
        .unwrap()
        .connect()
        .await
        .expect("h2c to the API port");
    let mut client = iohr_proto::runs::runs_client::RunsClient::new(channel);
    let mut request = tonic::Request::new(iohr_proto::runs::WatchRunRequest {
        run_id: id.to_string(),
        after_frame: 0,
    });
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    client.watch_run(request).await.map(drop)
}

/// A WebSocket upgrade of `/v1/reliability/stream` on a raw HTTP/1.1 connection: the
/// answer's status and, unless it switched protocols, its JSON body. The connection is
/// returned so that an upgraded one stays open.
async fn websocket(api: SocketAddr, token: &str) -> (u16, Value, tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!(
        "GET /v1/reliability/stream HTTP/1.1\r\nhost: {api}\r\nauthorization: Bearer {token}\r\n\
         connection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\n\
         sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    let mut stream = tokio::net::TcpStream::connect(api).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = async {
        loop {
            let mut chunk = [0u8; 1024];
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed before the head: {answer:?}");
            answer.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&answer).to_string();
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                continue;
            };
            let status: u16 = head[9..12].parse().unwrap();
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if status == 101 || body.len() >= length {
                return (status, serde_json::from_str(body).unwrap_or(Value::Null));
            }
        }
    };
    let (status, body) = tokio::time::timeout(LIMIT, read).await.unwrap();
    (status, body, stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_holding_its_viewer_share_leaves_the_rest_to_others() {
    let install = Installation::new(Backend::Sqlite).await;
    install.create_account("other", 2, false);
    let controller = Controller::start_with(
        &install,
        200,
        None,
        &["--max-viewers", "3", "--max-viewers-per-account", "1"],
    )
    .await;
    let url = controller.api_url();
    let default_token = install.full_token();
    let other_token = install.token("other", &["reliability:run", "reliability:read"], None);
    let default = Api::new(&url, &default_token);
    let other = Api::new(&url, &other_token);
    let (mine, theirs) = (queued_run(&default).await, queued_run(&other).await);

    // `other` takes its one place; every kind of viewer of it is refused after that.
    let _held = other.events(&theirs, None).await;
    let (code, message) = refused_viewer(&other, &theirs).await;
    assert_eq!(code, "too_many_account_viewers");
    assert!(
        message.contains("already holds 1 live viewers"),
        "the account's own limit is named: {message}"
    );
    let status = watch_run(&controller, &other_token, &theirs)
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("already holds 1 live viewers"),
        "{status:?}"
    );
    let (status, body, _) = websocket(controller.api, &other_token).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("too_many_account_viewers")),
        "{body}"
    );

    // `default` still has its own share of the process's places: a WebSocket connection,
    // then (that share held) the same refusal as `other`'s.
    let (status, _, _socket) = websocket(controller.api, &default_token).await;
    assert_eq!(status, 101, "default's connection is upgraded");
    let (code, _) = refused_viewer(&default, &mine).await;
    assert_eq!(code, "too_many_account_viewers");
    controller.stop().await;
}

/// Backends of this database waiting on a lock in a read of one run (the compare's store
/// read; the controller reads no other run by id here, as there is none).
async fn waiting_reads(watcher: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND wait_event_type = 'Lock' \
         AND query LIKE '%FROM runs r LEFT JOIN agents a ON a.id = r.agent_id WHERE r.id = $1%'",
    )
    .fetch_one(watcher)
    .await
    .unwrap()
}

async fn compare(api: &Api) -> (u16, Value) {
    api.get("/v1/reliability/compare?before=run-a&after=run-b")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_holding_its_compare_share_leaves_the_rest_to_others() {
    let install = Installation::new(Backend::Postgres).await;
    install.create_account("other", 2, false);
    let controller = Controller::start_with(
        &install,
        200,
        None,
        &[
            "--max-compares",
            "1",
            "--compare-queue",
            "4",
            "--compares-per-account",
            "1",
        ],
    )
    .await;
    let url = controller.api_url();
    let default = Api::new(&url, &install.full_token());
    let other = Api::new(&url, &install.token("other", &["reliability:read"], None));
    let database_url = install.database_url.clone().unwrap();
    let watcher = sqlx::PgPool::connect(&database_url).await.unwrap();

    // The agents table locked: a comparison that has its place waits in its store read
    // (runs joined with agents) until the test lets go.
    let mut locker = sqlx::PgConnection::connect(&database_url).await.unwrap();
    let mut lock = locker.begin().await.unwrap();
    sqlx::query("LOCK TABLE agents IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();

    let held = tokio::spawn({
        let other = other.clone();
        async move { compare(&other).await }
    });
    wait_for("other's comparison holding its place", LIMIT, || async {
        (waiting_reads(&watcher).await == 1).then_some(())
    })
    .await;
    let (status, body) = compare(&other).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("too_many_account_compares")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already has 1 comparisons"),
        "the account's own limit is named: {body}"
    );

    // `default` gets a place of its own: its comparison waits beside other's.
    let mine = tokio::spawn({
        let default = default.clone();
        async move { compare(&default).await }
    });
    wait_for("default's comparison holding a place", LIMIT, || async {
        (waiting_reads(&watcher).await == 2).then_some(())
    })
    .await;
    lock.commit().await.unwrap();
    // Let in, both read the store and find no such runs.
    for answer in [held, mine] {
        let (status, body) = answer.await.unwrap();
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (404, Some("not_found")),
            "{body}"
        );
    }
    controller.stop().await;
}

/// A `POST /runs` whose head is sent and whose body never is: the controller checks the
/// token, takes the request's place, and waits for the body while the connection lives.
async fn request_held_open(api: SocketAddr, token: &str) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(api).await.unwrap();
    let head = format!(
        "POST /v1/reliability/runs HTTP/1.1\r\nHost: {api}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: 64\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// What the controller did with a held request, if anything: answered it (its first
/// bytes) or closed its connection. `None` while it still waits for the body.
fn held_request_fate(stream: &tokio::net::TcpStream) -> Option<String> {
    let mut buf = [0u8; 256];
    match stream.try_read(&mut buf) {
        Ok(0) => Some("connection closed".to_string()),
        Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(e) => Some(format!("read failed: {e}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_holding_its_request_share_leaves_the_rest_to_others() {
    let install = Installation::new(Backend::Sqlite).await;
    install.create_account("other", 2, false);
    let controller = Controller::start_with(
        &install,
        200,
        None,
        &["--api-max-requests", "8", "--api-requests-per-account", "2"],
    )
    .await;
    let url = controller.api_url();
    let default_token = install.full_token();
    let default = Api::new(&url, &default_token);
    let other = Api::new(&url, &install.token("other", &["reliability:read"], None));

    // Two of default's requests in flight: its next one is refused, naming its share.
    // A held request the controller let go of (it should not: each waits for its body)
    // is named and sent again, so a loaded machine's hiccup is seen, not hidden.
    let mut held = vec![
        request_held_open(controller.api, &default_token).await,
        request_held_open(controller.api, &default_token).await,
    ];
    let mut let_go = Vec::new();
    let deadline = tokio::time::Instant::now() + LIMIT;
    let (headers, body) = loop {
        for stream in &mut held {
            if let Some(fate) = held_request_fate(stream) {
                let_go.push(fate);
                *stream = request_held_open(controller.api, &default_token).await;
            }
        }
        let (status, headers, body) = default.get_head("/v1/reliability/runs").await;
        if status == 429 {
            break (headers, body);
        }
        assert!(
            tokio::time::Instant::now() < deadline && let_go.len() < 4,
            "default's share was never held by two requests within {LIMIT:?}; the \
             controller let held requests go: {let_go:?}; last answer {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    if !let_go.is_empty() {
        eprintln!("held requests let go before the share was seen held: {let_go:?}");
    }
    assert_eq!(body["error"]["code"], "too_many_account_requests", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("has 2 API requests in flight"),
        "the account's own limit is named: {body}"
    );
    assert!(headers.contains_key("retry-after"), "{headers:?}");
    let status = watch_run(&controller, &default_token, "run-x")
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");

    // Another account is served meanwhile.
    let (status, body) = other.get("/v1/reliability/runs").await;
    assert_eq!(status, 200, "{body}");

    // The held requests gone, default is served again.
    drop(held);
    wait_for("default served again", LIMIT, || async {
        let (status, _) = default.get("/v1/reliability/runs").await;
        (status == 200).then_some(())
    })
    .await;
    controller.stop().await;
}
