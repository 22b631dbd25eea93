//! `iohr-sample-target`: a small HTTP target for the README quickstart and the end-to-end
//! tests. Its first stdout line is `listening on http://ADDR`, so a test that asked for
//! port 0 learns the real port. It stops on SIGTERM, ctrl-c or after `--max-seconds`,
//! so a forgotten test process cannot outlive its run by long.

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on http://{addr}")?;
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
                Ok((stream, _)) => {
                    tokio::spawn(async move {
                        // A client that goes away mid-request is not this target's problem.
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service_fn(route))
                            .await;
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

async fn route(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path();
    let get = req.method() == Method::GET;
    let response = match path {
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
    };
    Ok(response)
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
