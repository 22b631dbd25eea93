//! Faults journals compared: the steady-state hypothesis before and after the method, probe
//! by probe (matched by name), whether each met its tolerance (a probe that now misses is
//! worse: a deviation that appeared; one that now meets it, a deviation gone); for a load
//! probe (`iohr` `load`), its p99 over the burst's requests and its error rate with the
//! intervals load uses; the rollbacks that failed and the faults left applied. An HTTP
//! probe sends one request a check, so its latency is told as information, never judged:
//! one sample has no interval. How each experiment ended is a note where it changed.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde_json::Value;

use crate::faults::journal::{ActivityRun, ActivityStatus, Journal, SteadyState};
use crate::histogram::decode;
use crate::load::Counts;

use super::errors::error_rate_difference;
use super::latency::latency_difference;
use super::{Comparison, Difference, verdict_change};

pub(crate) fn compare_faults(before: &Journal, after: &Journal, out: &mut Comparison) {
    let phases = [
        (
            "before the method",
            &before.steady_states.before,
            &after.steady_states.before,
        ),
        (
            "after the method",
            &before.steady_states.after,
            &after.steady_states.after,
        ),
    ];
    let mut samples = (0, 0);
    for (phase, earlier, now) in phases {
        if let (Some(earlier), Some(now)) = (earlier, now) {
            compare_phase(phase, earlier, now, out, &mut samples);
        }
    }
    if samples != (0, 0) {
        out.samples = Some(samples);
    }
    let (failed_before, failed_after) = (left_behind(before), left_behind(after));
    if failed_before != failed_after {
        out.differences.push(Difference {
            measure: "rollbacks failed".to_string(),
            worse: failed_after > failed_before,
            line: format!(
                "rollbacks failed or faults left applied: {failed_before} -> {failed_after}"
            ),
            trace_ids: Vec::new(),
        });
    } else {
        out.unchanged.push("rollbacks".to_string());
    }
    if before.status != after.status {
        out.notes.push(format!(
            "the experiment ended {} -> {}",
            before.status.as_str(),
            after.status.as_str()
        ));
    }
}

fn compare_phase(
    phase: &str,
    earlier: &SteadyState,
    now: &SteadyState,
    out: &mut Comparison,
    samples: &mut (u64, u64),
) {
    let before: BTreeMap<&str, &ActivityRun> =
        earlier.probes.iter().map(|p| (probe_name(p), p)).collect();
    for probe in &now.probes {
        let name = probe_name(probe);
        let Some(was) = before.get(name) else {
            continue;
        };
        let measure = format!("probe {name} {phase}");
        match (was.tolerance_met, probe.tolerance_met) {
            (Some(a), Some(b)) if a == b => out.unchanged.push(measure.clone()),
            (Some(a), Some(b)) => {
                verdict_change(out, measure.clone(), a, b, probe.exception.clone())
            }
            _ => {}
        }
        let output = |run: &ActivityRun| run.output.clone().unwrap_or(Value::Null);
        let (b, a) = (output(was), output(probe));
        if let (Some(bh), Some(ah)) = (burst(&b), burst(&a)) {
            *samples = (samples.0 + bh.len(), samples.1 + ah.len());
            latency_difference(out, &format!("p99 {measure}"), &bh, &ah, 0.99, None);
        }
        if let (Some(bc), Some(ac)) = (burst_counts(&b), burst_counts(&a)) {
            error_rate_difference(out, &format!("error rate {measure}"), &bc, &ac);
        }
        if let (Some(bl), Some(al)) = (b["latency_ms"].as_f64(), a["latency_ms"].as_f64()) {
            out.notes.push(format!(
                "{measure}: {bl:.2} ms -> {al:.2} ms (one request each: information, not judged)"
            ));
        }
    }
}

fn probe_name(probe: &ActivityRun) -> &str {
    probe.activity["name"].as_str().unwrap_or("probe")
}

/// A load probe's latencies, where its output keeps them.
fn burst(output: &Value) -> Option<Histogram<u64>> {
    decode(output["histogram"].as_str()?).ok()
}

/// A load probe's requests and failures (its error rate of its requests).
fn burst_counts(output: &Value) -> Option<Counts> {
    let requests = output["requests"].as_u64()?;
    let rate = output["error_rate"].as_f64()?;
    let failed = (rate * requests as f64).round() as u64;
    Some(Counts {
        requests,
        errors: BTreeMap::from([("failed".to_string(), failed.min(requests))]),
        ..Counts::default()
    })
}

/// Rollback actions that failed and faults never undone.
fn left_behind(journal: &Journal) -> usize {
    let failed = journal
        .rollbacks
        .iter()
        .filter(|r| r.status == ActivityStatus::Failed)
        .count();
    let applied = journal
        .ledger
        .iter()
        .filter(|l| l.undone_at.is_none())
        .count();
    failed + applied
}

#[cfg(test)]
#[path = "faults_tests.rs"]
mod tests;
