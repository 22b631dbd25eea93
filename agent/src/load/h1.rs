//! The load engine's HTTP/1.1 connection: a small driver that owns its stream, writes
//! each request as bytes encoded once per operation, and reads the response into one
//! reused buffer, parsing the head with `httparse` and reading the body to its end
//! without keeping it. No task and no channel per connection (as hyper's client has), no
//! header map per request: what a request costs is its two syscalls and a parse (or, for
//! a head the same as the connection's last, a comparison of bytes).
//! It is measured to be what makes the engine match wrk (docs/benchmarks.md), so it stays
//! apart from the agent's plain client ([`crate::http_client`]) that checks, scenarios and
//! probes share.
//!
//! Framing follows RFC 9112 section 6.3 as hyper's client does: no body for a HEAD
//! request and for 1xx/204/304 answers (informational answers other than 101 are
//! skipped), `Transfer-Encoding` ending in `chunked` (trailers read and dropped), then
//! `Content-Length`, else the body runs to the end of the connection. A connection is
//! reused unless the answer said `Connection: close`, was HTTP/1.0 without keep-alive,
//! ran to close, or the request was dropped half-way (a timeout).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::Method;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::client::Failure;
use super::request::PreparedOp;

/// The read buffer's starting size: a typical head and body in one read.
const INITIAL_BUFFER: usize = 16 * 1024;
/// The largest response head read before giving up (hyper's default buffer limit).
const MAX_HEAD: usize = 8192 + 4096 * 100;
/// Most answers have a handful of headers: parse with few slots first, and with
/// hyper's limit only when they do not fit.
const FEW_HEADERS: usize = 24;
const MAX_HEADERS: usize = 100;
/// A chunk-size line or a trailer line longer than this is not a sane response.
const MAX_LINE: usize = 4096;
/// All the trailers of one response together.
const MAX_TRAILERS: usize = 64 * 1024;

/// A connection's byte stream: plain TCP or rustls over TCP.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// How the body of an answer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Empty,
    Length(u64),
    Chunked,
    Close,
}

/// What the engine keeps of a response head.
#[derive(Debug, Clone, Copy)]
struct Head {
    status: u16,
    framing: Framing,
    keep_alive: bool,
}

/// One HTTP/1.1 connection, one request at a time.
pub struct H1Conn<S> {
    io: S,
    /// Read buffer; `buf[start..end]` holds bytes read and not yet consumed.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    keep_alive: bool,
    /// Set while a request is under way: still set, the request was dropped half-way
    /// and the stream is somewhere inside a response.
    busy: bool,
    /// The last final answer's head and what it parsed to.
    last: Option<LastHead>,
    /// The last request as written with its traceparent, kept for the next.
    stamped: Vec<u8>,
}

/// A head as it came on the wire, byte for byte, and what [`parse_head`] made of it for
/// `method`. The parse is a function of those bytes and the method alone (httparse stops
/// at the empty line that ends the head), so an answer that starts with the same bytes
/// has the same head and is not parsed again. A target under load mostly repeats its
/// head (nginx's static page changes only in `Date`, once a second), and httparse with
/// `head_of` was the largest share of the engine's own instructions per request
/// (docs/benchmarks.md, "Fewer instructions per request").
#[derive(Debug)]
struct LastHead {
    bytes: Vec<u8>,
    method: Method,
    head: Head,
}

/// Heads longer than this are parsed every time rather than kept.
const MAX_KEPT_HEAD: usize = 2048;

impl<S> std::fmt::Debug for H1Conn<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1Conn")
            .field("keep_alive", &self.keep_alive)
            .field("busy", &self.busy)
            .finish_non_exhaustive()
    }
}

