use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use super::*;

fn frame(run_id: &str, number: u64) -> StoredFrame {
    StoredFrame {
        run_id: run_id.to_string(),
        number,
        kind: "load".to_string(),
        payload: serde_json::json!({"n": number}),
        at: 0,
    }
}

/// A waker that counts how often it is woken.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_viewer_of_one_run_neither_receives_nor_wakes_for_another_runs_frames() {
    let hub = FrameHub::default();
    let mut a = hub.subscribe("run-a", "acc").unwrap();
    let mut b = hub.subscribe("run-b", "acc").unwrap();
    let wakes = Arc::new(Wakes::default());
    let waker = Waker::from(wakes.clone());
    let mut cx = Context::from_waker(&waker);
    {
        // A viewer of A parked on its next frame, as a live SSE stream is.
        let mut next = pin!(a.frames.recv());
        assert!(next.as_mut().poll(&mut cx).is_pending());
        for n in 1..=100 {
            hub.publish(frame("run-b", n));
        }
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            0,
            "run B's frames woke A's viewer"
        );
        hub.publish(frame("run-a", 1));
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        match next.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(f)) => assert_eq!((f.run_id.as_str(), f.number), ("run-a", 1)),
            other => panic!("A's viewer got {other:?}"),
        }
    }
    assert!(
        a.frames.try_recv().is_err(),
        "A got more than its own frame"
    );
    let got: Vec<u64> = std::iter::from_fn(|| b.frames.try_recv().ok())
        .map(|f| {
            assert_eq!(f.run_id, "run-b");
            f.number
        })
        .collect();
    assert_eq!(got, (1..=100).collect::<Vec<_>>());
}

#[test]
fn a_run_nobody_watches_has_no_broadcast_and_the_last_viewer_drops_its_own() {
    let hub = FrameHub::default();
    hub.publish(frame("run-a", 1));
    assert_eq!(hub.watched_runs(), 0);
    let first = hub.subscribe("run-a", "acc").unwrap();
    let second = hub.subscribe("run-a", "acc").unwrap();
    assert_eq!(hub.watched_runs(), 1);
    assert_eq!(hub.viewers("run-a"), (2, 2));
    drop(first);
    assert_eq!(hub.viewers("run-a"), (1, 1));
    drop(second);
    assert_eq!(hub.viewers("run-a"), (0, 0));
    assert_eq!(hub.watched_runs(), 0);
}

#[test]
fn viewers_are_bounded_per_run_and_in_total_and_a_place_frees_on_drop() {
    let hub = FrameHub::new(ViewerLimits {
        per_run: 2,
        total: 3,
        per_account: 3,
    });
    let a1 = hub.subscribe("run-a", "acc").unwrap();
    let _a2 = hub.subscribe("run-a", "acc").unwrap();
    assert_eq!(
        hub.subscribe("run-a", "acc").unwrap_err(),
        HubFull::PerRun(2)
    );
    // Another account's viewers: the process bounds, not a share, refuse them.
    let _b1 = hub.subscribe("run-b", "acc-b").unwrap();
    // Run B has room but the controller has none.
    assert_eq!(
        hub.subscribe("run-b", "acc-b").unwrap_err(),
        HubFull::Total(3)
    );
    drop(a1);
    let _b2 = hub.subscribe("run-b", "acc-b").unwrap();
    assert_eq!(hub.viewers("run-b"), (2, 3));
}

#[test]
fn an_internal_viewer_is_counted_but_never_refused() {
    let hub = FrameHub::new(ViewerLimits {
        per_run: 1,
        total: 1,
        per_account: 1,
    });
    let _viewer = hub.subscribe("run-a", "acc").unwrap();
    let mut internal = hub.subscribe_internal("run-a");
    assert_eq!(hub.viewers("run-a"), (2, 2));
    hub.publish(frame("run-a", 7));
    assert_eq!(internal.frames.try_recv().unwrap().number, 7);
    drop(internal);
    assert_eq!(hub.viewers("run-a"), (1, 1));
}

#[test]
fn a_websocket_connection_takes_a_place_in_the_total_until_dropped() {
    let hub = FrameHub::new(ViewerLimits {
        per_run: 1,
        total: 2,
        per_account: 2,
    });
    let connection = hub.hold_connection("acc").unwrap();
    let _a = hub.subscribe("run-a", "acc").unwrap();
    assert_eq!(hub.viewers("run-a"), (1, 2));
    assert_eq!(hub.hold_connection("acc-b").unwrap_err(), HubFull::Total(2));
    assert_eq!(
        hub.subscribe("run-b", "acc-b").unwrap_err(),
        HubFull::Total(2)
    );
    drop(connection);
    assert_eq!(hub.viewers("run-a"), (1, 1));
    let _b = hub.subscribe("run-b", "acc").unwrap();
}

#[test]
fn an_account_at_its_share_leaves_the_rest_to_others() {
    let hub = FrameHub::new(ViewerLimits {
        per_run: 8,
        total: 3,
        per_account: 2,
    });
    // A WebSocket connection and a subscription: both count in the share.
    let connection = hub.hold_connection("a").unwrap();
    let a1 = hub.subscribe("run-a", "a").unwrap();
    assert_eq!(
        hub.subscribe("run-a", "a").unwrap_err(),
        HubFull::Account(2)
    );
    assert_eq!(hub.hold_connection("a").unwrap_err(), HubFull::Account(2));
    assert_eq!(HubFull::Account(2).code(), "too_many_account_viewers");
    // B gets the rest of the total, then the total's own refusal.
    let _b1 = hub.subscribe("run-a", "b").unwrap();
    assert_eq!(hub.subscribe("run-b", "b").unwrap_err(), HubFull::Total(3));
    // An internal viewer is in no account's share.
    let internal = hub.subscribe_internal("run-a");
    drop(a1);
    drop(connection);
    assert_eq!(hub.viewers("run-a"), (2, 2));
    drop(internal);
    let _a2 = hub.subscribe("run-b", "a").unwrap();
    let _a3 = hub.subscribe("run-b", "a").unwrap();
    assert_eq!(
        hub.subscribe("run-b", "a").unwrap_err(),
        HubFull::Account(2)
    );
}

#[test]
fn a_share_not_below_the_total_leaves_the_total_to_answer() {
    let hub = FrameHub::new(ViewerLimits {
        per_run: 8,
        total: 2,
        per_account: 2,
    });
    let _a1 = hub.subscribe("run-a", "a").unwrap();
    let _a2 = hub.subscribe("run-a", "a").unwrap();
    assert_eq!(hub.subscribe("run-a", "a").unwrap_err(), HubFull::Total(2));
}
