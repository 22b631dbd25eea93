use std::task::Poll;

use futures_util::poll;

use super::*;

#[tokio::test]
async fn a_charge_waits_while_the_bound_is_full_and_goes_when_room_comes_back() {
    let budget = FrameBudget::new(100);
    let first = budget.charge(60).await;
    let second = budget.charge(40).await;
    assert_eq!(budget.used(), 100);
    let third = budget.charge(30);
    tokio::pin!(third);
    assert!(poll!(&mut third).is_pending(), "full: it waits");
    drop(second);
    let third = poll!(&mut third);
    assert!(matches!(third, Poll::Ready(_)), "40 bytes back: 30 fit");
    assert_eq!(budget.used(), 90);
    drop(first);
    assert_eq!(budget.used(), 30);
    drop(third);
    assert_eq!(budget.used(), 0);
}

#[tokio::test]
async fn charges_are_served_in_order_so_a_large_one_is_not_overtaken() {
    let budget = FrameBudget::new(100);
    let held = budget.charge(90).await;
    let large = budget.charge(80);
    tokio::pin!(large);
    assert!(poll!(&mut large).is_pending());
    let small = budget.charge(5);
    tokio::pin!(small);
    assert!(
        poll!(&mut small).is_pending(),
        "5 bytes would fit, but the large charge asked first"
    );
    drop(held);
    assert!(poll!(&mut large).is_ready());
    assert!(poll!(&mut small).is_ready());
}

#[tokio::test]
async fn a_frame_larger_than_the_bound_goes_alone() {
    let budget = FrameBudget::new(100);
    let small = budget.charge(1).await;
    let huge = budget.charge(1_000);
    tokio::pin!(huge);
    assert!(
        poll!(&mut huge).is_pending(),
        "waits for everything to be acknowledged"
    );
    drop(small);
    let alone = poll!(&mut huge);
    assert!(matches!(alone, Poll::Ready(_)), "alone, it goes");
    assert_eq!(budget.used(), 100, "charged the whole bound");
    drop(alone);
    assert_eq!(budget.used(), 0);
}

#[tokio::test]
async fn a_charge_without_waiting_is_owed_and_repaid_before_room_comes_back() {
    let budget = FrameBudget::new(100);
    let full = budget.charge(100).await;
    let owed = budget.charge_now(50);
    assert_eq!(budget.used(), 150, "taken at once, beyond the bound");
    let waiting = budget.charge(10);
    tokio::pin!(waiting);
    drop(full);
    assert_eq!(budget.used(), 50, "what was owed is paid first");
    let waiting = poll!(&mut waiting);
    assert!(matches!(waiting, Poll::Ready(_)), "then 50 bytes of room");
    drop(owed);
    assert_eq!(budget.used(), 10);
}
