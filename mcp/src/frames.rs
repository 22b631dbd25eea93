//! The run's live frames for `reliability_wait_run`'s progress: the server-sent events of
//! `GET /runs/{id}/events` read into frames, and what progress shows of them (the phase,
//! and for a load run the last second's rate and p99).

use std::collections::VecDeque;

use futures_util::StreamExt;
use iohr_sse::{SseEvent, SseParser};
use serde_json::Value;

use crate::rest::ByteStream;

/// The frames of one event stream, parsed as they arrive by the workspace's one
/// event-stream parser (BOM, every line end, comments, chunks split anywhere).
pub struct Frames {
    body: ByteStream,
    parser: SseParser,
    /// Events parsed from a chunk and not yet returned.
    ready: VecDeque<SseEvent>,
    ended: bool,
}

impl Frames {
    pub fn new(body: ByteStream) -> Frames {
        Frames {
            body,
            parser: SseParser::new(),
            ready: VecDeque::new(),
            ended: false,
        }
    }

    /// The next frame (`{run_id, number, kind, at, data}`), or `None` when the stream
    /// ended or broke (an event whose data is not JSON is passed over).
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            while let Some(event) = self.ready.pop_front() {
                if let Ok(frame) = serde_json::from_str(&event.data) {
                    return Some(frame);
                }
            }
            if self.ended {
                return None;
            }
            let events = match self.body.next().await {
                Some(Ok(bytes)) => match self.parser.push(&bytes) {
                    Ok(events) => events,
                    // A line past the parser's bound: a broken stream, not a frame.
                    Err(_) => return None,
                },
                _ => {
                    self.ended = true;
                    self.parser.finish()
                }
            };
            self.ready.extend(events);
        }
    }
}

/// What the frames so far say, for the progress message.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Live {
    pub phase: Option<String>,
    /// The last `load` frame's second: requests sent, and the p99 in ms when measured.
    pub rate: Option<u64>,
    pub p99_ms: Option<f64>,
    pub finished: bool,
}

impl Live {
    pub fn update(&mut self, frame: &Value) {
        let data = &frame["data"];
        match frame["kind"].as_str().unwrap_or_default() {
            "phase" => self.phase = data["phase"].as_str().map(str::to_string),
            "load" => {
                let second = iohr_domain::load::SecondSummary::of(data);
                self.rate = second.sent;
                if let Some(phase) = second.phase {
                    self.phase = Some(phase);
                }
                // Warm-up seconds carry no histogram: keep the last measured p99.
                if let Some(p99) = second.p99_ms {
                    self.p99_ms = Some(p99);
                }
            }
            "finished" => self.finished = true,
            _ => {}
        }
    }

    /// `, phase measure, last second 20 req/s, p99 3.1 ms`, or nothing.
    pub fn describe(&self) -> String {
        let mut text = String::new();
        if let Some(phase) = &self.phase {
            text.push_str(&format!(", phase {phase}"));
        }
        if let Some(rate) = self.rate {
            text.push_str(&format!(", last second {rate} req/s"));
        }
        if let Some(p99) = self.p99_ms {
            text.push_str(&format!(", p99 {p99:.1} ms"));
        }
        text
    }
}

#[cfg(test)]
mod tests;
