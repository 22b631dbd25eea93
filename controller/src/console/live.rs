//! `GET /runs/{id}/live`: what a run's page draws, as server-sent events, from the same
//! live stream as the API's (every stored frame from the start, then live ones, ending
//! with `finished`), read here so the browser never decodes a histogram:
//!
//! - `status` `{"status"}` first, and again when the run starts and ends;
//! - `second` `{"second", "phase", "sent", "failed", "late", "dropped", "p50_ms", "p99_ms"}`
//!   per `load` frame (p50/p99 from its histogram, corrected);
//! - `step` `{"line"}` per faults `timeline` frame.
//!
//! Viewers count against the run's bound like the API's (429 `too_many_viewers`).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{StreamExt, stream};
use iohr_domain::faults::journal::TimelineStep;
use iohr_domain::load::SecondSummary;
use serde_json::{Value, json};

use super::ConsoleState;
use super::layout::PageResult;
use super::session::Viewer;
use crate::auth::ReadScope;
use crate::runs::frames::frame_stream;
use crate::viewers::{frames_kept, join, last_event_id};

pub async fn feed(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> PageResult {
    let caller = viewer.caller::<ReadScope>()?;
    let shared = state.shared;
    let run = crate::runs::read::owned(&shared.store, caller.account_id(), &id).await?;
    frames_kept(&shared, &id).await?;
    // A browser that reconnects (EventSource does by itself) resumes after the last frame
    // it saw, so a plot never draws a second twice.
    let after = last_event_id(&headers)?.unwrap_or(0);
    let live = join(&shared, &id, caller.account_id())?;
    let first = event("status", &json!({"status": run.status.as_str()}));
    let frames = frame_stream(shared, id, after, live).filter_map(|frame| async move {
        translate(&frame.kind, &frame.payload).map(|e| e.id(frame.number.to_string()))
    });
    let events = stream::once(async move { first })
        .chain(frames)
        .map(Ok::<_, Infallible>);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

fn event(name: &str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

/// The event a frame becomes on the page, if it shows there.
fn translate(kind: &str, data: &Value) -> Option<Event> {
    match kind {
        "load" => {
            let s = SecondSummary::of(data);
            Some(event(
                "second",
                &json!({
                    "second": s.second, "phase": s.phase, "sent": s.sent, "failed": s.failed,
                    "late": s.late, "dropped": s.dropped, "p50_ms": s.p50_ms, "p99_ms": s.p99_ms,
                }),
            ))
        }
        "timeline" => {
            let step: TimelineStep = serde::Deserialize::deserialize(data).ok()?;
            Some(event("step", &json!({"line": step.line()})))
        }
        "started" => Some(event("status", &json!({"status": "running"}))),
        "finished" => Some(event(
            "status",
            &json!({"status": data.get("status").cloned().unwrap_or(Value::Null), "ended": true}),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::translate;
    use serde_json::json;

    #[test]
    fn frames_the_page_draws_become_events_and_others_are_left_out() {
        assert!(translate("load", &json!({"second": 1, "sent": 10})).is_some());
        assert!(translate("finished", &json!({"status": "passed"})).is_some());
        assert!(translate("started", &json!({})).is_some());
        assert!(translate("timeline", &json!({"not": "a step"})).is_none());
        assert!(translate("check", &json!({})).is_none());
    }
}
