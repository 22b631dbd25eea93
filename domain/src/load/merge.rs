//! A run split over several agents ([`Share`](super::Share)) measured as one: the
//! shares' per-second `load` frames and their results added exactly. Counts (late,
//! dropped and errors among them) are summed and HdrHistograms added, never percentiles
//! averaged, so a merged histogram is the one all the samples would have made recorded
//! together; percentiles, intervals and thresholds are then computed on the whole.

use std::collections::BTreeSet;

use hdrhistogram::Histogram;
use serde::Deserialize;

use crate::histogram::{HistogramError, decode, encode, latency_histogram};
use crate::stress::{GeneratorSaturated, TargetHeld};

use super::*;

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("nothing to merge")]
    Empty,
    #[error(transparent)]
    Histogram(#[from] HistogramError),
    #[error("histograms do not add: {0}")]
    Add(String),
    /// The parts disagree where shares of one run agree (a second, a phase, the model,
    /// the thresholds).
    #[error("the parts are not shares of one run: {0}")]
    Mismatch(String),
    #[error("a part is not a load result: {0}")]
    NotLoad(String),
    /// The kind's runs are not split over agents, so there is nothing to merge.
    #[error("a {0} run is not split over agents")]
    NotSplit(crate::RunKind),
}

/// Encoded histograms added exactly; `None` when there are none.
pub fn merge_histograms<'a>(
    parts: impl IntoIterator<Item = &'a str>,
) -> Result<Option<Histogram<u64>>, MergeError> {
    let mut merged: Option<Histogram<u64>> = None;
    for text in parts {
        let histogram = decode(text)?;
        match &mut merged {
            None => merged = Some(histogram),
            Some(sum) => sum
                .add(&histogram)
                .map_err(|e| MergeError::Add(format!("{e:?}")))?,
        }
    }
    Ok(merged)
}

/// The parts' histograms (those present) added and encoded again.
fn merged_text<'a>(
    parts: impl IntoIterator<Item = Option<&'a String>>,
) -> Result<Option<String>, MergeError> {
    let merged = merge_histograms(parts.into_iter().flatten().map(String::as_str))?;
    Ok(merged.map(|h| encode(&h)).transpose()?)
}

/// A field every share of one run has alike.
pub(crate) fn same<T: PartialEq + std::fmt::Debug>(
    what: &str,
    values: impl IntoIterator<Item = T>,
) -> Result<T, MergeError> {
    let mut values = values.into_iter();
    let first = values.next().ok_or(MergeError::Empty)?;
    for other in values {
        if other != first {
            return Err(MergeError::Mismatch(format!(
                "{what}: {first:?} and {other:?}"
            )));
        }
    }
    Ok(first)
}

/// A sum that saturates: frames are another process's numbers.
pub(crate) fn total(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}

pub(crate) fn counts_of<'a>(parts: impl IntoIterator<Item = &'a Counts>) -> Counts {
    let mut sum = Counts::default();
    for counts in parts {
        sum.add(counts);
    }
    sum
}

/// Operation names in the order the parts first name them.
fn names<'a>(
    lists: impl IntoIterator<Item = impl IntoIterator<Item = &'a String>>,
) -> Vec<&'a String> {
    let mut seen = BTreeSet::new();
    lists
        .into_iter()
        .flatten()
        .filter(|name| seen.insert(*name))
        .collect()
}

