//! `iohr-sample-target`: a small HTTP target for the README quickstart, the end-to-end
//! tests and the load benchmarks. Its first stdout line is `listening on http://ADDR`
//! (`https://` with TLS), so a test that asked for port 0 learns the real port. It stops on
//! SIGTERM, ctrl-c or after `--max-seconds`, so a forgotten test process cannot outlive
//! its run by long.
//!
//! Switches, all off by default, make it behave like a server under test:
//! - `--service-ms N`: every answer takes N ms (a delay; requests are served concurrently).
//! - `--workers W` (with `--service-ms N`): at most W requests are served at once, the
//!   rest wait in one FIFO queue, so the target's capacity is exactly W * 1000 / N
//!   requests per second: each worker's next answer is due N ms after its previous one
//!   (or after the request's arrival when it was idle), never later for a late wake-up.
//!   Below that rate an answer takes N ms; above it the queue, and the latency, grow.
//! - `--stall-every-ms P --stall-ms S`: no answer during [k*P, k*P+S) after start, k >= 1.
//! - `--stall-once-at-ms T --stall-ms S`: no answer during [T, T+S) after the first request
//!   (a load run's start, whenever the run is leased): one stall, as a GC pause makes it.
//! - `--error-percent P`: of every 100 requests, the first P are answered `500`.
//! - `--http2`: prior-knowledge HTTP/2 (h2c, or ALPN `h2` with TLS) besides HTTP/1.1.
//! - `--tls-dir DIR` / `--make-tls-dir DIR`: HTTPS with `DIR/server.pem` + `DIR/server.key`.
//!
//! - `--request-log FILE`: one JSON line per request as it arrives, `{"at_ms", "from",
//!   "path"}` (the wall clock in ms since the epoch, the client's IP, path and query): the
//!   target's own record of who sent what when, which the partition tests' checker reads.
//!
//! `GET /_stats` answers `{"requests":N,"errors":N,"stalled":N,"uptime_ms":X}`. It is the
//! observer's route: no switch applies to it and it is not counted, so a test can read
//! the counts and the target's clock in the middle of a stall.

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::rt::{Read as HyperRead, Write as HyperWrite};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

#[derive(Debug, Parser)]
#[command(
    name = "iohr-sample-target",
    about = "A small HTTP target to run checks against"
)]
struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Stop on its own after this many seconds.
    #[arg(long, default_value_t = 3600)]
    max_seconds: u64,
    /// Service time of every request, in milliseconds (fractions allowed): a delay
    /// before the answer; requests are served concurrently, not queued.
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    service_ms: f64,
    /// Serve at most W requests at once (with --service-ms N), queueing the rest: a
    /// capacity of W * 1000 / N requests per second.
    #[arg(long, value_name = "W", requires = "service_ms",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    workers: Option<u32>,
    /// Stall period in milliseconds: from the server's start, no request is answered
    /// during [k*P, k*P+S) for k = 1, 2, ... (with --stall-ms S).
    #[arg(long, value_name = "P", requires = "stall_ms")]
    stall_every_ms: Option<u64>,
    /// Length of each stall in milliseconds (with --stall-every-ms P, S < P; or with
    /// --stall-once-at-ms T).
    #[arg(long, value_name = "S")]
    stall_ms: Option<u64>,
    /// One stall only: no request is answered during [T, T+S) counted from the first
    /// request the server receives (with --stall-ms S).
    #[arg(
        long,
        value_name = "T",
        requires = "stall_ms",
        conflicts_with = "stall_every_ms"
    )]
    stall_once_at_ms: Option<u64>,
    /// Of every 100 requests (by arrival), the first P are answered 500.
    #[arg(long, value_name = "P", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    error_percent: u8,
    /// Serve prior-knowledge HTTP/2 (h2c; ALPN h2 with TLS) as well as HTTP/1.1.
    #[arg(long)]
    http2: bool,
    /// Append one JSON line per request (`at_ms`, `from`, `path`) to FILE as it arrives.
    #[arg(long, value_name = "FILE")]
    request_log: Option<PathBuf>,
    /// Serve HTTPS with DIR/server.pem (chain) and DIR/server.key.
    #[arg(long, value_name = "DIR", conflicts_with = "make_tls_dir")]
    tls_dir: Option<PathBuf>,
    /// Write a fresh CA (DIR/ca.pem) and a server certificate for 127.0.0.1, ::1 and
    /// localhost into DIR, then serve HTTPS from it. Refuses a DIR that already has a CA.
    #[arg(long, value_name = "DIR")]
    make_tls_dir: Option<PathBuf>,
}

/// Stall windows, measured from the server's start.
#[derive(Debug, Clone, Copy)]
struct Stalls {
    every: Duration,
    length: Duration,
}

