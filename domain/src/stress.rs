//! The generator's own state: the `stress` frame an agent emits once a second while it
//! sends load, and the rule that says when the generator, not the target, set the pace
//! (`generator_saturated` in the run's result, which compare refuses to judge).
//!
//! A load figure is only true while the generator keeps up. Three signs that it did not,
//! each judged per second:
//! - **CPU**: the agent process used at least [`CPU_SHARE_BOUND`] of the CPUs it may use
//!   (its cgroup quota or its affinity, the smaller). k6 warns at 80% of the host's CPU;
//!   ours is the process's share, since a quota or `taskset` binds before the host does.
//! - **Lag**: the agent's once-a-second timer fired more than [`LAG_BOUND_MS`] late. The
//!   engine's own tolerance for a late send is 10 ms; a runtime a tenth of a second
//!   behind on a timer is behind on its sends and its reads of answers too, and a bound
//!   this loose is not reached by the ordinary jitter of a busy two-core machine.
//! - **Late sends** (open model, measured seconds): more than [`LATE_SHARE_BOUND`] of a
//!   second's sends started more than [`BEHIND_BOUND_MS`] late while a connection was
//!   free for them, and at least [`LATE_MIN`] of them: the runtime was behind its
//!   schedule by as much as the lag bound, for many sends.
//!
//! A send that was late because the target held every connection the run may open (its
//! `max_connections`) is not the generator's: the engine counts it apart, and it goes
//! into the result's `target_held_connections` ([`held`]), never into this verdict. The
//! target's stall is measured all the same, from the intended send times.

use serde::{Deserialize, Serialize};

pub mod held;

pub use held::TargetHeld;

/// The share of its CPUs past which the agent process is taken as saturated.
pub const CPU_SHARE_BOUND: f64 = 0.80;
/// How late (ms) the agent's one-second timer may fire before the second counts.
pub const LAG_BOUND_MS: f64 = 100.0;
/// The share of a second's sends that may be late.
pub const LATE_SHARE_BOUND: f64 = 0.10;
/// How late (ms) a send with a connection free must start to count as the generator's:
/// the timer's bound, for the same reason. A send 10 ms late counts as `late` for people
/// (the engine's tolerance), but a busy host's scheduling jitter reaches that.
pub const BEHIND_BOUND_MS: u64 = 100;
/// Fewer late sends than this never count (a second of 20 sends with 3 late is noise).
pub const LATE_MIN: u64 = 5;
/// Seconds listed in a verdict; `count` says how many there were in all.
pub const MAX_LISTED_SECONDS: usize = 3600;

/// One second of the agent's own state, as its `stress` frame carries it. Host-wide
/// figures and the agent process's; never an argument list, an environment or a body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StressSecond {
    /// Seconds since the run started on the agent.
    pub second: u64,
    /// The load engine's measured second this one falls in (as its `load` frames number
    /// them), for runs with one measure (load, replay); absent in warm-up and elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measure_second: Option<u64>,
    /// Busy share of all the host's CPUs, 0 to 100.
    pub cpu_host_percent: f64,
    /// The agent process, in percent of one CPU (200 = two whole CPUs), as `top` says.
    pub cpu_agent_percent: f64,
    /// CPUs the agent may use: its affinity, or its cgroup quota when smaller.
    pub cpus_allowed: f64,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
    /// The agent process's resident memory.
    pub agent_memory_bytes: u64,
    /// 1, 5 and 15 minutes.
    pub load_average: [f64; 3],
    /// Sockets the agent process holds open.
    pub agent_sockets: u64,
    /// TCP sockets of the host (its network namespace), in any state.
    pub host_tcp_sockets: u64,
    /// How late the agent's one-second timer fired, in milliseconds.
    pub lag_ms: f64,
}

impl StressSecond {
    /// The agent's CPU as a share of what it may use.
    pub fn cpu_share(&self) -> f64 {
        if self.cpus_allowed > 0.0 {
            self.cpu_agent_percent / 100.0 / self.cpus_allowed
        } else {
            0.0
        }
    }

    /// The line `iohr reliability runs events` prints.
    pub fn line(&self) -> String {
        format!(
            "stress  {:>3}s  agent cpu {:.0}% of {} cpu{}  host cpu {:.0}%  lag {:.0} ms  load {:.2}  sockets {}  mem {} MiB",
            self.second,
            self.cpu_share() * 100.0,
            trim(self.cpus_allowed),
            if self.cpus_allowed == 1.0 { "" } else { "s" },
            self.cpu_host_percent,
            self.lag_ms,
            self.load_average[0],
            self.agent_sockets,
            self.agent_memory_bytes / (1024 * 1024),
        )
    }
}