impl LoadSecond {
    /// The same second of every share (one frame per agent, alike in `second` and
    /// `phase`), as that second of the whole run.
    pub fn merge(parts: &[LoadSecond]) -> Result<LoadSecond, MergeError> {
        let second = same("second", parts.iter().map(|p| p.second))?;
        let phase = same("phase", parts.iter().map(|p| &p.phase))?.clone();
        let mut operations = BTreeMap::new();
        for name in names(parts.iter().map(|p| p.operations.keys())) {
            let ops: Vec<&OperationSecond> = parts
                .iter()
                .filter_map(|p| p.operations.get(name))
                .collect();
            let merged = OperationSecond {
                counts: counts_of(ops.iter().map(|o| &o.counts)),
                histogram: merged_text(ops.iter().map(|o| o.histogram.as_ref()))?,
            };
            operations.insert(name.clone(), merged);
        }
        Ok(LoadSecond {
            second,
            phase,
            counts: counts_of(parts.iter().map(|p| &p.counts)),
            intended: total(parts.iter().map(|p| p.intended)),
            sent: total(parts.iter().map(|p| p.sent)),
            late: total(parts.iter().map(|p| p.late)),
            late_held: total(parts.iter().map(|p| p.late_held)),
            late_behind: total(parts.iter().map(|p| p.late_behind)),
            dropped: total(parts.iter().map(|p| p.dropped)),
            histogram: merged_text(parts.iter().map(|p| p.histogram.as_ref()))?,
            uncorrected_histogram: merged_text(
                parts.iter().map(|p| p.uncorrected_histogram.as_ref()),
            )?,
            operations,
            exemplars: Exemplars::merge(parts.iter().map(|p| &p.exemplars)),
        })
    }
}

/// Block `i` of every part added, for each `i` some part has.
fn merge_blocks<'a>(
    parts: impl IntoIterator<Item = &'a [String]>,
) -> Result<Vec<String>, MergeError> {
    let parts: Vec<&[String]> = parts.into_iter().collect();
    let longest = parts.iter().map(|b| b.len()).max().unwrap_or(0);
    (0..longest)
        .map(|i| merged_text(parts.iter().map(|b| b.get(i)))?.ok_or(MergeError::Empty))
        .collect()
}

/// The whole run's warm-up: a counted one is split over the shares (a share may have
/// none left), so its counts add; a timed one is every share's.
fn merged_warmup(parts: &[LoadResult]) -> Result<WarmupPlan, MergeError> {
    let counted = parts
        .iter()
        .any(|p| matches!(p.warmup.plan, WarmupPlan::Requests(_)));
    if !counted {
        return same("warmup", parts.iter().map(|p| p.warmup.plan));
    }
    let mut sum = 0u64;
    for part in parts {
        match part.warmup.plan {
            WarmupPlan::Requests(n) => sum = sum.saturating_add(n),
            WarmupPlan::None => {}
            other => {
                return Err(MergeError::Mismatch(format!(
                    "warmup: a count and {other:?}"
                )));
            }
        }
    }
    Ok(WarmupPlan::Requests(sum))
}

pub(crate) fn whole_histogram<'a>(
    parts: impl IntoIterator<Item = &'a str>,
) -> Result<Histogram<u64>, MergeError> {
    match merge_histograms(parts)? {
        Some(histogram) => Ok(histogram),
        None => Ok(latency_histogram()?),
    }
}

