//! Request framing for the HTTP faults: finds each HTTP/1.1 request head in the bytes a
//! client sends and where its body ends (Content-Length or chunked), so that a fault can act
//! on one request of a keep-alive connection. Bodies pass through as they come and are never
//! buffered; bytes that are not an HTTP/1.x request switch the connection to transparent
//! forwarding for good.

use std::borrow::Cow;

/// The longest request head read before giving up on HTTP for the connection.
const MAX_HEAD: usize = 64 * 1024;
/// The longest chunk-size or trailer line of a chunked body.
const MAX_CHUNK_LINE: usize = 8 * 1024;
/// Headers httparse may read in one head.
const MAX_HEADERS: usize = 100;

/// What the framer found in the bytes it was fed, in order.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Segment {
    /// Bytes to pass on as they are: a body, or a connection that is not HTTP.
    Pass(Vec<u8>),
    /// The end of a request head (all of it when it came in one read) and its path; the
    /// proxy decides what to do before passing it. A head that comes in pieces is passed
    /// as it comes, never held: bytes that only look like the start of a request (`ping`)
    /// must not wait for a head that never completes.
    Head { bytes: Vec<u8>, path: String },
}

#[derive(Debug)]
enum Mode {
    /// Reading a request head (possibly partial) into `pending`.
    Head,
    /// This many body bytes are still to pass.
    Length(u64),
    Chunked(Chunk),
    /// Not HTTP (or an upgraded connection): everything passes.
    Transparent,
}

#[derive(Debug)]
enum Chunk {
    /// Reading a chunk-size line into `line`.
    Size,
    /// This many chunk-data bytes, then the CRLF after them, are still to pass.
    Data(u64),
    /// Bytes of the CRLF after chunk data still to pass.
    DataEnd(u8),
    /// Reading trailer lines after the last chunk, until an empty one.
    Trailers,
}

#[derive(Debug)]
pub(super) struct Framer {
    mode: Mode,
    /// The part of a request head read so far.
    pending: Vec<u8>,
    /// How much of `pending` has been passed already.
    passed: usize,
    /// The part of a chunk-size or trailer line read so far.
    line: Vec<u8>,
    /// The current request asked for a protocol switch: after its body, nothing is framed.
    upgrade: bool,
}

impl Default for Framer {
    fn default() -> Self {
        Framer {
            mode: Mode::Head,
            pending: Vec::new(),
            passed: 0,
            line: Vec::new(),
            upgrade: false,
        }
    }
}

impl Framer {
    /// Splits `input` into segments; a partial head is kept for the next call.
    pub(super) fn feed(&mut self, input: &[u8]) -> Vec<Segment> {
        let mut out = Out::default();
        // The bytes after a head are framed under the mode that head sets.
        let mut data: Cow<'_, [u8]> = Cow::Borrowed(input);
        let mut pos = 0;
        while pos < data.len() {
            let input = &data[pos..];
            let upgrade = self.upgrade;
            match &mut self.mode {
                Mode::Transparent => {
                    out.pass(input);
                    pos = data.len();
                }
                Mode::Head => {
                    self.pending.extend_from_slice(input);
                    pos = data.len();
                    match read_head(&self.pending) {
                        HeadRead::Partial if self.pending.len() <= MAX_HEAD => {
                            out.pass(&self.pending[self.passed..]);
                            self.passed = self.pending.len();
                        }
                        HeadRead::Partial | HeadRead::NotHttp => {
                            self.mode = Mode::Transparent;
                            out.pass(&self.pending[self.passed..]);
                            self.pending.clear();
                            self.passed = 0;
                        }
                        HeadRead::Complete {
                            len,
                            path,
                            body,
                            upgrade,
                        } => {
                            let rest = self.pending.split_off(len);
                            // A partial head never completes before its end: passed < len.
                            let head = self.pending.split_off(self.passed.min(len));
                            self.pending.clear();
                            self.passed = 0;
                            out.head(head, path);
                            self.upgrade = upgrade;
                            self.mode = match body {
                                Body::Length(0) => after_body(upgrade),
                                Body::Length(n) => Mode::Length(n),
                                Body::Chunked => Mode::Chunked(Chunk::Size),
                                Body::Unknown => Mode::Transparent,
                            };
                            data = Cow::Owned(rest);
                            pos = 0;
                        }
                    }
                }
                Mode::Length(left) => {
                    let take = usize::try_from(*left)
                        .unwrap_or(usize::MAX)
                        .min(input.len());
                    out.pass(&input[..take]);
                    pos += take;
                    *left -= take as u64;
                    if *left == 0 {
                        self.mode = after_body(upgrade);
                    }
                }
                Mode::Chunked(chunk) => match chunk {
                    Chunk::Data(left) => {
                        let take = usize::try_from(*left)
                            .unwrap_or(usize::MAX)
                            .min(input.len());
                        out.pass(&input[..take]);
                        pos += take;
                        *left -= take as u64;
                        if *left == 0 {
                            *chunk = Chunk::DataEnd(2);
                        }
                    }
                    Chunk::DataEnd(left) => {
                        let take = usize::from(*left).min(input.len());
                        out.pass(&input[..take]);
                        pos += take;
                        *left -= take as u8;
                        if *left == 0 {
                            *chunk = Chunk::Size;
                        }
                    }
                    Chunk::Size | Chunk::Trailers => {
                        let Some(end) = input.iter().position(|b| *b == b'\n') else {
                            self.line.extend_from_slice(input);
                            out.pass(input);
                            pos = data.len();
                            if self.line.len() > MAX_CHUNK_LINE {
                                self.mode = Mode::Transparent;
                            }
                            continue;
                        };
                        self.line.extend_from_slice(&input[..=end]);
                        out.pass(&input[..=end]);
                        pos += end + 1;
                        let line = std::mem::take(&mut self.line);
                        let next = if matches!(chunk, Chunk::Size) {
                            match chunk_size(&line) {
                                Some(0) => Some(Chunk::Trailers),
                                Some(n) => Some(Chunk::Data(n)),
                                None => None,
                            }
                        } else if line == b"\r\n" || line == b"\n" {
                            self.mode = after_body(upgrade);
                            continue;
                        } else {
                            Some(Chunk::Trailers)
                        };
                        match next {
                            Some(next) => *chunk = next,
                            None => self.mode = Mode::Transparent,
                        }
                    }
                },
            }
        }
        out.finish()
    }
}

