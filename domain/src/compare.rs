//! Compare: two finished runs of one scenario version, environment and target, before and
//! after a change, and what is different now.
//!
//! A latency difference counts only where the two percentiles' intervals (exact binomial
//! order-statistic intervals from the histograms, [`crate::quantile`], widened by a block
//! bootstrap over the runs' blocks for the total and each operation that keeps them) do
//! not overlap, or one run made an excursion past the other's range (a one-off stall the
//! bootstrap resamples away: `excursion`), **and** the change is larger than a noise floor
//! (2% by default); otherwise "no
//! measurable difference". Throughput (block bootstrap over the same blocks) and error
//! rates (Wilson intervals) are judged alike. Surface checks whose verdict changed,
//! invariants that broke or healed and load thresholds that turned count too. The answer
//! starts with one word, and the lines that decide it come first.

mod bootstrap;
mod capacity;
mod checks;
mod errors;
mod excursion;
mod faults;
mod latency;
mod load;
mod scenario;
mod throughput;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::finding::RunFinding;
use crate::load::LEVEL;
use crate::run::{RunKind, RunStatus};
use crate::stress::GeneratorSaturated;

pub(crate) use capacity::compare_capacity_values;
pub(crate) use checks::compare_checks;
pub(crate) use faults::compare_faults;
pub(crate) use load::compare_load;
pub(crate) use scenario::compare_scenario;

/// Changes smaller than this share of the before value are noise, whatever the intervals.
pub const NOISE_FLOOR: f64 = 0.02;
/// Nor is a latency change below the engine's timing resolution measurable: its workers
/// wake on a 1 ms timer, so each run's corrected latencies carry a constant offset of up
/// to 1 ms that depends on the timer's phase against the schedule (measured: A/A runs of
/// one target differ by 0.5 to 0.9 ms at p50).
pub const TIMING_RESOLUTION_US: u64 = 1000;

/// The percentiles compared, per operation and in total.
const COMPARED: [(&str, f64); 2] = [("p50", 0.5), ("p99", 0.99)];

/// One side of a comparison: the run's identity and its result.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    pub id: &'a str,
    pub kind: RunKind,
    pub scenario_version: &'a str,
    pub environment: &'a str,
    pub target: &'a str,
    pub status: RunStatus,
    pub result: Option<&'a Value>,
}

/// Why two runs are not compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the runs differ in {what}: {before} before, {after} after; only runs of one scenario version, environment and target compare"
    )]
    Different {
        what: &'static str,
        before: String,
        after: String,
    },
    #[error("run {id} is {status}: only finished runs compare")]
    NotFinished { id: String, status: RunStatus },
    #[error(
        "runs of kind {0} are not compared yet ({compared} runs are)",
        compared = RunKind::listed_where(|t| t.compared, "and")
    )]
    Kind(RunKind),
    /// The generator, not the target, set the pace for part of a run: whatever differs
    /// may be the agent's own, so neither `regressed` nor `improved` would be true.
    #[error(
        "the measurement is not trustworthy: run {id}'s {line}; run it again on an agent with room to spare"
    )]
    GeneratorSaturated { id: String, line: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Regressed,
    Improved,
    Unchanged,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Regressed => "regressed",
            Verdict::Improved => "improved",
            Verdict::Unchanged => "unchanged",
        }
    }
}

/// One difference, worse or better.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Difference {
    pub measure: String,
    pub worse: bool,
    pub line: String,
    /// A regressed tail percentile (p99, p99.9) of a load run: the trace ids of the
    /// candidate's slowest requests in its slowest seconds (of the operation, for an
    /// operation's), slowest first, which the line names too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace_ids: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Comparison {
    pub before: String,
    pub after: String,
    pub verdict: Verdict,
    pub differences: Vec<Difference>,
    /// Measures compared that showed no difference (or could not be judged, and why).
    pub unchanged: Vec<String>,
    /// What the reader must know: a run that ended in error, compared on what it has.
    pub notes: Vec<String>,
    pub level: f64,
    pub noise_floor: f64,
    /// Samples (requests measured) before and after, for load results.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<u64>>, min_items = 2, max_items = 2))]
    pub samples: Option<(u64, u64)>,
}

impl Comparison {
    /// The answer for a pull request: the verdict word, a line per difference, a line
    /// naming what was compared without a difference.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![self.verdict.as_str().to_string()];
        lines.extend(self.differences.iter().map(|d| d.line.clone()));
        if !self.unchanged.is_empty() {
            let samples = self
                .samples
                .map(|(b, a)| format!("; {b} vs {a} samples"))
                .unwrap_or_default();
            lines.push(format!(
                "no measurable difference: {} ({:.0}% intervals, noise floor {:.0}% and {} ms{samples})",
                self.unchanged.join(", "),
                self.level * 100.0,
                self.noise_floor * 100.0,
                TIMING_RESOLUTION_US / 1000
            ));
        }
        lines.extend(self.notes.iter().cloned());
        lines
    }

    /// The answer as markdown to paste into a pull request: the verdict in bold with the
    /// two runs, then a bullet per line.
    pub fn markdown(&self) -> String {
        let lines = self.lines();
        let mut out = format!(
            "**{}** (`{}` -> `{}`)\n\n",
            lines[0], self.before, self.after
        );
        for line in &lines[1..] {
            out.push_str(&format!("- {line}\n"));
        }
        out
    }
}