impl LoadResult {
    /// The results of every share of one run (each agent's), as the whole run's result:
    /// counts and histograms added, percentiles and intervals read from the merged
    /// histograms, the thresholds judged again on them. The shares ran side by side, so
    /// the achieved and intended rates add and the measure lasted the longest share's.
    /// The status follows from [`LoadResult::verdict`] on the merged result.
    pub fn merge(parts: &[LoadResult]) -> Result<LoadResult, MergeError> {
        let first = parts.first().ok_or(MergeError::Empty)?;
        let expressions = same(
            "thresholds",
            parts.iter().map(|p| {
                p.thresholds
                    .iter()
                    .map(|t| t.threshold.as_str())
                    .collect::<Vec<_>>()
            }),
        )?;
        let thresholds = expressions
            .iter()
            .map(|text| text.parse::<Threshold>().map_err(MergeError::Mismatch))
            .collect::<Result<Vec<_>, _>>()?;
        let counts = counts_of(parts.iter().map(|p| &p.counts));
        let latency = whole_histogram(parts.iter().map(|p| p.latency.histogram.as_str()))?;
        let uncorrected = whole_histogram(
            parts
                .iter()
                .map(|p| p.uncorrected_latency.histogram.as_str()),
        )?;
        let mut operations = Vec::new();
        for name in names(parts.iter().map(|p| p.operations.iter().map(|o| &o.name))) {
            let ops: Vec<&OperationResult> = parts
                .iter()
                .flat_map(|p| p.operations.iter().filter(|o| &o.name == name))
                .collect();
            let Some(one) = ops.first() else { continue };
            let op_counts = counts_of(ops.iter().map(|o| &o.counts));
            operations.push(OperationResult {
                name: name.clone(),
                method: one.method.clone(),
                path: one.path.clone(),
                error_rate: op_counts.error_rate(),
                counts: op_counts,
                latency: summarise_latency(&whole_histogram(
                    ops.iter().map(|o| o.latency.histogram.as_str()),
                )?)?,
                blocks: merge_blocks(ops.iter().map(|o| o.blocks.as_slice()))?,
            });
        }
        let rates: Vec<f64> = parts.iter().filter_map(|p| p.intended_rate).collect();
        let mut merged = LoadResult {
            model: same("model", parts.iter().map(|p| p.model))?,
            http: same("http", parts.iter().map(|p| p.http))?,
            connections: parts
                .iter()
                .fold(0u32, |sum, p| sum.saturating_add(p.connections)),
            intended_rate: (!rates.is_empty()).then(|| rates.iter().sum()),
            achieved_rate: parts.iter().map(|p| p.achieved_rate).sum(),
            measured_seconds: parts.iter().map(|p| p.measured_seconds).fold(0.0, f64::max),
            warmup: WarmupResult {
                plan: merged_warmup(parts)?,
                requests: total(parts.iter().map(|p| p.warmup.requests)),
                discarded: true,
            },
            error_rate: counts.error_rate(),
            intended: total(parts.iter().map(|p| p.intended)),
            sent: total(parts.iter().map(|p| p.sent)),
            late: total(parts.iter().map(|p| p.late)),
            dropped: total(parts.iter().map(|p| p.dropped)),
            late_tolerance_ms: same(
                "late_tolerance_ms",
                parts.iter().map(|p| p.late_tolerance_ms),
            )?,
            latency: summarise_latency(&latency)?,
            uncorrected_latency: summarise_latency(&uncorrected)?,
            operations,
            thresholds: judge_all(&thresholds, &latency, &counts),
            aborted: parts.iter().find_map(|p| p.aborted.clone()),
            notes: Vec::new(),
            blocks: merge_blocks(parts.iter().map(|p| p.blocks.as_slice()))?,
            block_seconds: first.block_seconds,
            operation_block_seconds: first.operation_block_seconds,
            slow_seconds: merge_slow_seconds(parts.iter().flat_map(|p| &p.slow_seconds)),
            counts,
        };
        merged.notes = merged.standard_notes();
        if parts.len() > 1 {
            merged.notes.push(format!(
                "measured by {} agents side by side, their histograms added",
                parts.len()
            ));
        }
        Ok(merged)
    }
}

