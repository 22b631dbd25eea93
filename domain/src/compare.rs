//! Compare: two finished runs of one scenario version, environment and target, before and
//! after a change, and what is different now.
//!
//! A latency difference counts only where the two percentiles' intervals (exact binomial
//! order-statistic intervals from the histograms, [`crate::quantile`], widened by a block
//! bootstrap over the runs' blocks for the total and each operation that keeps them) do
//! not overlap **and** the change is larger than a noise floor (2% by default); otherwise "no
//! measurable difference". Surface checks whose verdict changed, invariants that broke or
//! healed and load thresholds that turned count too. The answer starts with one word.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::capacity::{
    CapacityResult, CurvePoint, Knee, SweepPoint, curve, knee, log_p99_range, ranked_points,
    rate_text,
};
use crate::checks::ChecksResult;
use crate::finding::RunFinding;
use crate::histogram::decode;
use crate::load::{LEVEL, LoadResult};
use crate::quantile::{Percentile, percentile};
use crate::run::{RunKind, RunStatus};

/// Changes smaller than this share of the before value are noise, whatever the intervals.
pub const NOISE_FLOOR: f64 = 0.02;
/// Nor is a latency change below the engine's timing resolution measurable: its workers
/// wake on a 1 ms timer, so each run's corrected latencies carry a constant offset of up
/// to 1 ms that depends on the timer's phase against the schedule (measured: A/A runs of
/// one target differ by 0.5 to 0.9 ms at p50).
pub const TIMING_RESOLUTION_US: u64 = 1000;

/// Fewer blocks than this are too few to resample.
const MIN_BLOCKS: usize = 5;
/// Bootstrap replicates (each gives every compared percentile).
const REPLICATES: usize = 400;
/// The bootstrap reads latencies on bins 0.5% wide: far finer than any difference past
/// the noise floor, and ten times fewer buckets to add up per resample.
const BIN_RATIO: f64 = 1.005;

fn bin_of(value: u64) -> i64 {
    ((value.max(1) as f64).ln() / BIN_RATIO.ln()).round() as i64
}

/// A run's blocks as sparse counts over the buckets both runs use.
struct Blocks {
    /// Per block: (bucket index, count).
    counts: Vec<Vec<(usize, u64)>>,
}

/// The distinct bucket values of both runs' blocks, in order, and each run's blocks
/// indexed into them.
fn read_blocks(before: &[String], after: &[String]) -> Option<(Vec<u64>, Blocks, Blocks)> {
    if before.len() < MIN_BLOCKS || after.len() < MIN_BLOCKS {
        return None;
    }
    let decode_all = |texts: &[String]| -> Option<Vec<Histogram<u64>>> {
        texts.iter().map(|t| decode(t).ok()).collect()
    };
    // Each block as (bin, count), bins ascending: buckets come in value order, so equal
    // bins are neighbours.
    let binned = |hs: Vec<Histogram<u64>>| -> Vec<Vec<(i64, u64)>> {
        hs.iter()
            .map(|h| {
                let mut out: Vec<(i64, u64)> = Vec::new();
                for v in h.iter_recorded() {
                    let bin = bin_of(v.value_iterated_to());
                    match out.last_mut() {
                        Some((last, count)) if *last == bin => *count += v.count_at_value(),
                        _ => out.push((bin, v.count_at_value())),
                    }
                }
                out
            })
            .collect()
    };
    let (b, a) = (binned(decode_all(before)?), binned(decode_all(after)?));
    let mut bins: Vec<i64> = b
        .iter()
        .chain(a.iter())
        .flat_map(|block| block.iter().map(|(bin, _)| *bin))
        .collect();
    bins.sort_unstable();
    bins.dedup();
    let index = |blocks: &[Vec<(i64, u64)>]| Blocks {
        counts: blocks
            .iter()
            .map(|block| {
                block
                    .iter()
                    .filter_map(|(bin, c)| Some((bins.binary_search(bin).ok()?, *c)))
                    .collect()
            })
            .collect(),
    };
    let (bb, ab) = (index(&b), index(&a));
    let values = bins
        .iter()
        .map(|bin| BIN_RATIO.powi(*bin as i32).round() as u64)
        .collect();
    Some((values, bb, ab))
}

