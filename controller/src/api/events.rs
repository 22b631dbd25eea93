//! `GET /runs/{id}/events`: the run's frames as server-sent events, the frame number as
//! the event id. A late viewer, or one reconnecting with `Last-Event-ID`, gets every
//! stored frame after that id, then live ones; the stream closes after `finished`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use super::auth::{Caller, ReadScope};
use super::error::ApiError;
use crate::Shared;
use crate::store::StoredFrame;

/// Frames read from the store per query while replaying.
const PAGE: u32 = 500;

/// The frames of a run after `after`, stored ones first, then live ones, in order and
/// without gaps, ending with `finished`. Served as SSE here and over gRPC by `WatchRun`.
pub fn frame_stream(
    shared: Shared,
    run_id: String,
    after: u64,
) -> impl Stream<Item = Arc<StoredFrame>> + Send {
    // Subscribe before the first read: a frame published meanwhile is then seen twice at
    // worst (and dropped by number), never missed.
    let live = shared.hub.subscribe();
    futures_util::stream::unfold(
        (
            shared,
            run_id,
            live,
            Vec::<StoredFrame>::new().into_iter(),
            after,
            false,
        ),
        |(shared, run_id, mut live, mut pending, mut last, mut done)| async move {
            loop {
                if done {
                    return None;
                }
                if let Some(frame) = pending.next() {
                    last = frame.number;
                    done = frame.kind == "finished";
                    return Some((Arc::new(frame), (shared, run_id, live, pending, last, done)));
                }
                // Whether the run has ended, asked before reading its frames: an ended
                // run's frames are all stored, so what is read then is all there is.
                let ended = match shared.store.run(&run_id).await {
                    Ok(run) => run.is_none_or(|r| r.status.is_finished()),
                    Err(error) => {
                        tracing::error!(run = %run_id, %error, "reading a run for a viewer failed");
                        return None;
                    }
                };
                let stored = match shared.store.frames_after(&run_id, last, PAGE).await {
                    Ok(frames) => frames,
                    Err(error) => {
                        tracing::error!(run = %run_id, %error, "reading frames for a viewer failed");
                        return None;
                    }
                };
                if ended {
                    // Everything left, past any gap an agent never filled, then the end
                    // (nothing at all for a viewer already past `finished`).
                    if stored.is_empty() {
                        return None;
                    }
                    pending = stored.into_iter();
                    continue;
                }
                // A live run: emit only a gapless run of numbers; a gap fills in later.
                let mut expected = last + 1;
                let gapless: Vec<StoredFrame> = stored
                    .into_iter()
                    .take_while(|f| {
                        let ok = f.number == expected;
                        expected += 1;
                        ok
                    })
                    .collect();
                if !gapless.is_empty() {
                    pending = gapless.into_iter();
                    continue;
                }
                // Nothing new stored: wait for this run's next live frame.
                loop {
                    tokio::select! {
                        received = live.recv() => match received {
                            Ok(frame) if frame.run_id == run_id && frame.number > last => break,
                            Ok(_) => {}
                            Err(RecvError::Lagged(_)) => break,
                            Err(RecvError::Closed) => return None,
                        },
                        _ = shared.shutdown.cancelled() => return None,
                    }
                }
            }
        },
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Same as `Last-Event-ID`, for clients that cannot set headers.
    after: Option<u64>,
}

pub async fn events(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let Query(query) = query?;
    shared
        .store
        .run_of_account(caller.account_id(), &id)
        .await?
        .ok_or_else(|| ApiError::not_found(&format!("run {id}")))?;
    let last_event_id = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_last_event_id",
                        "Last-Event-ID must be a frame number",
                    )
                })?,
        ),
    };
    let after = last_event_id.or(query.after).unwrap_or(0);
    let stream = futures_util::StreamExt::map(frame_stream(shared, id, after), |frame| {
        let data = serde_json::to_string(&frame.to_api()).unwrap_or_default();
        Ok(Event::default()
            .id(frame.number.to_string())
            .event(frame.kind.clone())
            .data(data))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
