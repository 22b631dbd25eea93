//! Exemplars: the trace ids of a few requests behind a second's figures, so that a slow
//! second (a spike on the plot, a regressed p99 in a compare) leads to the traces that
//! explain it. Each measured `load` frame keeps its second's [`SLOWEST_PER_SECOND`]
//! slowest requests (corrected latency) and its first [`FAILED_PER_SECOND`] failed ones
//! (no response, or a status of 400 or more); the result keeps those of its
//! [`SLOW_SECONDS`] slowest seconds (by the second's p99). Every list is bounded when
//! read: a longer one is truncated (its first entries kept, the agent's order: slowest
//! first), and an entry whose trace id is not 32 lower-case hex digits, or whose
//! operation name is longer than an operation's may be, is left out, so that what is
//! put into a tracing UI's URL is only ever a trace id.

use serde::{Deserialize, Deserializer, Serialize};

/// The slowest requests a second keeps.
pub const SLOWEST_PER_SECOND: usize = 3;
/// The failed requests a second keeps (the first ones of the second).
pub const FAILED_PER_SECOND: usize = 3;
/// The slowest seconds a result keeps, with their exemplars.
pub const SLOW_SECONDS: usize = 5;
/// Longer operation names are a broken agent's: an operation's name is its method and
/// path, bounded by the spec.
const MAX_OPERATION_NAME: usize = 2048;

/// The `K` largest of what was offered, largest first, in constant memory. Offering
/// compares the value with the K-th largest kept before it looks further, so that the
/// load engine can offer every request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slowest<T, const K: usize> {
    /// Largest first; the empty slots last.
    kept: [Option<(u64, T)>; K],
}

impl<T, const K: usize> Default for Slowest<T, K> {
    fn default() -> Self {
        Slowest {
            kept: std::array::from_fn(|_| None),
        }
    }
}

impl<T, const K: usize> Slowest<T, K> {
    /// Whether `value` would be kept: above the K-th largest, or a slot is free.
    #[inline]
    pub fn keeps(&self, value: u64) -> bool {
        match self.kept.last() {
            None => false,
            Some(None) => true,
            Some(Some((least, _))) => value > *least,
        }
    }

    /// Keeps `item` if `value` is among the K largest so far (a tie with the K-th is
    /// not: the first one stays).
    #[inline]
    pub fn offer(&mut self, value: u64, item: T) {
        if !self.keeps(value) {
            return;
        }
        let at = self
            .kept
            .iter()
            .position(|slot| slot.as_ref().is_none_or(|(v, _)| value > *v))
            .unwrap_or(K - 1);
        // The last slot (empty, or the K-th largest, now dropped) comes to `at`.
        self.kept[at..].rotate_right(1);
        self.kept[at] = Some((value, item));
    }

    /// What is kept, largest first.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.kept.iter().flatten().map(|(v, item)| (*v, item))
    }

    pub fn len(&self) -> usize {
        self.kept.iter().flatten().count()
    }

    pub fn is_empty(&self) -> bool {
        self.kept[..].first().is_none_or(Option::is_none)
    }

    pub fn clear(&mut self) {
        self.kept.iter_mut().for_each(|slot| *slot = None);
    }

    /// Adds what `other` keeps: the K largest of both.
    pub fn merge(&mut self, other: &Slowest<T, K>)
    where
        T: Clone,
    {
        for (value, item) in other.iter() {
            self.offer(value, item.clone());
        }
    }
}

/// One request behind a second's figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Exemplar {
    /// The W3C trace id the request was sent with (32 lower-case hex digits; the first
    /// 16 name the run, [`crate::trace`]).
    pub trace_id: String,
    /// Its latency from the intended send time, in microseconds (the frame's histogram's).
    pub latency_us: u64,
    /// The operation's name (method and path, or the spec's name).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operation: String,
    /// A failed request's status class (`4xx`, `5xx`) or failure (`timeout`, `reset`, ..);
    /// absent on a slowest request that succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

impl Exemplar {
    fn valid(&self) -> bool {
        is_trace_id(&self.trace_id)
            && self.operation.len() <= MAX_OPERATION_NAME
            && self
                .outcome
                .as_ref()
                .is_none_or(|o| o.len() <= 16 && o.bytes().all(|b| b.is_ascii_alphanumeric()))
    }
}

/// 32 lower-case hex digits, not all zero (W3C's trace-id).
pub fn is_trace_id(text: &str) -> bool {
    text.len() == 32
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && text.bytes().any(|b| b != b'0')
}

/// The trace id of a request of the run whose trace ids start with `prefix`
/// ([`crate::trace::run_prefix`]) and end with `low`.
pub fn trace_id(prefix: u64, low: u64) -> String {
    format!("{prefix:016x}{low:016x}")
}

