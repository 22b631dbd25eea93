//! Server-sent events: the "event stream" interpretation of the WHATWG HTML standard,
//! fed with body chunks exactly as they arrive. A chunk may end anywhere: inside a line,
//! between `\r` and `\n`, or inside a multi-byte UTF-8 character, so bytes are held
//! until their line is complete and only whole lines are decoded.
//!
//! The one parser of the workspace: the CLI (`iohr run --wait`, `iohr reliability
//! events`), the MCP tools' progress, the viewers bench and the end-to-end tests all read
//! event streams with it, so a stream is read one way everywhere.
//!
//! Why our own code and not a crate: the two maintained candidates refuse or change
//! streams the standard accepts. `sse-stream` (already in the build through rmcp) fails
//! the whole stream on a field line without a colon (`data`), an unknown field, a second
//! `event:` or `id:` line in one event, a `retry:` that is not a number or invalid UTF-8,
//! and does not carry the last event id over to the events after it; `eventsource-stream`
//! (unreleased since 2022) is an async adapter only, with no bound on a line's length.
//! This parser is small, synchronous (any body type feeds it), bounds a line
//! ([`MAX_LINE`]) and is property-tested against any split of its input.

use std::time::Duration;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The last event id in effect when the event was dispatched (`id:` persists across
    /// events until changed), `None` when no id was set or it was reset with `id:`.
    pub id: Option<String>,
    /// `event:`, or `message` when the event named none.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// A line longer than [`MAX_LINE`]: the stream cannot be read on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an event stream line exceeds {limit} bytes")]
pub struct LineTooLong {
    pub limit: usize,
}

/// A line this long is a broken or hostile server, not a frame: stop instead of
/// growing the buffer without bound.
pub const MAX_LINE: usize = 16 << 20;

const BOM: &[u8] = b"\xEF\xBB\xBF";

#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for a line end, so a long line arriving in many
    /// small chunks is scanned once, not once per chunk.
    scanned: usize,
    bom_checked: bool,
    data: String,
    event: String,
    id_buffer: String,
    retry: Option<Duration>,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feeds one chunk; returns the events it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, LineTooLong> {
        self.buf.extend_from_slice(chunk);
        let mut events = Vec::new();
        if !self.bom_checked {
            // A BOM may itself be split across chunks.
            if self.buf.len() < BOM.len() && BOM.starts_with(&self.buf) {
                return Ok(events);
            }
            if self.buf.starts_with(BOM) {
                self.buf.drain(..BOM.len());
            }
            self.bom_checked = true;
        }
        let mut start = 0;
        loop {
            let from = self.scanned.max(start);
            let Some(offset) = self.buf[from..]
                .iter()
                .position(|&b| b == b'\n' || b == b'\r')
            else {
                self.scanned = self.buf.len();
                break;
            };
            let end = from + offset;
            let terminator = if self.buf[end] == b'\r' {
                match self.buf.get(end + 1) {
                    Some(b'\n') => 2,
                    Some(_) => 1,
                    // `\r` last: the next chunk decides whether `\n` belongs to it.
                    None => {
                        self.scanned = end;
                        break;
                    }
                }
            } else {
                1
            };
            let line = String::from_utf8_lossy(&self.buf[start..end]).into_owned();
            start = end + terminator;
            self.scanned = start;
            self.line(&line, &mut events);
        }
        self.buf.drain(..start);
        self.scanned -= start;
        if self.buf.len() > MAX_LINE {
            return Err(LineTooLong { limit: MAX_LINE });
        }
        Ok(events)
    }

    /// The stream ended: a `\r` held back waiting for a possible `\n` ends its line.
    /// An event not yet closed by a blank line is discarded, as the standard says.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
            let line = String::from_utf8_lossy(&self.buf).into_owned();
            self.buf.clear();
            self.scanned = 0;
            self.line(&line, &mut events);
        }
        events
    }

    /// The reconnection delay the server asked for with `retry:`.
    pub fn retry(&self) -> Option<Duration> {
        self.retry
    }

    fn line(&mut self, line: &str, events: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        if line.starts_with(':') {
            // A comment: servers send these as keep-alives.
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            "id" if !value.contains('\0') => value.clone_into(&mut self.id_buffer),
            "retry" => {
                if !value.is_empty()
                    && value.bytes().all(|b| b.is_ascii_digit())
                    && let Ok(ms) = value.parse::<u64>()
                {
                    self.retry = Some(Duration::from_millis(ms));
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        let event = std::mem::take(&mut self.event);
        if self.data.is_empty() {
            return;
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop(); // the `\n` appended after the last data line
        events.push(SseEvent {
            id: (!self.id_buffer.is_empty()).then(|| self.id_buffer.clone()),
            event: if event.is_empty() {
                "message".to_string()
            } else {
                event
            },
            data,
        });
    }
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        for chunk in chunks {
            events.extend(parser.push(chunk).expect("line within limit"));
        }
        events.extend(parser.finish());
        events
    }

    fn ev(id: Option<&str>, event: &str, data: &str) -> SseEvent {
        SseEvent {
            id: id.map(str::to_string),
            event: event.to_string(),
            data: data.to_string(),
        }
    }

    const STREAM: &[u8] = b": keep-alive\n\nid: 1\nevent: started\ndata: {\"number\":1}\n\nid: 2\nevent: check\ndata: {\"name\":\"GET /\",\ndata: \"passed\":true}\n\n";

    #[test]
    fn whole_stream_in_one_chunk() {
        assert_eq!(
            parse_all(&[STREAM]),
            vec![
                ev(Some("1"), "started", "{\"number\":1}"),
                ev(Some("2"), "check", "{\"name\":\"GET /\",\n\"passed\":true}"),
            ]
        );
    }

    #[test]
    fn every_chunk_boundary_gives_the_same_events() {
        let whole = parse_all(&[STREAM]);
        for cut in 0..=STREAM.len() {
            let (a, b) = STREAM.split_at(cut);
            assert_eq!(parse_all(&[a, b]), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = STREAM.chunks(1).collect();
        assert_eq!(parse_all(&bytes), whole, "one byte per chunk");
    }

    #[test]
    fn crlf_and_cr_line_ends_even_when_split() {
        let stream = b"id: 7\r\nevent: phase\r\ndata: a\r\rdata: b\n\n";
        let whole = parse_all(&[stream]);
        assert_eq!(
            whole,
            vec![ev(Some("7"), "phase", "a"), ev(Some("7"), "message", "b")]
        );
        for cut in 0..=stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(parse_all(&[a, b]), whole, "cut at {cut}");
        }
    }

    #[test]
    fn a_multibyte_character_split_across_chunks_survives() {
        let stream = "data: café ✓\n\n".as_bytes();
        let at = stream.len() - 5; // inside the three bytes of '✓'
        assert_eq!(
            parse_all(&[&stream[..at], &stream[at..]]),
            vec![ev(None, "message", "café ✓")]
        );
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored_and_no_data_means_no_event() {
        let events = parse_all(&[b": ping\n\n:\n\nevent: started\nfoo: bar\n\nretry: 1500\n\n"]);
        assert!(events.is_empty(), "{events:?}");
        let mut parser = SseParser::new();
        parser.push(b"retry: 1500\n\n").expect("short");
        assert_eq!(parser.retry(), Some(Duration::from_millis(1500)));
        parser.push(b"retry: 1.5s\n\n").expect("short");
        assert_eq!(parser.retry(), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn ids_persist_until_changed_or_reset() {
        let events =
            parse_all(&[b"id: 4\ndata: a\n\ndata: b\n\nid\ndata: c\n\nid: x\0y\ndata: d\n\n"]);
        assert_eq!(
            events,
            vec![
                ev(Some("4"), "message", "a"),
                ev(Some("4"), "message", "b"),
                ev(None, "message", "c"),
                // An id with NUL is ignored, so the reset one stays.
                ev(None, "message", "d"),
            ]
        );
    }

    #[test]
    fn field_values_lose_one_leading_space_only() {
        let events = parse_all(&[b"data:no-space\ndata:  two\ndata\n\n"]);
        assert_eq!(events, vec![ev(None, "message", "no-space\n two\n")]);
    }

    #[test]
    fn an_unfinished_event_at_the_end_is_dropped() {
        let events = parse_all(&[b"id: 1\ndata: a\n\nid: 2\ndata: {\"half\":"]);
        assert_eq!(events, vec![ev(Some("1"), "message", "a")]);
    }

    #[test]
    fn a_leading_bom_is_skipped_even_when_split() {
        assert_eq!(
            parse_all(&[b"\xEF", b"\xBB\xBFdata: x\n\n"]),
            vec![ev(None, "message", "x")]
        );
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut parser = SseParser::new();
        let chunk = vec![b'a'; 1 << 20];
        let mut result = Ok(Vec::new());
        for _ in 0..=(MAX_LINE >> 20) {
            result = parser.push(&chunk);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(LineTooLong { limit: MAX_LINE }));
    }
}
