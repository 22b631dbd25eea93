//! What a run may cost before it starts: how long it can take at most (which a plan
//! caps) and how many requests it can send (the units it reserves). Pure functions of each
//! kind's plan, kept here beside one another so the controller's admission and the agent's
//! dry run read the same numbers.

use std::time::Duration;

use crate::capacity::CapacityPlan;
use crate::faults::experiment::{Activity, Experiment, LoadProbe, Provider};
use crate::faults::tolerance::Tolerance;
use crate::load::{LoadPlan, Model, WarmupPlan};

/// What a valid spec may cost.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCost {
    /// The units (requests) the run reserves.
    pub units: u64,
    /// The longest the run can last and what in the spec makes it so, for the kinds whose
    /// length the plan caps (load, replay, capacity).
    pub length: Option<(Duration, &'static str)>,
}

impl RunCost {
    /// A run whose length a plan does not cap.
    pub fn unbounded(units: u64) -> RunCost {
        RunCost {
            units,
            length: None,
        }
    }

    /// A run that lasts at most `length`, because of `what` in its spec.
    pub fn bounded(units: u64, length: Duration, what: &'static str) -> RunCost {
        RunCost {
            units,
            length: Some((length, what)),
        }
    }
}

/// Seconds as a `Duration`, saturating: a cost is a bound, never a panic.
fn seconds(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(Duration::MAX)
}

impl LoadPlan {
    /// The rate the open model warms up at: its start rate, or its first stage's target
    /// when it ramps from zero (as the engine does).
    pub fn warmup_rate(&self) -> f64 {
        if self.start_rate > 0.0 {
            self.start_rate
        } else {
            self.stages.first().map_or(0.0, |(_, rate)| *rate)
        }
    }

    /// How long the warm-up lasts: its duration, or for a count its time at the warm-up
    /// rate (a closed model's count has no known length: zero).
    pub fn warmup_length(&self) -> Duration {
        match (self.warmup, self.model) {
            (WarmupPlan::None, _) => Duration::ZERO,
            (WarmupPlan::Duration(d), _) => d,
            (WarmupPlan::Requests(n), Model::Open) if self.warmup_rate() > 0.0 => {
                seconds(n as f64 / self.warmup_rate())
            }
            (WarmupPlan::Requests(_), _) => Duration::ZERO,
        }
    }

    /// The longest the run can take: its warm-up and its measure (a ramp's stages summed,
    /// a replay's log span over its speed).
    pub fn run_length(&self) -> Duration {
        self.warmup_length().saturating_add(self.duration)
    }

    /// The units the run reserves: every request its schedule may send, its warm-up's
    /// included (the agent spends those too), a share's part of them. `None` for the
    /// closed model, which sends as fast as the target answers.
    pub fn units_to_reserve(&self) -> Option<u64> {
        let measure = self.expected_requests()?;
        let warmup = match (self.warmup, self.model) {
            (_, Model::Closed) => return None,
            (WarmupPlan::None, _) => 0,
            (WarmupPlan::Requests(n), _) => n,
            (WarmupPlan::Duration(d), _) => {
                let sent = (self.warmup_rate() * d.as_secs_f64()).ceil();
                if sent.is_finite() && sent < u64::MAX as f64 {
                    sent as u64
                } else {
                    u64::MAX
                }
            }
        };
        Some(measure.saturating_add(self.share.part(warmup)))
    }
}

impl CapacityPlan {
    /// The whole sweep's worst case: every grid step and every bisection round, each
    /// followed by its cooldown.
    pub fn run_length(&self) -> Duration {
        let steps = u32::try_from(self.grid.len())
            .unwrap_or(u32::MAX)
            .saturating_add(self.bisect);
        self.step
            .saturating_add(self.cooldown)
            .saturating_mul(steps)
    }
}

impl LoadProbe {
    /// The requests the burst schedules: its rate over its duration.
    pub fn expected_requests(&self) -> u64 {
        let sent = (self.rate * self.duration.as_secs_f64()).ceil();
        if sent.is_finite() && sent >= 0.0 && sent < u64::MAX as f64 {
            sent as u64
        } else {
            u64::MAX
        }
    }
}

/// The requests one activity may send: its provider's, and a probe tolerance's (which the
/// lifecycle runs to judge the output), nested as deep as the tolerance goes.
fn activity_requests(activity: &Activity) -> u64 {
    let own = match &activity.provider {
        Provider::Http(_) => 1,
        Provider::Load(burst) => burst.expected_requests(),
        Provider::Fault(_) => 0,
        // Resolved on the agent: counted as one request (its burst is not known yet).
        Provider::Deferred(_) => 1,
    };
    let judged = match &activity.tolerance {
        Some(Tolerance::Probe(probe)) => activity_requests(probe),
        _ => 0,
    };
    own.saturating_add(judged)
}

fn sum(activities: &[Activity]) -> u64 {
    activities
        .iter()
        .map(activity_requests)
        .fold(0, u64::saturating_add)
}

impl Experiment {
    /// The most requests the experiment sends (the units a faults run reserves): the
    /// steady-state probes twice (before and after the method), the method's probes and
    /// HTTP actions, and the rollbacks' HTTP actions. Faults themselves send nothing.
    pub fn expected_requests(&self) -> u64 {
        let hypothesis = self
            .hypothesis
            .as_ref()
            .map_or(0, |h| sum(&h.probes).saturating_mul(2));
        hypothesis
            .saturating_add(sum(&self.method))
            .saturating_add(sum(&self.rollbacks))
    }
}

#[cfg(test)]
mod tests;
