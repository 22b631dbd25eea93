//! How an executor sends its frames: into its lease's table, where the send waits while
//! the agent's bound on unacknowledged bytes is full (the executor is slowed, no frame is
//! dropped); or into a channel (`exec`, a capacity step's forwarder, tests).

use std::sync::Arc;

use tokio::sync::mpsc;

use super::NewFrame;
use crate::leases::Leases;

#[derive(Debug, Clone)]
pub struct FrameSender(Sink);

#[derive(Debug, Clone)]
enum Sink {
    Lease { leases: Leases, lease_id: Arc<str> },
    Channel(mpsc::UnboundedSender<NewFrame>),
}

impl FrameSender {
    /// Frames of a lease's run, numbered and held in its table until acknowledged.
    pub fn lease(leases: &Leases, lease_id: &str) -> FrameSender {
        FrameSender(Sink::Lease {
            leases: leases.clone(),
            lease_id: lease_id.into(),
        })
    }

    /// Frames into a channel, never waiting.
    pub fn channel() -> (FrameSender, mpsc::UnboundedReceiver<NewFrame>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (FrameSender(Sink::Channel(tx)), rx)
    }

    /// Sends a frame, waiting for room in the bound. A closed channel means its reader is
    /// gone, and the run still returns its outcome.
    pub async fn send(&self, frame: NewFrame) {
        match &self.0 {
            Sink::Lease { leases, lease_id } => {
                leases
                    .send_frame(lease_id, frame.kind.as_str(), frame.data.to_string())
                    .await
            }
            Sink::Channel(tx) => send_to_channel(tx, frame),
        }
    }

    /// Sends a frame without waiting, charged to the bound all the same: for the frames of
    /// a fault's lifecycle, whose rollback must never wait on the link.
    pub fn send_now(&self, frame: NewFrame) {
        match &self.0 {
            Sink::Lease { leases, lease_id } => {
                leases.push_frame(lease_id, frame.kind.as_str(), frame.data.to_string())
            }
            Sink::Channel(tx) => send_to_channel(tx, frame),
        }
    }
}

fn send_to_channel(tx: &mpsc::UnboundedSender<NewFrame>, frame: NewFrame) {
    let kind = frame.kind;
    if tx.send(frame).is_err() {
        tracing::debug!(kind = kind.as_str(), "frame dropped: receiver closed");
    }
}
