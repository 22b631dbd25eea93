//! `reliability_wait_run`: polls the run's record until it ends or the timeout passes,
//! sending a progress notification at each poll when the client asked for progress. The
//! run's live frames are read meanwhile (when the stream opens) for the phase and a load
//! run's last second, and their `finished` frame ends a poll's pause early.

use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ProgressNotificationParam};
use rmcp::service::RequestContext;
use serde_json::Value;
use tokio::time::Instant;

use crate::frames::{Frames, Live};
use crate::inputs::WaitRun;
use crate::outputs::{Record, Waited};
use crate::rest::{Method, RestError, segment};
use crate::tools::{Tools, failed};

/// The longest wait one call may ask for; a client wanting longer calls again.
pub const MAX_WAIT_S: u64 = 600;
const DEFAULT_WAIT_S: u64 = 120;
/// Between two reads of the record: a run's end is seen within this.
const POLL: Duration = Duration::from_millis(500);

const ENDED: [&str; 5] = ["passed", "failed", "error", "cancelled", "refused"];

pub async fn wait(
    tools: &Tools,
    wait: WaitRun,
    ctx: &RequestContext<RoleServer>,
) -> Result<Waited, CallToolResult> {
    let timeout_s = wait.timeout_s.unwrap_or(DEFAULT_WAIT_S);
    if !(1..=MAX_WAIT_S).contains(&timeout_s) {
        return Err(failed(RestError::new(
            "invalid_input",
            format!("timeout_s {timeout_s}: must be 1 to {MAX_WAIT_S} seconds"),
        )));
    }
    let path = format!("/runs/{}", segment(&wait.id));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(timeout_s);
    let token = ctx.meta.get_progress_token();
    // Only progress shows the frames: without a token they are not read.
    let mut frames = match &token {
        Some(_) => tools.frames(ctx, &format!("{path}/events")).await.ok(),
        None => None,
    };
    let mut live = Live::default();
    loop {
        let run = tools
            .call(ctx, Method::Get, &path, None)
            .await
            .map_err(failed)?;
        let status = field(&run, "status");
        let waited_s = started.elapsed().as_secs();
        let ended = ENDED.contains(&status.as_str());
        if ended || Instant::now() >= deadline {
            return Ok(Waited {
                run,
                timed_out: !ended,
                waited_s,
            });
        }
        if let Some(token) = &token {
            let elapsed = started.elapsed().as_secs_f64();
            let note = ProgressNotificationParam::new(token.clone(), elapsed)
                .with_total(Duration::from_secs(timeout_s).as_secs_f64())
                .with_message(format!("{}{}", progress_message(&run), live.describe()));
            // A client that stopped listening to progress still gets its answer.
            let _ = ctx.peer.notify_progress(note).await;
        }
        let pause = tokio::time::sleep_until(deadline.min(Instant::now() + POLL));
        tokio::pin!(pause);
        loop {
            tokio::select! {
                _ = &mut pause => break,
                // The client cancelled the call, or the controller is stopping.
                _ = ctx.ct.cancelled() => {
                    return Ok(Waited { run, timed_out: true, waited_s });
                }
                frame = next_frame(&mut frames) => match frame {
                    Some(frame) => {
                        live.update(&frame);
                        // The run has ended: read its record now (once; the stream
                        // closes after `finished`).
                        if live.finished {
                            frames = None;
                            break;
                        }
                    }
                    // The stream ended or broke: polling goes on without it.
                    None => frames = None,
                },
            }
        }
    }
}

/// The next frame, or never when there is no stream.
async fn next_frame(frames: &mut Option<Frames>) -> Option<Value> {
    match frames {
        Some(frames) => frames.next().await,
        None => std::future::pending().await,
    }
}

fn field(run: &Record, name: &str) -> String {
    run.get(name)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// `running on agent edge-1`, or `queued: agent edge-1 is not connected`.
fn progress_message(run: &Record) -> String {
    let mut text = field(run, "status");
    let agent = field(run, "agent");
    if !agent.is_empty() {
        text.push_str(&format!(" on agent {agent}"));
    }
    let reason = field(run, "reason");
    if !reason.is_empty() {
        text.push_str(&format!(": {reason}"));
    }
    text
}
