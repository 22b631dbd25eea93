//! `GET /v1/reliability/stream`: the multiplexed WebSocket stream. One connection
//! follows the frames of several runs: a client subscribes (resuming after a frame
//! number, as `Last-Event-ID` does for SSE) and unsubscribes with JSON text messages
//! ([`message`]). Each subscription is the SSE stream's own [`frame_stream`], so the
//! frames, their numbers and the ending are the SSE stream's.
//!
//! The caller is checked (`reliability:read`) before the upgrade, so a refused caller
//! gets a 401 or 403 and never a WebSocket; each subscribe checks the token again (a
//! revoked one closes the connection) and that the run is the caller's account's.
//!
//! Bounds: the connection holds a place in the controller's viewer total and in its
//! account's share of it (429 `too_many_viewers`, or `too_many_account_viewers`, before
//! the upgrade when there is none) and each subscription a viewer's place (per run, in
//! total and in the account's share) besides; [`MAX_SUBSCRIPTIONS`] at once; client
//! messages of at most [`MAX_CLIENT_MESSAGE`] bytes. The socket is written with
//! backpressure: each subscription's task hands its frames over a channel of
//! [`SUBSCRIPTION_BUFFER`], taken only as the socket takes messages; a subscription
//! that falls behind its run's broadcast catches up from the store, so a slow reader
//! costs bounded memory; one that takes no message for [`WRITE_TIMEOUT`] is dropped.

mod message;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use futures_util::SinkExt;
use futures_util::stream::{SplitSink, Stream, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::StreamMap;

use super::auth::{Caller, ReadScope, authorize};
use super::error::ApiError;
use super::events::{frame_stream, join};
use crate::Shared;
use crate::hub::ConnectionSeat;
use crate::outbox::account_events;
use crate::store::{EventRow, StoredFrame};
use message::{Refusal, Request};

/// Subscriptions one connection may hold at once; one more is refused
/// `too_many_subscriptions`.
pub const MAX_SUBSCRIPTIONS: usize = 32;
/// The largest client message (or frame of one); a larger one closes the connection
/// with 1009. Client messages are a few dozen bytes.
pub const MAX_CLIENT_MESSAGE: usize = 4096;
/// A ping this often, as the SSE stream's keep-alive comment.
pub const PING_INTERVAL: Duration = Duration::from_secs(15);
/// Nothing heard from the client (a message or a pong) for this long: closed with 1008.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// One message not written within this long: the reader is gone or stuck; dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Frames a subscription's task may hold ready for the socket.
pub const SUBSCRIPTION_BUFFER: usize = 16;

/// The multiplexed WebSocket stream of several runs' frames (upgrade with
/// `Upgrade: websocket`; the protocol is in docs/api.md, "The WebSocket stream").
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/stream",
    tag = "events",
    operation_id = "stream",
    security(("bearer" = [])),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol"),
        (status = 400, description = "`websocket_required`: not a WebSocket upgrade", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 426, description = "`websocket_required`: the connection cannot be upgraded", body = super::openapi::ApiErrorBody),
        (status = 429, description = "`too_many_viewers`: the controller's bound; `too_many_account_viewers`: this account's share of it (with `Retry-After`)", body = super::openapi::ApiErrorBody),
    )
)]
// The caller is the first extractor: no upgrade is looked at for a caller who may not
// read.
pub async fn stream(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade = upgrade.map_err(|rejection| {
        ApiError::new(
            rejection.status(),
            "websocket_required",
            format!(
                "this route is a WebSocket (GET with Upgrade: websocket): {}",
                rejection.body_text()
            ),
        )
    })?;
    let seat = shared
        .hub
        .hold_connection(caller.account_id())
        .map_err(|full| super::events::refuse_viewer(full, ""))?;
    let token = headers.get(AUTHORIZATION).cloned();
    Ok(upgrade
        .max_message_size(MAX_CLIENT_MESSAGE)
        .max_frame_size(MAX_CLIENT_MESSAGE)
        .on_upgrade(move |socket| async move {
            let connection = Connection {
                shared,
                caller,
                token,
                subscriptions: StreamMap::new(),
                events: None,
                _seat: seat,
            };
            connection.serve(socket).await;
        }))
}