impl Stalls {
    /// The end of the stall window `since_start` falls in, if any (k = 0 is skipped).
    fn window_end(&self, since_start: Duration) -> Option<Duration> {
        let every = self.every.as_nanos();
        let now = since_start.as_nanos();
        let k = now / every;
        let into = now % every;
        if k == 0 || into >= self.length.as_nanos() {
            return None;
        }
        // k*every + length fits: it is at most one period past `now`, itself a Duration.
        Some(since_start - Duration::from_nanos(into as u64) + self.length)
    }
}

struct State {
    started: Instant,
    service: Duration,
    /// With `--workers`: when each worker is next free.
    workers: Option<std::sync::Mutex<Vec<Instant>>>,
    stalls: Option<Stalls>,
    /// With `--stall-once-at-ms`: the one stall, from the first request, and that
    /// request's arrival.
    stall_once: Option<(Duration, Duration)>,
    first_request: std::sync::OnceLock<Instant>,
    error_percent: u64,
    requests: AtomicU64,
    errors: AtomicU64,
    stalled: AtomicU64,
    /// With `--request-log`: the file, one `write` per line (opened to append).
    request_log: Option<std::sync::Mutex<std::fs::File>>,
}

impl State {
    /// Waits while the server is in a stall window; true if it had to.
    async fn hold_while_stalled(&self) -> bool {
        if let Some((at, length)) = self.stall_once {
            let first = *self.first_request.get_or_init(Instant::now);
            let (start, end) = (first + at, first + at + length);
            let now = Instant::now();
            if now >= start && now < end {
                tokio::time::sleep_until(end).await;
                return true;
            }
            return false;
        }
        let Some(stalls) = self.stalls else {
            return false;
        };
        let mut held = false;
        // A loop, not one sleep: waking exactly at a window's end is outside it, but a
        // late wake-up must not land in the next window unnoticed.
        while let Some(end) = stalls.window_end(self.started.elapsed()) {
            held = true;
            tokio::time::sleep_until(self.started + end).await;
        }
        held
    }

    /// When this request's answer is due: N ms from now, or with `--workers`, N ms after
    /// the earliest-free worker is free (taking that worker).
    fn answer_due(&self, now: Instant) -> Instant {
        let Some(workers) = &self.workers else {
            return now + self.service;
        };
        // A poisoned lock only means another request panicked: the times are still valid.
        let mut free = workers.lock().unwrap_or_else(|e| e.into_inner());
        let Some(earliest) = free.iter_mut().min() else {
            return now + self.service;
        };
        let due = (*earliest).max(now) + self.service;
        *earliest = due;
        due
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let state = Arc::new(state_from(&args)?);
    let tls = match (&args.tls_dir, &args.make_tls_dir) {
        (Some(dir), _) => Some(tls_acceptor(dir, args.http2)?),
        (None, Some(dir)) => {
            let pki = iohr_certs::ControllerPki {
                dir: dir.to_path_buf(),
            };
            iohr_certs::init(&pki, &[]).with_context(|| {
                format!("making a CA and server certificate in {}", dir.display())
            })?;
            Some(tls_acceptor(dir, args.http2)?)
        }
        (None, None) => None,
    };
    eprintln!("switches: {}", describe(&args));

    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {scheme}://{addr}")?;
        // Tests block on this line; stdout to a pipe is block-buffered.
        out.flush()?;
    }