/// What follows a request's body: the next head, or nothing framed after a protocol switch.
fn after_body(upgrade: bool) -> Mode {
    if upgrade {
        Mode::Transparent
    } else {
        Mode::Head
    }
}

/// Collects segments, merging adjacent passed bytes into one.
#[derive(Default)]
struct Out {
    segments: Vec<Segment>,
}

impl Out {
    fn pass(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if let Some(Segment::Pass(last)) = self.segments.last_mut() {
            last.extend_from_slice(bytes);
        } else {
            self.segments.push(Segment::Pass(bytes.to_vec()));
        }
    }

    fn head(&mut self, bytes: Vec<u8>, path: String) {
        self.segments.push(Segment::Head { bytes, path });
    }

    fn finish(self) -> Vec<Segment> {
        self.segments
    }
}

enum Body {
    Length(u64),
    Chunked,
    /// A Transfer-Encoding other than chunked, or conflicting lengths: the end of the body
    /// cannot be known, so the connection is forwarded as it is from here.
    Unknown,
}

enum HeadRead {
    Partial,
    NotHttp,
    Complete {
        len: usize,
        path: String,
        body: Body,
        upgrade: bool,
    },
}

fn read_head(buf: &[u8]) -> HeadRead {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return HeadRead::Partial,
        Err(_) => return HeadRead::NotHttp,
    };
    let target = request.path.unwrap_or("/");
    let mut body = Body::Length(0);
    let mut length: Option<u64> = None;
    let mut upgrade = request.method == Some("CONNECT");
    for header in request.headers.iter() {
        let value = std::str::from_utf8(header.value).unwrap_or("").trim();
        if header.name.eq_ignore_ascii_case("transfer-encoding") {
            let last = value.rsplit(',').next().unwrap_or("").trim();
            body = if last.eq_ignore_ascii_case("chunked") {
                Body::Chunked
            } else {
                Body::Unknown
            };
        } else if header.name.eq_ignore_ascii_case("content-length") {
            match (value.parse::<u64>(), length) {
                (Ok(n), None) => length = Some(n),
                (Ok(n), Some(m)) if n == m => {}
                _ => return complete_unknown(len, target, upgrade),
            }
        } else if header.name.eq_ignore_ascii_case("upgrade") {
            upgrade = true;
        }
    }
    if let (Body::Length(_), Some(n)) = (&body, length) {
        body = Body::Length(n);
    }
    HeadRead::Complete {
        len,
        path: path_of(target),
        body,
        upgrade,
    }
}

fn complete_unknown(len: usize, target: &str, upgrade: bool) -> HeadRead {
    HeadRead::Complete {
        len,
        path: path_of(target),
        body: Body::Unknown,
        upgrade,
    }
}

