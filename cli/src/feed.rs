//! `iohr reliability events`: follows the account's product events
//! (`GET /v1/reliability/events`), one line each, reconnecting with `Last-Event-ID`
//! when the connection drops. Runs until interrupted, or until `--count` events.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use clap::Args;
use http_body_util::BodyExt;
use serde_json::Value;

use crate::Ctx;
use crate::error::{Failure, Result, chain};
use crate::output::{clean, emit, emit_json, note};
use iohr_cli::sse::SseParser;

/// Reconnects in a row without a new event before giving up.
const MAX_RECONNECTS: u32 = 8;
/// The server sends a keep-alive comment every 15 s: silence this long is a dead link.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// Start after this event seq (the SSE id) instead of at the account's first event.
    #[arg(long, value_name = "SEQ")]
    pub after: Option<u64>,
    /// Exit after this many events.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
}

pub async fn execute(ctx: &Ctx, args: EventsArgs) -> Result<u8> {
    let mut last = args.after;
    let mut left = args.count;
    let mut failures = 0u32;
    let mut waits = backoff();
    loop {
        let mut progressed = false;
        let outcome = connection(ctx, &mut last, &mut left, &mut progressed).await;
        let why = match outcome {
            Ok(true) => return Ok(0),
            Ok(false) => "the stream ended".to_string(),
            Err(failure) if failure.retryable => failure.to_string(),
            Err(failure) => return Err(failure),
        };
        if progressed {
            failures = 0;
            waits = backoff();
        }
        failures += 1;
        if failures > MAX_RECONNECTS {
            return Err(Failure::transport(format!(
                "event feed: {why}; gave up after {MAX_RECONNECTS} reconnects without a new event"
            )));
        }
        note(&format!(
            "feed interrupted ({why}); reconnecting after event {}",
            last.map_or("none".to_string(), |n| n.to_string())
        ));
        tokio::time::sleep(waits.next().unwrap_or(Duration::from_secs(5))).await;
    }
}

/// backon's delays: 250 ms doubling to 5 s.
fn backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(5))
        .without_max_times()
        .build()
}

/// One connection: `Ok(true)` once `--count` events are out.
async fn connection(
    ctx: &Ctx,
    last: &mut Option<u64>,
    left: &mut Option<u64>,
    progressed: &mut bool,
) -> Result<bool> {
    let after = last.map(|n| n.to_string());
    let response = ctx
        .api
        .open_stream("/v1/reliability/events", after.as_deref())
        .await?;
    let mut body = response.into_body();
    let mut parser = SseParser::new();
    loop {
        let next = tokio::time::timeout(IDLE_TIMEOUT, body.frame())
            .await
            .map_err(|_| Failure::transport("no data on the event feed for 60 s"))?;
        let events = match next {
            None => return Ok(false),
            Some(Err(e)) => {
                return Err(Failure::transport(format!(
                    "event feed broke: {}",
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
        for event in events {
            let seq = event
                .id
                .as_deref()
                .and_then(|id| id.trim().parse::<u64>().ok());
            if seq.is_some_and(|n| last.is_some_and(|l| n <= l)) {
                continue;
            }
            let raw: Value = serde_json::from_str(&event.data)
                .map_err(|e| Failure::protocol(format!("an event without JSON: {e}")))?;
            if ctx.json {
                emit_json(&raw)?;
            } else {
                emit(&line(&raw))?;
            }
            *last = seq.or(*last);
            *progressed = true;
            if let Some(n) = left {
                *n -= 1;
                if *n == 0 {
                    return Ok(true);
                }
            }
        }
    }
}

/// `SEQ  TIME  TYPE  key=value ...`.
fn line(event: &Value) -> String {
    let data: Vec<String> = event["data"]
        .as_object()
        .map(|fields| {
            fields
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().map_or(v.to_string(), str::to_string)))
                .collect()
        })
        .unwrap_or_default();
    clean(&format!(
        "{}  {}  {}  {}",
        event["seq"],
        event["timestamp"].as_str().unwrap_or("-"),
        event["type"].as_str().unwrap_or("-"),
        data.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_the_event_and_its_ids() {
        let event = serde_json::json!({"id": "evt_1", "seq": 3, "type": "reliability.run.finished",
            "timestamp": "2026-12-01T00:00:00.000Z",
            "data": {"run_id": "r1", "status": "failed"}});
        assert_eq!(
            line(&event),
            "3  2026-12-01T00:00:00.000Z  reliability.run.finished  run_id=r1 status=failed"
        );
    }
}
