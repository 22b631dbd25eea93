//! One run split over several agents (`"agents": N`): each agent runs one [`Share`] of
//! it, and their frames and results merge back into the whole ([`super::merge`]).
//!
//! What a share is, per model, in one place:
//! - open model (load, replay, each capacity step): the whole run's arrivals are
//!   numbered 0, 1, 2, ... and share `i` of `n` sends arrival `k` only when
//!   `k % n == i` ([`Share::nth`]), warm-up included, so the shares interleave and
//!   together are exactly the asked schedule (rate/n each) or the log's requests;
//! - the connections (the closed model's, and the open model's bound) are split: `C/n`
//!   each, the first `C % n` shares one more ([`Share::part`]); a plan with fewer
//!   connections than agents is refused ([`check_split`]);
//! - a closed model's counted warm-up is split the same way.
//!
//! The engine applies the arrivals' rule (its timeline); [`LoadPlan::share`] the rest.

use std::fmt;
use std::str::FromStr;

use crate::request::{SpecError, spec_error};

use super::{LoadPlan, Model, Threshold, WarmupPlan};

/// The most agents one run is split over.
pub const MAX_SHARES: u32 = 64;

/// Share `index` (from 0) of a run split over `count` agents; `count` 1 is the whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Share {
    index: u32,
    count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    #[error("a run is split over 1 to {MAX_SHARES} agents, not {0}")]
    Count(u32),
    #[error("share {index} of {count}: shares are numbered from 0 to {}", count - 1)]
    Index { index: u32, count: u32 },
    #[error("{0:?} is not a share such as 0/3 (INDEX/COUNT)")]
    Text(String),
}

impl Default for Share {
    fn default() -> Share {
        Share::WHOLE
    }
}

impl Share {
    /// The whole run, on one agent.
    pub const WHOLE: Share = Share { index: 0, count: 1 };

    pub fn new(index: u32, count: u32) -> Result<Share, ShareError> {
        if count == 0 || count > MAX_SHARES {
            return Err(ShareError::Count(count));
        }
        if index >= count {
            return Err(ShareError::Index { index, count });
        }
        Ok(Share { index, count })
    }

    /// As a `LeaseOffer` carries it (`share_index`, `share_count`): a count of 0, what a
    /// controller that never splits sends, is the whole run as 1 is.
    pub fn from_offer(index: u32, count: u32) -> Result<Share, ShareError> {
        Share::new(index, count.max(1))
    }

    /// Every share of a run split over `count` agents, in order: what the controller
    /// leases.
    pub fn all(count: u32) -> Result<impl Iterator<Item = Share>, ShareError> {
        Share::new(0, count)?;
        Ok((0..count).map(move |index| Share { index, count }))
    }

    pub fn index(self) -> u32 {
        self.index
    }

    pub fn count(self) -> u32 {
        self.count
    }

    pub fn is_whole(self) -> bool {
        self.count == 1
    }

    /// Whether the whole run's `k`-th arrival (from 0) is this share's.
    pub fn keeps(self, k: u64) -> bool {
        k % u64::from(self.count) == u64::from(self.index)
    }

    /// The whole run's index of this share's `i`-th arrival: the `i`-th `k` it
    /// [`keeps`](Share::keeps). `None` past what a `u64` counts.
    pub fn nth(self, i: u64) -> Option<u64> {
        i.checked_mul(u64::from(self.count))?
            .checked_add(u64::from(self.index))
    }

