use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{MAX_START_AFTER, START_WITHIN, start_at, wait_for_start, wait_for_the_others};
use crate::frames::FrameSender;
use crate::kinds::RunContext;
use crate::verdicts::{StepVerdict, StepVerdicts};

#[test]
fn an_offer_without_a_wait_starts_at_once_and_a_long_wait_is_bounded() {
    let received = Instant::now();
    assert_eq!(start_at(received, 0), None);
    assert_eq!(
        start_at(received, 500),
        Some(received + Duration::from_millis(500))
    );
    assert_eq!(
        start_at(received, u32::MAX),
        Some(received + MAX_START_AFTER)
    );
}

#[tokio::test(start_paused = true)]
async fn a_share_starts_at_its_instant_and_not_before() {
    let t0 = Instant::now();
    let at = start_at(t0, 500);
    let cancel = CancellationToken::new();
    wait_for_start(at, &cancel).await;
    assert_eq!(Instant::now() - t0, Duration::from_millis(500));
    // Past its instant (a late acceptance), a share starts at once.
    let before = Instant::now();
    wait_for_start(Some(t0), &cancel).await;
    assert_eq!(Instant::now(), before);
}

#[tokio::test(start_paused = true)]
async fn a_cancel_ends_the_wait() {
    let t0 = Instant::now();
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        canceller.cancel();
    });
    wait_for_start(start_at(t0, 5_000), &cancel).await;
    assert_eq!(Instant::now() - t0, Duration::from_millis(100));
}

/// A share's context with its verdicts, and those verdicts, to answer as the link would.
fn share_context() -> (RunContext, StepVerdicts) {
    let verdicts = StepVerdicts::default();
    let (frames, _) = FrameSender::channel();
    let ctx = RunContext::new("http://127.0.0.1:9", frames).with_verdicts(Some(verdicts.clone()));
    (ctx, verdicts)
}

#[tokio::test(start_paused = true)]
async fn a_share_starts_when_told_every_share_holds_its_lease_at_the_instant_given() {
    let (ctx, verdicts) = share_context();
    let t0 = Instant::now();
    let waiting = tokio::spawn(async move { wait_for_the_others(&ctx).await });
    // The others take 3 s to hold their leases (one lapsed and went elsewhere).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        verdicts.asking(),
        Some(iohr_proto::START_STEP),
        "it asks for the start"
    );
    assert!(verdicts.answer(StepVerdict {
        step: iohr_proto::START_STEP,
        meets_slo: true,
        reason: String::new(),
        start_after: Duration::from_millis(300),
    }));
    assert_eq!(waiting.await.expect("join"), Ok(()));
    assert_eq!(Instant::now() - t0, Duration::from_millis(3_300));
}

#[tokio::test(start_paused = true)]
async fn a_share_never_told_to_start_ends_with_why_and_a_cancel_ends_the_wait() {
    let (ctx, _verdicts) = share_context();
    let t0 = Instant::now();
    let why = wait_for_the_others(&ctx).await.expect_err("no start");
    assert_eq!(Instant::now() - t0, START_WITHIN);
    assert_eq!(why, "the run's other shares did not all start within 60 s");
    ctx.cancel.cancel();
    let before = Instant::now();
    assert_eq!(
        wait_for_the_others(&ctx).await,
        Ok(()),
        "cancelled: it runs and ends at once"
    );
    assert_eq!(Instant::now(), before);
}