/// The path of a request target: itself in origin form (`/a?b`), the part after the
/// authority in absolute form (`http://host/a?b`).
fn path_of(target: &str) -> String {
    match target.split_once("://") {
        Some((_, rest)) => match rest.find('/') {
            Some(i) => rest[i..].to_string(),
            None => "/".to_string(),
        },
        None => target.to_string(),
    }
}

/// The size of a chunk-size line (`1a;ext=1\r\n`), or None when it is not one.
fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 15 {
        return None;
    }
    let text = std::str::from_utf8(&line[..digits]).ok()?;
    u64::from_str_radix(text, 16).ok()
}

/// The answer to a request hit by a status fault: a short text body naming the proxy, and
/// `connection: close` because the request's body (if any) was not read.
pub(super) fn status_response(status: u16) -> Vec<u8> {
    let reason = hyper::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Fault");
    // 1xx, 204 and 304 answers have no body.
    let body = if status < 200 || status == 204 || status == 304 {
        String::new()
    } else {
        format!("{status} {reason} (iohr fault proxy)\n")
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(framer: &mut Framer, input: &[u8], step: usize) -> Vec<Segment> {
        let mut out = Vec::new();
        for piece in input.chunks(step) {
            for s in framer.feed(piece) {
                match (out.last_mut(), s) {
                    (Some(Segment::Pass(a)), Segment::Pass(b)) => a.extend_from_slice(&b),
                    (_, s) => out.push(s),
                }
            }
        }
        out
    }

    fn heads(segments: &[Segment]) -> Vec<String> {
        segments
            .iter()
            .filter_map(|s| match s {
                Segment::Head { path, .. } => Some(path.clone()),
                Segment::Pass(_) => None,
            })
            .collect()
    }

    fn joined(segments: &[Segment]) -> Vec<u8> {
        segments
            .iter()
            .flat_map(|s| match s {
                Segment::Head { bytes, .. } | Segment::Pass(bytes) => bytes.clone(),
            })
            .collect()
    }

    #[test]
    fn keep_alive_requests_are_framed_by_length_and_chunks_at_any_split() {
        let input: &[u8] = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /b?q=1 HTTP/1.1\r\nHost: x\r\n\r\nPOST http://x:1/c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;e=1\r\nabc\r\n0\r\nT: 1\r\n\r\nGET /d HTTP/1.1\r\n\r\n";
        for step in [1, 2, 3, 7, 64, input.len()] {
            let mut framer = Framer::default();
            let segments = feed_all(&mut framer, input, step);
            assert_eq!(
                heads(&segments),
                ["/a", "/b?q=1", "/c", "/d"],
                "step {step}"
            );
            assert_eq!(joined(&segments), input, "every byte passes, in order");
        }
    }

    #[test]
    fn bytes_that_are_not_http_pass_untouched_for_good() {
        let mut framer = Framer::default();
        let segments = framer.feed(b"\x00\x01binary");
        assert_eq!(segments, vec![Segment::Pass(b"\x00\x01binary".to_vec())]);
        let later = framer.feed(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(
            later,
            vec![Segment::Pass(b"GET / HTTP/1.1\r\n\r\n".to_vec())]
        );
    }

    #[test]
    fn a_partial_head_passes_as_it_comes_and_is_decided_at_its_end() {
        let mut framer = Framer::default();
        assert_eq!(framer.feed(b"ping"), vec![Segment::Pass(b"ping".to_vec())]);
        let mut framer = Framer::default();
        assert_eq!(
            framer.feed(b"GET /a HT"),
            vec![Segment::Pass(b"GET /a HT".to_vec())]
        );
        assert_eq!(
            framer.feed(b"TP/1.1\r\n\r\n"),
            vec![Segment::Head {
                bytes: b"TP/1.1\r\n\r\n".to_vec(),
                path: "/a".into()
            }]
        );
    }

    #[test]
    fn the_http2_preface_is_not_http_1() {
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        let mut framer = Framer::default();
        assert_eq!(framer.feed(preface), vec![Segment::Pass(preface.to_vec())]);
        assert!(matches!(framer.mode, Mode::Transparent));
    }

    #[test]
    fn an_upgrade_ends_framing_after_its_head() {
        let mut framer = Framer::default();
        let segments =
            framer.feed(b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\nGET /x HTTP/1.1\r\n\r\n");
        assert_eq!(heads(&segments), ["/ws"]);
    }

    #[test]
    fn status_answers_are_short_and_close() {
        let text = String::from_utf8(status_response(503)).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{text}"
        );
        assert!(text.contains("connection: close"));
        let no_body = String::from_utf8(status_response(204)).unwrap();
        assert!(no_body.ends_with("content-length: 0\r\nconnection: close\r\n\r\n"));
    }
}
