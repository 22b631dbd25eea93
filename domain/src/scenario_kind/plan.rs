//! The order of a scenario's requests: one sequence number run-wide from 1, the warm-up
//! first (all of op 1's warm-up, then op 2's, ...), then the load (op 1's count, then
//! op 2's, ...). A pure function of the spec, so a replay numbers its requests the same.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::spec::ScenarioSpec;

/// One request of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedRequest {
    pub seq: u64,
    /// Index into the spec's ops.
    pub op: usize,
    pub warmup: bool,
}

/// Inclusive, written `first-last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqRange {
    pub first: u64,
    pub last: u64,
}

impl SeqRange {
    /// The range of `len` numbers from `first`, none when `len` is 0.
    fn of(first: u64, len: u64) -> Option<SeqRange> {
        (len > 0).then(|| SeqRange {
            first,
            last: first + len - 1,
        })
    }
}

impl fmt::Display for SeqRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// Where one op's requests fall in the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpSeqs {
    pub op: usize,
    /// None without a warm-up.
    pub warmup: Option<SeqRange>,
    pub load: SeqRange,
}

/// Each op's sequence ranges, without listing every request.
pub fn layout(spec: &ScenarioSpec) -> Vec<OpSeqs> {
    let warmup = u64::from(spec.warmup);
    let mut next_load = spec.warmup_requests() + 1;
    (0..spec.ops.len())
        .map(|op| {
            let count = u64::from(spec.op_count(op));
            let load = SeqRange {
                first: next_load,
                last: next_load + count - 1,
            };
            next_load += count;
            OpSeqs {
                op,
                warmup: SeqRange::of(1 + op as u64 * warmup, warmup),
                load,
            }
        })
        .collect()
}

/// The whole warm-up's range, none without one.
pub fn warmup_range(spec: &ScenarioSpec) -> Option<SeqRange> {
    SeqRange::of(1, spec.warmup_requests())
}

/// The whole load's range (a spec has at least one op of at least one request).
pub fn load_range(spec: &ScenarioSpec) -> SeqRange {
    SeqRange {
        first: spec.warmup_requests() + 1,
        last: spec.total_requests(),
    }
}

/// Every request, in sequence order.
pub fn plan(spec: &ScenarioSpec) -> Vec<PlannedRequest> {
    let mut requests = Vec::with_capacity(spec.total_requests() as usize);
    let seqs = layout(spec);
    for (phase_warmup, range_of) in [
        (
            true,
            (|s: &OpSeqs| s.warmup) as fn(&OpSeqs) -> Option<SeqRange>,
        ),
        (false, |s: &OpSeqs| Some(s.load)),
    ] {
        for s in &seqs {
            if let Some(range) = range_of(s) {
                requests.extend((range.first..=range.last).map(|seq| PlannedRequest {
                    seq,
                    op: s.op,
                    warmup: phase_warmup,
                }));
            }
        }
    }
    requests
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(value: serde_json::Value) -> ScenarioSpec {
        ScenarioSpec::from_json(&value).expect("valid spec")
    }

    #[test]
    fn warm_up_first_then_the_load_as_the_seed_records_it() {
        // The seed's record: two ops, 5 warm-up and 30 load each.
        let s = spec(json!({"slug": "s", "ops": ["GET /api/users", "POST /api/orders {}"]}));
        assert_eq!(warmup_range(&s), Some(SeqRange { first: 1, last: 10 }));
        assert_eq!(load_range(&s).to_string(), "11-70");
        let seqs = layout(&s);
        assert_eq!(
            seqs[0].warmup.map(|r| r.to_string()).as_deref(),
            Some("1-5")
        );
        assert_eq!(
            seqs[1].warmup.map(|r| r.to_string()).as_deref(),
            Some("6-10")
        );
        assert_eq!(seqs[0].load.to_string(), "11-40");
        assert_eq!(seqs[1].load.to_string(), "41-70");

        let all = plan(&s);
        assert_eq!(all.len(), 70);
        assert!(all.iter().enumerate().all(|(i, r)| r.seq == i as u64 + 1));
        assert_eq!(
            all[0],
            PlannedRequest {
                seq: 1,
                op: 0,
                warmup: true
            }
        );
        assert_eq!(
            all[5],
            PlannedRequest {
                seq: 6,
                op: 1,
                warmup: true
            }
        );
        assert_eq!(
            all[10],
            PlannedRequest {
                seq: 11,
                op: 0,
                warmup: false
            }
        );
        assert_eq!(
            all[40],
            PlannedRequest {
                seq: 41,
                op: 1,
                warmup: false
            }
        );
    }

    #[test]
    fn per_op_counts_and_no_warm_up() {
        let s = spec(json!({"slug": "s", "ops": ["GET /", "GET /b 10"], "count": 40, "warmup": 2}));
        let seqs = layout(&s);
        assert_eq!(seqs[1].warmup, Some(SeqRange { first: 3, last: 4 }));
        assert_eq!(seqs[0].load, SeqRange { first: 5, last: 44 });
        assert_eq!(
            seqs[1].load,
            SeqRange {
                first: 45,
                last: 54
            }
        );

        let s = spec(json!({"slug": "s", "ops": ["GET /", "GET /b 3"], "count": 2, "warmup": 0}));
        assert_eq!(warmup_range(&s), None);
        assert!(layout(&s).iter().all(|o| o.warmup.is_none()));
        let all = plan(&s);
        assert_eq!(
            all.iter()
                .map(|r| (r.seq, r.op, r.warmup))
                .collect::<Vec<_>>(),
            [
                (1, 0, false),
                (2, 0, false),
                (3, 1, false),
                (4, 1, false),
                (5, 1, false)
            ]
        );
    }
}
