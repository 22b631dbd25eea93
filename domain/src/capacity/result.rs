//! What a capacity run measured: each step judged against the SLO, and the result with
//! its summary for people.

use serde::{Deserialize, Serialize};

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
        let pick = |name: &str| {
            result
                .latency
                .percentiles
                .get(name)
                .cloned()
                .unwrap_or(Percentile::Insufficient {
                    insufficient: "no responses".to_string(),
                    samples: 0,
                })
        };
        let p99_us = decode(&result.latency.histogram)
            .ok()
            .filter(|h| !h.is_empty())
            .map(|h| h.value_at_quantile(0.99));
        let mut broke = Vec::new();
        match p99_us {
            None => broke.push("no responses".to_string()),
            Some(p99) if p99 as f64 > slo.p99_us => broke.push(format!(
                "p99 {} > {}",
                ms_text(p99 as f64),
                ms_text(slo.p99_us)
            )),
            Some(_) => {}
        }
        if result.error_rate > slo.error_rate {
            broke.push(format!(
                "error rate {:.2}% > {:.2}%",
                result.error_rate * 100.0,
                slo.error_rate * 100.0
            ));
        }
        // A share of a split sweep offers its part of the step's rate.
        let offered_here = at.rate / f64::from(share.count());
        if achieved < KEEP_UP * offered_here {
            let whose = if share.is_whole() {
                String::new()
            } else {
                format!(" (share {share} of {})", rate_text(at.rate))
            };
            broke.push(format!(
                "achieved {} under {:.0}% of {} offered{whose}",
                rate_text(achieved),
                KEEP_UP * 100.0,
                rate_text(offered_here)
            ));
        }
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
            meets_slo: broke.is_empty(),
            broke,
            histogram: result.latency.histogram.clone(),
        }
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
