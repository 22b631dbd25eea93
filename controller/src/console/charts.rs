//! What a finished run's page and the compare page plot, read from the run: its seconds
//! (the stored `load` frames, read through the run-lifecycle layer's frame stream, as
//! the live plot reads them), its latency distribution (the result's histogram) and its
//! sweep (a capacity result), made into [`Plot`]s, and each operation's seconds
//! ([`super::op_plots`]: from the same frames, or a scenario record's requests). The kind
//! contract says which a run has ([`ResultPlot`]); one run draws alone (`run`), two draw
//! on one plot (`before` dashed, `after` solid), aligned on the measure's start.

use std::str::FromStr;

use futures_util::StreamExt;
use iohr_domain::RunRecord;
use iohr_domain::capacity::CapacityResult;
use iohr_domain::kind::ResultPlot;
use iohr_domain::load::{Metric, SecondSummary, Threshold};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::PageError;
use super::op_plots::Operations;
use super::plot::{
    Axis, Band, Level, Mark, Plot, Points, Scale, Series, TracePoint, legend, percentile_x,
};
use super::traces::TraceUrl;
use crate::Shared;
use crate::runs::frames::frame_stream;

/// Frames read per run: an hour of seconds and its warm-up, with room for the others.
const MAX_FRAMES: usize = 5000;
/// Points drawn per line: longer runs are drawn in buckets of seconds (each bucket its
/// mean rate and its highest p50 and p99, so a stall still shows).
const MAX_POINTS: usize = 600;
/// Points of a percentile curve, from 0% to 99.99%.
const CURVE_POINTS: usize = 81;

/// One second as drawn: x is seconds from the measure's start (warm-up seconds are 0 and
/// below), the rest per second.
#[derive(Debug, Clone, PartialEq)]
pub struct Second {
    pub x: f64,
    pub rate: Option<f64>,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    /// The second's slowest request, from its exemplars: trace id and latency in ms.
    pub slowest: Option<(String, f64)>,
}

/// A run's seconds and its warm-up's length in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seconds {
    pub seconds: Vec<Second>,
    pub warmup: u64,
}

/// A run's seconds as a whole and each operation's (in the order of its result's).
#[derive(Debug, Clone, Default)]
pub struct RunSeconds {
    pub total: Seconds,
    pub operations: Operations,
}

/// A finished run's stored seconds, aligned on its measure's start, as a whole and per
/// operation. Only for a finished run: its stream ends with its `finished` frame.
pub async fn seconds(
    shared: &Shared,
    run: &RunRecord,
    account_id: &str,
) -> Result<RunSeconds, PageError> {
    let live = crate::viewers::join(shared, &run.id, account_id)?;
    let frames: Vec<_> = frame_stream(shared.clone(), run.id.clone(), 0, live)
        .take(MAX_FRAMES)
        .filter(|f| std::future::ready(f.kind == "load"))
        .collect()
        .await;
    // A split run relays its shares' seconds (each with its `share`) beside its own.
    let whole = frames.iter().any(|f| f.payload.get("share").is_none());
    let payloads: Vec<&serde_json::Value> = frames
        .iter()
        .filter(|f| !whole || f.payload.get("share").is_none())
        .map(|f| &f.payload)
        .collect();
    let summaries: Vec<SecondSummary> = payloads.iter().map(|p| SecondSummary::of(p)).collect();
    Ok(RunSeconds {
        total: align(&summaries),
        operations: super::op_plots::from_frames(&payloads, run.result.as_ref()),
    })
}

/// Seconds aligned on the measure's start: the measure's second `s` at `x = s`, the
/// warm-up's `W` seconds at `1 - W ..= 0`.
pub fn align(summaries: &[SecondSummary]) -> Seconds {
    let is_warmup = |s: &SecondSummary| s.phase.as_deref() == Some("warmup");
    let warmup = summaries.iter().filter(|s| is_warmup(s)).count() as u64;
    let (mut warm, mut measured) = (0u64, 0u64);
    let seconds = summaries
        .iter()
        .map(|s| {
            let x = if is_warmup(s) {
                warm += 1;
                warm as f64 - warmup as f64
            } else {
                measured += 1;
                s.second.unwrap_or(measured) as f64
            };
            Second {
                x,
                rate: s.sent.map(|n| n as f64),
                p50: s.p50_ms,
                p99: s.p99_ms,
                slowest: s.slowest.clone(),
            }
        })
        .collect();
    Seconds { seconds, warmup }
}

