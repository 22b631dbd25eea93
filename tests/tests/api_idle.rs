//! 2,000 idle TCP connections to the API do not stop it from serving: a client still
//! gets `GET /healthz` and an authenticated GET, and the server closes the idle ones after
//! its header timeout (`serve --api-header-timeout-ms`, short here).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::{Duration, Instant};

use iohr_tests::{Backend, Controller, Installation, wait_for};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const IDLE: usize = 2_000;
const HEADER_TIMEOUT_MS: u64 = 5_000;

/// The soft limit on open files raised to the hard one, which must leave room for the
/// idle connections (the controller raises its own the same way).
fn raise_open_file_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).expect("setrlimit");
    }
    assert!(
        hard >= IDLE as u64 + 512,
        "this test needs a hard RLIMIT_NOFILE of at least {} (it is {hard})",
        IDLE + 512
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_connections_do_not_stop_the_api() {
    raise_open_file_limit();
    let install = Installation::new(Backend::Sqlite).await;
    let token = install.token("default", &["reliability:read"], None);
    let timeout = HEADER_TIMEOUT_MS.to_string();
    let controller =
        Controller::start_with(&install, 200, None, &["--api-header-timeout-ms", &timeout]).await;
    let api = iohr_tests::Api::new(&controller.api_url(), &token);

    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(TcpStream::connect(controller.api).await.expect("connect"));
    }
    let opened = Instant::now();

    // While they sit there, a client is answered (each call is bounded by the client).
    let (status, body) = api.with_token(None).get("/healthz").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = api.get("/v1/reliability/runs").await;
    assert_eq!(status, 200, "{body}");
    assert!(body["runs"].is_array(), "{body}");
    // ... while the idle ones were still open (nothing to read yet, not closed).
    let mut buf = [0u8; 64];
    let open = idle
        .iter()
        .filter(|s| matches!(s.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock))
        .count();
    assert_eq!(
        open, IDLE,
        "idle connections still open when the client was answered"
    );

    // The server closes every idle one after the header timeout: each read ends (EOF or
    // reset), none of them sent anything.
    let deadline = Duration::from_millis(HEADER_TIMEOUT_MS) + Duration::from_secs(60);
    let closed = tokio::time::timeout(deadline, async {
        let mut n = 0;
        for stream in &mut idle {
            let mut buf = [0u8; 64];
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => n += 1,
                Ok(got) => panic!("an idle connection was sent {got} bytes"),
            }
        }
        n
    })
    .await
    .expect("every idle connection closed by the server in time");
    assert_eq!(closed, IDLE);
    assert!(
        opened.elapsed() >= Duration::from_millis(HEADER_TIMEOUT_MS),
        "closed by the timeout, not before: {:?}",
        opened.elapsed()
    );
    drop(idle);

    // And it still serves afterwards.
    wait_for(
        "the API after the idle connections",
        Duration::from_secs(30),
        || async { (api.get("/v1/reliability/runs").await.0 == 200).then_some(()) },
    )
    .await;
}