/// The percentile intervals of each q-quantile over `REPLICATES` resamples of whole blocks
/// (a block bootstrap: the seconds of a run are correlated, its blocks far less).
fn bootstrap(
    values: &[u64],
    blocks: &Blocks,
    qs: &[f64],
    level: f64,
    rng: &mut StdRng,
) -> Vec<(u64, u64)> {
    let k = blocks.counts.len();
    let Some(last) = values.len().checked_sub(1) else {
        // No latency in any block: nothing to widen by.
        return vec![(0, 0); qs.len()];
    };
    // Each block's running count over every bin: a resample's count up to a bin is then
    // the sum over the blocks it drew, so each quantile is a binary search over the bins
    // rather than a walk over every bucket of every block drawn (compare reads one total
    // and up to 100 operations this way).
    let cumulative: Vec<Vec<u64>> = blocks
        .counts
        .iter()
        .map(|block| {
            let mut running = vec![0u64; values.len()];
            for (i, c) in block {
                running[*i] += c;
            }
            let mut seen = 0u64;
            for c in running.iter_mut() {
                seen += *c;
                *c = seen;
            }
            running
        })
        .collect();
    let mut drawn = vec![0u64; k];
    let mut picked: Vec<(usize, u64)> = Vec::with_capacity(k);
    let mut replicates = vec![Vec::with_capacity(REPLICATES); qs.len()];
    for _ in 0..REPLICATES {
        drawn.iter_mut().for_each(|m| *m = 0);
        for _ in 0..k {
            drawn[rng.random_range(0..k)] += 1;
        }
        picked.clear();
        picked.extend(
            drawn
                .iter()
                .enumerate()
                .filter(|(_, m)| **m > 0)
                .map(|(j, m)| (j, *m)),
        );
        let up_to =
            |bin: usize| -> u64 { picked.iter().map(|(j, m)| m * cumulative[*j][bin]).sum() };
        let total = up_to(last);
        if total == 0 {
            continue;
        }
        for (at, q) in qs.iter().enumerate() {
            let rank = ((q * total as f64).ceil() as u64).max(1);
            // The first bin whose running count reaches the rank.
            let (mut low, mut high) = (0, last);
            while low < high {
                let mid = (low + high) / 2;
                if up_to(mid) < rank {
                    low = mid + 1;
                } else {
                    high = mid;
                }
            }
            replicates[at].push(values[low]);
        }
    }
    let tail = (1.0 - level) / 2.0;
    replicates
        .iter_mut()
        .map(|r| {
            r.sort_unstable();
            let pick = |share: f64| {
                let i = ((share * r.len() as f64) as usize).min(r.len().saturating_sub(1));
                r.get(i).copied().unwrap_or_default()
            };
            (pick(tail), pick(1.0 - tail))
        })
        .collect()
}

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
    #[error("runs of kind {0} are not compared yet (checks, load, replay and capacity runs are)")]
    Kind(RunKind),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
pub struct Difference {
    pub measure: String,
    pub worse: bool,
    pub line: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    Ok(out)
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
    });
}

pub(crate) fn compare_checks(before: &ChecksResult, after: &ChecksResult, out: &mut Comparison) {
    let earlier: BTreeMap<&str, bool> = before
        .checks
        .iter()
        .map(|c| (c.name.as_str(), c.passed))
        .collect();
    let mut same = 0;
    for check in &after.checks {
        let Some(was) = earlier.get(check.name.as_str()) else {
            continue;
        };
        if *was == check.passed {
            same += 1;
        }
        let why = (!check.failures.is_empty()).then(|| check.failures.join("; "));
        verdict_change(
            out,
            format!("check {}", check.name),
            *was,
            check.passed,
            why,
        );
    }
    let invariants: BTreeMap<&str, bool> = before
        .invariants
        .iter()
        .map(|i| (i.name.as_str(), i.passed))
        .collect();
    for inv in &after.invariants {
        if let Some(was) = invariants.get(inv.name.as_str()) {
            if *was == inv.passed {
                same += 1;
            } else {
                let (word, worse) = if inv.passed {
                    ("healed", false)
                } else {
                    ("broke", true)
                };
                out.differences.push(Difference {
                    measure: format!("invariant {}", inv.name),
                    worse,
                    line: format!("invariant {}: {word}", inv.name),
                });
            }
        }
    }
    if same > 0 {
        out.unchanged.push(format!("{same} checks and invariants"));
    }
}

fn histogram(text: &str) -> Option<Histogram<u64>> {
    decode(text).ok()
}

/// One measure compared in a load result: the total or an operation, with its
/// histograms and blocks (empty when the result has none) before and after.
struct LoadPair<'a> {
    name: &'a str,
    before: &'a str,
    after: &'a str,
    before_blocks: &'a [String],
    after_blocks: &'a [String],
}

