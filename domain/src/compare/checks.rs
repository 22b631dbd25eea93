//! Checks results compared: each surface check whose verdict changed and each invariant
//! that broke or healed.

use std::collections::BTreeMap;

use crate::checks::ChecksResult;

use super::{Comparison, Difference, verdict_change};

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
                    trace_ids: Vec::new(),
                });
            }
        }
    }
    if same > 0 {
        out.unchanged.push(format!("{same} checks and invariants"));
    }
}
