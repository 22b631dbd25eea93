//! The run's live frames for `reliability_wait_run`'s progress: the server-sent events of
//! `GET /runs/{id}/events` read into frames, and what progress shows of them (the phase,
//! and for a load run the last second's rate and p99).

use futures_util::StreamExt;
use serde_json::Value;

use crate::rest::ByteStream;

/// The frames of one event stream, parsed as they arrive.
pub struct Frames {
    body: ByteStream,
    buffer: Vec<u8>,
}

/// The largest event we buffer; a frame is far smaller, so more is not our API.
const MAX_EVENT: usize = 4 << 20;

impl Frames {
    pub fn new(body: ByteStream) -> Frames {
        Frames {
            body,
            buffer: Vec::new(),
        }
    }

    /// The next frame (`{run_id, number, kind, at, data}`), or `None` when the stream
    /// ended, broke or sent something that is not one.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(event) = self.take_event() {
                match data_of(&event) {
                    Some(frame) => return Some(frame),
                    // A comment (keep-alive) or an event without data.
                    None => continue,
                }
            }
            if self.buffer.len() > MAX_EVENT {
                return None;
            }
            match self.body.next().await {
                Some(Ok(bytes)) => self.buffer.extend_from_slice(&bytes),
                _ => return None,
            }
        }
    }

    /// One whole event (up to its blank line) out of the buffer. Bytes, not text, are
    /// searched: a chunk may end inside a character.
    fn take_event(&mut self) -> Option<String> {
        let (end, gap) = [&b"\n\n"[..], b"\r\n\r\n"]
            .into_iter()
            .filter_map(|blank| {
                self.buffer
                    .windows(blank.len())
                    .position(|w| w == blank)
                    .map(|at| (at, blank.len()))
            })
            .min()?;
        let event = String::from_utf8_lossy(&self.buffer[..end]).replace('\r', "");
        self.buffer.drain(..end + gap);
        Some(event)
    }
}

fn data_of(event: &str) -> Option<Value> {
    let data: Vec<&str> = event
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() {
        return None;
    }
    serde_json::from_str(&data.join("\n")).ok()
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
