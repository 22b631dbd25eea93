//! The lease table as the sink of its runs' frames.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::Leases;
use crate::frames::{FrameSender, FrameSink, NewFrame};

#[derive(Debug)]
struct LeaseFrames {
    leases: Leases,
    lease_id: Arc<str>,
}

impl FrameSink for LeaseFrames {
    fn send(&self, frame: NewFrame) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.leases.send_frame(
            &self.lease_id,
            frame.kind.as_str(),
            frame.data.to_string(),
        ))
    }

    fn send_now(&self, frame: NewFrame) {
        self.leases
            .push_frame(&self.lease_id, frame.kind.as_str(), frame.data.to_string())
    }
}

impl Leases {
    /// Frames of a lease's run, numbered and held in its table until acknowledged.
    pub fn frame_sender(&self, lease_id: &str) -> FrameSender {
        FrameSender::from_sink(Arc::new(LeaseFrames {
            leases: self.clone(),
            lease_id: lease_id.into(),
        }))
    }
}
