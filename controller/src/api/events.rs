//! `GET /runs/{id}/events`: the run's frames as server-sent events, the frame number as
//! the event id. A late viewer, or one reconnecting with `Last-Event-ID`, gets every
//! stored frame after that id, then live ones; the stream closes after `finished`.

use std::collections::VecDeque;
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
use crate::hub::{HubFull, Subscription};
use crate::store::StoredFrame;

/// Frames read from the store per query while replaying.
const PAGE: u32 = 500;

/// Seconds a refused viewer is told to wait: viewers leave as runs end.
const VIEWERS_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// A place among the run's live viewers for the account, or 429 `too_many_viewers`
/// (`too_many_account_viewers` past the account's share).
pub fn join(shared: &Shared, run_id: &str, account_id: &str) -> Result<Subscription, ApiError> {
    shared
        .hub
        .subscribe(run_id, account_id)
        .map_err(|full| refuse_viewer(full, run_id))
}

/// The 429 of a viewer the hub refused (a WebSocket connection, which has no run, is
/// never refused `PerRun`).
pub fn refuse_viewer(full: HubFull, run_id: &str) -> ApiError {
    let message = match full {
        HubFull::PerRun(limit) => {
            format!("run {run_id} already has {limit} viewers, its limit; retry later")
        }
        HubFull::Total(limit) => {
            format!("the controller already serves {limit} viewers, its limit; retry later")
        }
        HubFull::Account(_) => full.to_string(),
    };
    ApiError::too_many(full.code(), message, VIEWERS_RETRY_AFTER)
}

/// 410 `frames_expired` when retention deleted the run's frames: its record (and its
/// result) stays, its stream has nothing left to replay.
pub async fn frames_kept(shared: &Shared, run_id: &str) -> Result<(), ApiError> {
    match shared.store.frames_expired_at(run_id).await? {
        None => Ok(()),
        Some(at) => Err(ApiError::new(
            axum::http::StatusCode::GONE,
            "frames_expired",
            format!(
                "the frames of run {run_id} expired at {} (retention keeps a run's frames for \
                 a period after it ends); GET /v1/reliability/runs/{run_id} keeps its record \
                 and result",
                crate::store::format_ms(at)
            ),
        )),
    }
}

/// The frames of a run after `after`, stored ones first, then live ones, in order and
/// without gaps, ending with `finished`. Served as SSE here and over gRPC by `WatchRun`.
/// `live` must be taken before this is called (see [`join`]): a frame published while
/// the store is read is then seen twice at worst (and dropped by number), never missed.
///
/// Live frames come from the hub, straight: the store is read only to catch up (at the
/// start, after the viewer lagged past its run's broadcast, or while the stored frames
/// have a gap an agent has yet to fill).
pub fn frame_stream(
    shared: Shared,
    run_id: String,
    after: u64,
    live: Subscription,
) -> impl Stream<Item = Arc<StoredFrame>> + Send {
    let viewer = Viewer {
        shared,
        run_id,
        live,
        pending: VecDeque::new(),
        last: after,
        done: false,
        catch_up: true,
        gapped: false,
    };
    futures_util::stream::unfold(viewer, |mut viewer| async move {
        let frame = viewer.next().await?;
        Some((frame, viewer))
    })
}

struct Viewer {
    shared: Shared,
    run_id: String,
    live: Subscription,
    /// Frames to emit, in order, each `last + 1` of the one before.
    pending: VecDeque<Arc<StoredFrame>>,
    /// The last frame number emitted (or the resume point).
    last: u64,
    done: bool,
    /// The store may hold frames past `last` that the live broadcast will not bring.
    catch_up: bool,
    /// The last read stopped at a gap: frames past it are stored and were seen live
    /// already, so the frame that fills the gap is read from the store with them.
    gapped: bool,
}

impl Viewer {
    async fn next(&mut self) -> Option<Arc<StoredFrame>> {
        loop {
            if self.done {
                return None;
            }
            if let Some(frame) = self.pending.pop_front() {
                self.last = frame.number;
                self.done = frame.kind == "finished";
                return Some(frame);
            }
            if self.catch_up {
                self.read_store().await?;
                continue;
            }
            tokio::select! {
                received = self.live.frames.recv() => match received {
                    Ok(frame) if frame.number <= self.last => {}
                    Ok(frame) if frame.number == self.last + 1 && !self.gapped => {
                        self.pending.push_back(frame);
                    }
                    // Past a gap (or filling one): the store has the whole sequence.
                    Ok(_) | Err(RecvError::Lagged(_)) => self.catch_up = true,
                    Err(RecvError::Closed) => return None,
                },
                _ = self.shared.shutdown.cancelled() => return None,
            }
        }
    }

