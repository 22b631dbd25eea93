//! Plots drawn on the server as inline SVG: no script, no asset, and a page that is read
//! (or tested) as markup. Every element a reader asks about carries its meaning as data:
//! a series' `path` its `data-series` and `data-run`, a threshold or SLO `line` its
//! `data-threshold` / `data-slo`, a warm-up `rect` its `data-warmup`, a knee `circle` its
//! `data-knee`. Colours are presentation attributes (the CSP allows no inline style).

use std::fmt::Write;

use maud::{Markup, PreEscaped, html};

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 56.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 42.0;
/// A level more than this many times the data's top is drawn on the top edge.
const FAR: f64 = 3.0;
/// The measures' colours: rate, p50, p99, then the rest.
pub const COLOURS: [&str; 6] = [
    "#2b6cb0", "#2f855a", "#b7791f", "#805ad5", "#c53030", "#319795",
];

/// How an axis maps its values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    Linear,
    /// A percentile axis as HdrHistogram's plotter draws it: the value is
    /// `log10(1 / (1 - q))`, so 0 is the median's left end and 4 is 99.99%.
    Percentile,
}

#[derive(Debug, Clone)]
pub struct Axis {
    pub label: String,
    pub scale: Scale,
}

impl Axis {
    pub fn linear(label: &str) -> Axis {
        Axis {
            label: label.to_string(),
            scale: Scale::Linear,
        }
    }
}

/// A line's points: x and its y, `None` where it has none (a gap).
pub type Points = Vec<(f64, Option<f64>)>;

/// One line: its points (`None` is a gap), its colour and whose it is.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    /// `run`, or `before` / `after` on the compare page (dashed before, solid after).
    pub run: &'static str,
    pub colour: usize,
    /// Read on the right axis.
    pub right: bool,
    pub points: Points,
}

/// A horizontal line at a limit: `kind` is `threshold` or `slo`.
#[derive(Debug, Clone)]
pub struct Level {
    pub kind: &'static str,
    pub label: String,
    pub value: f64,
}

/// An x range shaded: a run's warm-up.
#[derive(Debug, Clone)]
pub struct Band {
    pub run: &'static str,
    pub from: f64,
    pub to: f64,
}

/// A point marked: a sweep's knee, or a run's verdict on a trend (`verdict`: its status).
#[derive(Debug, Clone)]
pub struct Mark {
    pub run: &'static str,
    pub label: String,
    pub x: f64,
    pub y: f64,
    pub verdict: Option<&'static str>,
}

/// A second's slowest request, at its latency: a link to its trace in the operator's
/// tracing UI (`href`), or its id as the point's title without one.
#[derive(Debug, Clone)]
pub struct TracePoint {
    pub run: &'static str,
    pub x: f64,
    pub y: f64,
    pub trace_id: String,
    pub href: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Plot {
    /// The `svg` element's id, unique on its page.
    pub id: String,
    pub x: Axis,
    pub y: Axis,
    pub y2: Option<Axis>,
    pub series: Vec<Series>,
    pub levels: Vec<Level>,
    pub bands: Vec<Band>,
    pub marks: Vec<Mark>,
    /// Seconds' slowest requests, by trace id (the seconds plot's).
    pub traces: Vec<TracePoint>,
}

/// A value range with room above its top, from 0 unless a value is negative.
#[derive(Debug, Clone, Copy)]
struct Range {
    low: f64,
    high: f64,
}

impl Range {
    fn of(values: impl Iterator<Item = f64>, from_zero: bool) -> Range {
        let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.filter(|v| v.is_finite()) {
            low = low.min(v);
            high = high.max(v);
        }
        if !low.is_finite() {
            return Range {
                low: 0.0,
                high: 1.0,
            };
        }
        if from_zero {
            low = low.min(0.0);
        }
        if high - low < 1e-9 {
            high = low + 1.0;
        }
        Range { low, high }
    }

    fn padded(self) -> Range {
        let step = nice_step(self.high - self.low);
        Range {
            low: (self.low / step).floor() * step,
            high: (self.high / step).ceil() * step,
        }
    }

