//! Where workers record what each request did. Memory is constant whatever the length or
//! the rate: counters and HdrHistograms, never a list of samples. Workers record into a
//! few locked shards (uncontended locks cost nanoseconds); once a second the reporter
//! takes every shard's window, leaving them empty.

use std::sync::Mutex;

use hdrhistogram::Histogram;
use iohr_domain::histogram::{HistogramError, MAX_MICROS, latency_histogram};
use iohr_domain::load::{
    Counts, Exemplar, Exemplars, FAILED_PER_SECOND, SLOWEST_PER_SECOND, Slowest, status_class,
};

use super::client::Failure;

/// Whether a request belongs to the discarded warm-up or to the measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Warmup,
    Measure,
}

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Per operation: responses by class and failures by kind.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    statuses: [u64; 5],
    errors: [u64; 5],
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        for (a, b) in self.statuses.iter_mut().zip(other.statuses) {
            *a += b;
        }
        for (a, b) in self.errors.iter_mut().zip(other.errors) {
            *a += b;
        }
    }

    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for (class, n) in CLASSES.iter().zip(self.statuses) {
            if n > 0 {
                counts.responses.insert(class.to_string(), n);
            }
        }
        for (kind, n) in Failure::ALL.iter().zip(self.errors) {
            if n > 0 {
                counts.errors.insert(kind.as_str().to_string(), n);
            }
        }
        counts.requests = self.statuses.iter().sum::<u64>() + self.errors.iter().sum::<u64>();
        counts
    }
}

/// How the schedule went: what was due, sent, late and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScheduleTally {
    pub intended: u64,
    pub sent: u64,
    pub late: u64,
    /// Of `late`, those that waited because the target held every connection.
    pub late_held: u64,
    /// Of `late`, those more than the generator's bound late with a connection free.
    pub late_behind: u64,
    pub dropped: u64,
}

impl ScheduleTally {
    fn add(&mut self, other: &ScheduleTally) {
        self.intended += other.intended;
        self.sent += other.sent;
        self.late += other.late;
        self.late_held += other.late_held;
        self.late_behind += other.late_behind;
        self.dropped += other.dropped;
    }
}

/// A request an exemplar names: the random half of its trace id, its operation and how
/// it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub trace: u64,
    pub operation: usize,
    pub outcome: Result<u16, Failure>,
}

/// A window's exemplars ([`iohr_domain::load::Exemplars`]): fixed arrays, so recording
/// allocates nothing and a request that is not among the slowest costs one comparison.
#[derive(Debug, Clone, Default)]
pub struct Marks {
    pub slowest: Slowest<Mark, SLOWEST_PER_SECOND>,
    /// The first failed requests, by corrected latency.
    pub failed: [Option<(u64, Mark)>; FAILED_PER_SECOND],
}

impl Marks {
    #[inline]
    fn record(&mut self, latency_us: u64, mark: Mark) {
        self.slowest.offer(latency_us, mark);
        let failed = match mark.outcome {
            Ok(status) => status >= 400,
            Err(_) => true,
        };
        if failed && self.failed[FAILED_PER_SECOND - 1].is_none() {
            self.keep_failed(latency_us, mark);
        }
    }

    fn keep_failed(&mut self, latency_us: u64, mark: Mark) {
        if let Some(slot) = self.failed.iter_mut().find(|s| s.is_none()) {
            *slot = Some((latency_us, mark));
        }
    }

    fn add(&mut self, other: &Marks) {
        self.slowest.merge(&other.slowest);
        for (latency_us, mark) in other.failed.iter().flatten() {
            self.keep_failed(*latency_us, *mark);
        }
    }

    fn clear(&mut self) {
        *self = Marks::default();
    }

    /// As a frame carries them: trace ids under the run's `prefix`, operations by name.
    pub fn exemplars(&self, prefix: u64, names: &[String]) -> Exemplars {
        let exemplar = |latency_us: u64, mark: &Mark| Exemplar {
            trace_id: iohr_domain::load::trace_id(prefix, mark.trace),
            latency_us,
            operation: names.get(mark.operation).cloned().unwrap_or_default(),
            outcome: match mark.outcome {
                Ok(status) if status >= 400 => Some(status_class(status).to_string()),
                Ok(_) => None,
                Err(failure) => Some(failure.as_str().to_string()),
            },
        };
        Exemplars {
            slowest: self
                .slowest
                .iter()
                .map(|(latency, mark)| exemplar(latency, mark))
                .collect(),
            failed: self
                .failed
                .iter()
                .flatten()
                .map(|(latency, mark)| exemplar(*latency, mark))
                .collect(),
        }
    }
}