/// What one subscription yields: its frames, then that it is over.
enum Item {
    Frame(Arc<StoredFrame>),
    Over,
}

/// A subscription: its frames come from a task of its own through a small bounded
/// channel. Not polled in the connection's task, since a frame stream parked mid-read
/// while the connection awaits the store for a subscribe would hold a pool connection
/// the subscribe needs; the task parks on the full channel instead, holding nothing.
struct Subscription {
    frames: mpsc::Receiver<Item>,
    last: u64,
    finished: bool,
    _task: AbortOnDrop,
}

impl Stream for Subscription {
    type Item = Item;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Item>> {
        self.frames.poll_recv(cx)
    }
}

/// A subscription's task, stopped (with its viewer's place freed) when it goes.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The account's events on this connection: from a task of its own (as a subscription's
/// frames), holding one of the controller's event-feed places while it lives.
struct EventFeed {
    events: mpsc::Receiver<EventRow>,
    last: u64,
    _task: AbortOnDrop,
    _place: crate::outbox::FeedPlace,
}

/// The next event of the connection's feed; never, without one.
async fn next_event(feed: &mut Option<EventFeed>) -> Option<EventRow> {
    match feed {
        Some(feed) => feed.events.recv().await,
        None => std::future::pending().await,
    }
}

struct Connection {
    shared: Shared,
    caller: Caller<ReadScope>,
    /// The `Authorization` header, to check the token again at each subscribe; never
    /// logged.
    token: Option<HeaderValue>,
    subscriptions: StreamMap<String, Subscription>,
    events: Option<EventFeed>,
    _seat: ConnectionSeat,
}

/// What the loop does after one step.
enum Next {
    Send(Vec<Value>),
    Ping,
    Close(u16, &'static str),
    Drop,
}

impl Connection {
    async fn serve(mut self, socket: WebSocket) {
        let (mut sink, mut incoming) = socket.split();
        let mut ping = tokio::time::interval_at(Instant::now() + PING_INTERVAL, PING_INTERVAL);
        // After a slow write, one ping, not a burst of the missed ones.
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut heard = Instant::now();
        loop {
            let idle = tokio::time::sleep_until(heard + IDLE_TIMEOUT);
            let next = tokio::select! {
                received = incoming.next() => match received {
                    None => Next::Drop,
                    Some(Err(error)) => closing_error(&error),
                    Some(Ok(message)) => {
                        heard = Instant::now();
                        self.on_message(message).await
                    }
                },
                Some((run, item)) = self.subscriptions.next(), if !self.subscriptions.is_empty() => {
                    self.on_item(&run, item).await
                }
                event = next_event(&mut self.events) => self.on_event(event),
                _ = ping.tick() => Next::Ping,
                _ = idle => Next::Close(1008, "nothing heard for 60 s"),
                _ = self.shared.shutdown.cancelled() => Next::Close(1001, "the controller is stopping"),
            };
            let messages = match next {
                Next::Send(values) => values
                    .into_iter()
                    .map(|v| Message::text(v.to_string()))
                    .collect(),
                Next::Ping => vec![Message::Ping(Default::default())],
                Next::Close(code, reason) => {
                    let close = Message::Close(Some(CloseFrame {
                        code,
                        reason: reason.into(),
                    }));
                    let _ = write(&mut sink, vec![close]).await;
                    return;
                }
                Next::Drop => return,
            };
            if !write(&mut sink, messages).await {
                return;
            }
        }
    }

