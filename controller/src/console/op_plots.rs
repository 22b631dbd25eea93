//! Each operation's seconds, for results of several operations (those the operations
//! table lists, [`super::operations`]): a load or replay run's from the `operations` of
//! its stored `load` frames (each second's completed requests and corrected latency
//! histogram), a scenario run's from its record's requests (each request at the second it
//! started, the durations of the load's complete responses as its latencies; warm-up
//! requests counted, not timed, as a load's warm-up seconds are). One plot per
//! operation, drawn as the run's own seconds are ([`super::charts::seconds_plot`]): both
//! runs on it when two are compared, aligned on the measure's (a scenario's load's)
//! start, the warm-up shaded and the run's latency thresholds drawn.

use std::collections::BTreeMap;

use iohr_domain::load::{Counts, SecondSummary};
use iohr_domain::scenario_kind::record::{RequestRecord, ScenarioRecord};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::charts::{Second, Seconds, align, seconds_plot};
use super::plot::{Axis, Level, legend};

/// Each operation's name and seconds, in the result's order; empty for a result of fewer
/// than two operations (its total says it all).
pub type Operations = Vec<(String, Seconds)>;

/// The operations' seconds of a load-like run from its `load` frames' payloads.
pub fn from_frames(payloads: &[&Value], result: Option<&Value>) -> Operations {
    let names = super::operations::names(result);
    if names.len() < 2 {
        return Vec::new();
    }
    from_frames_named(payloads, &names)
}

fn from_frames_named(payloads: &[&Value], names: &[impl AsRef<str>]) -> Operations {
    names
        .iter()
        .map(|name| {
            let name = name.as_ref();
            let summaries: Vec<SecondSummary> = payloads
                .iter()
                .filter_map(|frame| {
                    let op = frame.get("operations")?.get(name)?;
                    // The op's histogram and counts; its second and phase are the frame's.
                    let mut second = SecondSummary::of(op);
                    second.second = frame.get("second").and_then(Value::as_u64);
                    second.phase = frame
                        .get("phase")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                    second.sent = Counts::deserialize(op).ok().map(|c| c.requests);
                    Some(second)
                })
                .collect();
            (name.to_string(), align(&summaries))
        })
        .collect()
}

/// The operations' seconds of a scenario run from its record's requests.
pub fn from_record(result: Option<&Value>) -> Operations {
    let Some(record) = result.and_then(|r| ScenarioRecord::deserialize(r).ok()) else {
        return Vec::new();
    };
    // The load's first request starts second 1; the warm-up's seconds are 0 and below.
    let start = record
        .requests
        .iter()
        .filter(|r| !r.warmup)
        .map(|r| r.offset_ms)
        .min_by(f64::total_cmp);
    let (Some(start), true) = (start, record.ops.len() >= 2) else {
        return Vec::new();
    };
    record
        .ops
        .iter()
        .map(|op| {
            let name = format!("{} {}", op.method, op.path);
            (name, op_seconds(&record.requests, op.op, start))
        })
        .collect()
}

/// One op's seconds: requests started in each, and the p50 and p99 of the load's complete
/// responses. A pause of its requests (another op's turn) is one point of no requests at
/// each of its ends, so the lines break there and the points stay as many as the requests.
fn op_seconds(requests: &[RequestRecord], op: usize, start: f64) -> Seconds {
    let mut by_second: BTreeMap<i64, Vec<&RequestRecord>> = BTreeMap::new();
    for r in requests.iter().filter(|r| r.op == op) {
        let x = ((r.offset_ms - start) / 1000.0).floor() as i64 + 1;
        by_second.entry(x).or_default().push(r);
    }
    let mut seconds: Vec<Second> = Vec::new();
    let idle = |x: i64| Second {
        x: x as f64,
        rate: Some(0.0),
        p50: None,
        p99: None,
        slowest: None,
    };
    for (x, sent) in &by_second {
        if let Some(last) = seconds.last().map(|s| s.x as i64) {
            if x - last > 1 {
                seconds.push(idle(last + 1));
            }
            if x - last > 2 {
                seconds.push(idle(x - 1));
            }
        }
        let mut timed: Vec<f64> = sent
            .iter()
            .filter(|r| !r.warmup && r.answered())
            .map(|r| r.duration_ms)
            .collect();
        timed.sort_by(f64::total_cmp);
        seconds.push(Second {
            x: *x as f64,
            rate: Some(sent.len() as f64),
            p50: nearest_rank(&timed, 0.5),
            p99: nearest_rank(&timed, 0.99),
            slowest: None,
        });
    }
    let first = by_second.keys().next().copied().unwrap_or(1);
    Seconds {
        seconds,
        warmup: u64::try_from(1 - first).unwrap_or(0),
    }
}

/// The `q` quantile of sorted values by nearest rank: a second's few requests, exactly.
fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.max(1) - 1).copied()
}

/// What a latency axis reads: a load's corrected latencies, or a scenario's request
/// durations (its requests follow each other: nothing to correct).
pub const CORRECTED: &str = "ms (corrected)";
pub const DURATIONS: &str = "ms (request durations)";

