//! A run's live frames as people read them: one line per second for load-like runs
//! (elapsed/total, requests/s, p50, p99, errors, late), one per step of a faults run's
//! timeline, one per `stress` second (the agent's own CPU, lag and sockets), the other
//! frames as [`frame_line`] writes them. `--wait` leaves the `stress` seconds out: the
//! record it ends with says whether the generator was saturated. On a terminal, `--wait` draws a load run's seconds as a
//! progress bar (indicatif) instead of a line each; `--json` and `runs events --raw` keep
//! the frames as they are.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use iohr_domain::faults::journal::TimelineStep;
use iohr_domain::load::SecondSummary;
use iohr_domain::stress::StressSecond;
use iohr_domain::{Frame, FrameKind, RunKind};
use serde::Deserialize;
use serde_json::Value;

use crate::output::{clean, frame_line, note};

/// The line a person reads for `frame`; `total_s` is the measured part's length when
/// known.
pub fn line(frame: &Frame, total_s: Option<u64>) -> String {
    match FrameKind::parse(&frame.kind) {
        Some(FrameKind::Load) => clean(&SecondSummary::of(&frame.data).line(total_s)),
        Some(FrameKind::Stress) => match StressSecond::deserialize(&frame.data) {
            Ok(second) => clean(&second.line()),
            Err(_) => frame_line(&frame.kind, &frame.data),
        },
        Some(FrameKind::Timeline) => match TimelineStep::deserialize(&frame.data) {
            Ok(step) => clean(&format!("timeline  {}", step.line())),
            Err(_) => frame_line(&frame.kind, &frame.data),
        },
        // The other frames, and one this CLI does not know, as they came.
        _ => frame_line(&frame.kind, &frame.data),
    }
}

/// The measured seconds of a run of `kind` with this spec, as its kind's contract reads
/// them ([`RunKind::measured_seconds`]: a load spec's duration or stages).
pub fn total_seconds(kind: &str, spec: Option<&Value>) -> Option<u64> {
    kind.parse::<RunKind>().ok()?.measured_seconds(spec?)
}

/// `--wait`'s progress on stderr: a line per frame, or on a terminal a bar for the
/// measured seconds of a load run whose length is known.
pub struct Progress {
    total_s: Option<u64>,
    bar: Option<ProgressBar>,
}

impl Progress {
    pub fn new(total_s: Option<u64>) -> Progress {
        let bar = total_s
            .filter(|_| std::io::stderr().is_terminal())
            .map(|total| {
                let bar = ProgressBar::new(total);
                if let Ok(style) = ProgressStyle::with_template("{bar:30} {msg}") {
                    bar.set_style(style);
                }
                bar
            });
        Progress { total_s, bar }
    }

    pub fn frame(&self, frame: &Frame) {
        let kind = FrameKind::parse(&frame.kind);
        if kind == Some(FrameKind::Stress) {
            return;
        }
        let text = line(frame, self.total_s);
        match &self.bar {
            Some(bar) if kind == Some(FrameKind::Load) => {
                let summary = SecondSummary::of(&frame.data);
                if summary.phase.as_deref() == Some("measure")
                    && let Some(second) = summary.second
                {
                    bar.set_position(second);
                }
                bar.set_message(text);
            }
            Some(bar) => bar.println(text),
            None => note(&text),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn frame(kind: &str, data: Value) -> Frame {
        serde_json::from_value(json!({"run_id": "r1", "number": 3, "kind": kind,
            "at": "2026-12-01T10:00:00.000Z", "data": data}))
        .expect("frame")
    }

    #[test]
    fn load_seconds_read_as_lines_not_histograms() {
        let second = frame(
            "load",
            json!({"second": 4, "phase": "measure", "requests": 10,
            "responses": {"2xx": 10}, "errors": {}, "intended": 10, "sent": 10, "late": 0,
            "dropped": 0, "histogram": "HISTFAAA", "operations": {}}),
        );
        let text = line(&second, Some(30));
        assert_eq!(text, "measure  4/30 s  10 req/s  errors 0  late 0");
        assert!(!text.contains("HISTFAAA"));
        let step = frame(
            "timeline",
            json!({"phase": "hypothesis_after", "activity": "fast",
            "status": "missed", "at": 12, "detail": "latency_ms 101.2 outside [0, 50]"}),
        );
        assert_eq!(
            line(&step, None),
            "timeline  hypothesis after  fast  missed  latency_ms 101.2 outside [0, 50]"
        );
        let finished = frame("finished", json!({"status": "passed"}));
        assert_eq!(line(&finished, None), "finished  passed");
        let stress = frame(
            "stress",
            json!({"second": 7, "measure_second": 5, "cpu_host_percent": 61.4,
            "cpu_agent_percent": 19.0, "cpus_allowed": 0.2, "memory_used_bytes": 1,
            "memory_total_bytes": 2, "agent_memory_bytes": 31457280,
            "load_average": [1.5, 1.0, 0.5], "agent_sockets": 9, "host_tcp_sockets": 30,
            "lag_ms": 140.2}),
        );
        assert_eq!(
            line(&stress, None),
            "stress    7s  agent cpu 95% of 0.2 cpus  host cpu 61%  lag 140 ms  load 1.50  sockets 9  mem 30 MiB"
        );
        // A stress frame this CLI cannot read is printed as it came.
        let odd = frame("stress", json!({"second": "x"}));
        assert_eq!(line(&odd, None), "stress  {\"second\":\"x\"}");
    }

    #[test]
    fn the_length_comes_from_the_duration_or_the_stages() {
        let spec = json!({"duration": "1m"});
        assert_eq!(total_seconds("load", Some(&spec)), Some(60));
        let staged = json!({"stages": [{"duration": "10s", "target": 5},
            {"duration": "20s", "target": 0}]});
        assert_eq!(total_seconds("load", Some(&staged)), Some(30));
        assert_eq!(total_seconds("checks", Some(&spec)), None);
        assert_eq!(total_seconds("load", None), None);
        let bad = json!({"stages": [{"duration": "soon"}]});
        assert_eq!(total_seconds("load", Some(&bad)), None);
    }
}