    async fn on_message(&mut self, message: Message) -> Next {
        let text = match message {
            Message::Text(text) => text,
            Message::Binary(_) => {
                let refusal = Refusal::new(
                    "invalid_message",
                    "send messages as JSON text, not binary",
                    None,
                );
                return Next::Send(vec![refusal.to_message()]);
            }
            // Pings are answered by the WebSocket layer; a pong is proof of life.
            Message::Ping(_) | Message::Pong(_) => return Next::Send(Vec::new()),
            // The layer answers the close; the stream ends after it.
            Message::Close(_) => return Next::Send(Vec::new()),
        };
        let answer = match message::parse(text.as_str()) {
            Ok(Request::Subscribe { run, after }) => self.subscribe(run, after).await,
            Ok(Request::Unsubscribe { run }) => self.unsubscribe(&run),
            Ok(Request::SubscribeEvents { after }) => self.subscribe_events(after).await,
            Ok(Request::UnsubscribeEvents) => self.unsubscribe_events(),
            Err(refusal) => Err(refusal),
        };
        match answer {
            Ok(value) => Next::Send(vec![value]),
            Err(refusal) if refusal.code == "unauthorized" => {
                Next::Close(1008, "the token is unknown or revoked")
            }
            Err(refusal) => Next::Send(vec![refusal.to_message()]),
        }
    }

    async fn subscribe(&mut self, run: String, after: u64) -> Result<Value, Refusal> {
        let refuse = |code, message: String| Refusal::new(code, message, Some(&run));
        if let Err(error) = authorize::<ReadScope>(&self.shared, self.token.as_ref()).await {
            return Err(refuse(error.code, error.message));
        }
        if self.subscriptions.contains_key(&run) {
            return Err(refuse(
                "already_subscribed",
                format!("run {run} is subscribed already on this connection; unsubscribe first"),
            ));
        }
        if self.subscriptions.len() >= MAX_SUBSCRIPTIONS {
            return Err(refuse(
                "too_many_subscriptions",
                format!(
                    "a connection holds at most {MAX_SUBSCRIPTIONS} subscriptions; unsubscribe one first"
                ),
            ));
        }
        let found = self
            .shared
            .store
            .run_of_account(self.caller.account_id(), &run)
            .await
            .map_err(|e| {
                let error = ApiError::from(e);
                refuse(error.code, error.message)
            })?;
        if found.is_none() {
            return Err(refuse("not_found", format!("run {run} not found")));
        }
        super::events::frames_kept(&self.shared, &run)
            .await
            .map_err(|e| refuse(e.code, e.message))?;
        let live = join(&self.shared, &run, self.caller.account_id())
            .map_err(|e| refuse(e.code, e.message))?;
        let (tx, frames) = mpsc::channel(SUBSCRIPTION_BUFFER);
        let stream = frame_stream(self.shared.clone(), run.clone(), after, live);
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(frame) = stream.next().await {
                if tx.send(Item::Frame(frame)).await.is_err() {
                    return;
                }
            }
            let _ = tx.send(Item::Over).await;
        });
        self.subscriptions.insert(
            run.clone(),
            Subscription {
                frames,
                last: after,
                finished: false,
                _task: AbortOnDrop(task),
            },
        );
        Ok(message::subscribed(&run, after))
    }

    async fn subscribe_events(&mut self, after: u64) -> Result<Value, Refusal> {
        if let Err(error) = authorize::<ReadScope>(&self.shared, self.token.as_ref()).await {
            return Err(Refusal::new(error.code, error.message, None));
        }
        if self.events.is_some() {
            return Err(Refusal::new(
                "already_subscribed",
                "the events are subscribed already on this connection; unsubscribe first",
                None,
            ));
        }
        let place = self
            .shared
            .feed
            .join(self.caller.account_id())
            .map_err(|full| {
                let (code, message) = crate::outbox::feed::refusal(full);
                Refusal::new(code, message, None)
            })?;
        let (tx, events) = mpsc::channel(SUBSCRIPTION_BUFFER);
        let stream = account_events(
            self.shared.store.clone(),
            self.caller.account_id().to_string(),
            i64::try_from(after).unwrap_or(i64::MAX),
            self.shared.feed.poll,
            self.shared.shutdown.clone(),
        );
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if tx.send(event).await.is_err() {
                    return;
                }
            }
        });
        self.events = Some(EventFeed {
            events,
            last: after,
            _task: AbortOnDrop(task),
            _place: place,
        });
        Ok(message::events_subscribed(after))
    }

    fn unsubscribe_events(&mut self) -> Result<Value, Refusal> {
        match self.events.take() {
            Some(_) => Ok(message::events_unsubscribed()),
            None => Err(Refusal::new(
                "not_subscribed",
                "the events are not subscribed on this connection",
                None,
            )),
        }
    }

    /// An event to send, or the feed's end (the controller stops, or the store failed).
    fn on_event(&mut self, event: Option<EventRow>) -> Next {
        match event {
            Some(event) => {
                if let Some(feed) = &mut self.events {
                    feed.last = u64::try_from(event.seq).unwrap_or(feed.last);
                }
                Next::Send(vec![message::event(&event)])
            }
            None => {
                let last = self.events.take().map_or(0, |feed| feed.last);
                if self.shared.shutdown.is_cancelled() {
                    return Next::Close(1001, "the controller is stopping");
                }
                Next::Send(vec![message::events_end(last)])
            }
        }
    }

    fn unsubscribe(&mut self, run: &str) -> Result<Value, Refusal> {
        match self.subscriptions.remove(run) {
            Some(_) => Ok(message::unsubscribed(run)),
            None => Err(Refusal::new(
                "not_subscribed",
                format!("run {run} is not subscribed on this connection"),
                Some(run),
            )),
        }
    }

    async fn on_item(&mut self, run: &str, item: Item) -> Next {
        match item {
            Item::Frame(frame) => {
                if let Some(subscription) = self.subscriptions.iter_mut().find(|(r, _)| r == run) {
                    subscription.1.last = frame.number;
                    subscription.1.finished = frame.kind == "finished";
                }
                Next::Send(vec![message::frame(&frame)])
            }
            Item::Over => {
                let Some(subscription) = self.subscriptions.remove(run) else {
                    return Next::Send(Vec::new());
                };
                if self.shared.shutdown.is_cancelled() {
                    return Next::Close(1001, "the controller is stopping");
                }
                let (last, finished) = (subscription.last, subscription.finished);
                Next::Send(vec![ending(&self.shared, run, last, finished).await])
            }
        }
    }
}