/// A CPU count as people write it: `2`, `0.5`, `0.005` (three places, so that the small
/// quotas a container or a test grants do not print as `0`).
fn trim(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// What the seconds of a verdict count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// The load engine's measured seconds (load, replay), as its `load` frames number them.
    Measure,
    /// Seconds since the run started (scenario, faults, capacity), as the `stress` frames
    /// number them.
    Run,
}

/// Which sign a second showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cause {
    Cpu,
    Lag,
    Late,
}

/// One sign, over the seconds that showed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaturationReason {
    pub cause: Cause,
    /// Seconds that showed it.
    pub seconds: u64,
    /// The worst second's figure: a share of the CPUs (cpu), milliseconds (lag), a share
    /// of the sends (late).
    pub worst: f64,
    pub bound: f64,
    /// The same in words.
    pub text: String,
}

/// The result's `generator_saturated`: the generator set the pace for these seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GeneratorSaturated {
    /// Seconds affected, ascending (at most [`MAX_LISTED_SECONDS`]).
    pub seconds: Vec<u64>,
    /// Seconds affected in all.
    pub count: u64,
    pub basis: Basis,
    pub reasons: Vec<SaturationReason>,
}

impl GeneratorSaturated {
    /// `generator saturated for 12 s (agent CPU at 97% ...; ...)`.
    pub fn line(&self) -> String {
        let why: Vec<&str> = self.reasons.iter().map(|r| r.text.as_str()).collect();
        format!(
            "generator saturated for {} s ({})",
            self.count,
            why.join("; ")
        )
    }

    /// Reads a result's verdict, if it has one.
    pub fn of_result(result: &serde_json::Value) -> Option<GeneratorSaturated> {
        let value = result.get("generator_saturated")?;
        GeneratorSaturated::deserialize(value).ok()
    }

    /// The verdicts of the agents that shared one run, as the whole's: every second some
    /// agent's generator set the pace (a second of the whole is that second of each
    /// share), and for each cause the worst agent's reason as it stated it. `count` is at
    /// least every listed second and every agent's own count. `None` when none saturated.
    pub fn merge(parts: &[GeneratorSaturated]) -> Option<GeneratorSaturated> {
        let first = parts.first()?;
        let (seconds, count) = join_seconds(parts.iter().map(|p| (&p.seconds[..], p.count)));
        let mut reasons: Vec<SaturationReason> = Vec::new();
        for reason in parts.iter().flat_map(|p| &p.reasons) {
            match reasons.iter_mut().find(|r| r.cause == reason.cause) {
                Some(kept) if kept.worst >= reason.worst => {}
                Some(kept) => *kept = reason.clone(),
                None => reasons.push(reason.clone()),
            }
        }
        reasons.sort_by_key(|r| r.cause);
        Some(GeneratorSaturated {
            seconds,
            count,
            basis: first.basis,
            reasons,
        })
    }
}

/// The affected seconds of several agents' shares of one run, joined (a second of the
/// whole is that second of each share; at most [`MAX_LISTED_SECONDS`] listed), and the
/// whole's count: at least every listed second and every share's own count.
fn join_seconds<'a>(parts: impl Iterator<Item = (&'a [u64], u64)>) -> (Vec<u64>, u64) {
    let mut seconds = std::collections::BTreeSet::new();
    let mut count = 0;
    for (listed, counted) in parts {
        seconds.extend(listed.iter().copied());
        count = count.max(counted);
    }
    let count = count.max(seconds.len() as u64);
    (
        seconds.into_iter().take(MAX_LISTED_SECONDS).collect(),
        count,
    )
}

#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    seconds: u64,
    worst: f64,
    cpus: f64,
}

impl Tally {
    fn add(&mut self, figure: f64) {
        self.seconds += 1;
        self.worst = self.worst.max(figure);
    }
}

/// The verdict as the seconds come: fed by the sampler's seconds ([`Saturation::stress`])
/// and the engine's ([`Saturation::sends`]), each judged at once, so memory is the
/// affected seconds only (and bounded by [`MAX_LISTED_SECONDS`]).
#[derive(Debug, Clone)]
pub struct Saturation {
    basis: Basis,
    seconds: std::collections::BTreeSet<u64>,
    count_beyond: u64,
    /// The highest second counted past the list's bound: the two sources each come in
    /// order, so a later second is a new one.
    last_beyond: u64,
    cpu: Tally,
    lag: Tally,
    late: Tally,
    held: held::HeldTally,
}

