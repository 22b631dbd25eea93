//! `GET /runs/{id}/events`: the run's frames as server-sent events, the frame number as
//! the event id. A late viewer, or one reconnecting with `Last-Event-ID`, gets every
//! stored frame after that id, then live ones; the stream closes after `finished`. The
//! stream is the run-lifecycle layer's ([`crate::runs::frames`]); the viewer's place and
//! resume point are [`crate::viewers`]'.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;

use super::auth::{Caller, ReadScope};
use super::error::ApiError;
use crate::Shared;
pub use crate::runs::frames::frame_stream;
pub use crate::viewers::{frames_kept, join, last_event_id, refuse_viewer};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Same as `Last-Event-ID`, for clients that cannot set headers.
    #[param(format = "uint64", maximum = 18446744073709551615usize)]
    after: Option<u64>,
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
    crate::runs::read::owned(&shared.store, caller.account_id(), &id).await?;
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
