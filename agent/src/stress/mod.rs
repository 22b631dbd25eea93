//! The agent's own state while it sends load: a `stress` frame once a second (host and
//! agent CPU, memory, load average, open sockets, how late its timer fires) and the
//! verdict it adds to the result when the generator set the pace
//! ([`iohr_domain::stress`] has the rule and its bounds).
//!
//! - [`meter`]: what the run's seconds showed, judged as they come (a leaf: iohr-domain,
//!   tokio and std only, so the load engine can report its measure and late sends).
//! - [`sample`]: one second's figures, read with `sysinfo` and from `/proc`.
//! - [`proc`]: the `/proc` text `sysinfo` does not read (sockets).
//!
//! One sampler per run ([`watch`]), a task that wakes once a second and reads on a
//! blocking thread; its memory is the affected seconds only.

pub mod meter;
pub mod proc;
pub mod sample;

use std::time::Duration;

use iohr_domain::FrameKind;
use iohr_domain::stress::{GeneratorSaturated, TargetHeld};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::frames::{FrameSender, NewFrame};
pub use meter::{Meter, Sends};
use sample::Probe;

/// A run's sampler: started with the run, finished when it ends.
pub struct Watch {
    meter: Meter,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// Starts sampling: a `stress` frame into `frames` once a second until [`Watch::finish`]
/// (or `cancel`, the run's).
pub fn watch(frames: FrameSender, cancel: &CancellationToken) -> Watch {
    let meter = Meter::new();
    let stop = cancel.child_token();
    let task = tokio::spawn(sampler(meter.clone(), frames, stop.clone()));
    Watch { meter, stop, task }
}

impl Watch {
    /// What the run's engine reports its measure and sends to.
    pub fn meter(&self) -> Meter {
        self.meter.clone()
    }

    /// Stops the sampler; what the run's seconds showed.
    pub async fn finish(self) -> Judgement {
        self.stop.cancel();
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "the stress sampler ended abnormally");
        }
        Judgement {
            saturated: self.meter.verdict(),
            held: self.meter.target_held(),
            sends: self.meter.sent(),
        }
    }
}

/// What a run's seconds showed of the generator and of the connections the target held.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judgement {
    /// `None` when the generator kept up.
    pub saturated: Option<GeneratorSaturated>,
    /// `None` when no send waited for a connection the target held.
    pub held: Option<TargetHeld>,
    pub sends: Sends,
}

impl From<Option<GeneratorSaturated>> for Judgement {
    fn from(saturated: Option<GeneratorSaturated>) -> Judgement {
        Judgement {
            saturated,
            ..Judgement::default()
        }
    }
}

/// Adds what the run's seconds showed to a result object (every kind's result is one):
/// `generator_saturated`; for the open model, `late_held` and `late_behind`, the
/// connections' bound and
/// how many were opened, and `target_held_connections` with its note. A result that is
/// not an object (an error's `null`) has nothing to qualify.
pub fn qualify(result: &mut serde_json::Value, judgement: impl Into<Judgement>) {
    let judgement = judgement.into();
    let Some(object) = result.as_object_mut() else {
        return;
    };
    let mut insert = |key: &str, value: Result<serde_json::Value, serde_json::Error>| match value {
        Ok(value) => {
            object.insert(key.to_string(), value);
        }
        Err(e) => tracing::warn!(error = %e, key, "a verdict could not be written"),
    };
    if let Some(verdict) = judgement.saturated {
        insert("generator_saturated", serde_json::to_value(verdict));
    }
    let sends = judgement.sends;
    if let Some(late_held) = sends.late_held {
        insert("late_held", Ok(late_held.into()));
    }
    if let Some(late_behind) = sends.late_behind {
        insert("late_behind", Ok(late_behind.into()));
    }
    if let Some(max) = sends.max_connections {
        insert("max_connections", Ok(max.into()));
    }
    if let Some(opened) = sends.connections_opened {
        insert("connections_opened", Ok(opened.into()));
    }
    if let Some(held) = judgement.held {
        let note = held.text.clone();
        insert("target_held_connections", serde_json::to_value(held));
        if let Some(notes) = object.get_mut("notes").and_then(|n| n.as_array_mut()) {
            notes.push(note.into());
        }
    }
}

async fn sampler(meter: Meter, frames: FrameSender, stop: CancellationToken) {
    let mut probe = Some(Probe::new());
    let start = Instant::now();
    let mut second = 0u64;
    loop {
        second += 1;
        let due = start + Duration::from_secs(second);
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(due) => {}
        }
        let fired = Instant::now();
        let lag = fired.saturating_duration_since(due);
        // A timer more than a second behind skips the seconds it missed rather than
        // firing them all at once.
        second = second.max(fired.saturating_duration_since(start).as_secs());
        let Some(mut current) = probe.take() else {
            return;
        };
        // A few small /proc reads, and more with many sockets: off the runtime's threads.
        let read = tokio::task::spawn_blocking(move || {
            let sample = current.read();
            (current, sample)
        })
        .await;
        let Ok((current, mut sample)) = read else {
            tracing::warn!("the stress sampler's read failed; no more stress frames");
            return;
        };
        probe = Some(current);
        sample.second = second;
        sample.lag_ms = lag.as_secs_f64() * 1000.0;
        meter.judge(fired, &mut sample);
        let data = serde_json::to_value(&sample).unwrap_or_default();
        frames
            .send(NewFrame {
                kind: FrameKind::Stress,
                data,
            })
            .await;
    }
}

#[cfg(test)]
mod tests;