/// A second's exemplars (or a slow second's in a result).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Exemplars {
    /// Its slowest requests, slowest first (at most [`SLOWEST_PER_SECOND`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slowest: Vec<Exemplar>,
    /// Its first failed requests (at most [`FAILED_PER_SECOND`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<Exemplar>,
}

/// Entries past `bound`, or not valid, left out.
fn bounded(list: Vec<Exemplar>, bound: usize) -> Vec<Exemplar> {
    list.into_iter()
        .filter(Exemplar::valid)
        .take(bound)
        .collect()
}

impl<'de> Deserialize<'de> for Exemplars {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default)]
            slowest: Vec<Exemplar>,
            #[serde(default)]
            failed: Vec<Exemplar>,
        }
        let raw = Raw::deserialize(deserializer)?;
        Ok(Exemplars {
            slowest: bounded(raw.slowest, SLOWEST_PER_SECOND),
            failed: bounded(raw.failed, FAILED_PER_SECOND),
        })
    }
}

impl Exemplars {
    pub fn is_empty(&self) -> bool {
        self.slowest.is_empty() && self.failed.is_empty()
    }

    /// Several parts' exemplars of one second (the shares of a split run) as the
    /// whole's: the slowest of all, and failed ones up to the bound.
    pub fn merge<'a>(parts: impl IntoIterator<Item = &'a Exemplars>) -> Exemplars {
        let mut slowest: Slowest<&Exemplar, SLOWEST_PER_SECOND> = Slowest::default();
        let mut failed = Vec::new();
        for part in parts {
            for e in &part.slowest {
                slowest.offer(e.latency_us, e);
            }
            failed.extend(part.failed.iter().cloned());
        }
        failed.truncate(FAILED_PER_SECOND);
        Exemplars {
            slowest: slowest.iter().map(|(_, e)| (*e).clone()).collect(),
            failed,
        }
    }
}

/// A `load` frame's exemplars as an agent sent them, bounded as [`Exemplars`] reads them
/// (truncated, the invalid left out; a field that is not exemplars at all is dropped):
/// what the controller stores of a frame.
pub fn bound_frame_exemplars(frame: &mut serde_json::Value) {
    let Some(object) = frame.as_object_mut() else {
        return;
    };
    let Some(sent) = object.remove("exemplars") else {
        return;
    };
    if let Ok(read) = Exemplars::deserialize(sent)
        && !read.is_empty()
        && let Ok(value) = serde_json::to_value(read)
    {
        object.insert("exemplars".to_string(), value);
    }
}

/// A slow second of a run, as its result keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SlowSecond {
    /// Seconds since the measure started, as in its `load` frame.
    pub second: u64,
    /// The second's p99 (corrected, microseconds): what ranks it. In a split run's
    /// merged result, the slowest share's p99 of that second.
    pub p99_us: u64,
    #[serde(default)]
    pub exemplars: Exemplars,
}

/// A result's slow seconds, bounded when read ([`SLOW_SECONDS`], slowest first).
pub fn bounded_slow_seconds<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<SlowSecond>, D::Error> {
    let mut seconds = Vec::<SlowSecond>::deserialize(deserializer)?;
    seconds.truncate(SLOW_SECONDS);
    Ok(seconds)
}

/// The slowest seconds of several parts (the shares of a split run, or seconds as they
/// come): one entry per second, its exemplars merged, the slowest [`SLOW_SECONDS`] kept.
pub fn merge_slow_seconds<'a>(parts: impl IntoIterator<Item = &'a SlowSecond>) -> Vec<SlowSecond> {
    let mut by_second: std::collections::BTreeMap<u64, Vec<&SlowSecond>> = Default::default();
    for s in parts {
        by_second.entry(s.second).or_default().push(s);
    }
    let mut top: Slowest<SlowSecond, SLOW_SECONDS> = Slowest::default();
    for (second, same) in by_second {
        let p99_us = same.iter().map(|s| s.p99_us).max().unwrap_or(0);
        top.offer(
            p99_us,
            SlowSecond {
                second,
                p99_us,
                exemplars: Exemplars::merge(same.iter().map(|s| &s.exemplars)),
            },
        );
    }
    top.iter().map(|(_, s)| s.clone()).collect()
}

