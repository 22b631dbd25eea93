//! Per-phase latencies of a scenario's runs, as tables and JSON.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::agents::RunTimes;
use crate::stats::Phase;

pub(crate) const ACCEPTED: &str = "POST -> agent sends accept";

/// Per-phase latencies of every run of a scenario.
pub(crate) struct Report {
    pub(crate) phases: Vec<Phase>,
}

impl Report {
    pub(crate) fn from_times(times: &HashMap<String, RunTimes>, hold: Duration) -> Report {
        let held = !hold.is_zero();
        let names: [&'static str; 6] = [
            "POST -> 201 received",
            "POST -> offer at agent",
            ACCEPTED,
            if held {
                "accept -> frame 1 acked (minus hold)"
            } else {
                "accept -> frame 1 acked"
            },
            "frame 1 acked -> completion acked",
            if held {
                "POST -> finished (minus hold)"
            } else {
                "POST -> finished"
            },
        ];
        let mut phases: Vec<Phase> = names
            .iter()
            .filter_map(|name| Phase::new(name).ok())
            .collect();
        if phases.len() != names.len() {
            // Only fails for invalid bounds, which are constants: report nothing rather
            // than mislabel phases.
            phases.clear();
            return Report { phases };
        }
        let between = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) if b >= a => Some(b - a),
            _ => None,
        };
        for run in times.values() {
            let samples = [
                between(run.posted, run.created),
                between(run.posted, run.offered),
                between(run.posted, run.accepted),
                between(run.accepted, run.frames_acked).map(|d| d.saturating_sub(hold)),
                between(run.frames_acked, run.finished),
                between(run.posted, run.finished).map(|d| d.saturating_sub(hold)),
            ];
            for (phase, sample) in phases.iter_mut().zip(samples) {
                if let Some(d) = sample {
                    phase.record(d);
                }
            }
        }
        Report { phases }
    }

    pub(crate) fn phase(&self, name: &str) -> Option<&Phase> {
        self.phases.iter().find(|p| p.name == name && p.count() > 0)
    }
}

pub(crate) fn fmt_opt(value: Option<f64>, unit: &str) -> String {
    value.map_or("?".to_string(), |v| format!("{v:.1} {unit}"))
}

pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