/// Each run's block-bootstrap interval of each q-quantile, when both runs have enough
/// blocks that read.
type Widening = (Vec<(u64, u64)>, Vec<(u64, u64)>);

fn block_intervals(
    before: &[String],
    after: &[String],
    qs: &[f64],
    level: f64,
    rng: &mut StdRng,
) -> Option<Widening> {
    let (values, b, a) = read_blocks(before, after)?;
    Some((
        bootstrap(&values, &b, qs, level, rng),
        bootstrap(&values, &a, qs, level, rng),
    ))
}

/// Which intervals a load comparison used, for the note that says so.
#[derive(Default)]
struct IntervalsUsed {
    /// Blocks before and after, when the total's intervals were widened.
    total: Option<(usize, usize)>,
    operations_widened: usize,
    /// Blocks before and after of the first operation widened (all span the same time).
    operation_blocks: Option<(usize, usize)>,
    operations_binomial: usize,
}

fn operations(n: usize) -> String {
    if n == 1 {
        "1 operation".to_string()
    } else {
        format!("{n} operations")
    }
}

impl IntervalsUsed {
    fn count(&mut self, total: bool, pair: &LoadPair, widened: bool) {
        let blocks = (pair.before_blocks.len(), pair.after_blocks.len());
        match (total, widened) {
            (true, true) => self.total = Some(blocks),
            (true, false) => {}
            (false, true) => {
                self.operations_widened += 1;
                self.operation_blocks.get_or_insert(blocks);
            }
            (false, false) => self.operations_binomial += 1,
        }
    }

    /// `None` when no interval was widened (exact binomial throughout, as before blocks).
    fn note(&self, total_seconds: u64, operation_seconds: u64) -> Option<String> {
        let widened = |(b, a): (usize, usize), seconds: u64| {
            format!(
                "exact binomial widened by a block bootstrap ({b} and {a} blocks of {seconds} s, {REPLICATES} resamples)"
            )
        };
        let ops = self
            .operation_blocks
            .map(|blocks| (operations(self.operations_widened), blocks));
        let mut note = match (self.total, ops) {
            (None, None) => return None,
            (Some(total), None) => format!("total intervals: {}", widened(total, total_seconds)),
            (Some(total), Some((n, blocks)))
                if total == blocks && total_seconds == operation_seconds =>
            {
                format!(
                    "total and operation intervals ({n}): {}",
                    widened(total, total_seconds)
                )
            }
            (Some(total), Some((n, blocks))) => format!(
                "total intervals: {}; operation intervals ({n}): {}",
                widened(total, total_seconds),
                widened(blocks, operation_seconds)
            ),
            (None, Some((n, blocks))) => format!(
                "operation intervals ({n}): {}; total: exact binomial only",
                widened(blocks, operation_seconds)
            ),
        };
        if self.operations_binomial > 0 {
            note.push_str(&format!(
                "; {}: exact binomial only (a run keeps fewer than {MIN_BLOCKS} blocks of them)",
                operations(self.operations_binomial)
            ));
        }
        Some(note)
    }
}