/// What happened in one phase over some stretch of time. Warm-up windows keep counts
/// only: their latencies are discarded.
#[derive(Debug, Clone)]
pub struct Window {
    pub tallies: Vec<Tally>,
    /// Corrected latency per operation (measure only).
    pub latency: Vec<Histogram<u64>>,
    /// Uncorrected latency of all operations (measure only).
    pub uncorrected: Histogram<u64>,
    pub schedule: ScheduleTally,
    /// The slowest and first failed requests sent with the run's trace context (measure
    /// only).
    pub marks: Marks,
}

impl Window {
    /// A window of `phase`: the warm-up's keeps counts only (no per-operation histogram).
    pub fn new(operations: usize, phase: Phase) -> Result<Window, HistogramError> {
        let latency = match phase {
            Phase::Warmup => Vec::new(),
            Phase::Measure => (0..operations)
                .map(|_| latency_histogram())
                .collect::<Result<_, _>>()?,
        };
        Ok(Window {
            tallies: vec![Tally::default(); operations],
            latency,
            uncorrected: latency_histogram()?,
            schedule: ScheduleTally::default(),
            marks: Marks::default(),
        })
    }

    /// Adds `other` into this window; histograms of one shape merge exactly.
    pub fn add(&mut self, other: &Window) {
        for (a, b) in self.tallies.iter_mut().zip(&other.tallies) {
            a.add(b);
        }
        for (a, b) in self.latency.iter_mut().zip(&other.latency) {
            // Same bounds on both sides, so this cannot fail.
            let _ = a.add(b);
        }
        let _ = self.uncorrected.add(&other.uncorrected);
        self.schedule.add(&other.schedule);
        self.marks.add(&other.marks);
    }

    fn reset(&mut self) {
        self.tallies.iter_mut().for_each(|t| *t = Tally::default());
        self.latency.iter_mut().for_each(Histogram::reset);
        self.uncorrected.reset();
        self.schedule = ScheduleTally::default();
        self.marks.clear();
    }

    /// All operations' corrected latency in one histogram.
    pub fn total_latency(&self) -> Result<Histogram<u64>, HistogramError> {
        let mut total = latency_histogram()?;
        for h in &self.latency {
            let _ = total.add(h);
        }
        Ok(total)
    }

    pub fn total_counts(&self) -> Counts {
        let mut total = Tally::default();
        for t in &self.tallies {
            total.add(t);
        }
        total.counts()
    }
}

struct Shard {
    warmup: Window,
    measure: Window,
}

pub struct Recorder {
    shards: Vec<Mutex<Shard>>,
    operations: usize,
}

impl Recorder {
    pub fn new(operations: usize, shards: usize) -> Result<Recorder, HistogramError> {
        let shards = (0..shards.max(1))
            .map(|_| {
                Ok(Mutex::new(Shard {
                    warmup: Window::new(operations, Phase::Warmup)?,
                    measure: Window::new(operations, Phase::Measure)?,
                }))
            })
            .collect::<Result<_, HistogramError>>()?;
        Ok(Recorder { shards, operations })
    }

    fn with<R>(&self, shard: usize, phase: Phase, f: impl FnOnce(&mut Window) -> R) -> R {
        let slot = &self.shards[shard % self.shards.len()];
        // A worker that panicked mid-record leaves counts that are still counts.
        let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        match phase {
            Phase::Warmup => f(&mut guard.warmup),
            Phase::Measure => f(&mut guard.measure),
        }
    }

