//! The timeline: every step of a lifecycle as it happens, sent as `timeline` frames.

use iohr_domain::FrameKind;
use iohr_domain::faults::journal::TimelineStep;

use super::state::State;
use super::{Clock, Driver};
use crate::kinds::{FrameSender, NewFrame, to_json};

/// A timeline callback that sends each step as a `timeline` frame of the run. It never
/// waits for room in the agent's frame bound: a rollback must not wait on the link.
pub fn timeline_frames(frames: FrameSender) -> impl Fn(TimelineStep) + Send + Sync {
    move |step| {
        frames.send_now(NewFrame {
            kind: FrameKind::Timeline,
            data: to_json(&step),
        })
    }
}

impl<'a, D: Driver, E: Clock, T: Fn(TimelineStep) + Send + Sync> State<'a, D, E, T> {
    pub(super) fn step(
        &self,
        phase: &str,
        activity: Option<&str>,
        status: &str,
        detail: Option<String>,
    ) {
        // A probe's error may quote a URL or header made with a secret.
        (self.run.timeline)(TimelineStep {
            phase: phase.to_string(),
            activity: activity.map(|a| self.mask.mask_str(a)),
            status: status.to_string(),
            at: self.run.clock.now_ms(),
            detail: detail.map(|d| self.mask.mask_str(&d)),
        });
    }
}
