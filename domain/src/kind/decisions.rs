//! What the surfaces decide by a run's kind, asked of its contract through [`visit`]: the
//! schedule floor, the stress sampler, the halt, the run page's live view and result plots, the CLI's
//! progress, and the words that list the kinds in help texts. No surface matches on a
//! [`RunKind`] for these, so a new kind is asked each of them by the compiler.

use std::time::Duration;

use serde_json::Value;

use super::{Kind, KindVisitor, RunKind, visit};

/// What a run's page draws from its live feed ([`Kind::LIVE_VIEW`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveView {
    /// A plot of each second: requests/s, p50, p99 and errors/s (`load` frames).
    Seconds,
    /// The experiment's steps as they happen (`timeline` frames).
    Timeline,
    /// Nothing live: the result says it all when the run ends.
    Nothing,
}

/// What a finished run's page and compare draw from its result and stored seconds
/// ([`Kind::RESULT_PLOT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultPlot {
    /// Its seconds (rate, p50 and p99 aligned on the measure's start, the warm-up shaded,
    /// the thresholds drawn) and its latency distribution (a percentile curve from the
    /// result's histogram): load-like results.
    Seconds,
    /// Its sweep: p99 against the offered rate, the SLO and the knee.
    Sweep,
    /// Each operation's seconds from the requests its result records one by one (rate,
    /// p50 and p99 of their durations): scenario records, whose requests follow each
    /// other and send no seconds of their own.
    Requests,
    /// Nothing to plot: the result's lines and tables say it.
    Nothing,
}

/// The kind's constant items at once, for the accessors below.
struct Decided {
    schedule_floor: Duration,
    stress_sampled: bool,
    halted: bool,
    live_view: LiveView,
    result_plot: ResultPlot,
}

struct DecidedOf;
impl KindVisitor for DecidedOf {
    type Output = Decided;
    fn visit<K: Kind>(self) -> Decided {
        Decided {
            schedule_floor: K::SCHEDULE_FLOOR,
            stress_sampled: K::STRESS_SAMPLED,
            halted: K::HALTED,
            live_view: K::LIVE_VIEW,
            result_plot: K::RESULT_PLOT,
        }
    }
}

impl RunKind {
    fn decided(self) -> Decided {
        visit(self, DecidedOf)
    }

    /// How often a schedule of this kind may fire by default ([`Kind::SCHEDULE_FLOOR`]).
    pub fn schedule_floor(self) -> Duration {
        self.decided().schedule_floor
    }

    /// Whether the agent samples its own stress beside a run of this kind
    /// ([`Kind::STRESS_SAMPLED`]).
    pub fn stress_sampled(self) -> bool {
        self.decided().stress_sampled
    }

    /// Whether `POST /halt` cancels this kind's unfinished runs ([`Kind::HALTED`]).
    pub fn halted(self) -> bool {
        self.decided().halted
    }

    /// What the run's page draws from its live feed ([`Kind::LIVE_VIEW`]).
    pub fn live_view(self) -> LiveView {
        self.decided().live_view
    }

    /// What a finished run's page and compare draw ([`Kind::RESULT_PLOT`]).
    pub fn result_plot(self) -> ResultPlot {
        self.decided().result_plot
    }

    /// The measured seconds of a spec of this kind as sent ([`Kind::measured_seconds`]).
    pub fn measured_seconds(self, spec: &Value) -> Option<u64> {
        struct SecondsOf<'a>(&'a Value);
        impl KindVisitor for SecondsOf<'_> {
            type Output = Option<u64>;
            fn visit<K: Kind>(self) -> Option<u64> {
                K::measured_seconds(self.0)
            }
        }
        visit(self, SecondsOf(spec))
    }

    /// Every kind's word for a help text, in the registry's order: `checks, load, ...
    /// or replay` with `last` = "or".
    pub fn listed(last: &str) -> String {
        listed(RunKind::ALL.iter().map(|k| k.as_str()), last)
    }

    /// The words of the kinds whose traits pass `which`, as [`RunKind::listed`] lists
    /// them: `load, capacity and replay` for the kinds that split.
    pub fn listed_where(which: impl Fn(super::Traits) -> bool, last: &str) -> String {
        listed(
            RunKind::ALL
                .iter()
                .filter(|k| which(k.traits()))
                .map(|k| k.as_str()),
            last,
        )
    }
}

/// Words as a sentence lists them: `a, b and c`.
pub fn listed<'a>(words: impl IntoIterator<Item = &'a str>, last: &str) -> String {
    let words: Vec<&str> = words.into_iter().collect();
    match words.split_last() {
        None => String::new(),
        Some((only, [])) => (*only).to_string(),
        Some((end, rest)) => format!("{} {last} {end}", rest.join(", ")),
    }
}
