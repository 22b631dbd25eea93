//! The viewer's stream against a real SQLite store and the real hub.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::compare_pool::ComparePool;
use crate::hub::FrameHub;
use crate::queue::Dispatcher;
use crate::store::{Store, sqlite_url};
use crate::timing::Timing;
use crate::viewers::join;

const WAIT: Duration = Duration::from_secs(10);

/// A controller's parts on a new SQLite store holding `seed`'s queued run (also the
/// console's tests' fixture).
pub(crate) async fn shared_with_a_live_run() -> (Shared, String) {
    let dir = std::env::temp_dir().join(format!("iohr-events-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let store = Store::open(&sqlite_url(&dir)).await.expect("open sqlite");
    let (_, run) = crate::store::tests::seed(&store).await;
    let hub = FrameHub::default();
    let shutdown = CancellationToken::new();
    let timing = Timing::from_heartbeat(Duration::from_millis(200));
    let (dispatcher, _task) =
        Dispatcher::start(store.clone(), hub.clone(), timing, shutdown.clone())
            .await
            .expect("dispatcher");
    let shared = Shared {
        store,
        hub,
        compares: ComparePool::new(1, 0, 1),
        dispatcher,
        timing,
        shutdown,
        feed: Default::default(),
        egress: Default::default(),
        requests: crate::limits::Limits::default().requests(),
    };
    (shared, run.id)
}

fn frame(run_id: &str, number: u64, kind: &str) -> StoredFrame {
    StoredFrame {
        run_id: run_id.to_string(),
        number,
        kind: kind.to_string(),
        payload: json!({"n": number}),
        at: 0,
    }
}

/// Live frames are served from the hub as they come: none of these is in the store, so
/// a viewer that read the store for each (as it did) would emit none of them.
#[tokio::test]
async fn a_live_viewer_takes_the_next_frames_from_the_hub_without_reading_the_store() {
    let (shared, run_id) = shared_with_a_live_run().await;
    let live = join(&shared, &run_id, "default").expect("a place");
    let mut stream = Box::pin(frame_stream(shared.clone(), run_id.clone(), 0, live));
    // The viewer first catches up (nothing stored), then waits on its run's broadcast.
    let hub = shared.hub.clone();
    let id = run_id.clone();
    let publisher = tokio::spawn(async move {
        // Published only once the viewer is parked on the broadcast, so none is missed
        // whatever the order the two tasks run in: the viewer subscribed before this.
        for n in 1..=3 {
            hub.publish(frame(&id, n, "check"));
        }
        // A frame past a gap is not emitted live (the store has nothing past 3).
        hub.publish(frame(&id, 5, "check"));
    });
    let mut got = Vec::new();
    while got.len() < 3 {
        let next = tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("a frame in time")
            .expect("the stream goes on");
        got.push(next.number);
    }
    publisher.await.expect("publisher");
    assert_eq!(got, vec![1, 2, 3]);
    shared.shutdown.cancel();
    assert!(
        tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("the stream ends on shutdown")
            .is_none(),
        "frame 5 came past the gap"
    );
}