pub(crate) fn compare_load(before: &LoadResult, after: &LoadResult, out: &mut Comparison) {
    out.samples = Some((before.latency.samples, after.latency.samples));
    let mut pairs = vec![LoadPair {
        name: "total",
        before: &before.latency.histogram,
        after: &after.latency.histogram,
        before_blocks: &before.blocks,
        after_blocks: &after.blocks,
    }];
    for op in &after.operations {
        if let Some(earlier) = before.operations.iter().find(|o| o.name == op.name) {
            pairs.push(LoadPair {
                name: &op.name,
                before: &earlier.latency.histogram,
                after: &op.latency.histogram,
                before_blocks: &earlier.blocks,
                after_blocks: &op.blocks,
            });
        }
    }
    // One operation's figures are the total's: say them once.
    if before.operations.len() == 1 && after.operations.len() == 1 {
        pairs.truncate(1);
    }
    // Seeded by the runs: the same two runs always give the same answer.
    let seed = out
        .before
        .bytes()
        .chain(out.after.bytes())
        .fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
        });
    let mut rng = StdRng::seed_from_u64(seed);
    let qs: Vec<f64> = COMPARED.iter().map(|(_, q)| *q).collect();
    // Where both runs have blocks (the total's, and each operation's in results that
    // record them), the intervals also cover a block bootstrap over them, so that two
    // runs of one build do not differ by chance more often than the level says.
    let mut used = IntervalsUsed::default();
    for (index, pair) in pairs.iter().enumerate() {
        let widen = block_intervals(
            pair.before_blocks,
            pair.after_blocks,
            &qs,
            out.level,
            &mut rng,
        );
        used.count(index == 0, pair, widen.is_some());
        let (Some(b), Some(a)) = (histogram(pair.before), histogram(pair.after)) else {
            out.notes
                .push(format!("{}: a histogram could not be read", pair.name));
            continue;
        };
        for (at, (label, q)) in COMPARED.into_iter().enumerate() {
            let widen = widen.as_ref().map(|(bw, aw)| (bw[at], aw[at]));
            latency_difference(out, &format!("{label} {}", pair.name), &b, &a, q, widen);
        }
    }
    if let Some(note) = used.note(
        after.block_seconds.max(1),
        after.operation_block_seconds.max(1),
    ) {
        out.notes.push(note);
    }
    let earlier: BTreeMap<&str, bool> = before
        .thresholds
        .iter()
        .map(|t| (t.threshold.as_str(), t.passed))
        .collect();
    for t in &after.thresholds {
        if let Some(was) = earlier.get(t.threshold.as_str()) {
            verdict_change(
                out,
                format!("threshold {}", t.threshold),
                *was,
                t.passed,
                Some(t.observed.clone()),
            );
        }
    }
}

fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

/// Whether the q-quantile moved: intervals apart and beyond the noise floor.
fn latency_difference(
    out: &mut Comparison,
    measure: &str,
    before: &Histogram<u64>,
    after: &Histogram<u64>,
    q: f64,
    widen: Option<((u64, u64), (u64, u64))>,
) {
    let (b, a) = (
        percentile(before, q, out.level),
        percentile(after, q, out.level),
    );
    let (
        Percentile::Estimate {
            value: bv,
            low: bl,
            high: bh,
            ..
        },
        Percentile::Estimate {
            value: av,
            low: al,
            high: ah,
            ..
        },
    ) = (&b, &a)
    else {
        let need = [b, a]
            .into_iter()
            .find_map(|p| match p {
                Percentile::Insufficient { insufficient, .. } => Some(insufficient),
                Percentile::Estimate { .. } => None,
            })
            .unwrap_or_default();
        out.unchanged.push(format!("{measure} ({need})"));
        return;
    };
    let ((bl, bh), (al, ah)) = match widen {
        Some(((bbl, bbh), (abl, abh))) => (
            ((*bl).min(bbl), (*bh).max(bbh)),
            ((*al).min(abl), (*ah).max(abh)),
        ),
        None => ((*bl, *bh), (*al, *ah)),
    };
    let apart = al > bh || ah < bl;
    let change = (*av as f64 - *bv as f64) / (*bv).max(1) as f64;
    let beyond_resolution = av.abs_diff(*bv) > TIMING_RESOLUTION_US;
    if apart && change.abs() > out.noise_floor && beyond_resolution {
        out.differences.push(Difference {
            measure: measure.to_string(),
            worse: change > 0.0,
            line: format!(
                "{measure}: {} [{}, {}] -> {} [{}, {}] ({:+.0}%)",
                ms(*bv),
                ms(bl),
                ms(bh),
                ms(*av),
                ms(al),
                ms(ah),
                change * 100.0
            ),
        });
    } else {
        out.unchanged.push(measure.to_string());
    }
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
        });
        out.verdict = Verdict::Regressed;
    }
}

// Capacity runs: p50 and p99 at every offered rate both sweeps measured, and the knee
// recomputed over the range of rates both share, normalised alike.

pub(crate) fn compare_capacity_values(before: Value, after: Value, out: &mut Comparison) {
    match (
        serde_json::from_value::<CapacityResult>(before),
        serde_json::from_value::<CapacityResult>(after),
    ) {
        (Ok(b), Ok(a)) => compare_capacity(&b, &a, out),
        _ => out
            .notes
            .push("a capacity result could not be read: nothing to compare".to_string()),
    }
}

/// Two offered rates are one sweep point: grids are kept to two decimals.
fn same_rate(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.005
}

