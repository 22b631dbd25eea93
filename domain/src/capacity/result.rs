//! What a capacity run measured: each step judged against the SLO, and the result with
//! its summary for people.

use serde::{Deserialize, Serialize};

use crate::RunStatus;
use crate::histogram::decode;
use crate::load::{Counts, LoadResult, Share};
use crate::quantile::Percentile;

use super::*;

/// One measured step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// 1-based, in the order the steps ran.
    pub step: u32,
    pub stage: Stage,
    /// Requests per second the step's schedule asked for (the whole sweep's, also in a
    /// share's point).
    pub offered: f64,
    /// Requests completed per second during the judged part of the step (whenever sent).
    pub achieved: f64,
    #[serde(flatten)]
    pub counts: Counts,
    pub error_rate: f64,
    pub late: u64,
    pub dropped: u64,
    /// Corrected latency (from the intended send time), microseconds, with 95% intervals.
    pub p50: Percentile,
    pub p99: Percentile,
    /// The p99 the SLO is judged on (the histogram's, even from too few samples for an
    /// interval), microseconds; none without responses.
    pub p99_us: Option<u64>,
    pub meets_slo: bool,
    /// How the step broke the SLO, when it did.
    pub broke: Vec<String>,
    /// The judged part's latency histogram (V2 + deflate, base64): the knee's bootstrap
    /// and compare read it.
    pub histogram: String,
}

impl SweepPoint {
    /// A step's load result, judged against the SLO. `achieved` is the requests completed
    /// per second during the judged part of the step, whenever they were sent: under
    /// overload the engine's own count (requests sent in the judged part, completed
    /// whenever) would trail the offered rate only by how late they complete. `share`: the
    /// part of the step this agent sent, whose rate `achieved` keeps up with.
    pub fn judge(
        step: u32,
        at: Step,
        result: &LoadResult,
        achieved: f64,
        slo: &Slo,
        share: Share,
    ) -> SweepPoint {
        let pick = |name: &str| result.latency.percentile(name);
        let p99_us = decode(&result.latency.histogram)
            .ok()
            .filter(|h| !h.is_empty())
            .map(|h| h.value_at_quantile(0.99));
        SweepPoint {
            step,
            stage: at.stage,
            offered: at.rate,
            achieved,
            counts: result.counts.clone(),
            error_rate: result.error_rate,
            late: result.late,
            dropped: result.dropped,
            p50: pick("p50"),
            p99: pick("p99"),
            p99_us,
            meets_slo: false,
            broke: Vec::new(),
            histogram: result.latency.histogram.clone(),
        }
        .judged(slo, share)
    }

    /// The point with its verdict against the SLO: its p99, its error rate, and whether
    /// it kept up with the part of the step's rate that `share` offered.
    pub(super) fn judged(mut self, slo: &Slo, share: Share) -> SweepPoint {
        let mut broke = Vec::new();
        match self.p99_us {
            None => broke.push("no responses".to_string()),
            Some(p99) if p99 as f64 > slo.p99_us => broke.push(format!(
                "p99 {} > {}",
                ms_text(p99 as f64),
                ms_text(slo.p99_us)
            )),
            Some(_) => {}
        }
        if self.error_rate > slo.error_rate {
            broke.push(format!(
                "error rate {:.2}% > {:.2}%",
                self.error_rate * 100.0,
                slo.error_rate * 100.0
            ));
        }
        // A share of a split sweep offers its part of the step's rate.
        let offered_here = self.offered / f64::from(share.count());
        if self.achieved < KEEP_UP * offered_here {
            let whose = if share.is_whole() {
                String::new()
            } else {
                format!(" (share {share} of {})", rate_text(self.offered))
            };
            broke.push(format!(
                "achieved {} under {:.0}% of {} offered{whose}",
                rate_text(self.achieved),
                KEEP_UP * 100.0,
                rate_text(offered_here)
            ));
        }
        self.meets_slo = broke.is_empty();
        self.broke = broke;
        self
    }

    /// `337.5/s: achieved 337.1/s, p50 10.2 ms, p99 12.9 ms [12.1, 14.0], errors 0.00%: meets the SLO`.
    pub fn line(&self) -> String {
        let verdict = if self.meets_slo {
            "meets the SLO".to_string()
        } else {
            format!("breaks the SLO ({})", self.broke.join("; "))
        };
        format!(
            "{} {}: achieved {}, p50 {}, p99 {}, errors {:.2}%: {verdict}",
            self.stage.as_str(),
            rate_text(self.offered),
            rate_text(self.achieved),
            percentile_text(&self.p50),
            percentile_text(&self.p99),
            self.error_rate * 100.0
        )
    }
}

fn ms_text(us: f64) -> String {
    format!("{:.2} ms", us / 1000.0)
}