/// One plot per operation (`op-plot-1`, ... in a `section` naming it), each run's seconds
/// of it on the plot, the latency axis `y` ([`CORRECTED`] or [`DURATIONS`]); nothing when
/// the runs have fewer than two operations.
pub fn render(
    runs: &[(&'static str, &Operations)],
    levels: &[Level],
    y: &str,
    compared: bool,
) -> Markup {
    let count = runs.iter().map(|(_, ops)| ops.len()).max().unwrap_or(0);
    if count < 2 {
        return html! {};
    }
    // Two runs of one version have the same operations in the same order: matched by
    // place and name, so an operation only one run has is drawn for it alone.
    let plots: Vec<(String, Markup)> = (0..count)
        .filter_map(|i| {
            let name = runs.iter().find_map(|(_, ops)| ops.get(i))?.0.clone();
            let drawn: Vec<(&'static str, &Seconds)> = runs
                .iter()
                .filter_map(|(run, ops)| {
                    ops.get(i)
                        .filter(|(n, _)| *n == name)
                        .map(|(_, s)| (*run, s))
                })
                .collect();
            let mut plot =
                seconds_plot(format!("op-plot-{}", i + 1), &drawn, levels.to_vec(), None);
            plot.y = Axis::linear(y);
            Some((name, plot.render()))
        })
        .collect();
    html! {
        h2 { "Each operation, per second" }
        @for (name, plot) in &plots {
            section.operation data-operation=(name) {
                h3 { (name) }
                (plot)
            }
        }
        (legend(&[("requests/s (right)", 0), ("p50", 1), ("p99", 2), ("threshold", 4)], compared))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(seq: u64, op: usize, warmup: bool, offset_ms: f64, ms: f64) -> RequestRecord {
        RequestRecord {
            seq,
            op,
            method: "GET".into(),
            path: "/".into(),
            warmup,
            offset_ms,
            status: Some(200),
            error: None,
            duration_ms: ms,
        }
    }

    #[test]
    fn a_scenario_ops_seconds_start_at_its_load_and_break_where_it_paused() {
        let mut requests = vec![
            request(1, 0, true, 0.0, 50.0),
            request(2, 0, true, 100.0, 50.0),
            request(3, 0, false, 1500.0, 10.0),
            request(4, 0, false, 1900.0, 30.0),
            request(5, 0, false, 2600.0, 20.0),
            // Another op's turn, then this op again.
            request(6, 0, false, 7600.0, 5.0),
        ];
        requests[4].error = Some("timeout".into());
        let seconds = op_seconds(&requests, 0, 1500.0);
        let xs: Vec<(f64, Option<f64>, Option<f64>)> = seconds
            .seconds
            .iter()
            .map(|s| (s.x, s.rate, s.p99))
            .collect();
        assert_eq!(
            xs,
            vec![
                (-1.0, Some(2.0), None),
                (0.0, Some(0.0), None),
                (1.0, Some(2.0), Some(30.0)),
                (2.0, Some(1.0), None),
                (3.0, Some(0.0), None),
                (6.0, Some(0.0), None),
                (7.0, Some(1.0), Some(5.0)),
            ],
            "warm-up requests counted, not timed; a timeout not timed; a pause is two idle points"
        );
        assert_eq!(seconds.warmup, 2);
        assert_eq!(seconds.seconds[2].p50, Some(10.0));
    }

    #[test]
    fn nearest_rank_is_exact_on_few_values() {
        assert_eq!(nearest_rank(&[], 0.5), None);
        assert_eq!(nearest_rank(&[4.0], 0.99), Some(4.0));
        assert_eq!(nearest_rank(&[1.0, 2.0, 3.0, 4.0], 0.5), Some(2.0));
        assert_eq!(nearest_rank(&[1.0, 2.0, 3.0, 4.0], 0.99), Some(4.0));
    }

    #[test]
    fn load_frames_give_each_operations_seconds_in_the_results_order() {
        let mut h = iohr_domain::histogram::latency_histogram().expect("histogram");
        h.record(2000).expect("record");
        let histogram = iohr_domain::histogram::encode(&h).expect("encode");
        let op = |n: u64, with: bool| {
            let mut v = json!({"requests": n, "responses": {"2xx": n}, "errors": {}});
            if with {
                v["histogram"] = json!(histogram);
            }
            v
        };
        let frames = [
            json!({"second": 1, "phase": "warmup", "operations": {"b": op(3, false), "a": op(1, false)}}),
            json!({"second": 1, "phase": "measure", "operations": {"b": op(4, true), "a": op(2, true)}}),
            json!({"second": 2, "phase": "measure", "operations": {"b": op(5, true), "a": op(6, true)}}),
        ];
        let payloads: Vec<&Value> = frames.iter().collect();
        let result = json!({"operations": [], "latency": {}});
        assert!(from_frames(&payloads, Some(&result)).is_empty());
        // The operations table's rows give the order: b, then a.
        let names = |ops: &Operations| ops.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        let ops = from_frames_named(&payloads, &["b", "a"]);
        assert_eq!(names(&ops), ["b", "a"]);
        let b = &ops[0].1;
        assert_eq!(b.warmup, 1);
        let drawn: Vec<(f64, Option<f64>, Option<f64>)> =
            b.seconds.iter().map(|s| (s.x, s.rate, s.p99)).collect();
        assert_eq!(
            drawn,
            vec![
                (0.0, Some(3.0), None),
                (1.0, Some(4.0), Some(2.0)),
                (2.0, Some(5.0), Some(2.0))
            ]
        );
        let page = render(&[("before", &ops), ("after", &ops)], &[], CORRECTED, true).into_string();
        assert_eq!(page.matches("<section class=\"operation\"").count(), 2);
        assert!(page.contains(r#"id="op-plot-2""#), "{page}");
        assert_eq!(page.matches(r#"data-run="before""#).count(), 2 * 3);
        assert_eq!(page.matches(r#"data-warmup="after""#).count(), 2);
        assert!(page.contains(r#"aria-label="ms (corrected)""#), "{page}");
        assert!(
            render(&[("run", &ops[..1].to_vec())], &[], DURATIONS, false)
                .into_string()
                .is_empty()
        );
    }
}
