//! A worker's per-request timeout on one timer that moves only when it fires.
//!
//! Each request of a worker is due to end by its start plus the timeout, and a worker's
//! requests start one after another, so each deadline is later than the one before.
//! Re-arming the timer for every request (`Sleep::reset`, with tokio's conversion of the
//! deadline to a tick) cost about 170 instructions per request (callgrind, the closed
//! model against nginx; about 85 fewer in all once it went, docs/benchmarks.md);
//! instead the timer stays armed at an earlier request's deadline,
//! and when it fires before the current deadline it is moved to it then. It fires at
//! most once per timeout per worker that way, and a request still fails at exactly its
//! own deadline.

use std::future::Future;
use std::pin::Pin;
#[cfg(test)]
use std::pin::pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

use super::client::Failure;

/// Polls `attempt` until it ends or `deadline` passes (then [`Failure::Timeout`]), with
/// `timer` armed at `deadline` or earlier; call [`arm`] first. Biased: the attempt is
/// polled first, as `tokio::time::timeout` polls its future before its timer. Takes the
/// attempt pinned where its caller made it: passing an async block by value to a
/// wrapper future copied it (a few hundred bytes) twice more per request.
pub fn poll_within<T>(
    cx: &mut Context<'_>,
    timer: &mut Pin<&mut Sleep>,
    deadline: Instant,
    attempt: Pin<&mut impl Future<Output = Result<T, Failure>>>,
) -> Poll<Result<T, Failure>> {
    if let Poll::Ready(outcome) = attempt.poll(cx) {
        return Poll::Ready(outcome);
    }
    loop {
        match timer.as_mut().poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(()) if timer.deadline() >= deadline => {
                return Poll::Ready(Err(Failure::Timeout));
            }
            // An earlier request's deadline: move on to this one's and wait again.
            Poll::Ready(()) => timer.as_mut().reset(deadline),
        }
    }
}

/// Makes sure `timer` fires no later than `deadline`.
pub fn arm(timer: &mut Pin<&mut Sleep>, deadline: Instant) {
    if timer.deadline() > deadline {
        // Only a deadline earlier than one already armed (not the engine's order).
        timer.as_mut().reset(deadline);
    }
}

/// [`poll_within`] as a future, for the tests.
#[cfg(test)]
async fn within<T>(
    mut timer: Pin<&mut Sleep>,
    deadline: Instant,
    attempt: impl Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    arm(&mut timer, deadline);
    let mut attempt = pin!(attempt);
    std::future::poll_fn(|cx| poll_within(cx, &mut timer, deadline, attempt.as_mut())).await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_request_fails_at_its_own_deadline_on_one_timer() {
        let start = Instant::now();
        let timeout = Duration::from_secs(1);
        let mut timer = pin!(tokio::time::sleep(timeout));
        // Quick answers move time on without a reset: the timer stays where it was.
        for i in 0..4u64 {
            let started = Instant::now();
            let answer = tokio::time::sleep(Duration::from_millis(300));
            let outcome = within(timer.as_mut(), started + timeout, async {
                answer.await;
                Ok(i)
            })
            .await;
            assert_eq!(outcome, Ok(i));
            if i < 3 {
                assert_eq!(
                    timer.deadline(),
                    start + timeout,
                    "not re-armed before it fires"
                );
            } else {
                // It fired 1 s in, during this request: moved to this one's deadline.
                assert_eq!(timer.deadline(), started + timeout);
            }
        }
        // A hanging request still gets its whole second.
        let started = Instant::now();
        let outcome: Result<(), Failure> =
            within(timer.as_mut(), started + timeout, std::future::pending()).await;
        assert_eq!(outcome, Err(Failure::Timeout));
        assert_eq!(Instant::now(), started + timeout);
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_than_the_armed_one_is_kept() {
        let mut timer = pin!(tokio::time::sleep(Duration::from_secs(60)));
        let started = Instant::now();
        let outcome: Result<(), Failure> = within(
            timer.as_mut(),
            started + Duration::from_millis(10),
            std::future::pending(),
        )
        .await;
        assert_eq!(outcome, Err(Failure::Timeout));
        assert_eq!(Instant::now(), started + Duration::from_millis(10));
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_ready_with_the_deadline_wins() {
        let mut timer = pin!(tokio::time::sleep(Duration::ZERO));
        let outcome = within(timer.as_mut(), Instant::now(), async { Ok(7) }).await;
        assert_eq!(outcome, Ok(7));
    }
}