    /// A request's end: its status or failure, its latencies in microseconds, and the
    /// random half of its trace id when it carried the run's.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        shard: usize,
        phase: Phase,
        operation: usize,
        outcome: Result<u16, Failure>,
        corrected_us: u64,
        uncorrected_us: u64,
        trace: Option<u64>,
    ) {
        self.record_with(
            shard,
            phase,
            Mark {
                trace: trace.unwrap_or(0),
                operation,
                outcome,
            },
            (corrected_us, uncorrected_us),
            trace.is_some(),
            |_| {},
        );
    }

    fn record_with(
        &self,
        shard: usize,
        phase: Phase,
        mark: Mark,
        (corrected_us, uncorrected_us): (u64, u64),
        traced: bool,
        schedule: impl FnOnce(&mut ScheduleTally),
    ) {
        self.with(shard, phase, |w| {
            schedule(&mut w.schedule);
            let tally = &mut w.tallies[mark.operation];
            match mark.outcome {
                Ok(status) => {
                    let class = usize::from(status / 100).clamp(1, 5) - 1;
                    tally.statuses[class] += 1;
                }
                Err(failure) => tally.errors[failure.index()] += 1,
            }
            if let Some(h) = w.latency.get_mut(mark.operation) {
                let corrected = corrected_us.clamp(1, MAX_MICROS);
                h.saturating_record(corrected);
                w.uncorrected
                    .saturating_record(uncorrected_us.clamp(1, MAX_MICROS));
                if traced {
                    w.marks.record(corrected, mark);
                }
            }
        });
    }

    /// A closed-model request, due when it was sent: counted as intended and sent, and
    /// its end recorded, under one lock.
    pub fn record_sent(
        &self,
        shard: usize,
        phase: Phase,
        operation: usize,
        outcome: Result<u16, Failure>,
        latency_us: u64,
        trace: Option<u64>,
    ) {
        self.record_with(
            shard,
            phase,
            Mark {
                trace: trace.unwrap_or(0),
                operation,
                outcome,
            },
            (latency_us, latency_us),
            trace.is_some(),
            |s| {
                s.intended += 1;
                s.sent += 1;
            },
        );
    }

    pub fn schedule(&self, shard: usize, phase: Phase, f: impl FnOnce(&mut ScheduleTally)) {
        self.with(shard, phase, |w| f(&mut w.schedule));
    }

    /// Everything recorded in `phase` since the last take, leaving the shards empty.
    pub fn take(&self, phase: Phase) -> Result<Window, HistogramError> {
        let mut out = Window::new(self.operations, phase)?;
        for shard in &self.shards {
            let mut guard = shard.lock().unwrap_or_else(|p| p.into_inner());
            let window = match phase {
                Phase::Warmup => &mut guard.warmup,
                Phase::Measure => &mut guard.measure,
            };
            out.add(window);
            window.reset();
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_merge_into_one_window_and_start_again_empty() {
        let recorder = Recorder::new(2, 3).expect("recorder");
        for i in 0..300u64 {
            let shard = i as usize;
            let outcome = if i % 100 == 0 {
                Err(Failure::Timeout)
            } else if i % 10 == 0 {
                Ok(503)
            } else {
                Ok(200)
            };
            recorder.record(
                shard,
                Phase::Measure,
                (i % 2) as usize,
                outcome,
                1000 + i,
                500,
                Some(i),
            );
            recorder.schedule(shard, Phase::Measure, |s| s.sent += 1);
        }
        recorder.record(0, Phase::Warmup, 0, Ok(200), 5, 5, Some(999));
        let window = recorder.take(Phase::Measure).expect("take");
        let counts = window.total_counts();
        assert_eq!(counts.requests, 300);
        assert_eq!(counts.errors.get("timeout"), Some(&3));
        assert_eq!(counts.responses.get("5xx"), Some(&27));
        assert_eq!(counts.responses.get("2xx"), Some(&270));
        assert_eq!(window.schedule.sent, 300);
        assert_eq!(window.total_latency().expect("total").len(), 300);
        assert_eq!(window.uncorrected.len(), 300);
        // Over the shards, the three slowest (the last three sent) and three failures.
        let names = ["a".to_string(), "b".to_string()];
        let exemplars = window.marks.exemplars(0x1234, &names);
        let slowest: Vec<(u64, &str)> = exemplars
            .slowest
            .iter()
            .map(|e| (e.latency_us, e.operation.as_str()))
            .collect();
        assert_eq!(slowest, [(1299, "b"), (1298, "a"), (1297, "b")]);
        assert_eq!(
            exemplars.slowest[0].trace_id,
            "0000000000001234000000000000012b"
        );
        assert_eq!(exemplars.failed.len(), 3);
        assert!(exemplars.failed.iter().all(|e| e.outcome.is_some()));

        let warm = recorder.take(Phase::Warmup).expect("take");
        assert_eq!(warm.total_counts().requests, 1, "warm-up counted apart");
        assert!(warm.latency.is_empty(), "warm-up latencies are discarded");
        assert!(warm.marks.slowest.is_empty(), "and so are its exemplars");
        let again = recorder.take(Phase::Measure).expect("take");
        assert_eq!(again.total_counts().requests, 0);
        assert_eq!(again.total_latency().expect("total").len(), 0);
        assert!(again.marks.slowest.is_empty() && again.marks.failed[0].is_none());
    }
}