    fn at(&self, v: f64, from: f64, to: f64) -> f64 {
        from + (v - self.low) / (self.high - self.low) * (to - from)
    }
}

/// A round step giving about five ticks over `span`.
fn nice_step(span: f64) -> f64 {
    let raw = (span / 5.0).max(1e-9);
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

fn ticks(range: Range) -> Vec<f64> {
    let step = nice_step(range.high - range.low);
    let mut out = Vec::new();
    let mut v = (range.low / step).ceil() * step;
    while v <= range.high + step * 1e-6 && out.len() < 20 {
        out.push(v);
        v += step;
    }
    out
}

fn label(v: f64) -> String {
    if v.abs() < 1e-9 {
        return "0".to_string();
    }
    if v.abs() >= 100.0 || v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The percentile axis's ticks: (value, label).
const PERCENTILE_TICKS: [(f64, &str); 5] = [
    (0.0, "0%"),
    (1.0, "90%"),
    (2.0, "99%"),
    (3.0, "99.9%"),
    (4.0, "99.99%"),
];

/// The x of a quantile on a [`Scale::Percentile`] axis.
pub fn percentile_x(q: f64) -> f64 {
    (1.0 / (1.0 - q.clamp(0.0, 0.9999))).log10()
}

impl Plot {
    fn x_range(&self) -> Range {
        if self.x.scale == Scale::Percentile {
            return Range {
                low: 0.0,
                high: 4.0,
            };
        }
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .chain(self.bands.iter().flat_map(|b| [b.from, b.to]))
            .chain(self.marks.iter().map(|m| m.x));
        Range::of(xs, false)
    }

    fn y_range(&self, right: bool) -> Range {
        let ys = self
            .series
            .iter()
            .filter(|s| s.right == right)
            .flat_map(|s| s.points.iter().filter_map(|p| p.1));
        let ys: Vec<f64> = ys.collect();
        let extra: Vec<f64> = if right {
            Vec::new()
        } else {
            // A limit far above the data would flatten it: such a level is drawn on the
            // top edge instead, its label saying so.
            let top = Range::of(ys.iter().copied(), true).high * FAR;
            self.levels
                .iter()
                .map(|l| l.value)
                .filter(|v| ys.is_empty() || *v <= top)
                .chain(self.marks.iter().map(|m| m.y))
                .collect()
        };
        Range::of(ys.into_iter().chain(extra), true).padded()
    }

    /// The plot as an `svg` element with its id, or a line saying there is nothing to
    /// draw.
    pub fn render(&self) -> Markup {
        let drawn = self
            .series
            .iter()
            .any(|s| s.points.iter().any(|p| p.1.is_some()))
            || !self.marks.is_empty();
        if !drawn {
            return html! { p.empty data-plot=(self.id) { "Nothing to plot." } };
        }
        let (xr, yr) = (self.x_range(), self.y_range(false));
        let y2r = self.y2.as_ref().map(|_| self.y_range(true));
        let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP);
        let px = |v: f64| xr.at(v, x0, x1);
        let py = |v: f64, right: bool| match (right, y2r) {
            (true, Some(r)) => r.at(v, y0, y1),
            _ => yr.at(v, y0, y1),
        };
        let x_ticks: Vec<(f64, String)> = match self.x.scale {
            Scale::Percentile => PERCENTILE_TICKS
                .iter()
                .map(|(v, l)| (*v, l.to_string()))
                .collect(),
            Scale::Linear => ticks(xr).into_iter().map(|v| (v, label(v))).collect(),
        };
        let view = format!("0 0 {WIDTH} {HEIGHT}");
        html! {
            svg.plot id=(self.id) viewBox=(view) role="img" aria-label=(self.y.label)
                data-series-count=(self.series.len()) xmlns="http://www.w3.org/2000/svg" {
                @for band in &self.bands {
                    @let (a, b) = (px(band.from), px(band.to));
                    rect data-warmup=(band.run) x=(f1(a.min(b))) y=(f1(y1)) width=(f1((b - a).abs()))
                        height=(f1(y0 - y1)) fill="#edf2f7" {
                        title { (band.run) " warm-up (discarded)" }
                    }
                }
                @for (v, text) in ticks(yr).into_iter().map(|v| (v, label(v))) {
                    line.grid x1=(f1(x0)) x2=(f1(x1)) y1=(f1(py(v, false))) y2=(f1(py(v, false))) stroke="#e2e8f0" {}
                    text x=(f1(x0 - 6.0)) y=(f1(py(v, false) + 4.0)) text-anchor="end" font-size="11" fill="#4a5568" { (text) }
                }
                @if let Some(r) = y2r {
                    @for v in ticks(r) {
                        text x=(f1(x1 + 6.0)) y=(f1(py(v, true) + 4.0)) font-size="11" fill="#4a5568" { (label(v)) }
                    }
                }
                @for (v, text) in &x_ticks {
                    text x=(f1(px(*v))) y=(f1(y0 + 16.0)) text-anchor="middle" font-size="11" fill="#4a5568" { (text) }
                }
                line x1=(f1(x0)) x2=(f1(x1)) y1=(f1(y0)) y2=(f1(y0)) stroke="#4a5568" {}
                text x=(f1((x0 + x1) / 2.0)) y=(f1(HEIGHT - 6.0)) text-anchor="middle" font-size="12" fill="#1a202c" { (self.x.label) }
                text x="12" y=(f1((y0 + y1) / 2.0)) text-anchor="middle" font-size="12" fill="#1a202c"
                    transform=(format!("rotate(-90 12 {})", f1((y0 + y1) / 2.0))) { (self.y.label) }
                @if let Some(axis) = &self.y2 {
                    text x=(f1(WIDTH - 10.0)) y=(f1((y0 + y1) / 2.0)) text-anchor="middle" font-size="12" fill="#1a202c"
                        transform=(format!("rotate(90 {} {})", f1(WIDTH - 10.0), f1((y0 + y1) / 2.0))) { (axis.label) }
                }
                @for s in &self.series {
                    @let d = path(&s.points, &px, &|v| py(v, s.right && y2r.is_some()));
                    path data-series=(s.name) data-run=(s.run) data-points=(s.points.iter().filter(|p| p.1.is_some()).count())
                        d=(d) fill="none" stroke=(COLOURS[s.colour % COLOURS.len()]) stroke-width=(if s.run == "before" { "1.5" } else { "2" })
                        stroke-dasharray=[(s.run == "before").then_some("6 4")] {
                        title { (s.run) " " (s.name) }
                    }
                }
                @for level in &self.levels {
                    @let above = level.value > yr.high;
                    @let y = if above { y1 } else { py(level.value, false) };
                    line data-threshold=[(level.kind == "threshold").then_some(&level.label)]
                        data-slo=[(level.kind == "slo").then_some(&level.label)]
                        data-value=(level.value) data-above=[above.then_some("1")]
                        x1=(f1(x0)) x2=(f1(x1)) y1=(f1(y)) y2=(f1(y)) stroke="#c53030" stroke-width="1.5" stroke-dasharray="2 3" {
                        title { (level.kind) " " (level.label) }
                    }
                    text x=(f1(x1 - 4.0)) y=(f1(if above { y + 12.0 } else { y - 4.0 })) text-anchor="end" font-size="11" fill="#c53030" {
                        (level.label) @if above { " (above the plot)" }
                    }
                }
                @for t in &self.traces {
                    @let (cx, cy) = (f1(px(t.x)), f1(py(t.y, false)));
                    @let label = format!("second {}: slowest request {:.1} ms, trace {}", t.x, t.y, t.trace_id);
                    @match &t.href {
                        Some(href) => {
                            a href=(href) target="_blank" rel="noopener noreferrer" data-trace-link=(t.trace_id) {
                                circle data-trace=(t.trace_id) data-run=(t.run) cx=(cx) cy=(cy) r="3" fill=(COLOURS[2]) {
                                    title { (label) }
                                }
                            }
                        }
                        None => {
                            circle data-trace=(t.trace_id) data-run=(t.run) cx=(cx) cy=(cy) r="3" fill=(COLOURS[2]) {
                                title { (label) }
                            }
                        }
                    }
                }
                @for mark in &self.marks {
                    @let (cx, cy) = (f1(px(mark.x)), f1(py(mark.y, false)));
                    @let opacity = if mark.run == "before" { "0.45" } else { "1" };
                    @match mark.verdict {
                        None => {
                            circle data-knee=(mark.x) data-run=(mark.run) cx=(cx) cy=(cy) r="6" fill="#c53030" fill-opacity=(opacity) {
                                title { (mark.label) }
                            }
                        }
                        Some(verdict) => {
                            circle data-verdict=(verdict) data-run=(mark.run) cx=(cx) cy=(cy) r="5" fill=(verdict_colour(verdict)) {
                                title { (mark.label) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Passed green, failed red, the rest grey.
fn verdict_colour(status: &str) -> &'static str {
    match status {
        "passed" => "#2f855a",
        "failed" | "error" => "#c53030",
        _ => "#718096",
    }
}

/// An SVG path through the points, broken at each gap.
fn path(
    points: &[(f64, Option<f64>)],
    px: &dyn Fn(f64) -> f64,
    py: &dyn Fn(f64) -> f64,
) -> PreEscaped<String> {
    let mut d = String::new();
    let mut pen_down = false;
    for (x, y) in points {
        match y {
            Some(y) => {
                let command = if pen_down { 'L' } else { 'M' };
                let _ = write!(d, "{command}{:.1},{:.1}", px(*x), py(*y));
                pen_down = true;
            }
            None => pen_down = false,
        }
    }
    PreEscaped(d)
}

fn f1(v: f64) -> String {
    format!("{v:.1}")
}

/// The plot's key: each measure's colour, and which run is dashed.
pub fn legend(entries: &[(&str, usize)], compared: bool) -> Markup {
    html! {
        p.legend.key {
            @for (name, colour) in entries {
                span class=(format!("swatch c{}", colour % COLOURS.len())) {} (name) " "
            }
            @if compared { " · dashed: before, solid: after" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plot() -> Plot {
        Plot {
            id: "t".into(),
            x: Axis::linear("second"),
            y: Axis::linear("ms"),
            y2: Some(Axis::linear("requests/s")),
            series: vec![
                Series {
                    name: "p99".into(),
                    run: "after",
                    colour: 2,
                    right: false,
                    points: vec![
                        (1.0, Some(3.0)),
                        (2.0, None),
                        (3.0, Some(5.0)),
                        (4.0, Some(4.0)),
                    ],
                },
                Series {
                    name: "rate".into(),
                    run: "before",
                    colour: 0,
                    right: true,
                    points: vec![(1.0, Some(100.0)), (2.0, Some(120.0))],
                },
            ],
            levels: vec![Level {
                kind: "threshold",
                label: "p99 < 8ms".into(),
                value: 8.0,
            }],
            bands: vec![Band {
                run: "after",
                from: -2.0,
                to: 0.0,
            }],
            marks: vec![Mark {
                run: "after",
                label: "knee".into(),
                x: 168.75,
                y: 4.0,
                verdict: None,
            }],
            traces: Vec::new(),
        }
    }

    #[test]
    fn every_line_and_mark_is_drawn_with_its_meaning() {
        let svg = plot().render().into_string();
        assert!(svg.starts_with("<svg class=\"plot\" id=\"t\""), "{svg}");
        assert!(
            svg.contains(r#"data-series="p99" data-run="after" data-points="3""#),
            "{svg}"
        );
        assert!(svg.contains(r#"data-series="rate" data-run="before" data-points="2""#));
        assert!(
            svg.contains(r#"stroke-dasharray="6 4""#),
            "before is dashed"
        );
        assert!(svg.contains(r#"data-threshold="p99 &lt; 8ms""#), "{svg}");
        assert!(svg.contains(r#"data-warmup="after""#));
        assert!(
            svg.contains(r#"data-knee="168.75""#),
            "the knee's own value: {svg}"
        );
        // A gap starts a new stroke.
        assert_eq!(
            svg.matches('M').count() - svg.matches("M.").count(),
            3,
            "{svg}"
        );
    }

    #[test]
    fn a_limit_far_above_the_data_is_drawn_on_the_top_edge() {
        let mut far = plot();
        far.levels[0].value = 2000.0;
        let svg = far.render().into_string();
        assert!(svg.contains(r#"data-value="2000" data-above="1""#), "{svg}");
        assert!(svg.contains("(above the plot)"));
        assert!(
            !plot().render().into_string().contains("data-above"),
            "8 ms is near 5 ms"
        );
    }

    #[test]
    fn nothing_to_draw_says_so() {
        let mut empty = plot();
        for s in &mut empty.series {
            s.points.clear();
        }
        empty.marks.clear();
        assert!(empty.render().into_string().contains("Nothing to plot"));
    }

    #[test]
    fn axes_get_round_ticks_and_percentiles_their_log_scale() {
        assert_eq!(nice_step(100.0), 20.0);
        assert_eq!(nice_step(7.0), 2.0);
        let r = Range::of([0.3, 9.7].into_iter(), true).padded();
        assert_eq!((r.low, r.high), (0.0, 10.0));
        assert_eq!(ticks(r), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert!((percentile_x(0.99) - 2.0).abs() < 1e-9);
        assert!((percentile_x(0.0)).abs() < 1e-9);
        assert!((percentile_x(1.0) - 4.0).abs() < 1e-9, "clamped to 99.99%");
    }
}