/// What a kind whose results cannot be read as its own says.
pub(crate) fn not_compared(out: &mut Comparison) {
    out.notes
        .push("the results of this kind are not compared yet".to_string());
}

/// Compares `after` with `before`; refused when they are not two measures of one thing.
pub fn compare(before: &Side, after: &Side, noise_floor: f64) -> Result<Comparison, Refusal> {
    for side in [before, after] {
        if !side.status.is_finished() || side.status == RunStatus::Refused {
            return Err(Refusal::NotFinished {
                id: side.id.to_string(),
                status: side.status,
            });
        }
    }
    // Runs stored before targets were normalised keep their spelling: both sides are
    // normalised here, so `http://h:80/` compares with `http://h`.
    let comparable = |t: &str| crate::target::normalize_target(t).unwrap_or_else(|_| t.to_string());
    let (target_before, target_after) = (comparable(before.target), comparable(after.target));
    let same = [
        ("kind", before.kind.as_str(), after.kind.as_str()),
        (
            "scenario version",
            before.scenario_version,
            after.scenario_version,
        ),
        ("environment", before.environment, after.environment),
        ("target", &target_before, &target_after),
    ];
    for (what, b, a) in same {
        if b != a {
            return Err(Refusal::Different {
                what,
                before: b.to_string(),
                after: a.to_string(),
            });
        }
    }
    if !before.kind.traits().compared {
        return Err(Refusal::Kind(before.kind));
    }
    // Every compared kind compares its whole measure (capacity: every rate both sweeps
    // share, whose seconds a verdict on the run's seconds cannot tell apart), so any
    // saturated second of either run is in the compared part.
    for side in [before, after] {
        if let Some(saturated) = side.result.and_then(GeneratorSaturated::of_result) {
            return Err(Refusal::GeneratorSaturated {
                id: side.id.to_string(),
                line: saturated.line(),
            });
        }
    }
    let mut out = Comparison {
        before: before.id.to_string(),
        after: after.id.to_string(),
        verdict: Verdict::Unchanged,
        differences: Vec::new(),
        unchanged: Vec::new(),
        notes: Vec::new(),
        level: LEVEL,
        noise_floor,
        samples: None,
    };
    for side in [before, after] {
        if side.status != RunStatus::Passed && side.status != RunStatus::Failed {
            out.notes.push(format!(
                "run {} ended {}: compared on what it measured",
                side.id, side.status
            ));
        }
    }
    out.notes.extend(crate::stress::held::late_by_cause(
        before.result,
        after.result,
    ));
    let parse = |side: &Side| side.result.cloned();
    match (parse(before), parse(after)) {
        (Some(b), Some(a)) => crate::kind::compare(before.kind, b, a, &mut out),
        _ => out
            .notes
            .push("a run has no result: nothing to compare".to_string()),
    }
    out.verdict = if out.differences.iter().any(|d| d.worse) {
        Verdict::Regressed
    } else if out.differences.is_empty() {
        Verdict::Unchanged
    } else {
        Verdict::Improved
    };
    out.decisive_first();
    Ok(out)
}

impl Comparison {
    /// The differences that decide the verdict first (the worse ones of a regression), and
    /// among them what a percentile of the sent requests can hide: lost throughput, a
    /// rising error rate, the tail. A stable sort: otherwise in the order compared.
    fn decisive_first(&mut self) {
        let regressed = self.verdict == Verdict::Regressed;
        let rank = |d: &Difference| {
            if d.measure == "throughput" {
                0
            } else if d.measure.starts_with("error rate") {
                1
            } else if d.measure.starts_with("p99.9") {
                2
            } else {
                3
            }
        };
        self.differences
            .sort_by_key(|d| (d.worse != regressed, rank(d)));
    }
}

fn verdict_change(
    out: &mut Comparison,
    measure: String,
    before: bool,
    after: bool,
    why: Option<String>,
) {
    if before == after {
        return;
    }
    let (word, worse) = if after {
        ("passed", false)
    } else {
        ("failed", true)
    };
    let why = why.map(|w| format!(" ({w})")).unwrap_or_default();
    out.differences.push(Difference {
        line: format!(
            "{measure}: {} -> {word}{why}",
            if before { "passed" } else { "failed" }
        ),
        measure,
        worse,
        trace_ids: Vec::new(),
    });
}

/// Findings of the after run whose signature the before run lacks: each is a worse
/// difference, so a new finding makes the verdict `regressed`. Called on the comparison
/// of the two runs' results with their records' findings.
pub fn add_new_findings(out: &mut Comparison, before: &[RunFinding], after: &[RunFinding]) {
    let earlier: std::collections::BTreeSet<&str> =
        before.iter().map(|f| f.signature.as_str()).collect();
    for finding in after
        .iter()
        .filter(|f| !earlier.contains(f.signature.as_str()))
    {
        let detail: String = finding.detail.chars().take(200).collect();
        out.differences.push(Difference {
            measure: format!("finding {}", finding.id),
            worse: true,
            line: format!("new finding: {} ({detail})", finding.title),
            trace_ids: Vec::new(),
        });
        out.verdict = Verdict::Regressed;
    }
    out.decisive_first();
}

#[cfg(test)]
mod tests;
