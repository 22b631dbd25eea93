//! `GET /events`: the account's product events as server-sent events (not a run's frames:
//! those are `runs/{id}/events`). The SSE id is the event's per-account `seq`; a client
//! reconnecting with `Last-Event-ID` (or `?after=`) gets every event after it from the
//! outbox, then live ones. Needs `reliability:read`.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;

use super::auth::{Caller, ReadScope};
use super::error::ApiError;
use crate::Shared;
use crate::outbox::account_events;

/// Seconds a refused feed is told to wait.
const FEEDS_RETRY_AFTER: Duration = Duration::from_secs(5);

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FeedQuery {
    /// Same as `Last-Event-ID`, for clients that cannot set headers.
    #[param(minimum = 0)]
    after: Option<i64>,
}

/// The account's product events (`reliability.run.finished`,
/// `reliability.finding.created`: ids only), from the outbox, then live.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/events",
    tag = "events",
    operation_id = "account_events",
    security(("bearer" = [])),
    params(
        ("Last-Event-ID" = Option<i64>, Header, minimum = 0, description = "Resume after this event seq"),
        FeedQuery,
    ),
    responses(
        (status = 200, description = "The events, as `text/event-stream`", body = super::openapi::SseEvent, content_type = "text/event-stream"),
        (status = 400, description = "`invalid_query`, `invalid_last_event_id`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 429, description = "`too_many_feeds`: the controller's bound; `too_many_account_feeds`: this account's share of it (`Retry-After`)", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn events(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    headers: HeaderMap,
    query: Result<Query<FeedQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let Query(query) = query?;
    let last_event_id = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_last_event_id",
                        "Last-Event-ID must be an event seq (a number)",
                    )
                })?,
        ),
    };
    if query.after.is_some_and(|n| n < 0) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "after must be 0 or more",
        ));
    }
    let after = last_event_id.or(query.after).unwrap_or(0);
    let permit = shared.feed.join(caller.account_id()).map_err(|full| {
        let (code, message) = crate::outbox::feed::refusal(full);
        ApiError::too_many(code, message, FEEDS_RETRY_AFTER)
    })?;
    let stream = account_events(
        shared.store.clone(),
        caller.account_id().to_string(),
        after,
        shared.feed.poll,
        shared.shutdown.clone(),
    )
    .map(move |event| {
        // The feed's place is held while its stream lives.
        let _held = &permit;
        Ok(Event::default()
            .id(event.seq.to_string())
            .event(event.event_type.clone())
            .data(event.to_json()))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