/// I/O errors are resets, as hyper's were counted (a timed-out socket excepted).
pub(super) fn io_failure(error: io::Error) -> Failure {
    match error.kind() {
        io::ErrorKind::TimedOut => Failure::Timeout,
        _ => Failure::Reset,
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> H1Conn<S> {
    pub fn new(io: S) -> H1Conn<S> {
        H1Conn {
            io,
            buf: vec![0; INITIAL_BUFFER],
            start: 0,
            end: 0,
            keep_alive: true,
            busy: false,
            last: None,
            stamped: Vec::new(),
        }
    }

    /// Whether another request may go on this connection.
    pub fn is_reusable(&self) -> bool {
        self.keep_alive && !self.busy
    }

    /// Sends `op` with its own traceparent, its trace id ending in `trace`
    /// ([`PreparedOp::stamped`]).
    pub async fn send_op(&mut self, op: &PreparedOp, trace: u64) -> Result<u16, Failure> {
        if !op.stamps() {
            return self.send(op.wire(), op.method()).await;
        }
        let mut request = std::mem::take(&mut self.stamped);
        op.stamped(&mut request, trace);
        let sent = self.send(&request, op.method()).await;
        self.stamped = request;
        sent
    }

    /// Sends `request` (head and body as they go on the wire, for `method`) and reads
    /// the answer to its end. Returns the status.
    pub async fn send(&mut self, request: &[u8], method: &Method) -> Result<u16, Failure> {
        if !self.is_reusable() {
            // The engine drops such a connection; this is for any other caller.
            return Err(Failure::Reset);
        }
        self.busy = true;
        self.start = 0;
        self.end = 0;
        self.io.write_all(request).await.map_err(io_failure)?;
        // A no-op for TCP; rustls writes its records out here.
        self.io.flush().await.map_err(io_failure)?;
        let head = loop {
            if let Some(head) = self.read_head(method).await? {
                break head;
            }
        };
        match head.framing {
            Framing::Empty => {}
            Framing::Length(n) => self.skip_length(n).await?,
            Framing::Chunked => self.skip_chunked().await?,
            Framing::Close => self.skip_to_close().await?,
        }
        // Bytes past the answer: the stream is out of step, so it is not reused (hyper
        // closes a connection that sends unasked bytes too).
        self.keep_alive =
            head.keep_alive && head.framing != Framing::Close && self.start == self.end;
        self.busy = false;
        Ok(head.status)
    }

    /// Reads more bytes into the buffer, making room first; `limit` caps how large the
    /// buffer may grow to hold what is not consumed yet. Returns 0 at the end of the
    /// stream.
    async fn fill(&mut self, limit: usize) -> Result<usize, Failure> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= limit {
                return Err(Failure::Protocol);
            }
            let grown = (self.buf.len() * 2).min(limit);
            self.buf.resize(grown, 0);
        }
        let n = self
            .io
            .read(&mut self.buf[self.end..])
            .await
            .map_err(io_failure)?;
        self.end += n;
        Ok(n)
    }

    /// Reads one response head: `None` for an informational answer to skip.
    async fn read_head(&mut self, method: &Method) -> Result<Option<Head>, Failure> {
        loop {
            let pending = &self.buf[self.start..self.end];
            if let Some(last) = &self.last
                && last.method == *method
                && pending.starts_with(&last.bytes)
            {
                self.start += last.bytes.len();
                return Ok(Some(last.head));
            }
            if !pending.is_empty()
                && let Some((used, head)) = parse_head(pending, method)?
            {
                if let Some(head) = head
                    && used <= MAX_KEPT_HEAD
                {
                    let bytes = &pending[..used];
                    match &mut self.last {
                        Some(last) => {
                            last.bytes.clear();
                            last.bytes.extend_from_slice(bytes);
                            last.method.clone_from(method);
                            last.head = head;
                        }
                        None => {
                            self.last = Some(LastHead {
                                bytes: bytes.to_vec(),
                                method: method.clone(),
                                head,
                            })
                        }
                    }
                }
                self.start += used;
                return Ok(head);
            }
            if self.fill(MAX_HEAD).await? == 0 {
                // Closed before a whole head: hyper's "incomplete message".
                return Err(Failure::Reset);
            }
        }
    }

    async fn skip_length(&mut self, mut remaining: u64) -> Result<(), Failure> {
        loop {
            let available = (self.end - self.start) as u64;
            let take = available.min(remaining);
            self.start += take as usize;
            remaining -= take;
            if remaining == 0 {
                return Ok(());
            }
            if self.fill(self.buf.len()).await? == 0 {
                return Err(Failure::Reset);
            }
        }
    }

    async fn skip_to_close(&mut self) -> Result<(), Failure> {
        loop {
            self.start = self.end;
            if self.fill(self.buf.len()).await? == 0 {
                return Ok(());
            }
        }
    }

    /// Reads a chunked body and its trailers, keeping nothing.
    async fn skip_chunked(&mut self) -> Result<(), Failure> {
        let mut state = Chunked::Size;
        let mut trailers = 0usize;
        loop {
            let pending = &self.buf[self.start..self.end];
            let step = match state {
                Chunked::Size => match line(pending)? {
                    Some((text, used)) => {
                        self.start += used;
                        let size = chunk_size(text)?;
                        state = if size == 0 {
                            Chunked::Trailers
                        } else {
                            Chunked::Data(size)
                        };
                        true
                    }
                    None => false,
                },
                Chunked::Data(remaining) => {
                    let take = (pending.len() as u64).min(remaining);
                    self.start += take as usize;
                    state = if take == remaining {
                        Chunked::DataEnd
                    } else {
                        Chunked::Data(remaining - take)
                    };
                    take == remaining
                }
                Chunked::DataEnd => match pending {
                    [b'\r', b'\n', ..] => {
                        self.start += 2;
                        state = Chunked::Size;
                        true
                    }
                    [] | [b'\r'] => false,
                    _ => return Err(Failure::Protocol),
                },
                Chunked::Trailers => match line(pending)? {
                    Some((text, used)) => {
                        self.start += used;
                        trailers += used;
                        if trailers > MAX_TRAILERS {
                            return Err(Failure::Protocol);
                        }
                        if text.is_empty() {
                            return Ok(());
                        }
                        true
                    }
                    None => false,
                },
            };
            if !step && self.fill(self.buf.len()).await? == 0 {
                return Err(Failure::Reset);
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Chunked {
    Size,
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    Trailers,
}

/// One CRLF-ended line at the start of `bytes`, without its CRLF, and the bytes it took;
/// `None` when it has not all arrived.
fn line(bytes: &[u8]) -> Result<Option<(&[u8], usize)>, Failure> {
    match bytes.iter().take(MAX_LINE + 2).position(|b| *b == b'\n') {
        Some(lf) if lf > 0 && bytes[lf - 1] == b'\r' => Ok(Some((&bytes[..lf - 1], lf + 1))),
        // A bare LF: hyper refuses it too.
        Some(_) => Err(Failure::Protocol),
        None if bytes.len() > MAX_LINE => Err(Failure::Protocol),
        None => Ok(None),
    }
}

/// A chunk-size line: hex digits, optional whitespace, optional `;extensions`.
fn chunk_size(text: &[u8]) -> Result<u64, Failure> {
    let digits_end = text
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(text.len());
    let rest = &text[digits_end..];
    let rest_ok = rest
        .iter()
        .position(|b| *b != b' ' && *b != b'\t')
        .is_none_or(|i| rest[i] == b';');
    if digits_end == 0 || digits_end > 16 || !rest_ok {
        return Err(Failure::Protocol);
    }
    let mut size = 0u64;
    for b in &text[..digits_end] {
        // Hex digits only, checked above; 16 of them fit a u64.
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => b - b'A' + 10,
        };
        size = (size << 4) | u64::from(digit);
    }
    Ok(size)
}

/// Parses a response head at the start of `bytes`: `None` if it has not all arrived,
/// else the bytes it took and the head (`None` for an informational answer to skip).
fn parse_head(bytes: &[u8], method: &Method) -> Result<Option<(usize, Option<Head>)>, Failure> {
    let mut few = [httparse::EMPTY_HEADER; FEW_HEADERS];
    let mut response = httparse::Response::new(&mut few);
    match response.parse(bytes) {
        Ok(status) => head_of(status, &response, method),
        Err(httparse::Error::TooManyHeaders) => {
            let mut many = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut response = httparse::Response::new(&mut many);
            let status = response.parse(bytes).map_err(|_| Failure::Protocol)?;
            head_of(status, &response, method)
        }
        Err(_) => Err(Failure::Protocol),
    }
}

fn head_of(
    status: httparse::Status<usize>,
    response: &httparse::Response<'_, '_>,
    method: &Method,
) -> Result<Option<(usize, Option<Head>)>, Failure> {
    let used = match status {
        httparse::Status::Complete(used) => used,
        httparse::Status::Partial => return Ok(None),
    };
    let code = response.code.ok_or(Failure::Protocol)?;
    let http10 = response.version == Some(0);
    let mut content_length: Option<u64> = None;
    let mut bad_length = false;
    let mut transfer_encoding: Option<&[u8]> = None;
    let mut close = false;
    let mut keep_alive_token = false;
    for header in response.headers.iter() {
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            // Every value (and comma-separated item) must be the same number.
            for item in header.value.split(|b| *b == b',') {
                match parse_length(item.trim_ascii()) {
                    Some(n) if content_length.is_none_or(|m| m == n) => content_length = Some(n),
                    _ => bad_length = true,
                }
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // The last value decides, as the final coding must be chunked.
            transfer_encoding = Some(header.value);
        } else if name.eq_ignore_ascii_case("connection") {
            for token in header.value.split(|b| *b == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    let keep_alive = !close && (!http10 || keep_alive_token);
    let head = |framing| {
        Ok(Some((
            used,
            Some(Head {
                status: code,
                framing,
                keep_alive,
            }),
        )))
    };
    match code {
        // Switching protocols: nothing more of HTTP/1.1 comes on this stream.
        101 => {
            return Ok(Some((
                used,
                Some(Head {
                    status: code,
                    framing: Framing::Empty,
                    keep_alive: false,
                }),
            )));
        }
        100..=199 => return Ok(Some((used, None))),
        204 | 304 => return head(Framing::Empty),
        _ => {}
    }
    if *method == Method::HEAD {
        return head(Framing::Empty);
    }
    if *method == Method::CONNECT && (200..300).contains(&code) {
        return Ok(Some((
            used,
            Some(Head {
                status: code,
                framing: Framing::Empty,
                keep_alive: false,
            }),
        )));
    }
    if let Some(te) = transfer_encoding {
        if http10 {
            return Err(Failure::Protocol);
        }
        let last = te.rsplit(|b| *b == b',').next().unwrap_or(te).trim_ascii();
        return if last.eq_ignore_ascii_case(b"chunked") {
            head(Framing::Chunked)
        } else {
            head(Framing::Close)
        };
    }
    if bad_length {
        return Err(Failure::Protocol);
    }
    match content_length {
        Some(0) => head(Framing::Empty),
        Some(n) => head(Framing::Length(n)),
        None => head(Framing::Close),
    }
}

fn parse_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0u64, |n, d| n * 10 + u64::from(d - b'0')),
    )
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests;