    /// One page from the store into `pending`; `None` when the stream is over or the
    /// store failed.
    async fn read_store(&mut self) -> Option<()> {
        let (shared, run_id) = (&self.shared, &self.run_id);
        // Whether the run has ended, asked before reading its frames: an ended run's
        // frames are all stored, so what is read then is all there is.
        let ended = match shared.store.run(run_id).await {
            Ok(run) => run.is_none_or(|r| r.status.is_finished()),
            Err(error) => {
                tracing::error!(run = %run_id, %error, "reading a run for a viewer failed");
                return None;
            }
        };
        let stored = match shared.store.frames_after(run_id, self.last, PAGE).await {
            Ok(frames) => frames,
            Err(error) => {
                tracing::error!(run = %run_id, %error, "reading frames for a viewer failed");
                return None;
            }
        };
        let full = stored.len() >= PAGE as usize;
        if ended {
            // Everything left, past any gap an agent never filled, then the end
            // (nothing at all for a viewer already past `finished`).
            if stored.is_empty() {
                return None;
            }
            self.pending.extend(stored.into_iter().map(Arc::new));
            return Some(());
        }
        // A live run: emit only a gapless run of numbers; a gap fills in later.
        let read = stored.len();
        let mut expected = self.last + 1;
        self.pending.extend(
            stored
                .into_iter()
                .take_while(|f| {
                    let ok = f.number == expected;
                    expected += 1;
                    ok
                })
                .map(Arc::new),
        );
        self.gapped = self.pending.len() < read;
        // A full page may have more behind it; otherwise the broadcast brings the rest.
        self.catch_up = full && !self.gapped;
        Some(())
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Same as `Last-Event-ID`, for clients that cannot set headers.
    #[param(format = "uint64", maximum = 18446744073709551615usize)]
    after: Option<u64>,
}

/// The frame number a reconnecting `EventSource` sends back, if any; 400
/// `invalid_last_event_id` when it is not a number.
pub fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid_last_event_id",
                "Last-Event-ID must be a frame number",
            )
        })
}

/// A run's frames as server-sent events.
///
/// Scope: `reliability:read`. Each event's `id` is the frame number, its `event` the
/// frame's kind, its `data` the frame as JSON; stored frames after the resume point first,
/// then live ones; the stream ends after `finished`.
#[utoipa::path(
    get,
    path = "/v1/reliability/runs/{id}/events",
    tag = "events",
    operation_id = "run_events",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The run's id"),
        ("Last-Event-ID" = Option<u64>, Header, format = "uint64", maximum = 18446744073709551615usize, description = "Resume after this frame number"),
        EventsQuery,
    ),
    responses(
        (status = 200, description = "The frames, as `text/event-stream`", body = super::openapi::SseEvent, content_type = "text/event-stream"),
        (status = 400, description = "`invalid_query`, `invalid_last_event_id`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such run in this account", body = super::openapi::ApiErrorBody),
        (status = 410, description = "`frames_expired`: retention deleted the run's frames; its record stays", body = super::openapi::ApiErrorBody),
        (status = 429, description = "`too_many_viewers`: the run's or the controller's bound; `too_many_account_viewers`: this account's share of it (`Retry-After`)", body = super::openapi::ApiErrorBody),
    )
)]
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
    frames_kept(&shared, &id).await?;
    let last_event_id = last_event_id(&headers)?;
    let after = last_event_id.or(query.after).unwrap_or(0);
    let live = join(&shared, &id, caller.account_id())?;
    let stream = futures_util::StreamExt::map(frame_stream(shared, id, after, live), |frame| {
        let data = serde_json::to_string(&frame.to_api()).unwrap_or_default();
        Ok(Event::default()
            .id(frame.number.to_string())
            .event(frame.kind.clone())
            .data(data))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

#[cfg(test)]
pub(crate) mod tests;
