//! Scenario records compared, operation by operation (matched by place, method and path;
//! two runs of one scenario version send the same ops): p50 and p99 of the load requests
//! that had a whole response, judged as load's are (exact binomial intervals apart, or a
//! percentile over twice the other run's slowest request, and past the noise floor and the
//! timing resolution), and each op's error rate with Wilson intervals. The histograms are
//! rebuilt from the record's requests, which it keeps one by one. A scenario has no
//! seconds of its own (its requests follow each other), so no block bootstrap and no
//! throughput: how many requests a scenario sends is its spec's.

use crate::scenario_kind::record::{ScenarioRecord, op_counts, op_latency_histogram};

use super::errors::error_rate_difference;
use super::latency::latency_difference;
use super::{COMPARED, Comparison};

pub(crate) fn compare_scenario(
    before: &ScenarioRecord,
    after: &ScenarioRecord,
    out: &mut Comparison,
) {
    let mut samples = (0, 0);
    for op in &after.ops {
        let Some(earlier) = before
            .ops
            .iter()
            .find(|o| o.op == op.op && o.method == op.method && o.path == op.path)
        else {
            out.notes.push(format!(
                "{} {}: only the after run has this operation",
                op.method, op.path
            ));
            continue;
        };
        let name = format!("{} {}", op.method, op.path);
        match (
            op_latency_histogram(&before.requests, earlier.op),
            op_latency_histogram(&after.requests, op.op),
        ) {
            (Ok(b), Ok(a)) => {
                samples = (samples.0 + b.len(), samples.1 + a.len());
                for (label, q) in COMPARED {
                    latency_difference(out, &format!("{label} {name}"), &b, &a, q, None);
                }
            }
            _ => out
                .notes
                .push(format!("{name}: its latencies could not be read")),
        }
        error_rate_difference(
            out,
            &format!("error rate {name}"),
            &op_counts(&earlier.by_status, &earlier.errors),
            &op_counts(&op.by_status, &op.errors),
        );
    }
    out.samples = Some(samples);
}

#[cfg(test)]
#[path = "scenario_tests.rs"]
mod tests;
