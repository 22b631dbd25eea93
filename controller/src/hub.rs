//! The live side of frames: every stored frame is published here once, and each viewer
//! (SSE, gRPC WatchRun, a cancel waiting for its run to end) picks its run's frames.
//! A viewer that falls behind reads the rest from the store, so nothing is lost.

use std::sync::Arc;

use tokio::sync::broadcast;

use crate::store::StoredFrame;

#[derive(Debug, Clone)]
pub struct FrameHub {
    tx: broadcast::Sender<Arc<StoredFrame>>,
}

impl Default for FrameHub {
    fn default() -> Self {
        FrameHub::new(8192)
    }
}

impl FrameHub {
    pub fn new(capacity: usize) -> FrameHub {
        let (tx, _) = broadcast::channel(capacity);
        FrameHub { tx }
    }

    pub fn publish(&self, frame: StoredFrame) {
        // No viewer is not an error: the frame is in the store already.
        let _ = self.tx.send(Arc::new(frame));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<StoredFrame>> {
        self.tx.subscribe()
    }
}
