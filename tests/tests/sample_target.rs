//! The sample target's switches, checked from outside with a plain hyper client on
//! loopback: service time, stall windows, injected errors, h2c and HTTPS.
//!
//! Lower bounds are strict (a correct target can never be faster); upper bounds are
//! generous, for a loaded 2-core machine. Stall checks read the target's clock from
//! `/_stats` and retry in a later window when the machine delayed a request past the
//! window it was aimed at.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::{http1, http2};
use hyper::{Request, StatusCode, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use iohr_tests::Target;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;

const LIMIT: Duration = Duration::from_secs(20);

async fn start(args: &[&str]) -> Target {
    Target::start_with(args).await
}

/// One client connection, HTTP/1.1 or HTTP/2.
enum Conn {
    H1(http1::SendRequest<Empty<Bytes>>),
    H2(http2::SendRequest<Empty<Bytes>>),
}

impl Conn {
    async fn h1<I>(io: I) -> Conn
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let (sender, conn) = http1::handshake(io).await.expect("HTTP/1.1 handshake");
        tokio::spawn(conn);
        Conn::H1(sender)
    }

    async fn h2<I>(io: I) -> Conn
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let (sender, conn) = http2::handshake(TokioExecutor::new(), io)
            .await
            .expect("HTTP/2 handshake");
        tokio::spawn(conn);
        Conn::H2(sender)
    }

    async fn plain(target: &Target) -> Conn {
        let tcp = TcpStream::connect(target.addr).await.expect("connect");
        Conn::h1(TokioIo::new(tcp)).await
    }

    /// GET `path`; the status, the HTTP version and the body.
    async fn get(&mut self, target: &Target, path: &str) -> (StatusCode, Version, String) {
        // Absolute form: HTTP/2 needs the scheme and authority, HTTP/1.1 servers take it.
        let request = Request::get(format!("{}{path}", target.url()))
            .header(hyper::header::HOST, target.addr.to_string())
            .body(Empty::new())
            .expect("request");
        let exchange = async {
            // A keep-alive connection takes the next request once the last one is done
            // with, which `ready` waits for.
            let response = match self {
                Conn::H1(sender) => match sender.ready().await {
                    Ok(()) => sender.send_request(request).await,
                    Err(e) => Err(e),
                },
                Conn::H2(sender) => match sender.ready().await {
                    Ok(()) => sender.send_request(request).await,
                    Err(e) => Err(e),
                },
            }
            .expect("response");
            let (status, version) = (response.status(), response.version());
            let body = response
                .into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes();
            (status, version, String::from_utf8_lossy(&body).into_owned())
        };
        tokio::time::timeout(LIMIT, exchange)
            .await
            .unwrap_or_else(|_| panic!("GET {path} took more than {LIMIT:?}"))
    }

    async fn stats(&mut self, target: &Target) -> Value {
        let (status, _, body) = self.get(target, "/_stats").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        serde_json::from_str(&body).expect("/_stats JSON")
    }
}

fn count(stats: &Value, name: &str) -> u64 {
    stats[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} in {stats}"))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_time_delays_every_answer_without_queueing() {
    let service_ms = 250.5;
    let target = start(&["--service-ms", "250.5"]).await;
    let mut conn = Conn::plain(&target).await;
    for path in ["/", "/health", "/status/404"] {
        let sent = Instant::now();
        let (status, _, _) = conn.get(&target, path).await;
        let took = ms(sent.elapsed());
        assert!(status == StatusCode::OK || path == "/status/404");
        assert!(took >= service_ms, "{path} answered after {took} ms");
    }

    // Ten at once on ten connections: served concurrently they take one service time;
    // queued they would take ten (2.5 s).
    let sent = Instant::now();
    let answers = futures_util::future::join_all((0..10).map(|_| async {
        let mut conn = Conn::plain(&target).await;
        let sent = Instant::now();
        let (status, _, _) = conn.get(&target, "/").await;
        (status, ms(sent.elapsed()))
    }))
    .await;
    let total = ms(sent.elapsed());
    for (status, took) in answers {
        assert_eq!(status, StatusCode::OK);
        assert!(took >= service_ms, "answered after {took} ms");
    }
    assert!(total < 2000.0, "ten concurrent requests took {total} ms");

    let stats = conn.stats(&target).await;
    assert_eq!(count(&stats, "requests"), 13, "{stats}");
    assert_eq!(count(&stats, "errors"), 0, "{stats}");
    assert_eq!(count(&stats, "stalled"), 0, "{stats}");
}

/// The target's clock from here: `target_ms - local_ms` lies in [lo, hi], local time being
/// milliseconds since `zero`.
struct Clock {
    zero: Instant,
    lo: f64,
    hi: f64,
}

