//! The sweep's decisions, from the steps' verdicts alone: next rate, stop, bisect.

use serde::{Deserialize, Serialize};

use super::*;

/// Where a step belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Sweep,
    Bisect,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Sweep => "sweep",
            Stage::Bisect => "bisect",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub rate: f64,
    pub stage: Stage,
}

/// The sweep's decisions, from the steps' verdicts alone.
#[derive(Debug, Clone)]
pub struct Sweep {
    grid: Vec<f64>,
    next: usize,
    rounds: u32,
    rounds_done: u32,
    good: Option<f64>,
    bad: Option<f64>,
    /// Why the first bad step broke the SLO.
    broke: Option<String>,
    bisecting: bool,
}

impl Sweep {
    pub fn new(grid: Vec<f64>, bisect: u32) -> Sweep {
        Sweep {
            grid,
            next: 0,
            rounds: bisect,
            rounds_done: 0,
            good: None,
            bad: None,
            broke: None,
            bisecting: false,
        }
    }

    /// The next step to run, or `None` when the sweep is over.
    pub fn next(&self) -> Option<Step> {
        if !self.bisecting {
            if self.bad.is_some() {
                return None;
            }
            return self.grid.get(self.next).map(|rate| Step {
                rate: *rate,
                stage: Stage::Sweep,
            });
        }
        let (good, bad) = (self.good?, self.bad?);
        if self.rounds_done >= self.rounds {
            return None;
        }
        let mid = round_rate((good + bad) / 2.0);
        // Closer than the rates' resolution: nothing left to bisect.
        (mid > good && mid < bad).then_some(Step {
            rate: mid,
            stage: Stage::Bisect,
        })
    }

    /// Records a step's verdict: `why` says how a bad step broke the SLO.
    pub fn record(&mut self, step: Step, meets_slo: bool, why: &str) {
        match step.stage {
            Stage::Sweep => {
                self.next += 1;
                if meets_slo {
                    self.good = Some(step.rate);
                } else {
                    self.bad = Some(step.rate);
                    self.broke = Some(format!("{} broke the SLO: {why}", rate_text(step.rate)));
                    self.bisecting = self.good.is_some() && self.rounds > 0;
                }
            }
            Stage::Bisect => {
                self.rounds_done += 1;
                if meets_slo {
                    self.good = Some(step.rate);
                } else {
                    self.bad = Some(step.rate);
                }
            }
        }
    }

    /// The highest offered rate that met the SLO.
    pub fn max_rate_meeting_slo(&self) -> Option<f64> {
        self.good
    }

    /// Why the sweep stopped, in plain words.
    pub fn stopped_because(&self) -> String {
        let Some(broke) = &self.broke else {
            let top = self.grid.last().copied().unwrap_or(0.0);
            return format!(
                "the sweep reached its top rate ({}) within the SLO: the capacity is above it",
                rate_text(top)
            );
        };
        match (self.good, self.bad) {
            (None, _) => format!("{broke}; the first step already broke it: start lower"),
            (Some(good), Some(bad)) if self.rounds_done > 0 => format!(
                "{broke}; bisected {} times: {} meets it, {} does not",
                self.rounds_done,
                rate_text(good),
                rate_text(bad)
            ),
            _ => broke.clone(),
        }
    }
}