/// The stored results (JSON) of every share of a load or replay run, as the whole run's:
/// [`LoadResult::merge`], and a `generator_saturated` when any agent's generator set
/// the pace ([`GeneratorSaturated::merge`]): the whole is then no truer than its worst
/// share.
pub fn merge_results(parts: &[serde_json::Value]) -> Result<serde_json::Value, MergeError> {
    let results = parts
        .iter()
        .map(|v| LoadResult::deserialize(v).map_err(|e| MergeError::NotLoad(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    let merged = LoadResult::merge(&results)?;
    let value = serde_json::to_value(&merged).map_err(|e| MergeError::NotLoad(e.to_string()))?;
    with_saturation(value, parts)
}

/// A merged result with a `generator_saturated` when any share's generator set the pace
/// ([`GeneratorSaturated::merge`]): the whole is then no truer than its worst share.
pub(crate) fn with_saturation(
    mut merged: serde_json::Value,
    parts: &[serde_json::Value],
) -> Result<serde_json::Value, MergeError> {
    let verdicts: Vec<GeneratorSaturated> = parts
        .iter()
        .filter_map(GeneratorSaturated::of_result)
        .collect();
    if let (Some(saturated), Some(object)) =
        (GeneratorSaturated::merge(&verdicts), merged.as_object_mut())
    {
        let saturated =
            serde_json::to_value(saturated).map_err(|e| MergeError::NotLoad(e.to_string()))?;
        object.insert("generator_saturated".to_string(), saturated);
    }
    with_held(&mut merged, parts)?;
    Ok(merged)
}

/// The shares' late sends by cause and their connections, added (`late_held`,
/// `late_behind`, `max_connections`, `connections_opened`, where any share counted
/// them), and their `target_held_connections` merged ([`TargetHeld::merge`]),
/// with its note.
fn with_held(
    merged: &mut serde_json::Value,
    parts: &[serde_json::Value],
) -> Result<(), MergeError> {
    let Some(object) = merged.as_object_mut() else {
        return Ok(());
    };
    // Added over the shares that counted them (the connections' figures too).
    for key in [
        "late_held",
        "late_behind",
        "max_connections",
        "connections_opened",
    ] {
        let counted: Vec<u64> = parts.iter().filter_map(|p| p.get(key)?.as_u64()).collect();
        if !counted.is_empty() {
            object.insert(key.to_string(), total(counted).into());
        }
    }
    let held: Vec<TargetHeld> = parts.iter().filter_map(TargetHeld::of_result).collect();
    if let Some(held) = TargetHeld::merge(&held) {
        if let Some(notes) = object.get_mut("notes").and_then(|n| n.as_array_mut()) {
            notes.push(held.text.clone().into());
        }
        let held = serde_json::to_value(held).map_err(|e| MergeError::NotLoad(e.to_string()))?;
        object.insert("target_held_connections".to_string(), held);
    }
    Ok(())
}

/// The measure so far of a run split over agents, fed its merged measured seconds as they
/// come: what `abort_on_fail` judges, on the whole rather than on any one share.
#[derive(Debug, Clone)]
pub struct MergedMeasure {
    latency: Histogram<u64>,
    counts: Counts,
}

impl MergedMeasure {
    pub fn new() -> Result<MergedMeasure, HistogramError> {
        Ok(MergedMeasure {
            latency: latency_histogram()?,
            counts: Counts::default(),
        })
    }

    /// Adds a measured second (a warm-up second is not measured: left out).
    pub fn add(&mut self, second: &LoadSecond) -> Result<(), MergeError> {
        if second.phase != "measure" {
            return Ok(());
        }
        self.counts.add(&second.counts);
        if let Some(text) = &second.histogram {
            self.latency
                .add(decode(text)?)
                .map_err(|e| MergeError::Add(format!("{e:?}")))?;
        }
        Ok(())
    }

    /// The first of `thresholds` the measure so far crosses, with what it observed.
    pub fn crossed<'a>(&self, thresholds: &'a [Threshold]) -> Option<(&'a Threshold, String)> {
        first_crossed(thresholds, &self.latency, &self.counts)
    }

    /// As a store keeps it between seconds that come in different transactions: the
    /// histogram encoded as frames carry it, and the counts.
    pub fn to_text(&self) -> Result<String, MergeError> {
        let stored = StoredMeasure {
            latency: encode(&self.latency)?,
            counts: self.counts.clone(),
        };
        serde_json::to_string(&stored).map_err(|e| MergeError::NotLoad(e.to_string()))
    }

    pub fn from_text(text: &str) -> Result<MergedMeasure, MergeError> {
        let stored: StoredMeasure =
            serde_json::from_str(text).map_err(|e| MergeError::NotLoad(e.to_string()))?;
        let mut latency = latency_histogram()?;
        latency
            .add(decode(&stored.latency)?)
            .map_err(|e| MergeError::Add(format!("{e:?}")))?;
        Ok(MergedMeasure {
            latency,
            counts: stored.counts,
        })
    }
}

#[derive(serde::Serialize, Deserialize)]
struct StoredMeasure {
    latency: String,
    counts: Counts,
}

#[cfg(test)]
mod tests;
