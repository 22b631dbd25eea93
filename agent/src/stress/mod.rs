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
use iohr_domain::stress::GeneratorSaturated;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::frames::{FrameSender, NewFrame};
pub use meter::Meter;
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

    /// Stops the sampler; the verdict, `None` when the generator kept up.
    pub async fn finish(self) -> Option<GeneratorSaturated> {
        self.stop.cancel();
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "the stress sampler ended abnormally");
        }
        self.meter.verdict()
    }
}

/// Inserts a verdict into a result object (every kind's result is one); a result that is
/// not an object (an error's `null`) has nothing to qualify.
pub fn qualify(result: &mut serde_json::Value, verdict: Option<GeneratorSaturated>) {
    let (Some(verdict), Some(object)) = (verdict, result.as_object_mut()) else {
        return;
    };
    match serde_json::to_value(verdict) {
        Ok(value) => {
            object.insert("generator_saturated".to_string(), value);
        }
        Err(e) => tracing::warn!(error = %e, "the saturation verdict could not be written"),
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
