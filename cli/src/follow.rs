//! Following a run's live stream (`GET /v1/reliability/runs/{id}/events`) until its
//! `finished` frame, reconnecting with `Last-Event-ID` when the connection drops.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use http_body_util::BodyExt;
use iohr_domain::Frame;
use serde::Deserialize;
use serde_json::Value;

use crate::client::{Api, segment};
use crate::error::{Failure, Result, chain};
use crate::output::note;
use iohr_cli::sse::SseParser;

/// Reconnects in a row without receiving a new frame before giving up.
const MAX_RECONNECTS: u32 = 8;
/// Without a byte (frames or keep-alive comments) for this long the connection is
/// treated as dead: a half-open TCP connection would otherwise hang forever.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
const DEFAULT_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Where the stream has got to; survives reconnects.
#[derive(Debug, Default)]
struct Position {
    /// The SSE id of the last frame handled, sent back as `Last-Event-ID`.
    last_id: Option<String>,
    /// The last frame number handled: a server that resumes inclusively (or replays)
    /// must not make us print a frame twice.
    last_number: Option<u64>,
    /// Whether the current connection delivered a new frame.
    progressed: bool,
    retry: Option<Duration>,
}

/// Calls `on_frame` with each new frame (the raw JSON and its parsed form), in order,
/// once each, and returns after the `finished` frame. `after` starts the stream after
/// that frame number instead of at the start. `chatty` notes reconnects on stderr.
pub async fn follow(
    api: &Api,
    run_id: &str,
    after: Option<u64>,
    chatty: bool,
    mut on_frame: impl FnMut(&Value, &Frame) -> Result<()>,
) -> Result<()> {
    let path = format!(
        "/v1/reliability/runs/{}/events",
        segment("the run ID", run_id)?
    );
    let mut at = Position {
        last_id: after.map(|n| n.to_string()),
        last_number: after,
        ..Position::default()
    };
    let mut attempts = 0u32;
    loop {
        at.progressed = false;
        let outcome = connection(api, &path, &mut at, &mut on_frame).await;
        let why = match outcome {
            Ok(true) => return Ok(()),
            Ok(false) => "the stream ended before the run finished".to_string(),
            Err(failure) if failure.retryable => failure.to_string(),
            Err(failure) => return Err(failure),
        };
        attempts = if at.progressed { 1 } else { attempts + 1 };
        if attempts > MAX_RECONNECTS {
            return Err(Failure::transport(format!(
                "event stream of run {run_id}: {why}; gave up after {MAX_RECONNECTS} reconnects without a new frame"
            )));
        }
        if chatty {
            note(&format!(
                "stream interrupted ({why}); reconnecting after frame {}",
                at.last_id.as_deref().unwrap_or("none")
            ));
        }
        tokio::time::sleep(backoff(attempts, at.retry)).await;
    }
}

/// The first reconnect after progress is immediate; then the server's `retry:` (or
/// 250 ms), doubling, capped: backon's delays, as the agent's, but without jitter: one
/// person's stream, paced by the server's `retry:`.
fn backoff(attempt: u32, server: Option<Duration>) -> Duration {
    if attempt <= 1 {
        return Duration::ZERO;
    }
    let base = server.unwrap_or(DEFAULT_BACKOFF).min(MAX_BACKOFF);
    ExponentialBuilder::new()
        .with_min_delay(base)
        .with_max_delay(MAX_BACKOFF)
        .without_max_times()
        .build()
        .nth((attempt - 2).min(16) as usize)
        .unwrap_or(MAX_BACKOFF)
}

/// One connection: `Ok(true)` after `finished`, `Ok(false)` on a clean end before it.
async fn connection(
    api: &Api,
    path: &str,
    at: &mut Position,
    on_frame: &mut impl FnMut(&Value, &Frame) -> Result<()>,
) -> Result<bool> {
    let response = api.open_stream(path, at.last_id.as_deref()).await?;
    let mut body = response.into_body();
    let mut parser = SseParser::new();
    loop {
        let next = tokio::time::timeout(IDLE_TIMEOUT, body.frame())
            .await
            .map_err(|_| {
                Failure::transport(format!(
                    "no data on the event stream for {} s",
                    IDLE_TIMEOUT.as_secs()
                ))
            })?;
        let ended = next.is_none();
        let events = match next {
            None => parser.finish(),
            Some(Err(e)) => {
                return Err(Failure::transport(format!(
                    "event stream broke: {}",
                    chain(&e)
                )));
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(bytes) => parser
                    .push(&bytes)
                    .map_err(|e| Failure::protocol(e.to_string()))?,
                Err(_trailers) => Vec::new(),
            },
        };
        at.retry = parser.retry().or(at.retry);
        for event in events {
            let raw: Value = serde_json::from_str(&event.data).map_err(|e| {
                Failure::protocol(format!("event {} carries no JSON frame: {e}", event.event))
            })?;
            let frame = Frame::deserialize(&raw).map_err(|e| {
                Failure::protocol(format!("event {} is not a frame: {e}", event.event))
            })?;
            if at.last_number.is_some_and(|n| frame.number <= n) {
                continue;
            }
            on_frame(&raw, &frame)?;
            at.last_number = Some(frame.number);
            at.last_id = Some(event.id.unwrap_or_else(|| frame.number.to_string()));
            at.progressed = true;
            if frame.kind == "finished" || event.event == "finished" {
                return Ok(true);
            }
        }
        if ended {
            return Ok(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_starts_at_once_then_doubles_to_a_cap() {
        assert_eq!(backoff(1, None), Duration::ZERO);
        assert_eq!(backoff(2, None), Duration::from_millis(250));
        assert_eq!(backoff(3, None), Duration::from_millis(500));
        assert_eq!(backoff(30, None), MAX_BACKOFF);
        assert_eq!(
            backoff(2, Some(Duration::from_secs(1))),
            Duration::from_secs(1)
        );
        assert_eq!(backoff(2, Some(Duration::from_secs(60))), MAX_BACKOFF);
    }
}
