//! Sends that were late because the target held every connection the run may open:
//! the result's `target_held_connections`. The open model opens another connection when a
//! send is due and every one is busy, up to the spec's `max_connections`; past that bound
//! a due send waits for one to be free. That wait is the target's latency (measured from
//! the intended send time, so the corrected percentiles already show it) and a property
//! of the run's configuration, never the generator's: it does not count towards
//! `generator_saturated`.

use serde::{Deserialize, Serialize};

use super::{Basis, MAX_LISTED_SECONDS};

/// The result's `target_held_connections`: the seconds in which sends waited for a
/// connection because the target held all of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetHeld {
    /// Seconds in which a send waited, ascending (at most [`MAX_LISTED_SECONDS`]).
    pub seconds: Vec<u64>,
    /// Such seconds in all.
    pub count: u64,
    pub basis: Basis,
    /// Sends that waited for a connection, in all (part of the result's `late`).
    pub late: u64,
    /// The worst second's share of its sends that waited.
    pub worst: f64,
    /// The bound on connections that was reached (the spec's `max_connections`, or this
    /// agent's part of it); absent where the engine did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// The same in words.
    pub text: String,
}

impl TargetHeld {
    /// Reads a result's `target_held_connections`, if it has one.
    pub fn of_result(result: &serde_json::Value) -> Option<TargetHeld> {
        let value = result.get("target_held_connections")?;
        TargetHeld::deserialize(value).ok()
    }

    fn describe(
        count: u64,
        late: u64,
        worst: f64,
        max_connections: Option<u32>,
        agents: usize,
    ) -> String {
        let bound = match (max_connections, agents) {
            (Some(max), 1) => format!("all {max} connections (its max_connections)"),
            (Some(max), n) => format!("all {max} connections of {n} agents (max_connections)"),
            (None, _) => "every connection it may open".to_string(),
        };
        format!(
            "the target held {bound} in {count} s: {late} sends waited for one (up to {:.0}% of a second's); the target's latency, measured from the intended send times, not the generator's",
            worst * 100.0
        )
    }

    /// The verdicts of the agents that shared one run, as the whole's: their seconds
    /// joined, their waits and bounds added, the worst second's share kept. `None` when
    /// no agent's sends waited.
    pub fn merge(parts: &[TargetHeld]) -> Option<TargetHeld> {
        let first = parts.first()?;
        let (seconds, count) = super::join_seconds(parts.iter().map(|p| (&p.seconds[..], p.count)));
        let late = parts.iter().fold(0u64, |sum, p| sum.saturating_add(p.late));
        let worst = parts.iter().map(|p| p.worst).fold(0.0, f64::max);
        let max_connections = parts
            .iter()
            .map(|p| p.max_connections)
            .try_fold(0u32, |sum, m| Some(sum.saturating_add(m?)));
        Some(TargetHeld {
            seconds,
            count,
            basis: first.basis,
            late,
            worst,
            max_connections,
            text: TargetHeld::describe(count, late, worst, max_connections, parts.len()),
        })
    }
}

/// The held seconds as they come ([`super::Saturation::sends`]); memory is the affected
/// seconds only, bounded by [`MAX_LISTED_SECONDS`].
#[derive(Debug, Clone, Default)]
pub(super) struct HeldTally {
    seconds: Vec<u64>,
    count: u64,
    late: u64,
    worst: f64,
    max_connections: Option<u32>,
}

impl HeldTally {
    /// `held` of a second's `sent` waited for a connection. Seconds come in order.
    pub(super) fn add(&mut self, second: u64, sent: u64, held: u64) {
        if held == 0 {
            return;
        }
        if self.seconds.last() != Some(&second) {
            self.count += 1;
            if self.seconds.len() < MAX_LISTED_SECONDS {
                self.seconds.push(second);
            }
        }
        self.late = self.late.saturating_add(held);
        self.worst = self.worst.max(held as f64 / sent.max(held).max(1) as f64);
    }

    pub(super) fn bound(&mut self, max_connections: u32) {
        self.max_connections = Some(max_connections);
    }

    pub(super) fn verdict(&self, basis: Basis) -> Option<TargetHeld> {
        (self.count > 0).then(|| TargetHeld {
            seconds: self.seconds.clone(),
            count: self.count,
            basis,
            late: self.late,
            worst: self.worst,
            max_connections: self.max_connections,
            text: TargetHeld::describe(self.count, self.late, self.worst, self.max_connections, 1),
        })
    }
}

/// Compare's line of information on two load results' late sends by cause: `late sends
/// by cause: 169 (target held 0, generator 0) -> 25990 (target held 25978, generator 0)`
/// (the generator's: over [`super::BEHIND_BOUND_MS`] late with a connection free). `None`
/// unless both are load results and one sent late. A result written before the split
/// counts all its late sends as the generator's, as the rule then did.
pub fn late_by_cause(
    before: Option<&serde_json::Value>,
    after: Option<&serde_json::Value>,
) -> Option<String> {
    let split = |result: Option<&serde_json::Value>| {
        let result = result?;
        let count = |key: &str| result.get(key).and_then(serde_json::Value::as_u64);
        let late = count("late")?;
        let held = count("late_held").unwrap_or(0).min(late);
        let behind = count("late_behind").unwrap_or(late - held).min(late - held);
        Some((late, held, behind))
    };
    let (before, after) = (split(before)?, split(after)?);
    if before.0 == 0 && after.0 == 0 {
        return None;
    }
    let side = |(late, held, behind): (u64, u64, u64)| {
        format!("{late} (target held {held}, generator {behind})")
    };
    Some(format!(
        "late sends by cause: {} -> {} (information, not judged)",
        side(before),
        side(after)
    ))
}
