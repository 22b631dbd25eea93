//! A replica's ear (`serve --replica`): the other replicas' notices (see
//! `store/replicas.rs`) handed to this one's dispatcher (runs queued, leases ended,
//! cancels asked) and
//! hub (frames of runs whose agents are connected elsewhere, for the viewers here).
//!
//! A notice can be lost (PostgreSQL drops a listener's notices while it reconnects): the
//! dispatcher's once-a-second look at the store finds the queue and the cancels anyway,
//! and a viewer that sees a frame number jump reads the missing ones from the store.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::hub::FrameHub;
use crate::queue::DispatcherHandle;
use crate::store::{
    CANCELS_CHANNEL, ENDED_CHANNEL, FRAMES_CHANNEL, FramesNotice, OFFERS_CHANNEL, QUEUE_CHANNEL,
    Store,
};

/// How long to wait before listening again after the listener failed.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);
/// Frames relayed per notice at most: a longer batch is read by the viewer itself.
const RELAY_MAX: u64 = 1_000;

pub fn spawn(
    store: Store,
    hub: FrameHub,
    dispatcher: DispatcherHandle,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                ended = listen(&store, &hub, &dispatcher) => {
                    if let Err(error) = ended {
                        tracing::warn!(%error, "listening to the other replicas failed; listening again");
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(RELISTEN_AFTER) => {}
            }
        }
    })
}

async fn listen(
    store: &Store,
    hub: &FrameHub,
    dispatcher: &DispatcherHandle,
) -> Result<(), crate::store::StoreError> {
    let mut listener = store.listener().await?;
    tracing::info!(replica = store.replica(), "listening to the other replicas");
    loop {
        let notice = listener
            .recv()
            .await
            .map_err(crate::store::StoreError::from)?;
        match notice.channel() {
            QUEUE_CHANNEL => dispatcher.queued_elsewhere(notice.payload()),
            CANCELS_CHANNEL => dispatcher.cancel_asked(notice.payload()),
            OFFERS_CHANNEL => {
                // "REPLICA RUN": only the replica named offers it.
                if let Some((replica, run_id)) = notice.payload().split_once(' ')
                    && replica == store.replica().to_string()
                {
                    dispatcher.offered_here(run_id);
                }
            }
            ENDED_CHANNEL => {
                // Its own endings a replica has counted already.
                if let Some((replica, account)) = notice.payload().split_once(' ')
                    && replica != store.replica().to_string()
                {
                    dispatcher.lease_freed(account);
                }
            }
            FRAMES_CHANNEL => {
                if let Some(frames) = FramesNotice::parse(notice.payload()) {
                    relay(store, hub, &frames).await;
                }
            }
            _ => {}
        }
    }
}

/// Frames stored by another replica, to this one's viewers of their run, if any (the
/// storing replica published them to its own).
async fn relay(store: &Store, hub: &FrameHub, notice: &FramesNotice) {
    if notice.replica == store.replica() || hub.viewers(&notice.run_id).0 == 0 {
        return;
    }
    let count = (notice.last - notice.first + 1).min(RELAY_MAX);
    let after = notice.first.saturating_sub(1);
    match store
        .frames_after(
            &notice.run_id,
            after,
            u32::try_from(count).unwrap_or(u32::MAX),
        )
        .await
    {
        Ok(frames) => {
            for frame in frames {
                hub.publish(frame);
            }
        }
        Err(error) => {
            tracing::warn!(run = %notice.run_id, %error, "relaying another replica's frames failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_notices_read_back_and_refuse_what_they_did_not_write() {
        let notice =
            FramesNotice::parse("3 10 12 01890a5d-ac96-774b-bcce-b302099a8057").expect("a notice");
        assert_eq!(notice.replica, 3);
        assert_eq!((notice.first, notice.last), (10, 12));
        assert_eq!(notice.run_id, "01890a5d-ac96-774b-bcce-b302099a8057");
        for bad in ["", "3 10", "3 12 10 run", "x 1 2 run", "3 1 2 "] {
            assert_eq!(FramesNotice::parse(bad), None, "{bad:?}");
        }
    }
}