impl Clock {
    /// Intersects the bounds of several `/_stats` probes (`/_stats` is never stalled).
    async fn read(target: &Target, conn: &mut Conn) -> Clock {
        let zero = Instant::now();
        let (mut lo, mut hi) = (f64::MIN, f64::MAX);
        for _ in 0..20 {
            let before = ms(zero.elapsed());
            let stats = conn.stats(target).await;
            let after = ms(zero.elapsed());
            let uptime = stats["uptime_ms"].as_f64().expect("uptime_ms");
            lo = lo.max(uptime - after);
            hi = hi.min(uptime - before);
            if hi - lo < 5.0 {
                break;
            }
        }
        assert!(lo <= hi, "inconsistent clock bounds [{lo}, {hi}]");
        Clock { zero, lo, hi }
    }

    fn local_now(&self) -> f64 {
        ms(self.zero.elapsed())
    }

    /// The local instant at which the target's clock reads at least `target_ms`.
    fn local_instant(&self, target_ms: f64) -> Instant {
        self.zero
            + Duration::try_from_secs_f64(((target_ms - self.lo) / 1000.0).max(0.0))
                .expect("a test's instants are seconds apart")
    }
}

/// Sends GET / when the target's clock reads `offset_ms` past the start of a stall window
/// (negative: before it) and checks the answer does not come before the window ends. A
/// request the machine delayed past the window is not held: then the next window is tried.
async fn held_until_the_window_ends(args: &[&str], every: f64, stall: f64, offset_ms: f64) {
    let target = start(args).await;
    let mut observer = Conn::plain(&target).await;
    let mut conn = Conn::plain(&target).await;
    let clock = Clock::read(&target, &mut observer).await;
    assert!(
        clock.hi - clock.lo < 100.0,
        "could not read the target's clock closer than {} ms",
        clock.hi - clock.lo
    );
    for _attempt in 0..5 {
        // The first window at least 50 ms ahead of the latest the target can be now.
        let ahead = clock.local_now() + clock.hi + 50.0 - offset_ms;
        let window = (ahead / every).ceil().max(1.0) * every;
        let end = window + stall;
        let before = count(&observer.stats(&target).await, "stalled");
        // Waiting for the moment under test is the behaviour under test, not a sync.
        tokio::time::sleep_until(clock.local_instant(window + offset_ms)).await;
        let (status, _, _) = conn.get(&target, "/").await;
        let answered = clock.local_now();
        let after = count(&observer.stats(&target).await, "stalled");
        assert_eq!(status, StatusCode::OK);
        if after == before {
            eprintln!("the request missed the window at {window} ms; trying the next one");
            continue;
        }
        assert_eq!(after, before + 1);
        // The target answered at its time >= end; we read the answer later still.
        assert!(
            answered + clock.hi >= end,
            "answered at target time <= {} ms, before the window's end at {end} ms",
            answered + clock.hi
        );
        assert!(
            answered + clock.lo <= end + 2000.0,
            "answered at target time >= {} ms, long after the window's end at {end} ms",
            answered + clock.lo
        );
        return;
    }
    panic!("no request reached the target inside a stall window in 5 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_arriving_in_a_stall_is_answered_when_the_window_ends() {
    let args = ["--stall-every-ms", "400", "--stall-ms", "200"];
    held_until_the_window_ends(&args, 400.0, 200.0, 20.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_due_in_a_stall_is_held_until_the_window_ends() {
    // Arrives 50 ms before the window, ready 50 ms into it.
    let args = [
        "--stall-every-ms",
        "400",
        "--stall-ms",
        "200",
        "--service-ms",
        "100",
    ];
    held_until_the_window_ends(&args, 400.0, 200.0, -50.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_between_stalls_are_not_held() {
    let target = start(&["--stall-every-ms", "400", "--stall-ms", "200"]).await;
    let mut observer = Conn::plain(&target).await;
    let mut conn = Conn::plain(&target).await;
    let clock = Clock::read(&target, &mut observer).await;
    // Aimed at 50 ms into the 200 ms between two windows; a machine can delay one past
    // the next window's start, not all five.
    for _attempt in 0..5 {
        let ahead = clock.local_now() + clock.hi + 50.0;
        let window = (ahead / 400.0).ceil().max(1.0) * 400.0;
        let before = count(&observer.stats(&target).await, "stalled");
        tokio::time::sleep_until(clock.local_instant(window + 250.0)).await;
        let (status, _, _) = conn.get(&target, "/").await;
        assert_eq!(status, StatusCode::OK);
        if count(&observer.stats(&target).await, "stalled") == before {
            return;
        }
    }
    panic!("every request sent between stall windows was held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_percent_fails_exactly_that_many_of_every_hundred() {
    let target = start(&["--error-percent", "10"]).await;
    let mut conn = Conn::plain(&target).await;
    for round in 1..=2u64 {
        let mut statuses = Vec::new();
        for _ in 0..100 {
            statuses.push(conn.get(&target, "/").await.0);
        }
        let errors: Vec<usize> = statuses
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == StatusCode::INTERNAL_SERVER_ERROR)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(errors, (0..10).collect::<Vec<_>>(), "round {round}");
        assert!(
            statuses[10..].iter().all(|s| *s == StatusCode::OK),
            "{statuses:?}"
        );
        let stats = conn.stats(&target).await;
        assert_eq!(count(&stats, "requests"), 100 * round, "{stats}");
        assert_eq!(count(&stats, "errors"), 10 * round, "{stats}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_serves_h2c_and_http1_on_one_port() {
    let target = start(&["--http2"]).await;
    let tcp = TcpStream::connect(target.addr).await.expect("connect");
    let mut h2 = Conn::h2(TokioIo::new(tcp)).await;
    let (status, version, body) = h2.get(&target, "/").await;
    assert_eq!(
        (status, version, body.as_str()),
        (StatusCode::OK, Version::HTTP_2, "ok")
    );

    let mut h1 = Conn::plain(&target).await;
    let (status, version, body) = h1.get(&target, "/").await;
    assert_eq!(
        (status, version, body.as_str()),
        (StatusCode::OK, Version::HTTP_11, "ok")
    );
    assert_eq!(count(&h1.stats(&target).await, "requests"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http1_target_refuses_prior_knowledge_http2() {
    let target = start(&[]).await;
    let tcp = TcpStream::connect(target.addr).await.expect("connect");
    let (mut sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
        .await
        .expect("the client side of the handshake does not wait for the server");
    tokio::spawn(conn);
    let request = Request::get(format!("{}/", target.url()))
        .body(Empty::<Bytes>::new())
        .expect("request");
    let answer = tokio::time::timeout(LIMIT, sender.send_request(request))
        .await
        .expect("an answer or an error in time");
    assert!(answer.is_err(), "HTTP/2 without --http2: {answer:?}");
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "iohr-sample-target-tls-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: a leftover temp dir is harmless.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tls_connector(ca: &Path, alpn: &[&[u8]]) -> TlsConnector {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("ca.pem") {
        roots.add(cert.expect("a CA certificate")).expect("add CA");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

/// A TLS connection to `target` checked against `ca` for `name`; the ALPN protocol chosen.
async fn tls_conn(target: &Target, ca: &Path, name: &str, alpn: &[&[u8]]) -> (Conn, Vec<u8>) {
    let tcp = TcpStream::connect(target.addr).await.expect("connect");
    let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).expect("name");
    let tls = tls_connector(ca, alpn)
        .connect(server_name, tcp)
        .await
        .expect("TLS handshake");
    let chosen = tls.get_ref().1.alpn_protocol().unwrap_or_default().to_vec();
    let conn = if chosen == b"h2" {
        Conn::h2(TokioIo::new(tls)).await
    } else {
        Conn::h1(TokioIo::new(tls)).await
    };
    (conn, chosen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_made_tls_dir_then_served_from_it() {
    let dir = TempDir::new();
    let dir_arg = dir.0.to_str().expect("UTF-8 temp dir");
    let ca = dir.0.join("ca.pem");

    // --make-tls-dir with --http2: ALPN offers h2 and http/1.1.
    let target = start(&["--make-tls-dir", dir_arg, "--http2"]).await;
    assert_eq!(target.scheme, "https");
    for name in ["127.0.0.1", "localhost"] {
        let (mut conn, alpn) = tls_conn(&target, &ca, name, &[b"h2", b"http/1.1"]).await;
        assert_eq!(alpn, b"h2");
        let (status, version, body) = conn.get(&target, "/").await;
        assert_eq!(
            (status, version, body.as_str()),
            (StatusCode::OK, Version::HTTP_2, "ok")
        );
    }
    let (mut conn, alpn) = tls_conn(&target, &ca, "127.0.0.1", &[b"http/1.1"]).await;
    assert_eq!(alpn, b"http/1.1");
    let (status, version, _) = conn.get(&target, "/health").await;
    assert_eq!((status, version), (StatusCode::OK, Version::HTTP_11));
    assert_eq!(count(&conn.stats(&target).await, "requests"), 3);
    drop(target);

    // --tls-dir without --http2: HTTP/1.1 only, even when the client offers h2.
    let target = start(&["--tls-dir", dir_arg]).await;
    assert_eq!(target.scheme, "https");
    let (mut conn, alpn) = tls_conn(&target, &ca, "127.0.0.1", &[b"h2", b"http/1.1"]).await;
    assert_eq!(alpn, b"http/1.1");
    let (status, version, body) = conn.get(&target, "/").await;
    assert_eq!(
        (status, version, body.as_str()),
        (StatusCode::OK, Version::HTTP_11, "ok")
    );

    // A second --make-tls-dir on the same dir refuses to replace the CA.
    let refused = std::process::Command::new(iohr_tests::process::bin("iohr-sample-target"))
        .args(["--listen", "127.0.0.1:0", "--max-seconds", "5"])
        .args(["--make-tls-dir", dir_arg])
        .output()
        .expect("run iohr-sample-target");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("refusing to overwrite a CA"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
