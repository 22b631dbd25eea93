use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{MAX_START_AFTER, start_at, wait_for_start};

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
