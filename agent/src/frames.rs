//! How an executor sends its frames: into a sink that may make it wait (a lease's table,
//! where the send waits while the agent's bound on unacknowledged bytes is full: the
//! executor is slowed, no frame is dropped), or into a channel (`exec`, a capacity step's
//! forwarder, tests).
//!
//! A leaf of the crate (iohr-domain, tokio and std only): the load engine and every kind
//! send through it, and the lease table plugs in as a [`FrameSink`].

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use iohr_domain::FrameKind;
use serde_json::Value;
use tokio::sync::mpsc;

/// A frame an executor emits; the link numbers it and streams it to the controller.
#[derive(Debug, Clone)]
pub struct NewFrame {
    pub kind: FrameKind,
    pub data: serde_json::Value,
}

/// Where frames go when they are not a channel's: the lease table, which numbers them and
/// holds them until the controller acknowledges them.
pub trait FrameSink: Debug + Send + Sync {
    /// Takes a frame once it fits in the sink's bound, waiting until it does.
    fn send(&self, frame: NewFrame) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    /// Takes a frame at once, charged to the bound all the same.
    fn send_now(&self, frame: NewFrame);
}

#[derive(Debug, Clone)]
pub struct FrameSender(Sink);

#[derive(Debug, Clone)]
enum Sink {
    Shared(Arc<dyn FrameSink>),
    Channel(mpsc::UnboundedSender<NewFrame>),
}

impl FrameSender {
    /// Frames into a sink such as a lease's table.
    pub fn from_sink(sink: Arc<dyn FrameSink>) -> FrameSender {
        FrameSender(Sink::Shared(sink))
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
            Sink::Shared(sink) => sink.send(frame).await,
            Sink::Channel(tx) => send_to_channel(tx, frame),
        }
    }

    /// Sends a frame without waiting, charged to the bound all the same: for the frames of
    /// a fault's lifecycle, whose rollback must never wait on the link.
    pub fn send_now(&self, frame: NewFrame) {
        match &self.0 {
            Sink::Shared(sink) => sink.send_now(frame),
            Sink::Channel(tx) => send_to_channel(tx, frame),
        }
    }
}

/// Sends a frame, waiting while the agent's bound on unacknowledged frames is full.
pub async fn emit(frames: &FrameSender, kind: FrameKind, data: Value) {
    frames.send(NewFrame { kind, data }).await
}

fn send_to_channel(tx: &mpsc::UnboundedSender<NewFrame>, frame: NewFrame) {
    let kind = frame.kind;
    if tx.send(frame).is_err() {
        tracing::debug!(kind = kind.as_str(), "frame dropped: receiver closed");
    }
}