fn compare_capacity(before: &CapacityResult, after: &CapacityResult, out: &mut Comparison) {
    let samples = |r: &CapacityResult| r.points.iter().map(|p| p.counts.requests).sum::<u64>();
    out.samples = Some((samples(before), samples(after)));
    let mut points: Vec<&SweepPoint> = after.points.iter().collect();
    points.sort_by(|a, b| a.offered.total_cmp(&b.offered));
    let mut matched = 0;
    for a in points {
        let Some(b) = before
            .points
            .iter()
            .find(|b| same_rate(b.offered, a.offered))
        else {
            continue;
        };
        let rate = rate_text(a.offered);
        let (Some(hb), Some(ha)) = (histogram(&b.histogram), histogram(&a.histogram)) else {
            out.notes
                .push(format!("{rate}: a histogram could not be read"));
            continue;
        };
        matched += 1;
        for (label, q) in COMPARED {
            latency_difference(out, &format!("{label} @ {rate}"), &hb, &ha, q, None);
        }
    }
    let alone = before.points.len() + after.points.len() - 2 * matched;
    if alone > 0 {
        out.notes.push(format!(
            "{matched} offered rates measured by both sweeps compared; {alone} points of one sweep only (bisection follows each run's results)"
        ));
    }
    compare_knees(before, after, out);
    let max = |r: &CapacityResult| r.max_rate_meeting_slo.map_or("none".to_string(), rate_text);
    out.notes.push(format!(
        "max rate meeting the SLO: {} -> {}",
        max(before),
        max(after)
    ));
}

fn rate_range(points: &[SweepPoint]) -> Option<(f64, f64)> {
    let low = points.iter().map(|p| p.offered).reduce(f64::min)?;
    let high = points.iter().map(|p| p.offered).reduce(f64::max)?;
    Some((low, high))
}