    /// This share's part of `n` things split over the shares: `n / count`, one more for
    /// the first `n % count` shares. The same number as the arrivals below `n` it keeps,
    /// so it splits connections, warm-up counts and a schedule's total alike.
    pub fn part(self, n: u64) -> u64 {
        let count = u64::from(self.count);
        n / count + u64::from(u64::from(self.index) < n % count)
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Written as it reads, `"1/3"` (a dry run's `share`).
impl serde::Serialize for Share {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `INDEX/COUNT`, such as `0/3` (`iohr-agent exec --share`).
impl FromStr for Share {
    type Err = ShareError;

    fn from_str(text: &str) -> Result<Share, ShareError> {
        let bad = || ShareError::Text(text.chars().take(40).collect());
        let (index, count) = text.trim().split_once('/').ok_or_else(bad)?;
        let number = |s: &str| s.trim().parse::<u32>().map_err(|_| bad());
        Share::new(number(index)?, number(count)?)
    }
}

/// Whether `plan` may be split over `count` agents. The controller asks it at POST (a
/// refusal names `agents` or `spec.connections`, a 400 `invalid_spec`); the agent again
/// when it takes a share.
pub fn check_split(plan: &LoadPlan, count: u32) -> Result<(), SpecError> {
    if count == 0 || count > MAX_SHARES {
        return Err(spec_error(
            "agents",
            format!("must be between 1 and {MAX_SHARES}"),
        ));
    }
    if plan.connections < count {
        return Err(spec_error(
            "spec.connections",
            format!(
                "{} connections cannot be split over {count} agents: each agent needs at least one",
                plan.connections
            ),
        ));
    }
    Ok(())
}

impl LoadPlan {
    /// The thresholds that stop the run early: all of them with `abort_on_fail`, else none.
    pub fn abort_thresholds(&self) -> Vec<Threshold> {
        if self.abort_on_fail {
            self.thresholds.clone()
        } else {
            Vec::new()
        }
    }

    /// This plan as `share` of it runs: its connections (and a closed model's counted
    /// warm-up) split, its arrivals left for the engine to split by [`Share::nth`].
    /// `abort_on_fail` is off in a share of several: the thresholds that stop the run
    /// are judged on the merged whole, where the shares' seconds meet.
    pub fn share(mut self, share: Share) -> Result<LoadPlan, SpecError> {
        if !self.share.is_whole() {
            return Err(spec_error("agents", "the plan is a share already"));
        }
        check_split(&self, share.count())?;
        if share.is_whole() {
            return Ok(self);
        }
        // A part of a u32 is at most the u32.
        self.connections = u32::try_from(share.part(u64::from(self.connections))).unwrap_or(1);
        // Split as the connections are, so a share's bound is never below its start.
        self.max_connections = u32::try_from(share.part(u64::from(self.max_connections)))
            .unwrap_or(self.connections)
            .max(self.connections);
        if let (Model::Closed, WarmupPlan::Requests(n)) = (self.model, self.warmup) {
            self.warmup = match share.part(n) {
                0 => WarmupPlan::None,
                n => WarmupPlan::Requests(n),
            };
        }
        self.abort_on_fail = false;
        self.share = share;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::load::LoadSpec;

    fn plan(spec: serde_json::Value) -> LoadPlan {
        LoadSpec::from_json(&spec)
            .and_then(|s| s.plan())
            .expect("plan")
    }

    #[test]
    fn shares_interleave_into_exactly_the_whole() {
        for count in 1..=7u32 {
            for total in [0u64, 1, 5, 6, 7, 100] {
                let mut seen: Vec<u64> = Share::all(count)
                    .expect("count")
                    .flat_map(|s| (0..).map_while(move |i| s.nth(i).filter(|k| *k < total)))
                    .collect();
                let parts: u64 = Share::all(count)
                    .expect("count")
                    .map(|s| s.part(total))
                    .sum();
                assert_eq!(parts, total, "{count} shares of {total}");
                for s in Share::all(count).expect("count") {
                    let kept = (0..total).filter(|k| s.keeps(*k)).count() as u64;
                    assert_eq!(kept, s.part(total), "share {s} of {total}");
                }
                seen.sort_unstable();
                assert_eq!(seen, (0..total).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn connections_split_with_the_first_shares_one_more_and_too_few_are_refused() {
        let closed = plan(
            serde_json::json!({"operations": [{"path": "/"}], "model": "closed",
            "connections": 10, "duration": "1s", "warmup": 5, "abort_on_fail": true}),
        );
        let parts: Vec<(u32, WarmupPlan, bool)> = Share::all(3)
            .expect("count")
            .map(|s| closed.clone().share(s).expect("share"))
            .map(|p| (p.connections, p.warmup, p.abort_on_fail))
            .collect();
        assert_eq!(
            parts,
            vec![
                (4, WarmupPlan::Requests(2), false),
                (3, WarmupPlan::Requests(2), false),
                (3, WarmupPlan::Requests(1), false)
            ]
        );
        let whole = closed.clone().share(Share::WHOLE).expect("whole");
        assert_eq!(whole, closed, "the whole is the plan as it is");
        let err = check_split(&closed, 11).expect_err("11 agents, 10 connections");
        assert_eq!(err.field, "spec.connections");
        assert_eq!(
            check_split(&closed, 65).expect_err("too many").field,
            "agents"
        );
        assert_eq!(check_split(&closed, 0).expect_err("none").field, "agents");
        let shared = closed
            .share(Share::new(0, 2).expect("share"))
            .expect("share");
        assert_eq!(
            shared.share(Share::WHOLE).expect_err("twice").field,
            "agents"
        );
    }

    #[test]
    fn a_share_reads_as_index_over_count_and_offers_of_count_zero_are_whole() {
        assert_eq!("2/3".parse::<Share>(), Share::new(2, 3));
        assert_eq!(" 0 / 1 ".parse::<Share>(), Ok(Share::WHOLE));
        assert_eq!(Share::from_offer(0, 0), Ok(Share::WHOLE));
        assert_eq!(
            Share::from_offer(1, 0),
            Err(ShareError::Index { index: 1, count: 1 })
        );
        for bad in ["3/3", "0/0", "0/65", "1", "a/b", "-1/3", "1/3/4", ""] {
            assert!(bad.parse::<Share>().is_err(), "{bad:?}");
        }
        assert_eq!(Share::new(4, 9).expect("share").to_string(), "4/9");
    }

    proptest! {
        #![proptest_config(crate::proptests::config(256))]

        /// `--share` is outside input: any text is a share or a refusal, never a panic,
        /// and a share reads back as it prints.
        #[test]
        fn any_text_is_a_share_or_a_refusal(text in "\\PC{0,12}|[0-9]{1,3}/[0-9]{1,3}") {
            if let Ok(share) = text.parse::<Share>() {
                prop_assert!(share.index() < share.count() && share.count() <= MAX_SHARES);
                prop_assert_eq!(share.to_string().parse::<Share>(), Ok(share));
            }
        }

        #[test]
        fn nth_is_the_ith_kept_arrival(index in 0u32..64, extra in 1u32..64, i in 0u64..10_000) {
            let share = Share::new(index % extra, extra).expect("share");
            let k = share.nth(i).expect("in range");
            prop_assert!(share.keeps(k));
            prop_assert_eq!(share.part(k), i, "{} arrivals before it are the share's", i);
        }
    }
}
