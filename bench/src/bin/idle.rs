//! `iohr-bench-idle`: does the API still answer while many idle TCP connections sit on
//! it? Against a running controller (`--api http://127.0.0.1:PORT`, plain HTTP):
//!
//! 1. `--requests` sequential requests alternating `GET /healthz` and the authenticated
//!    `GET /v1/reliability/runs`, each on a new connection: the baseline latencies;
//! 2. `--idle` TCP connections opened and left silent;
//! 3. the same requests again while they sit there (the controller must still accept);
//! 4. the time until the controller has closed every idle connection (its header timeout),
//!    or, past `--close-limit-s`, how many it closed.
//!
//! Prints one JSON object: the phases' latencies and the seconds to close the idle ones.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Parser)]
struct Args {
    /// The controller's API, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    api: String,
    /// A token with reliability:read.
    #[arg(long)]
    token: String,
    #[arg(long, default_value_t = 2000)]
    idle: usize,
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// One request's bound; a request slower than this counts as failed.
    #[arg(long, default_value_t = 30)]
    request_limit_s: u64,
    /// How long to wait for the controller to close the idle connections.
    #[arg(long, default_value_t = 120)]
    close_limit_s: u64,
}

async fn get(
    addr: &str,
    path: &str,
    token: Option<&str>,
    limit: Duration,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
        let request =
            format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\n{auth}connection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(limit, exchange)
        .await
        .with_context(|| format!("GET {path}: no answer within {limit:?}"))??;
    if !answer.starts_with(b"HTTP/1.1 200") {
        bail!(
            "GET {path}: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(200)])
        );
    }
    Ok(started.elapsed())
}

async fn phase(
    addr: &str,
    token: &str,
    requests: usize,
    limit: Duration,
) -> anyhow::Result<serde_json::Value> {
    let mut health = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut runs = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut failed = 0;
    let mut first_failure = None;
    for i in 0..requests {
        let (histogram, took) = if i % 2 == 0 {
            (&mut health, get(addr, "/healthz", None, limit).await)
        } else {
            (
                &mut runs,
                get(addr, "/v1/reliability/runs", Some(token), limit).await,
            )
        };
        match took {
            Ok(took) => {
                histogram.saturating_record(u64::try_from(took.as_micros()).unwrap_or(u64::MAX))
            }
            Err(error) => {
                failed += 1;
                first_failure.get_or_insert_with(|| format!("{error:#}"));
            }
        }
    }
    let summary = |h: &Histogram<u64>| {
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        json!({"count": h.len(), "p50_ms": ms(0.5), "p99_ms": ms(0.99), "max_ms": h.max() as f64 / 1000.0})
    };
    Ok(json!({
        "healthz": summary(&health),
        "runs": summary(&runs),
        "failed": failed,
        "first_failure": first_failure,
    }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let addr = args
        .api
        .strip_prefix("http://")
        .context("--api must be an http:// URL")?
        .trim_end_matches('/')
        .to_string();
    {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
        if soft < hard {
            setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
        }
    }
    let limit = Duration::from_secs(args.request_limit_s);
    let baseline = phase(&addr, &args.token, args.requests, limit).await?;

    let opening = Instant::now();
    let mut idle = Vec::with_capacity(args.idle);
    let mut not_opened = None;
    for _ in 0..args.idle {
        // A controller that stopped accepting leaves the backlog full: connect then hangs.
        match tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(&addr)).await {
            Ok(Ok(stream)) => idle.push(stream),
            Ok(Err(error)) => {
                not_opened = Some(error.to_string());
                break;
            }
            Err(_) => {
                not_opened = Some("connect timed out after 3 s".to_string());
                break;
            }
        }
    }
    let opened_s = opening.elapsed().as_secs_f64();
    let opened = Instant::now();
    let with_idle = phase(&addr, &args.token, args.requests, limit).await?;
    let answered_s = opened.elapsed().as_secs_f64();
    let mut buf = [0u8; 1];
    let still_open = idle
        .iter()
        .filter(|s| matches!(s.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock))
        .count();

    let closing = async {
        for stream in &mut idle {
            // EOF or a reset: closed by the controller.
            let _ = stream.read(&mut buf).await;
        }
    };
    let all_closed_s = tokio::time::timeout(Duration::from_secs(args.close_limit_s), closing)
        .await
        .ok()
        .map(|()| opened.elapsed().as_secs_f64());
    let closed = idle
        .iter()
        .filter(|s| !matches!(s.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock))
        .count();

    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "idle_connections": args.idle,
            "idle_opened": idle.len(),
            "why_not_all_opened": not_opened,
            "seconds_to_open_them": opened_s,
            "baseline": baseline,
            "with_idle_connections": with_idle,
            "seconds_for_the_requests_with_idle": answered_s,
            "idle_still_open_after_those_requests": still_open,
            "seconds_until_all_idle_closed": all_closed_s,
            "idle_closed_by_the_controller": closed,
        }))?
    );
    Ok(())
}