/// Why a subscription's frames stopped: the run is over (the SSE stream's close), or
/// reading the store failed (the client may subscribe again after `last`).
async fn ending(shared: &Shared, run: &str, last: u64, finished: bool) -> Value {
    let over = finished
        || match shared.store.run(run).await {
            Ok(found) => found.is_none_or(|r| r.status.is_finished()),
            Err(_) => false,
        };
    if over {
        message::end(run, last)
    } else {
        Refusal::new(
            "store_unavailable",
            format!("reading run {run}'s frames failed; subscribe again with after {last}"),
            Some(run),
        )
        .to_message()
    }
}

/// A read error: a message over the bound is answered 1009; anything else ends the
/// connection (the peer is gone or broke the protocol).
fn closing_error(error: &axum::Error) -> Next {
    let text = error.to_string();
    if text.contains("Space limit exceeded") {
        Next::Close(1009, "a message is at most 4096 bytes")
    } else {
        tracing::debug!(%error, "WebSocket stream read failed");
        Next::Drop
    }
}

/// Writes and flushes `messages` in order, each within [`WRITE_TIMEOUT`]; `false` when
/// the connection is gone.
async fn write(sink: &mut SplitSink<WebSocket, Message>, messages: Vec<Message>) -> bool {
    for message in messages {
        match tokio::time::timeout(WRITE_TIMEOUT, sink.send(message)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::debug!(%error, "WebSocket stream write failed");
                return false;
            }
            Err(_) => {
                tracing::debug!("WebSocket stream reader too slow: dropped");
                return false;
            }
        }
    }
    true
}