/// The trace ids behind a slow tail: of the slowest requests of the slowest seconds
/// (of `operation` only, when named), slowest second first, at most `limit`, each with
/// its second and latency.
pub fn slowest_traces<'a>(
    seconds: &'a [SlowSecond],
    operation: Option<&str>,
    limit: usize,
) -> Vec<(&'a SlowSecond, &'a Exemplar)> {
    let mut out: Vec<(&SlowSecond, &Exemplar)> = Vec::new();
    for second in seconds {
        for e in &second.exemplars.slowest {
            let matches = operation.is_none_or(|name| e.operation == name);
            if matches && !out.iter().any(|(_, seen)| seen.trace_id == e.trace_id) {
                out.push((second, e));
            }
        }
    }
    out.truncate(limit);
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn id(n: u64) -> String {
        trace_id(0xabc, n)
    }

    proptest! {
        #![proptest_config(crate::proptests::config(256))]

        /// What is kept is the K largest of what was offered (as a multiset of values),
        /// largest first, never more than K; shards merged keep the same.
        #[test]
        fn the_k_slowest_are_kept(values in proptest::collection::vec(0u64..50, 0..60), split in 0usize..60) {
            let mut all: Slowest<usize, 3> = Slowest::default();
            let (mut a, mut b): (Slowest<usize, 3>, Slowest<usize, 3>) = Default::default();
            for (i, v) in values.iter().enumerate() {
                all.offer(*v, i);
                if i < split { a.offer(*v, i) } else { b.offer(*v, i) }
            }
            let mut expected = values.clone();
            expected.sort_unstable_by(|x, y| y.cmp(x));
            expected.truncate(3);
            let kept: Vec<u64> = all.iter().map(|(v, _)| v).collect();
            prop_assert!(kept.len() <= 3);
            prop_assert_eq!(&kept, &expected);
            for (v, i) in all.iter() {
                prop_assert_eq!(values[*i], v);
            }
            a.merge(&b);
            prop_assert_eq!(a.iter().map(|(v, _)| v).collect::<Vec<_>>(), expected);
        }

        /// Whatever an agent sends, what is read is bounded and holds only trace ids.
        #[test]
        fn decoding_bounds_and_filters(n in 0usize..40, junk in "\\PC{0,40}") {
            let list: Vec<_> = (0..n)
                .map(|i| if i % 3 == 0 {
                    json!({"trace_id": junk.clone(), "latency_us": i})
                } else {
                    json!({"trace_id": id(i as u64 + 1), "latency_us": i})
                })
                .collect();
            let read: Exemplars = serde_json::from_value(json!({"slowest": list, "failed": list}))
                .expect("read");
            prop_assert!(read.slowest.len() <= SLOWEST_PER_SECOND);
            prop_assert!(read.failed.len() <= FAILED_PER_SECOND);
            prop_assert!(read.slowest.iter().chain(&read.failed).all(|e| is_trace_id(&e.trace_id)));
        }
    }

    #[test]
    fn a_frame_with_too_many_exemplars_is_truncated() {
        let many: Vec<_> = (1..=10)
            .map(|i| json!({"trace_id": id(i), "latency_us": 100 - i}))
            .collect();
        let mut frame = json!({"second": 1, "exemplars": {"slowest": many, "failed": many}});
        bound_frame_exemplars(&mut frame);
        let kept = &frame["exemplars"];
        assert_eq!(kept["slowest"].as_array().map(Vec::len), Some(3));
        assert_eq!(kept["slowest"][0]["trace_id"], json!(id(1)));
        assert_eq!(kept["failed"].as_array().map(Vec::len), Some(3));
        let mut junk = json!({"second": 1, "exemplars": "x"});
        bound_frame_exemplars(&mut junk);
        assert_eq!(junk, json!({"second": 1}));
    }

    #[test]
    fn seconds_merge_by_number_and_the_slowest_are_kept() {
        let second = |n: u64, p99: u64, ids: &[u64]| SlowSecond {
            second: n,
            p99_us: p99,
            exemplars: Exemplars {
                slowest: ids
                    .iter()
                    .map(|i| Exemplar {
                        trace_id: id(*i),
                        latency_us: *i,
                        operation: if i % 2 == 0 { "GET /a" } else { "GET /b" }.into(),
                        outcome: None,
                    })
                    .collect(),
                failed: Vec::new(),
            },
        };
        let parts = [
            second(1, 10, &[9, 8]),
            second(1, 30, &[20, 7]),
            second(2, 20, &[5]),
            second(3, 1, &[1]),
            second(4, 2, &[2]),
            second(5, 3, &[3]),
            second(6, 4, &[4]),
        ];
        let merged = merge_slow_seconds(&parts);
        assert_eq!(
            merged
                .iter()
                .map(|s| (s.second, s.p99_us))
                .collect::<Vec<_>>(),
            [(1, 30), (2, 20), (6, 4), (5, 3), (4, 2)]
        );
        let first: Vec<u64> = merged[0]
            .exemplars
            .slowest
            .iter()
            .map(|e| e.latency_us)
            .collect();
        assert_eq!(first, [20, 9, 8]);
        let traces = slowest_traces(&merged, Some("GET /b"), 2);
        assert_eq!(
            traces
                .iter()
                .map(|(s, e)| (s.second, e.latency_us))
                .collect::<Vec<_>>(),
            [(1, 9), (2, 5)]
        );
    }
}