impl Saturation {
    pub fn new(basis: Basis) -> Saturation {
        Saturation {
            basis,
            seconds: Default::default(),
            count_beyond: 0,
            last_beyond: 0,
            cpu: Tally::default(),
            lag: Tally::default(),
            late: Tally::default(),
            held: held::HeldTally::default(),
        }
    }

    pub fn basis(&self) -> Basis {
        self.basis
    }

    /// One sampled second at `second` of the basis: CPU and lag.
    pub fn stress(&mut self, second: u64, sample: &StressSecond) {
        let share = sample.cpu_share();
        let mut hit = false;
        if share >= CPU_SHARE_BOUND {
            self.cpu.add(share);
            self.cpu.cpus = sample.cpus_allowed;
            hit = true;
        }
        if sample.lag_ms > LAG_BOUND_MS {
            self.lag.add(sample.lag_ms);
            hit = true;
        }
        if hit {
            self.mark(second);
        }
    }

    /// One measured second's sends (open model): of `sent`, `behind` started more than
    /// [`BEHIND_BOUND_MS`] late while a connection was free (the generator's), and `held`
    /// waited because the target held every connection the run may open (the target's).
    pub fn sends(&mut self, second: u64, sent: u64, behind: u64, held: u64) {
        self.held.add(second, sent, held);
        let late = behind;
        if sent == 0 || late < LATE_MIN {
            return;
        }
        let share = late as f64 / sent as f64;
        if share > LATE_SHARE_BOUND {
            self.late.add(share);
            self.mark(second);
        }
    }

    /// The bound on connections the engine reached when sends waited for one.
    pub fn connection_bound(&mut self, max_connections: u32) {
        self.held.bound(max_connections);
    }

    /// The seconds whose sends waited for a connection the target held; `None` when none
    /// did.
    pub fn target_held(&self) -> Option<TargetHeld> {
        self.held.verdict(self.basis)
    }

    fn mark(&mut self, second: u64) {
        if self.seconds.contains(&second) {
            return;
        }
        if self.seconds.len() < MAX_LISTED_SECONDS {
            self.seconds.insert(second);
        } else if second > self.last_beyond {
            self.last_beyond = second;
            self.count_beyond += 1;
        }
    }

    /// `None` when no second showed a sign.
    pub fn verdict(&self) -> Option<GeneratorSaturated> {
        if self.seconds.is_empty() {
            return None;
        }
        let mut reasons = Vec::new();
        if self.cpu.seconds > 0 {
            reasons.push(SaturationReason {
                cause: Cause::Cpu,
                seconds: self.cpu.seconds,
                worst: self.cpu.worst,
                bound: CPU_SHARE_BOUND,
                text: format!(
                    "agent CPU up to {:.0}% of the {} CPU{} it may use in {} s, bound {:.0}%",
                    self.cpu.worst * 100.0,
                    trim(self.cpu.cpus),
                    if self.cpu.cpus == 1.0 { "" } else { "s" },
                    self.cpu.seconds,
                    CPU_SHARE_BOUND * 100.0
                ),
            });
        }
        if self.lag.seconds > 0 {
            reasons.push(SaturationReason {
                cause: Cause::Lag,
                seconds: self.lag.seconds,
                worst: self.lag.worst,
                bound: LAG_BOUND_MS,
                text: format!(
                    "its timer fired up to {:.0} ms late in {} s, bound {:.0} ms",
                    self.lag.worst, self.lag.seconds, LAG_BOUND_MS
                ),
            });
        }
        if self.late.seconds > 0 {
            reasons.push(SaturationReason {
                cause: Cause::Late,
                seconds: self.late.seconds,
                worst: self.late.worst,
                bound: LATE_SHARE_BOUND,
                text: format!(
                    "up to {:.0}% of a second's sends over {} ms late with a connection free in {} s, bound {:.0}%",
                    self.late.worst * 100.0,
                    BEHIND_BOUND_MS,
                    self.late.seconds,
                    LATE_SHARE_BOUND * 100.0
                ),
            });
        }
        Some(GeneratorSaturated {
            seconds: self.seconds.iter().copied().collect(),
            count: self.seconds.len() as u64 + self.count_beyond,
            basis: self.basis,
            reasons,
        })
    }
}

#[cfg(test)]
mod tests;