fn percentile_text(p: &Percentile) -> String {
    match p {
        Percentile::Estimate {
            value, low, high, ..
        } => format!(
            "{} [{:.2}, {:.2}]",
            ms_text(*value as f64),
            *low as f64 / 1000.0,
            *high as f64 / 1000.0
        ),
        Percentile::Insufficient { insufficient, .. } => insufficient.clone(),
    }
}

/// Why a sweep that was cancelled stopped (its result's `stopped_because`).
pub const CANCELLED: &str = "cancelled";

/// How a sweep ended: its run's status, why, and its result.
#[derive(Debug, Clone)]
pub struct Concluded {
    pub status: RunStatus,
    pub reason: Option<String>,
    pub result: CapacityResult,
}

/// The result of a capacity run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityResult {
    pub slo: Slo,
    /// The spec's floor (requests per second), when it gives one.
    pub floor: Option<f64>,
    /// The highest offered rate whose step met the SLO (and kept up); none when no step did.
    pub max_rate_meeting_slo: Option<f64>,
    pub stopped_because: String,
    /// Every step, in the order run.
    pub points: Vec<SweepPoint>,
    pub knee: Knee,
    /// Seconds each step held its rate and the first seconds of it not judged.
    pub step_seconds: f64,
    pub discard_seconds: f64,
    pub notes: Vec<String>,
}

impl CapacityResult {
    /// A sweep's points as its run's ending: `failed` when no step met the SLO or the
    /// capacity is under the floor, `error` when nothing answered, `cancelled` when
    /// `stopped` says so, else `passed`; the knee found over the points.
    pub fn conclude(
        plan: &CapacityPlan,
        sweep: &Sweep,
        points: Vec<SweepPoint>,
        stopped: Option<String>,
    ) -> Concluded {
        let knee = knee_of(&points);
        let max_rate = sweep.max_rate_meeting_slo();
        let mut notes = Vec::new();
        let thin: Vec<String> = points
            .iter()
            .filter(|p| matches!(p.p99, Percentile::Insufficient { .. }) && p.p99_us.is_some())
            .map(|p| rate_text(p.offered))
            .collect();
        if !thin.is_empty() {
            notes.push(format!(
                "p99 judged on its histogram's value with too few samples for an interval at {}: longer steps or higher rates make it firm",
                thin.join(", ")
            ));
        }
        let answered = points
            .iter()
            .any(|p| p.counts.responses.values().sum::<u64>() > 0);
        let (status, reason) = if stopped.is_some() {
            (RunStatus::Cancelled, Some(CANCELLED.to_string()))
        } else if !answered {
            let errors: Vec<String> = points
                .iter()
                .flat_map(|p| p.counts.errors.iter())
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            (
                RunStatus::Error,
                Some(format!(
                    "target unreachable: no request got an answer ({})",
                    errors.join(", ")
                )),
            )
        } else {
            match (max_rate, plan.floor) {
                (None, _) => (
                    RunStatus::Failed,
                    Some(format!("no step met the SLO: {}", sweep.stopped_because())),
                ),
                (Some(rate), Some(floor)) if rate < floor => (
                    RunStatus::Failed,
                    Some(format!(
                        "the highest rate meeting the SLO, {}, is under the floor of {}",
                        rate_text(rate),
                        rate_text(floor)
                    )),
                ),
                (Some(_), _) => (RunStatus::Passed, None),
            }
        };
        let result = CapacityResult {
            slo: plan.slo,
            floor: plan.floor,
            max_rate_meeting_slo: max_rate,
            stopped_because: stopped.unwrap_or_else(|| sweep.stopped_because()),
            points,
            knee,
            step_seconds: plan.step.as_secs_f64(),
            discard_seconds: plan.discard.as_secs_f64(),
            notes,
        };
        Concluded {
            status,
            reason,
            result,
        }
    }

    /// The result in a few lines for people.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = vec![
            format!(
                "SLO: p99 <= {}, error rate <= {:.2}%; steps of {:.2} s, the first {:.2} s not judged",
                ms_text(self.slo.p99_us),
                self.slo.error_rate * 100.0,
                self.step_seconds,
                self.discard_seconds
            ),
            match self.max_rate_meeting_slo {
                Some(rate) => format!("max rate meeting the SLO: {}", rate_text(rate)),
                None => "max rate meeting the SLO: none (no step met it)".to_string(),
            },
        ];
        if let Some(floor) = self.floor {
            lines.push(format!("floor: {}", rate_text(floor)));
        }
        lines.push(self.knee.line());
        lines.push(format!("stopped: {}", self.stopped_because));
        lines.extend(
            self.points
                .iter()
                .map(|p| format!("step {}: {}", p.step, p.line())),
        );
        lines.extend(self.notes.iter().cloned());
        lines
    }
}
