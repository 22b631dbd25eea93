//! One await bounded by a request's deadline and the run's cancel token.

use std::future::Future;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub enum Bounded<T> {
    Done(T),
    TimedOut,
    Cancelled,
}

/// Awaits `work` until it finishes, the deadline passes or the run is cancelled.
pub async fn bounded<F: Future>(
    work: F,
    deadline: Instant,
    cancel: &CancellationToken,
) -> Bounded<F::Output> {
    tokio::select! {
        // Cancel wins a tie: a cancelled run must not report more work.
        biased;
        _ = cancel.cancelled() => Bounded::Cancelled,
        out = tokio::time::timeout_at(deadline, work) => match out {
            Ok(out) => Bounded::Done(out),
            Err(_) => Bounded::TimedOut,
        },
    }
}