    let shutdown = shutdown(Duration::from_secs(args.max_seconds));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            why = &mut shutdown => {
                eprintln!("stopping: {}", why?);
                return Ok(());
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let state = state.clone();
                    let tls = tls.clone();
                    let http2 = args.http2;
                    tokio::spawn(async move {
                        match tls {
                            Some(acceptor) => {
                                // A failed handshake is the client's problem, not a reason to stop.
                                if let Ok(stream) = acceptor.accept(stream).await {
                                    serve(TokioIo::new(stream), http2, state, peer).await;
                                }
                            }
                            None => serve(TokioIo::new(stream), http2, state, peer).await,
                        }
                    });
                }
                Err(e) => {
                    eprintln!("accept failed: {e}");
                    // Out of descriptors and the like: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

fn state_from(args: &Args) -> anyhow::Result<State> {
    if !args.service_ms.is_finite() || args.service_ms < 0.0 {
        bail!("--service-ms must be a number of milliseconds >= 0");
    }
    let stalls = match (args.stall_every_ms, args.stall_ms) {
        (Some(every), Some(length)) => {
            if length >= every {
                bail!("--stall-ms ({length}) must be shorter than --stall-every-ms ({every})");
            }
            Some(Stalls {
                every: Duration::from_millis(every),
                length: Duration::from_millis(length),
            })
        }
        (Some(_), None) => bail!("--stall-every-ms needs --stall-ms"),
        (None, Some(_)) if args.stall_once_at_ms.is_none() => {
            bail!("--stall-ms needs --stall-every-ms or --stall-once-at-ms")
        }
        (None, _) => None,
    };
    let stall_once = args
        .stall_once_at_ms
        .zip(args.stall_ms)
        .map(|(at, length)| (Duration::from_millis(at), Duration::from_millis(length)));
    let started = Instant::now();
    if args.workers.is_some() && args.service_ms <= 0.0 {
        bail!("--workers needs a --service-ms above 0");
    }
    Ok(State {
        started,
        service: Duration::try_from_secs_f64(args.service_ms / 1000.0)
            .map_err(|e| anyhow::anyhow!("--service-ms {}: {e}", args.service_ms))?,
        workers: args
            .workers
            .map(|w| std::sync::Mutex::new(vec![started; w as usize])),
        stalls,
        stall_once,
        first_request: std::sync::OnceLock::new(),
        error_percent: u64::from(args.error_percent),
        requests: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        stalled: AtomicU64::new(0),
        request_log: args
            .request_log
            .as_ref()
            .map(|path| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("opening --request-log {}", path.display()))
            })
            .transpose()?
            .map(std::sync::Mutex::new),
    })
}

fn describe(args: &Args) -> String {
    let stall = match (args.stall_every_ms, args.stall_ms) {
        (Some(every), Some(length)) => format!("{length} ms every {every} ms"),
        (None, Some(length)) => format!(
            "{length} ms once, {} ms after the first request",
            args.stall_once_at_ms.unwrap_or_default()
        ),
        _ => "off".to_string(),
    };
    let tls = match (&args.tls_dir, &args.make_tls_dir) {
        (Some(dir), _) => dir.display().to_string(),
        (None, Some(dir)) => format!("{} (made now)", dir.display()),
        (None, None) => "off".to_string(),
    };
    let workers = args
        .workers
        .map_or("unlimited".to_string(), |w| w.to_string());
    format!(
        "service-ms={} workers={workers} stall={stall} error-percent={} http2={} tls={tls}",
        args.service_ms,
        args.error_percent,
        if args.http2 { "on" } else { "off" },
    )
}

/// rustls with the ring provider given explicitly: the process default is never installed.
fn tls_acceptor(dir: &Path, http2: bool) -> anyhow::Result<TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let cert_path = dir.join("server.pem");
    let key_path = dir.join("server.key");
    let certs = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading {}", cert_path.display()))?;
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .with_context(|| format!("reading {}", key_path.display()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("TLS protocol versions")?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .context("TLS server certificate and key")?;
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(TlsAcceptor::from(Arc::new(config)))
}

async fn serve<I>(io: I, http2: bool, state: Arc<State>, peer: SocketAddr)
where
    I: HyperRead + HyperWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| handle(state.clone(), req, peer));
    // A client that goes away mid-request is not this target's problem.
    if http2 {
        let _ = auto::Builder::new(TokioExecutor::new())
            .serve_connection(io, service)
            .await;
    } else {
        let _ = http1::Builder::new().serve_connection(io, service).await;
    }
}

/// The switches around the routes: count, hold while stalled, service time, injected
/// error, hold again if the answer is ready inside a stall.
async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.uri().path() == "/_stats" && req.method() == Method::GET {
        return Ok(stats(&state));
    }
    if let Some(log) = &state.request_log {
        log_request(log, &req, peer);
    }
    let n = state.requests.fetch_add(1, Ordering::Relaxed);
    let inject_error = n % 100 < state.error_percent;
    let mut held = state.hold_while_stalled().await;
    if !state.service.is_zero() {
        // A thread sleep, not tokio's 1 ms timer wheel: the wheel would round every service
        // time up to a tick whose phase against the client's schedule changes from run to
        // run, and two runs of one target would differ by up to a millisecond.
        let due = state.answer_due(Instant::now()).into_std();
        let _ = tokio::task::spawn_blocking(move || {
            std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()))
        })
        .await;
    }
    let response = if inject_error {
        reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            "injected error".to_string(),
        )
    } else {
        route(req).await
    };
    held |= state.hold_while_stalled().await;
    if held {
        state.stalled.fetch_add(1, Ordering::Relaxed);
    }
    if response.status().is_server_error() {
        state.errors.fetch_add(1, Ordering::Relaxed);
    }
    Ok(response)
}

