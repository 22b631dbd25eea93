use std::pin::pin;

use axum::response::IntoResponse;
use futures_util::FutureExt;

use super::*;
use crate::api::error::ApiError;

/// A handle on a queue of `capacity` that no dispatcher drains.
fn handle(capacity: usize) -> (DispatcherHandle, mpsc::Receiver<Command>) {
    let (tx, rx) = mpsc::channel(capacity);
    let (_, connected) = waiting::Reasons::new();
    let handle = DispatcherHandle {
        tx,
        epoch: Instant::now(),
        next_session: Arc::new(AtomicU64::new(1)),
        connected,
    };
    (handle, rx)
}

#[tokio::test]
async fn a_full_queue_refuses_the_api_at_once_and_makes_an_agent_session_wait() {
    let (handle, mut rx) = handle(2);
    let place = handle.reserve().expect("a place");
    handle.agent_down(1).await;
    // Full: one sent, one reserved.
    assert_eq!(handle.reserve().err(), Some(Refused::Busy));
    assert_eq!(
        handle.online().now_or_never().map(|r| r.err()),
        Some(Some(Refused::Busy))
    );
    assert_eq!(
        handle.cancel("run", "why").now_or_never().map(|r| r.err()),
        Some(Some(Refused::Busy))
    );
    // An agent's report waits for room instead of being lost.
    let mut down = pin!(handle.agent_down(2));
    assert!(down.as_mut().now_or_never().is_none());
    assert!(matches!(
        rx.recv().await,
        Some(Command::AgentDown { session: 1 })
    ));
    down.await;
    assert!(matches!(
        rx.recv().await,
        Some(Command::AgentDown { session: 2 })
    ));
    // A reservation given back frees its place.
    drop(place);
    assert!(handle.reserve().is_ok());
}

#[tokio::test]
async fn a_stopped_dispatcher_is_told_apart_from_a_busy_one() {
    let (handle, rx) = handle(4);
    drop(rx);
    assert_eq!(handle.reserve().err(), Some(Refused::Stopped));
    assert_eq!(handle.online().await.err(), Some(Refused::Stopped));
    // An agent's report to a stopped dispatcher does not wait forever.
    assert!(handle.agent_down(1).now_or_never().is_some());
}

#[test]
fn busy_is_a_503_with_retry_after_and_a_code() {
    let response = ApiError::from(Refused::Busy).into_response();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let error = ApiError::from(Refused::Busy);
    assert_eq!(error.code, "busy");
}