/// The knee of each run over the rates both sweeps cover, with the log p99 range pooled
/// over both, so that neither run's own range moves its knee; a difference counts when
/// the intervals are apart and the change passes the noise floor.
fn compare_knees(before: &CapacityResult, after: &CapacityResult, out: &mut Comparison) {
    let (Some(rb), Some(ra)) = (rate_range(&before.points), rate_range(&after.points)) else {
        out.unchanged
            .push("knee (a sweep has no points)".to_string());
        return;
    };
    let shared = (rb.0.max(ra.0), rb.1.min(ra.1));
    if shared.0 >= shared.1 {
        out.unchanged
            .push("knee (the sweeps share no range of rates)".to_string());
        return;
    }
    let (ranked_b, ranked_a) = (ranked_points(&before.points), ranked_points(&after.points));
    let (cb, ca) = (curve(&ranked_b), curve(&ranked_a));
    let both: Vec<CurvePoint> = curve(&ranked_b)
        .into_iter()
        .chain(curve(&ranked_a))
        .collect();
    let Some(logs) = log_p99_range(&both, shared) else {
        out.unchanged
            .push("knee (no responses in the shared range)".to_string());
        return;
    };
    let (kb, ka) = (knee(&cb, shared, logs), knee(&ca, shared, logs));
    let resolved = |k: &Knee| match (k.resolved, k.rate, k.low, k.high) {
        (true, Some(rate), Some(low), Some(high)) => Some((rate, low, high)),
        _ => None,
    };
    let span = format!("{} to {}", rate_text(shared.0), rate_text(shared.1));
    let (Some((bv, bl, bh)), Some((av, al, ah))) = (resolved(&kb), resolved(&ka)) else {
        let why = [("before", &kb), ("after", &ka)]
            .iter()
            .filter(|(_, k)| !k.resolved)
            .map(|(side, k)| format!("{side}: {}", k.reason.as_deref().unwrap_or("not resolved")))
            .collect::<Vec<_>>()
            .join("; ");
        out.unchanged
            .push(format!("knee over {span} (not resolved: {why})"));
        return;
    };
    let change = (av - bv) / bv.max(f64::MIN_POSITIVE);
    let apart = ah < bl || al > bh;
    if apart && change.abs() > out.noise_floor {
        out.differences.push(Difference {
            measure: "knee".to_string(),
            // A knee at a lower rate: latency breaks under less load.
            worse: change < 0.0,
            line: format!(
                "knee over {span}: {} [{}, {}] -> {} [{}, {}] ({:+.0}%)",
                rate_text(bv),
                rate_text(bl),
                rate_text(bh),
                rate_text(av),
                rate_text(al),
                rate_text(ah),
                change * 100.0
            ),
        });
    } else {
        out.unchanged.push(format!("knee over {span}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::latency_histogram;

    /// Latencies (µs) from a log-normal-ish distribution: exp of a normal, scaled.
    fn sample(rng: &mut StdRng, n: usize, scale: f64) -> Histogram<u64> {
        let mut h = latency_histogram().expect("histogram");
        for _ in 0..n {
            // Box-Muller.
            let (u1, u2): (f64, f64) = (rng.random_range(1e-12..1.0), rng.random());
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            let us = (scale * (0.5 * z).exp()).max(1.0) as u64;
            h.record(us).expect("record");
        }
        h
    }

    fn empty() -> Comparison {
        Comparison {
            before: "a".into(),
            after: "b".into(),
            verdict: Verdict::Unchanged,
            differences: Vec::new(),
            unchanged: Vec::new(),
            notes: Vec::new(),
            level: LEVEL,
            noise_floor: NOISE_FLOOR,
            samples: None,
        }
    }

    #[test]
    fn a_a_comparisons_rarely_differ_and_a_30_percent_shift_always_does() {
        let mut rng = StdRng::seed_from_u64(7);
        let (mut false_alarms, trials) = (0, 1000);
        for _ in 0..trials {
            let b = sample(&mut rng, 2000, 10_000.0);
            let a = sample(&mut rng, 2000, 10_000.0);
            let mut out = empty();
            latency_difference(&mut out, "p99 total", &b, &a, 0.99, None);
            latency_difference(&mut out, "p50 total", &b, &a, 0.5, None);
            if out.differences.iter().any(|d| d.worse) {
                false_alarms += 1;
            }
        }
        // Each interval misses at most 5%; non-overlap of two is far rarer.
        assert!(
            false_alarms <= trials / 20,
            "{false_alarms} of {trials} A/A comparisons said regressed"
        );
        for _ in 0..50 {
            let b = sample(&mut rng, 2000, 10_000.0);
            let a = sample(&mut rng, 2000, 13_000.0);
            let mut out = empty();
            latency_difference(&mut out, "p50 total", &b, &a, 0.5, None);
            assert!(
                out.differences.first().is_some_and(|d| d.worse),
                "a 30% slower service regresses: {out:?}"
            );
        }
    }

    #[test]
    fn small_runs_say_how_many_samples_they_need() {
        let mut rng = StdRng::seed_from_u64(1);
        let (b, a) = (sample(&mut rng, 100, 1000.0), sample(&mut rng, 100, 5000.0));
        let mut out = empty();
        latency_difference(&mut out, "p99 total", &b, &a, 0.99, None);
        assert!(out.differences.is_empty());
        assert_eq!(
            out.unchanged,
            vec!["p99 total (insufficient samples (need 368))".to_string()]
        );
    }

    fn side<'a>(id: &'a str, version: &'a str, status: RunStatus, result: &'a Value) -> Side<'a> {
        Side {
            id,
            kind: RunKind::Checks,
            scenario_version: version,
            environment: "staging",
            target: "http://127.0.0.1:1",
            status,
            result: Some(result),
        }
    }

    #[test]
    fn a_check_that_turns_to_fail_regresses_and_mismatches_are_refused() {
        let verdict = |passed: bool| {
            serde_json::json!({"passed": passed, "total": 1, "failed": u8::from(!passed),
                "checks": [{"name": "health", "method": "GET", "path": "/health", "passed": passed,
                            "status": if passed { 200 } else { 500 }, "latency_ms": 1.0,
                            "failures": if passed { vec![] } else { vec!["status 500, expected 200"] }}],
                "invariants": [{"name": "no 5xx", "passed": passed}]})
        };
        let (good, bad) = (verdict(true), verdict(false));
        let before = side("r1", "sha256:1", RunStatus::Passed, &good);
        let after = side("r2", "sha256:1", RunStatus::Failed, &bad);
        let out = compare(&before, &after, NOISE_FLOOR).expect("comparable");
        assert_eq!(out.verdict, Verdict::Regressed);
        assert_eq!(
            out.lines(),
            vec![
                "regressed".to_string(),
                "check health: passed -> failed (status 500, expected 200)".to_string(),
                "invariant no 5xx: broke".to_string(),
            ]
        );
        let healed = compare(&after, &before, NOISE_FLOOR).expect("comparable");
        assert_eq!(healed.verdict, Verdict::Improved);

        let other = side("r3", "sha256:2", RunStatus::Passed, &good);
        assert!(matches!(
            compare(&before, &other, NOISE_FLOOR),
            Err(Refusal::Different {
                what: "scenario version",
                ..
            })
        ));
        // A run stored before targets were normalised compares with one stored after.
        let slash = Side {
            target: "HTTP://127.0.0.1:1/",
            ..side("r6", "sha256:1", RunStatus::Passed, &good)
        };
        assert!(compare(&before, &slash, NOISE_FLOOR).is_ok());
        let elsewhere = Side {
            target: "http://127.0.0.1:2",
            ..side("r7", "sha256:1", RunStatus::Passed, &good)
        };
        assert!(matches!(
            compare(&before, &elsewhere, NOISE_FLOOR),
            Err(Refusal::Different { what: "target", .. })
        ));
        let running = side("r4", "sha256:1", RunStatus::Running, &good);
        assert!(matches!(
            compare(&before, &running, NOISE_FLOOR),
            Err(Refusal::NotFinished { .. })
        ));
        let errored = side("r5", "sha256:1", RunStatus::Error, &good);
        let out = compare(&before, &errored, NOISE_FLOOR).expect("an error run compares");
        assert_eq!(out.verdict, Verdict::Unchanged);
        assert!(out.notes[0].contains("ended error"), "{:?}", out.notes);
    }

    /// A load result of the given operations, each as its blocks (histograms), with the
    /// total's blocks merged from them; `operation_blocks` false writes it as results did
    /// before operations kept blocks.
    fn load_result(operations: &[(&str, Vec<Histogram<u64>>)], operation_blocks: bool) -> Value {
        use crate::histogram::encode;
        use crate::load::{
            Counts, HttpVersion, LoadResult, Model, OperationResult, WarmupPlan, WarmupResult,
            operation_block_histogram, summarise_latency,
        };
        let merge = |blocks: &[Histogram<u64>]| {
            let mut h = latency_histogram().expect("histogram");
            blocks.iter().for_each(|b| h.add(b).expect("merge"));
            h
        };
        let count = operations[0].1.len();
        let total_blocks: Vec<Histogram<u64>> = (0..count)
            .map(|i| {
                merge(
                    &operations
                        .iter()
                        .map(|(_, b)| b[i].clone())
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let total = merge(&total_blocks);
        let summary = summarise_latency(&total).expect("summary");
        let result = LoadResult {
            model: Model::Open,
            http: HttpVersion::Http1,
            connections: 8,
            intended_rate: Some(400.0),
            achieved_rate: 400.0,
            measured_seconds: count as f64,
            warmup: WarmupResult {
                plan: WarmupPlan::None,
                requests: 0,
                discarded: true,
            },
            counts: Counts::default(),
            error_rate: 0.0,
            intended: total.len(),
            sent: total.len(),
            late: 0,
            dropped: 0,
            late_tolerance_ms: 10,
            latency: summary.clone(),
            uncorrected_latency: summary,
            operations: operations
                .iter()
                .map(|(name, blocks)| OperationResult {
                    name: name.to_string(),
                    method: "GET".into(),
                    path: "/".into(),
                    counts: Counts::default(),
                    error_rate: 0.0,
                    latency: summarise_latency(&merge(blocks)).expect("summary"),
                    // Kept at the agent's precision for operation blocks.
                    blocks: if operation_blocks {
                        blocks
                            .iter()
                            .map(|b| {
                                let mut kept = operation_block_histogram().expect("histogram");
                                kept.add(b).expect("merge");
                                encode(&kept).expect("encode")
                            })
                            .collect()
                    } else {
                        Vec::new()
                    },
                })
                .collect(),
            thresholds: Vec::new(),
            aborted: None,
            notes: Vec::new(),
            blocks: total_blocks
                .iter()
                .map(|b| encode(b).expect("encode"))
                .collect(),
            block_seconds: 1,
            operation_block_seconds: u64::from(operation_blocks),
        };
        serde_json::to_value(result).expect("json")
    }

    fn load_side<'a>(id: &'a str, result: &'a Value) -> Side<'a> {
        Side {
            kind: RunKind::Load,
            ..side(id, "sha256:1", RunStatus::Passed, result)
        }
    }

    /// 60 one-second blocks of 200 latencies around `scale` µs; the block `slow` (if any)
    /// is five times slower throughout, as a pause of the target would make it.
    fn blocks(rng: &mut StdRng, scale: f64, slow: Option<usize>) -> Vec<Histogram<u64>> {
        (0..60)
            .map(|i| {
                let factor = if slow == Some(i) { 5.0 } else { 1.0 };
                sample(rng, 200, scale * factor)
            })
            .collect()
    }

    #[test]
    fn one_slow_block_of_an_operation_is_judged_with_its_block_bootstrap() {
        let mut rng = StdRng::seed_from_u64(11);
        let before_ops = [
            ("GET /a", blocks(&mut rng, 10_000.0, None)),
            ("GET /b", blocks(&mut rng, 10_000.0, None)),
        ];
        let after_ops = [
            ("GET /a", blocks(&mut rng, 10_000.0, Some(30))),
            ("GET /b", blocks(&mut rng, 10_000.0, None)),
        ];
        // Written as before operations kept blocks: the operation's exact binomial
        // interval alone takes one slow second for a regression of its p99.
        let (b, a) = (
            load_result(&before_ops, false),
            load_result(&after_ops, false),
        );
        let old =
            compare(&load_side("r1", &b), &load_side("r2", &a), NOISE_FLOOR).expect("comparable");
        assert_eq!(old.verdict, Verdict::Regressed, "{:?}", old.lines());
        assert_eq!(
            old.differences
                .iter()
                .map(|d| d.measure.as_str())
                .collect::<Vec<_>>(),
            vec!["p99 GET /a"]
        );
        assert!(
            old.notes.iter().any(|n| n.starts_with("total intervals: ")
                && n.ends_with(
                    "; 2 operations: exact binomial only (a run keeps fewer than 5 blocks of them)"
                )),
            "{:?}",
            old.notes
        );
        // With its blocks, the operation's interval covers how much one second weighs.
        let (b, a) = (
            load_result(&before_ops, true),
            load_result(&after_ops, true),
        );
        let new =
            compare(&load_side("r1", &b), &load_side("r2", &a), NOISE_FLOOR).expect("comparable");
        assert_eq!(new.verdict, Verdict::Unchanged, "{:?}", new.lines());
        assert!(new.unchanged.contains(&"p99 GET /a".to_string()));
        assert_eq!(
            new.notes,
            vec![format!(
                "total and operation intervals (2 operations): exact binomial widened by a block bootstrap (60 and 60 blocks of 1 s, {REPLICATES} resamples)"
            )]
        );
        // A shift of every second is still a regression.
        let slower = [
            ("GET /a", blocks(&mut rng, 13_000.0, None)),
            ("GET /b", blocks(&mut rng, 10_000.0, None)),
        ];
        let a = load_result(&slower, true);
        let out =
            compare(&load_side("r1", &b), &load_side("r3", &a), NOISE_FLOOR).expect("comparable");
        assert!(
            out.differences
                .iter()
                .any(|d| d.measure == "p50 GET /a" && d.worse),
            "{:?}",
            out.lines()
        );
    }

    #[test]
    fn results_without_operation_blocks_still_read_and_compare() {
        let mut rng = StdRng::seed_from_u64(12);
        let ops = |rng: &mut StdRng| {
            [
                ("GET /a", blocks(rng, 10_000.0, None)),
                ("GET /b", blocks(rng, 20_000.0, None)),
            ]
        };
        let old = load_result(&ops(&mut rng), false);
        assert!(
            old["operations"][0].get("blocks").is_none(),
            "no empty field is written"
        );
        let new = load_result(&ops(&mut rng), true);
        assert_eq!(
            new["operations"][0]["blocks"].as_array().map(Vec::len),
            Some(60)
        );
        for (b, a) in [(&old, &new), (&new, &old)] {
            let out =
                compare(&load_side("r1", b), &load_side("r2", a), NOISE_FLOOR).expect("comparable");
            assert_eq!(out.verdict, Verdict::Unchanged, "{:?}", out.lines());
            assert_eq!(
                out.unchanged.len(),
                6,
                "p50 and p99 of the total and each operation"
            );
            assert!(
                out.notes
                    .iter()
                    .any(|n| n.contains("2 operations: exact binomial only")),
                "{:?}",
                out.notes
            );
        }
    }

    #[test]
    fn the_note_names_the_blocks_of_the_total_and_of_the_operations() {
        let used = IntervalsUsed {
            total: Some((60, 60)),
            operations_widened: 100,
            operation_blocks: Some((12, 12)),
            operations_binomial: 0,
        };
        assert_eq!(
            used.note(60, 300).as_deref(),
            Some(
                "total intervals: exact binomial widened by a block bootstrap (60 and 60 blocks of 60 s, 400 resamples); operation intervals (100 operations): exact binomial widened by a block bootstrap (12 and 12 blocks of 300 s, 400 resamples)"
            )
        );
        assert_eq!(IntervalsUsed::default().note(1, 1), None);
    }
}