/// One line per request, as it arrives. A failed write is reported, not fatal: the
/// target keeps serving, and a test reading the log sees the line missing.
fn log_request(log: &std::sync::Mutex<std::fs::File>, req: &Request<Incoming>, peer: SocketAddr) {
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path(), |p| p.as_str());
    let mut line = serde_json::json!({"at_ms": at_ms, "from": peer.ip().to_string(), "path": path})
        .to_string();
    line.push('\n');
    // A poisoned lock only means another request panicked: the file is still good.
    let mut file = log.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = file.write_all(line.as_bytes()) {
        eprintln!("request log: {e}");
    }
}

fn stats(state: &State) -> Response<Full<Bytes>> {
    let body = serde_json::json!({
        "requests": state.requests.load(Ordering::Relaxed),
        "errors": state.errors.load(Ordering::Relaxed),
        "stalled": state.stalled.load(Ordering::Relaxed),
        "uptime_ms": state.started.elapsed().as_secs_f64() * 1000.0,
    });
    reply(StatusCode::OK, "application/json", body.to_string())
}

/// Resolves with the reason to stop.
async fn shutdown(limit: Duration) -> anyhow::Result<&'static str> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "ctrl-c",
        _ = tokio::time::sleep(limit) => "--max-seconds reached",
    })
}

async fn route(req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let get = req.method() == Method::GET;
    match path {
        "/" if get => reply(StatusCode::OK, "text/plain", "ok".to_string()),
        "/health" if get => reply(
            StatusCode::OK,
            "application/json",
            r#"{"status":"ok"}"#.to_string(),
        ),
        "/slow" => {
            let ms = query_param(req.uri().query(), "ms")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            reply(StatusCode::OK, "text/plain", format!("slept {ms} ms"))
        }
        "/headers" => {
            // Names only: values may be credentials, and this body may end up in a log.
            let mut names: Vec<&str> = req.headers().keys().map(|k| k.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            reply(StatusCode::OK, "text/plain", names.join("\n"))
        }
        _ => match path.strip_prefix("/status/").map(status_code) {
            Some(Some(code)) => reply(code, "text/plain", code.to_string()),
            Some(None) => reply(
                StatusCode::BAD_REQUEST,
                "text/plain",
                "status must be a number from 200 to 599".to_string(),
            ),
            None => reply(StatusCode::NOT_FOUND, "text/plain", "not found".to_string()),
        },
    }
}

/// Final statuses only: a 1xx is not a complete response.
fn status_code(text: &str) -> Option<StatusCode> {
    let code: u16 = text.parse().ok()?;
    (200..=599)
        .contains(&code)
        .then(|| StatusCode::from_u16(code).ok())
        .flatten()
}

fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_queue_requests_at_exactly_their_capacity() {
        let args = Args::parse_from(["t", "--service-ms", "10", "--workers", "2"]);
        let state = state_from(&args).expect("state");
        let t0 = state.started + Duration::from_secs(1);
        let ms = Duration::from_millis;
        let due: Vec<Duration> = (0..5).map(|_| state.answer_due(t0) - t0).collect();
        assert_eq!(due, vec![ms(10), ms(10), ms(20), ms(20), ms(30)]);
        // An idle worker starts from the arrival, not from when it was last busy.
        let later = t0 + ms(100);
        assert_eq!(state.answer_due(later) - later, ms(10));
        let unlimited = state_from(&Args::parse_from(["t", "--service-ms", "10"])).expect("s");
        assert!((0..5).all(|_| unlimited.answer_due(t0) - t0 == ms(10)));
    }

    #[test]
    fn stall_windows_skip_the_first_period_and_end_on_time() {
        let stalls = Stalls {
            every: Duration::from_millis(400),
            length: Duration::from_millis(200),
        };
        let ms = Duration::from_millis;
        assert_eq!(stalls.window_end(ms(0)), None);
        assert_eq!(stalls.window_end(ms(199)), None);
        assert_eq!(stalls.window_end(ms(399)), None);
        assert_eq!(stalls.window_end(ms(400)), Some(ms(600)));
        assert_eq!(stalls.window_end(ms(599)), Some(ms(600)));
        assert_eq!(stalls.window_end(ms(600)), None);
        assert_eq!(stalls.window_end(ms(799)), None);
        assert_eq!(stalls.window_end(ms(800)), Some(ms(1000)));
        assert_eq!(stalls.window_end(ms(999)), Some(ms(1000)));
        assert_eq!(stalls.window_end(ms(1000)), None);
        // A month in: still whole windows, no drift.
        let month = ms(30 * 24 * 3600 * 1000);
        assert_eq!(stalls.window_end(month + ms(150)), Some(month + ms(200)));
        assert_eq!(stalls.window_end(month + ms(200)), None);
    }
}