/// At most [`MAX_POINTS`] seconds: consecutive buckets, each its mean rate and its
/// highest latencies.
pub(super) fn bucketed(seconds: &[Second]) -> Vec<Second> {
    let size = seconds.len().div_ceil(MAX_POINTS).max(1);
    if size == 1 {
        return seconds.to_vec();
    }
    let max = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    seconds
        .chunks(size)
        .map(|chunk| {
            let rates: Vec<f64> = chunk.iter().filter_map(|s| s.rate).collect();
            Second {
                x: chunk[0].x,
                rate: (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64),
                p50: chunk.iter().fold(None, |m, s| max(m, s.p50)),
                p99: chunk.iter().fold(None, |m, s| max(m, s.p99)),
                // The bucket's slowest request, as its p99 is its worst second's.
                slowest: chunk
                    .iter()
                    .filter_map(|s| s.slowest.clone())
                    .max_by(|a, b| a.1.total_cmp(&b.1)),
            }
        })
        .collect()
}

/// The thresholds of a load-like result that are latencies, as lines in ms.
pub fn latency_thresholds(result: Option<&serde_json::Value>) -> Vec<Level> {
    let judged = result
        .and_then(|r| r.get("thresholds"))
        .and_then(|t| t.as_array())
        .map(|list| {
            list.iter()
                .filter_map(|t| t.get("threshold").and_then(|e| e.as_str()))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    threshold_levels(judged)
}

/// The latency thresholds of a load-like spec (`thresholds`, as sent), as lines in ms:
/// what a live run's plot draws before its result judges them.
pub fn spec_thresholds(spec: &serde_json::Value) -> Vec<Level> {
    let given = spec
        .get("thresholds")
        .and_then(|t| t.as_array())
        .map(|list| list.iter().filter_map(|t| t.as_str()).collect::<Vec<_>>())
        .unwrap_or_default();
    threshold_levels(given)
}

/// Threshold expressions as lines in ms: the latency ones (an error rate is a share, not
/// on these axes), each once; an expression that does not parse is left out.
fn threshold_levels(expressions: Vec<&str>) -> Vec<Level> {
    let mut levels: Vec<Level> = Vec::new();
    for text in expressions {
        let Ok(threshold) = Threshold::from_str(text) else {
            continue;
        };
        if matches!(threshold.metric, Metric::ErrorRate) {
            continue;
        }
        if levels.iter().all(|l| l.label != threshold.expression) {
            levels.push(Level {
                kind: "threshold",
                label: threshold.expression.clone(),
                value: threshold.limit / 1000.0,
            });
        }
    }
    levels
}

/// Both runs' rate, p50 and p99 per second on one plot (ms left, requests/s right), each
/// warm-up shaded, the thresholds drawn; `id` is the plot's.
pub fn seconds_plot(
    id: String,
    runs: &[(&'static str, &Seconds)],
    levels: Vec<Level>,
    trace_url: Option<&TraceUrl>,
) -> Plot {
    let mut series = Vec::new();
    let mut traces = Vec::new();
    let mut bands = Vec::new();
    for (run, seconds) in runs {
        let drawn = bucketed(&seconds.seconds);
        let line = |name: &str,
                    colour: usize,
                    right: bool,
                    pick: &dyn Fn(&Second) -> Option<f64>| Series {
            name: name.to_string(),
            run,
            colour,
            right,
            points: drawn.iter().map(|s| (s.x, pick(s))).collect(),
        };
        series.push(line("requests/s", 0, true, &|s| s.rate));
        series.push(line("p50 ms", 1, false, &|s| s.p50));
        series.push(line("p99 ms", 2, false, &|s| s.p99));
        traces.extend(drawn.iter().filter_map(|s| {
            let (id, ms) = s.slowest.clone()?;
            Some(TracePoint {
                run,
                x: s.x,
                y: ms,
                href: trace_url.map(|u| u.link(&id)),
                trace_id: id,
            })
        }));
        if seconds.warmup > 0 {
            bands.push(Band {
                run,
                from: -(seconds.warmup as f64),
                to: 0.0,
            });
        }
    }
    Plot {
        id,
        x: Axis::linear("second of the measure (warm-up shaded)"),
        y: Axis::linear(super::op_plots::CORRECTED),
        y2: Some(Axis::linear("requests/s")),
        series,
        levels,
        bands,
        marks: Vec::new(),
        traces,
    }
}

/// The latency distribution of a load-like result: its corrected histogram as a
/// percentile curve (x = percentile on a log scale, as HdrHistogram's plotter draws it).
pub fn percentile_curve(result: Option<&serde_json::Value>) -> Points {
    let histogram = result
        .and_then(|r| r.pointer("/latency/histogram"))
        .and_then(|h| h.as_str())
        .and_then(|text| iohr_domain::histogram::decode(text).ok())
        .filter(|h| !h.is_empty());
    let Some(histogram) = histogram else {
        return Vec::new();
    };
    (0..CURVE_POINTS)
        .map(|i| {
            let x = 4.0 * i as f64 / (CURVE_POINTS - 1) as f64;
            let q = 1.0 - 10f64.powf(-x);
            let ms = histogram.value_at_quantile(q) as f64 / 1000.0;
            (percentile_x(q), Some(ms))
        })
        .collect()
}

pub fn latency_plot(runs: &[(&'static str, Points)], levels: Vec<Level>) -> Plot {
    Plot {
        id: "latency-plot".into(),
        x: Axis {
            label: "percentile".to_string(),
            scale: Scale::Percentile,
        },
        y: Axis::linear("ms (corrected)"),
        y2: None,
        series: runs
            .iter()
            .map(|(run, points)| Series {
                name: "latency".to_string(),
                run,
                colour: 3,
                right: false,
                points: points.clone(),
            })
            .collect(),
        levels,
        bands: Vec::new(),
        marks: Vec::new(),
        traces: Vec::new(),
    }
}

/// The p99 of a load-like result, in ms (from its corrected histogram).
fn p99_ms(result: Option<&serde_json::Value>) -> Option<f64> {
    result
        .and_then(|r| r.pointer("/latency/histogram"))
        .and_then(|h| h.as_str())
        .and_then(|text| iohr_domain::histogram::decode(text).ok())
        .filter(|h| !h.is_empty())
        .map(|h| h.value_at_quantile(0.99) as f64 / 1000.0)
}

/// A scenario's recent finished runs, oldest first: each one's p99 (where its result has
/// one) and its verdict, marked in its status's colour.
pub fn trend_plot(runs: &[RunRecord]) -> Plot {
    let finished: Vec<&RunRecord> = runs
        .iter()
        .rev()
        .filter(|r| r.status.is_finished())
        .collect();
    let p99s: Vec<Option<f64>> = finished.iter().map(|r| p99_ms(r.result.as_ref())).collect();
    let marks = finished
        .iter()
        .zip(&p99s)
        .enumerate()
        .map(|(i, (run, p99))| Mark {
            run: "run",
            label: format!(
                "run {} {}",
                super::runs::short(&run.id),
                run.status.as_str()
            ),
            x: (i + 1) as f64,
            y: p99.unwrap_or(0.0),
            verdict: Some(run.status.as_str()),
        })
        .collect();
    Plot {
        id: "trend-plot".into(),
        x: Axis::linear("run, oldest first"),
        y: Axis::linear("p99 ms"),
        y2: None,
        series: vec![Series {
            name: "p99 ms".to_string(),
            run: "run",
            colour: 2,
            right: false,
            points: p99s
                .iter()
                .enumerate()
                .map(|(i, p)| ((i + 1) as f64, *p))
                .collect(),
        }],
        levels: Vec::new(),
        bands: Vec::new(),
        marks,
        traces: Vec::new(),
    }
}

/// A capacity result, if the run's result is one.
pub fn sweep_of(run: &RunRecord) -> Option<CapacityResult> {
    run.result
        .as_ref()
        .and_then(|r| CapacityResult::deserialize(r).ok())
}

/// Each sweep's p99 against the offered rate, the SLO's p99 and each knee, marked at its
/// own rate (on the curve between the points around it).
pub fn sweep_plot(runs: &[(&'static str, &CapacityResult)]) -> Plot {
    let mut series = Vec::new();
    let mut marks = Vec::new();
    let mut levels: Vec<Level> = Vec::new();
    for (run, sweep) in runs {
        let mut points: Vec<(f64, Option<f64>)> = sweep
            .points
            .iter()
            .map(|p| (p.offered, p.p99_us.map(|us| us as f64 / 1000.0)))
            .collect();
        // Steps run in sweep order (bisecting goes back down); the line reads by rate.
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        if let Some(rate) = sweep.knee.rate {
            marks.push(Mark {
                run,
                label: format!("{run} knee at {rate}/s"),
                x: rate,
                y: on_curve(&points, rate).unwrap_or(0.0),
                verdict: None,
            });
        }
        series.push(Series {
            name: "p99 ms".to_string(),
            run,
            colour: 2,
            right: false,
            points,
        });
        let slo = format!("SLO p99 {} ms", sweep.slo.p99_us / 1000.0);
        if levels.iter().all(|l| l.label != slo) {
            levels.push(Level {
                kind: "slo",
                label: slo,
                value: sweep.slo.p99_us / 1000.0,
            });
        }
    }
    Plot {
        id: "sweep-plot".into(),
        x: Axis::linear("offered requests/s"),
        y: Axis::linear("p99 ms"),
        y2: None,
        series,
        levels,
        bands: Vec::new(),
        marks,
        traces: Vec::new(),
    }
}

/// The curve's value at `x`, between the points around it.
fn on_curve(points: &[(f64, Option<f64>)], x: f64) -> Option<f64> {
    let known: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|(px, y)| y.map(|y| (*px, y)))
        .collect();
    let after = known.iter().position(|(px, _)| *px >= x)?;
    let (x1, y1) = known[after];
    if after == 0 || (x1 - x).abs() < 1e-9 {
        return Some(y1);
    }
    let (x0, y0) = known[after - 1];
    Some(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
}

/// The plots of one run (`run`) or of two (`before`, `after`), as the kind says; the
/// runs' seconds are read only for the kinds that plot them.
pub async fn plots(
    shared: &Shared,
    account_id: &str,
    runs: &[(&'static str, &RunRecord)],
    trace_url: Option<&TraceUrl>,
) -> Result<Markup, PageError> {
    let Some((_, first)) = runs.first() else {
        return Ok(html! {});
    };
    let compared = runs.len() > 1;
    match first.kind.result_plot() {
        ResultPlot::Seconds => {
            let mut read = Vec::new();
            for (name, run) in runs {
                read.push((*name, seconds(shared, run, account_id).await?));
            }
            let borrowed: Vec<(&'static str, &Seconds)> =
                read.iter().map(|(n, s)| (*n, &s.total)).collect();
            let operations: Vec<(&'static str, &Operations)> =
                read.iter().map(|(n, s)| (*n, &s.operations)).collect();
            let levels = latency_thresholds(runs.last().and_then(|(_, r)| r.result.as_ref()));
            let curves: Vec<_> = runs
                .iter()
                .map(|(name, run)| (*name, percentile_curve(run.result.as_ref())))
                .collect();
            Ok(html! {
                h2 { "Each second" }
                (seconds_plot("seconds-plot".into(), &borrowed, levels.clone(), trace_url).render())
                (legend(&[("requests/s (right)", 0), ("p50", 1), ("p99", 2), ("threshold", 4)], compared))
                h2 { "Latency distribution" }
                (latency_plot(&curves, levels.clone()).render())
                (legend(&[("corrected latency by percentile", 3), ("threshold", 4)], compared))
                (super::op_plots::render(&operations, &levels, super::op_plots::CORRECTED, compared))
            })
        }
        ResultPlot::Requests => {
            let read: Vec<(&'static str, Operations)> = runs
                .iter()
                .map(|(name, run)| (*name, super::op_plots::from_record(run.result.as_ref())))
                .collect();
            let operations: Vec<(&'static str, &Operations)> =
                read.iter().map(|(n, o)| (*n, o)).collect();
            Ok(super::op_plots::render(
                &operations,
                &[],
                super::op_plots::DURATIONS,
                compared,
            ))
        }
        ResultPlot::Sweep => {
            let sweeps: Vec<(&'static str, CapacityResult)> = runs
                .iter()
                .filter_map(|(name, run)| sweep_of(run).map(|s| (*name, s)))
                .collect();
            let borrowed: Vec<(&'static str, &CapacityResult)> =
                sweeps.iter().map(|(n, s)| (*n, s)).collect();
            Ok(html! {
                h2 { "Latency against offered rate" }
                (sweep_plot(&borrowed).render())
                (legend(&[("p99", 2), ("SLO and knee", 4)], compared))
            })
        }
        ResultPlot::Nothing => Ok(html! {}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn second(phase: &str, n: u64) -> SecondSummary {
        SecondSummary {
            second: Some(n),
            phase: Some(phase.to_string()),
            sent: Some(10 * n),
            p50_ms: Some(1.0),
            p99_ms: Some(n as f64),
            ..SecondSummary::default()
        }
    }

    #[test]
    fn seconds_align_on_the_measure_and_the_warmup_comes_before_it() {
        let aligned = align(&[
            second("warmup", 1),
            second("warmup", 2),
            second("measure", 1),
            second("measure", 2),
        ]);
        let xs: Vec<f64> = aligned.seconds.iter().map(|s| s.x).collect();
        assert_eq!(xs, vec![-1.0, 0.0, 1.0, 2.0]);
        assert_eq!(aligned.warmup, 2);
        let plot = seconds_plot(
            "seconds-plot".into(),
            &[
                ("before", &aligned),
                ("after", &align(&[second("measure", 1)])),
            ],
            vec![],
            None,
        );
        assert_eq!(
            plot.bands.len(),
            1,
            "only the run with a warm-up shades one"
        );
        assert_eq!((plot.bands[0].from, plot.bands[0].to), (-2.0, 0.0));
        assert_eq!(plot.series.len(), 6);
    }

    #[test]
    fn long_runs_are_drawn_in_buckets_that_keep_their_worst_second() {
        let mut long: Vec<Second> = (0..1800)
            .map(|i| Second {
                x: i as f64,
                rate: Some(100.0),
                p50: Some(1.0),
                p99: Some(2.0),
                slowest: None,
            })
            .collect();
        long[901].p99 = Some(500.0);
        let drawn = bucketed(&long);
        assert_eq!(drawn.len(), 600);
        assert!(
            drawn.iter().any(|s| s.p99 == Some(500.0)),
            "the stall shows"
        );
        assert!(drawn.iter().all(|s| s.rate == Some(100.0)));
    }

    #[test]
    fn latency_thresholds_become_lines_and_error_rates_do_not() {
        let result = json!({"thresholds": [
            {"threshold": "p99 < 250ms", "passed": true, "observed": "3 ms"},
            {"threshold": "error_rate < 1%", "passed": true, "observed": "0%"},
            {"threshold": "not a threshold", "passed": false, "observed": ""}]});
        let levels = latency_thresholds(Some(&result));
        assert_eq!(levels.len(), 1);
        assert_eq!(
            (levels[0].label.as_str(), levels[0].value),
            ("p99 < 250ms", 250.0)
        );
        assert!(latency_thresholds(None).is_empty());
        let spec = json!({"thresholds": ["p99 < 300ms", "mean <= 1.5s", "error_rate < 1%", 7]});
        let labels: Vec<(String, f64)> = spec_thresholds(&spec)
            .into_iter()
            .map(|l| (l.label, l.value))
            .collect();
        assert_eq!(
            labels,
            vec![
                ("p99 < 300ms".to_string(), 300.0),
                ("mean <= 1.5s".to_string(), 1500.0)
            ]
        );
    }

    #[test]
    fn a_percentile_curve_rises_from_the_median_side_to_the_tail() {
        let mut h = iohr_domain::histogram::latency_histogram().expect("histogram");
        for ms in 1..=1000u64 {
            h.record(ms * 1000).expect("record");
        }
        let encoded = iohr_domain::histogram::encode(&h).expect("encode");
        let curve = percentile_curve(Some(&json!({"latency": {"histogram": encoded}})));
        assert_eq!(curve.len(), CURVE_POINTS);
        assert!(curve.windows(2).all(|w| w[0].1 <= w[1].1));
        let at_99 = curve
            .iter()
            .find(|(x, _)| (x - 2.0).abs() < 1e-6)
            .expect("99%");
        assert!((at_99.1.expect("value") - 990.0).abs() < 2.0, "{at_99:?}");
        assert!(percentile_curve(Some(&json!({"latency": {"histogram": "junk"}}))).is_empty());
    }

    /// A sweep of steps (offered, p99 ms) in the order run, its knee at `knee`.
    fn sweep(steps: &[(f64, u64)], knee: Option<f64>) -> CapacityResult {
        let thin = json!({"insufficient": "insufficient samples (need 368)", "samples": 9});
        let points: Vec<_> = steps
            .iter()
            .enumerate()
            .map(|(i, (offered, p99))| {
                json!({"step": i + 1, "stage": "sweep", "offered": offered, "achieved": offered,
                    "requests": 10, "responses": {"2xx": 10}, "errors": {}, "error_rate": 0.0,
                    "late": 0, "dropped": 0, "p50": thin, "p99": thin, "p99_us": p99 * 1000,
                    "meets_slo": true, "broke": [], "histogram": ""})
            })
            .collect();
        serde_json::from_value(json!({
            "slo": {"p99_us": 50000.0, "error_rate": 0.01}, "floor": null,
            "max_rate_meeting_slo": 200.0, "stopped_because": "top", "points": points,
            "knee": {"rate": knee, "low": null, "high": null, "resolved": knee.is_some(),
                     "reason": null, "range": [0.0, 1.0], "level": 0.95, "replicates": 0,
                     "found": 0},
            "step_seconds": 1.0, "discard_seconds": 0.0, "notes": []
        }))
        .expect("a capacity result")
    }

    #[test]
    fn two_sweeps_draw_on_one_plot_with_both_knees_and_the_slo_once() {
        // Bisecting goes back down: the line still reads by rate.
        let before = sweep(&[(150.0, 10), (225.0, 40), (187.5, 20)], Some(168.75));
        let after = sweep(&[(150.0, 12), (225.0, 60)], None);
        let plot = sweep_plot(&[("before", &before), ("after", &after)]);
        assert_eq!(plot.series.len(), 2);
        let xs: Vec<f64> = plot.series[0].points.iter().map(|p| p.0).collect();
        assert_eq!(xs, vec![150.0, 187.5, 225.0]);
        assert_eq!(plot.marks.len(), 1, "only a sweep with a knee marks one");
        assert_eq!(
            (plot.marks[0].run, plot.marks[0].x, plot.marks[0].y),
            ("before", 168.75, 15.0)
        );
        assert_eq!(plot.levels.len(), 1, "one SLO, drawn once");
        let svg = plot.render().into_string();
        assert!(svg.contains(r#"data-knee="168.75""#), "{svg}");
        assert!(svg.contains(r#"data-slo="SLO p99 50 ms""#), "{svg}");
    }

    #[test]
    fn a_knee_is_marked_at_its_own_rate_on_the_curve() {
        let points = [(150.0, Some(10.0)), (187.5, Some(20.0))];
        assert_eq!(on_curve(&points, 168.75), Some(15.0));
        assert_eq!(on_curve(&points, 150.0), Some(10.0));
        assert_eq!(on_curve(&points, 200.0), None);
    }
}
