//! Load (and replay) results compared: p50 and p99 of the total and of each operation
//! both runs measured and p99.9 of the total, their intervals widened by the block
//! bootstrap where both runs keep blocks; throughput and the error rate; the maximum as
//! information; and the thresholds whose verdict changed.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::load::{LoadResult, SlowSecond, slowest_traces};

use super::bootstrap::{MIN_BLOCKS, REPLICATES, block_intervals};
use super::errors::error_rate_difference;
use super::latency::{histogram, latency_difference, ms};
use super::throughput::compare_throughput;
use super::{COMPARED, Comparison, verdict_change};

/// The total's percentiles: the tail too, judged where both runs have the samples for it
/// (a stall that holds one request in a thousand shows there first).
const TOTAL_COMPARED: [(&str, f64); 3] = [COMPARED[0], COMPARED[1], ("p99.9", 0.999)];

/// One measure compared in a load result: the total or an operation, with its
/// histograms and blocks (empty when the result has none) before and after.
struct LoadPair<'a> {
    name: &'a str,
    before: &'a str,
    after: &'a str,
    before_blocks: &'a [String],
    after_blocks: &'a [String],
}

/// Which intervals a load comparison used, for the note that says so.
#[derive(Default)]
pub(super) struct IntervalsUsed {
    /// Blocks before and after, when the total's intervals were widened.
    pub(super) total: Option<(usize, usize)>,
    pub(super) operations_widened: usize,
    /// Blocks before and after of the first operation widened (all span the same time).
    pub(super) operation_blocks: Option<(usize, usize)>,
    pub(super) operations_binomial: usize,
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
    pub(super) fn note(&self, total_seconds: u64, operation_seconds: u64) -> Option<String> {
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

/// Trace ids a regressed tail names: the line stays readable with three.
pub const TRACES_NAMED: usize = 3;

/// A tail percentile found worse (the difference at `found`, when one was added) names
/// the candidate's slowest requests of its slowest seconds: where to look first.
fn name_traces(
    out: &mut Comparison,
    found: usize,
    seconds: &[SlowSecond],
    operation: Option<&str>,
) {
    let Some(difference) = out.differences.get_mut(found).filter(|d| d.worse) else {
        return;
    };
    let traces = slowest_traces(seconds, operation, TRACES_NAMED);
    if traces.is_empty() {
        return;
    }
    let named: Vec<String> = traces
        .iter()
        .map(|(second, e)| {
            format!(
                "{} (second {}, {})",
                e.trace_id,
                second.second,
                ms(e.latency_us)
            )
        })
        .collect();
    difference
        .line
        .push_str(&format!("; slowest traces: {}", named.join(", ")));
    difference.trace_ids = traces.iter().map(|(_, e)| e.trace_id.clone()).collect();
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
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Where both runs have blocks (the total's, and each operation's in results that
    // record them), the intervals also cover a block bootstrap over them, so that two
    // runs of one build do not differ by chance more often than the level says.
    let mut used = IntervalsUsed::default();
    for (index, pair) in pairs.iter().enumerate() {
        let compared: &[(&str, f64)] = if index == 0 {
            &TOTAL_COMPARED
        } else {
            &COMPARED
        };
        let qs: Vec<f64> = compared.iter().map(|(_, q)| *q).collect();
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
        for (at, (label, q)) in compared.iter().enumerate() {
            let widen = widen.as_ref().map(|(bw, aw)| (bw[at], aw[at]));
            let found = out.differences.len();
            latency_difference(out, &format!("{label} {}", pair.name), &b, &a, *q, widen);
            if *q >= 0.99 {
                let operation = (index > 0).then_some(pair.name);
                name_traces(out, found, &after.slow_seconds, operation);
            }
        }
        if index == 0 && !b.is_empty() && !a.is_empty() {
            // One request's latency: no interval bounds it, so it informs and never decides.
            out.notes.push(format!(
                "max total: {} -> {} (information, not judged)",
                ms(b.max()),
                ms(a.max())
            ));
        }
    }
    compare_throughput(before, after, out, &mut rng);
    error_rate_difference(out, "error rate", &before.counts, &after.counts);
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
