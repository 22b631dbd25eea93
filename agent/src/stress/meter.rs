//! What a run's seconds showed, judged as they come: the sampler's ([`Meter::judge`]) and,
//! for a run with a measure, the load engine's ([`Meter::measure_started`],
//! [`Meter::sends`], [`Meter::measure_ended`]). Before the engine starts its measure the
//! seconds are the run's; from then on the measure's, as its `load` frames number them,
//! and the warm-up's are forgotten.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use iohr_domain::stress::{Basis, GeneratorSaturated, Saturation, StressSecond, TargetHeld};
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct Meter(Arc<Mutex<State>>);

#[derive(Debug)]
struct State {
    saturation: Saturation,
    measure: Option<(Instant, Option<Instant>)>,
    sends: Sends,
}

/// What the open model's engine said of its measured sends and connections, for the
/// result ([`super::qualify`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sends {
    /// Measured late sends that waited for a connection the target held; `None` when no
    /// open-model engine reported.
    pub late_held: Option<u64>,
    /// Measured sends more than the generator's bound late with a connection free.
    pub late_behind: Option<u64>,
    /// The bound on connections (`max_connections`, this agent's part) and the most
    /// the engine opened, once it said.
    pub max_connections: Option<u32>,
    pub connections_opened: Option<u32>,
}

impl Default for Meter {
    fn default() -> Meter {
        Meter::new()
    }
}

impl Meter {
    pub fn new() -> Meter {
        Meter(Arc::new(Mutex::new(State {
            saturation: Saturation::new(Basis::Run),
            measure: None,
            sends: Sends::default(),
        })))
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        // Nothing here panics while holding the lock; were it poisoned, the figures are
        // still whole.
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut state)
    }

    /// The engine's measure started at `at` (its first measured second ends a second
    /// later). Only the first call counts: a run has one measure.
    pub fn measure_started(&self, at: Instant) {
        self.with(|s| {
            if s.measure.is_none() {
                s.measure = Some((at, None));
                s.saturation = Saturation::new(Basis::Measure);
                if let Some(max) = s.sends.max_connections {
                    s.saturation.connection_bound(max);
                }
            }
        });
    }

    pub fn measure_ended(&self, at: Instant) {
        self.with(|s| {
            if let Some((_, end @ None)) = &mut s.measure {
                *end = Some(at);
            }
        });
    }

    /// A measured second's sends (open model): of `sent`, `behind` late by the
    /// generator and `held` by the target ([`Saturation::sends`]).
    pub fn sends(&self, second: u64, sent: u64, behind: u64, held: u64) {
        self.with(|s| {
            s.saturation.sends(second, sent, behind, held);
            let total = s.sends.late_held.get_or_insert(0);
            *total = total.saturating_add(held);
            let total = s.sends.late_behind.get_or_insert(0);
            *total = total.saturating_add(behind);
        });
    }

    /// The open model's bound on connections (`max_connections`, this agent's part).
    pub fn connection_bound(&self, max_connections: u32) {
        self.with(|s| {
            s.sends.max_connections = Some(max_connections);
            s.saturation.connection_bound(max_connections);
        });
    }

    /// The most connections the open model's engine opened in the run.
    pub fn connections_opened(&self, opened: u32) {
        self.with(|s| s.sends.connections_opened = Some(opened));
    }

    /// What the engine said of its sends and connections.
    pub fn sent(&self) -> Sends {
        self.with(|s| s.sends)
    }

    pub fn target_held(&self) -> Option<TargetHeld> {
        self.with(|s| s.saturation.target_held())
    }

    /// A sample read at `at`: marks its measured second and judges it.
    pub fn judge(&self, at: Instant, sample: &mut StressSecond) {
        self.with(|s| match s.measure {
            None => s.saturation.stress(sample.second, sample),
            Some((start, end)) => {
                sample.measure_second = measure_second(start, end, at);
                if let Some(second) = sample.measure_second {
                    s.saturation.stress(second, sample);
                }
            }
        });
    }

    pub fn verdict(&self) -> Option<GeneratorSaturated> {
        self.with(|s| s.saturation.verdict())
    }
}

/// The measured second a sample read at `at` mostly covers (it covers the second before
/// `at`): `None` before the measure's first half second and after its end.
fn measure_second(start: Instant, end: Option<Instant>, at: Instant) -> Option<u64> {
    if end.is_some_and(|end| at > end + Duration::from_millis(500)) {
        return None;
    }
    let elapsed = at.checked_duration_since(start)?;
    let second = elapsed.as_secs_f64().round() as u64;
    (second > 0).then_some(second)
}
