//! The load engine's HTTP/2 connection: a small client of our own. A connection is one
//! task (the [`Driver`]) that owns the socket and writes what the requests queued and
//! reads what the server sent, in as few system calls as there is work for; the
//! connection's state ([`core::Core`]: streams, windows, settings, the HPACK decoder)
//! sits behind one lock that the requests and the driver share. A request writes its
//! HEADERS frame (its header block encoded once per operation, [`hpack::field`]) and
//! body into the state's outgoing bytes, wakes the driver, and waits for its stream's
//! end: there is no header map, no channel and no allocation per request. With several
//! streams on a connection their requests go out in one write and their answers come
//! back in one read, as h2load does.
//!
//! It replaced the `h2` crate's client, which this engine drove at 0.59-0.80x h2load's
//! requests/s at equal CPU (docs/benchmarks.md, "HTTP/2 and TLS side by side"): each
//! request there cloned and dropped a handle under the connection's lock, built a
//! header map and a stream of its own, and polled the response and its body apart.

mod core;
pub mod frame;
pub mod hpack;
mod huffman;

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use hyper::HeaderMap;
use hyper::body::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Sleep;

use self::core::{Core, MAX_FRAME};
use super::client::Failure;
use super::h1::{Stream, io_failure};

/// The read buffer: a few whole frames of the largest size we accept.
const READ_BUFFER: usize = 4 * (MAX_FRAME + frame::HEAD_LEN);
/// Reads and writes one turn of the driver does before it lets other tasks run.
const DRIVER_BUDGET: usize = 32;
/// How long a connection failed by an error of ours is kept to send its GOAWAY and see
/// the server close: a server that reads nothing, or never closes, costs no more.
const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// The headers HTTP/2 forbids (RFC 9113, 8.2.2); hyper drops them too.
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Removes what may not go on an HTTP/2 stream (`te` only as `trailers`).
pub fn strip_connection_headers(headers: &mut HeaderMap) {
    for name in CONNECTION_SPECIFIC {
        headers.remove(name);
    }
    if headers.get("te").is_some_and(|v| v != "trailers") {
        headers.remove("te");
    }
}

/// One worker's handle on an HTTP/2 connection; clones share it. The connection ends
/// when the last handle is dropped (or the peer or an error ends it).
#[derive(Debug)]
pub struct H2Conn {
    shared: Arc<Shared>,
    /// This handle's last request was not processed by the server (refused before its
    /// stream opened, above a GOAWAY's last stream, or REFUSED_STREAM).
    unprocessed: bool,
    /// A stream is kept for this handle's next request ([`H2Conn::reserve`]).
    reserved: bool,
}

/// What [`H2Conn::reserve`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// A stream was free at once.
    Free,
    /// A stream, after waiting for one of the server's to end.
    Waited,
    /// None: the connection failed or is going away; the next request goes as usual.
    None,
}

struct Shared {
    core: Mutex<Core>,
    handles: AtomicUsize,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("handles", &self.handles)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// The state, also after a panic elsewhere held the lock: every change to it is
    /// whole before anything that could panic runs.
    fn core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the state, then wakes the driver if `f` queued the first bytes to
    /// write, and the tasks `f` woke: outside the lock.
    fn with<T>(&self, f: impl FnOnce(&mut Core, &mut Vec<Waker>) -> T) -> T {
        let mut woken = Vec::new();
        let (value, driver) = {
            let mut core = self.core();
            let was_empty = core.out.is_empty();
            let value = f(&mut core, &mut woken);
            let driver = (was_empty && !core.out.is_empty())
                .then(|| core.driver.clone())
                .flatten();
            (value, driver)
        };
        woken.into_iter().chain(driver).for_each(Waker::wake);
        value
    }
}

impl Clone for H2Conn {
    fn clone(&self) -> H2Conn {
        self.shared.handles.fetch_add(1, Ordering::Relaxed);
        H2Conn {
            shared: self.shared.clone(),
            unprocessed: false,
            reserved: false,
        }
    }
}

impl Drop for H2Conn {
    fn drop(&mut self) {
        if self.reserved {
            self.shared.with(|core, woken| core.unreserve(woken));
        }
        if self.shared.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last handle: the driver ends the connection.
            let driver = self.shared.core().driver.take();
            driver.into_iter().for_each(Waker::wake);
        }
    }
}

/// A request's stream while it is under way: dropped before its end (a timeout), the
/// stream is cancelled.
struct Pending<'a> {
    shared: &'a Shared,
    id: u32,
    ended: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.shared.with(|core, woken| core.cancel(self.id, woken));
        }
    }
}

impl H2Conn {
    /// The client preface and SETTINGS over `io`, then the server's SETTINGS awaited:
    /// past this the server's limits are known. The connection is then driven by a task
    /// of its own.
    pub async fn handshake(mut io: Stream) -> Result<H2Conn, Failure> {
        let mut core = Core::default();
        core.start();
        io.write_all(&core.out).await.map_err(io_failure)?;
        io.flush().await.map_err(io_failure)?;
        core.out.clear();
        let mut read = vec![0; READ_BUFFER];
        let (mut start, mut end) = (0, 0);
        let mut woken = Vec::new();
        while !core.settings_seen() {
            let n = io.read(&mut read[end..]).await.map_err(io_failure)?;
            if n == 0 {
                return Err(Failure::Reset);
            }
            end += n;
            start += core.receive(&read[start..end], &mut woken);
            if let Some(failure) = core.closed() {
                // An error of ours: its GOAWAY is tried once, within the linger, and the
                // failure stands whatever comes of it.
                let goaway = async {
                    io.write_all(&core.out).await?;
                    io.shutdown().await
                };
                let _ = tokio::time::timeout(CLOSE_LINGER, goaway).await;
                return Err(failure);
            }
            if end == read.len() {
                // A first SETTINGS frame larger than the buffer is refused by `receive`.
                read.copy_within(start..end, 0);
                end -= start;
                start = 0;
            }
        }
        let shared = Arc::new(Shared {
            core: Mutex::new(core),
            handles: AtomicUsize::new(1),
        });
        tokio::spawn(Driver {
            io,
            shared: shared.clone(),
            read,
            start,
            end,
            write: Vec::with_capacity(4096),
            written: 0,
            flush: false,
            closing: None,
            shut: false,
        });
        Ok(H2Conn {
            shared,
            unprocessed: false,
            reserved: false,
        })
    }

    /// Whether this handle's last request failed without the server processing it
    /// (the connection had been told GOAWAY or had failed before it went out; it was
    /// above a GOAWAY's last stream; REFUSED_STREAM): it may be sent again (RFC 9113,
    /// 8.7).
    pub fn unprocessed(&self) -> bool {
        self.unprocessed
    }

    /// Whether `other` is a handle on the same connection.
    pub fn same_as(&self, other: &H2Conn) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Whether a new request may go on this connection: not failed, no GOAWAY.
    pub fn is_reusable(&self) -> bool {
        self.shared.core().is_reusable()
    }

    /// Keeps a stream for this handle's next request, waiting while the server's limit
    /// of concurrent streams is reached; the stream is given back if the handle is
    /// dropped unused. The open model's worker calls it before it takes a request.
    pub async fn reserve(&mut self) -> Reservation {
        if self.reserved {
            return Reservation::Free;
        }
        let shared = &*self.shared;
        let mut waited = false;
        self.reserved = poll_fn(|cx| {
            let kept = shared.core().poll_reserve(cx.waker());
            waited |= kept.is_pending();
            kept
        })
        .await;
        match (self.reserved, waited) {
            (false, _) => Reservation::None,
            (true, false) => Reservation::Free,
            (true, true) => Reservation::Waited,
        }
    }

    /// Sends one request (its header `block`, then `body` when not empty) and waits for
    /// its answer's end; the body is counted against the windows, never kept. Returns
    /// the status.
    pub async fn send(&mut self, block: &[u8], body: &Bytes) -> Result<u16, Failure> {
        self.send_stamped(block, &[], body).await
    }

    /// [`H2Conn::send`] with `extra` fields after the header block (the request's
    /// traceparent).
    pub async fn send_stamped(
        &mut self,
        block: &[u8],
        extra: &[u8],
        body: &Bytes,
    ) -> Result<u16, Failure> {
        let shared = &*self.shared;
        self.unprocessed = false;
        let reserved = std::mem::take(&mut self.reserved);
        let opened = poll_fn(|cx| {
            shared.with(|core, _| core.open_stamped(block, extra, body, cx.waker(), reserved))
        })
        .await;
        // `open` fails only before it makes a stream: nothing of the request was sent.
        self.unprocessed = opened.is_err();
        let id = opened?;
        let mut pending = Pending {
            shared,
            id,
            ended: false,
        };
        let (outcome, unprocessed) = poll_fn(|cx| shared.core().poll_outcome(id, cx.waker())).await;
        pending.ended = true;
        self.unprocessed = unprocessed;
        outcome
    }
}

/// The connection's task: writes what the requests queued, reads and hands what came
/// to the state, until the last handle is gone or the connection fails.
struct Driver {
    io: Stream,
    shared: Arc<Shared>,
    /// `read[start..end]` is read and not yet a whole frame.
    read: Vec<u8>,
    start: usize,
    end: usize,
    /// `write[written..]` is still to go out.
    write: Vec<u8>,
    written: usize,
    /// Written since the last flush (rustls sends its records there).
    flush: bool,
    /// The close's deadline, once the connection failed by an error of ours; see
    /// [`Driver::poll_close`].
    closing: Option<Pin<Box<Sleep>>>,
    /// Our side is shut: the close only reads.
    shut: bool,
}

impl Driver {
    /// Ends every request with `failure`, and the task with them.
    fn fail(&self, failure: Failure) -> Poll<()> {
        self.shared
            .with(|core, woken| core.fail(failure, None, woken));
        Poll::Ready(())
    }

    /// Writes what is queued, as far as the socket takes it now; whether anything went.
    fn write_queued(&mut self, cx: &mut Context<'_>) -> Result<bool, Failure> {
        let mut wrote = false;
        while self.written < self.write.len() {
            match Pin::new(&mut self.io).poll_write(cx, &self.write[self.written..]) {
                Poll::Ready(Ok(0)) => return Err(Failure::Reset),
                Poll::Ready(Ok(n)) => {
                    self.written += n;
                    self.flush = true;
                    wrote = true;
                }
                Poll::Ready(Err(e)) => return Err(io_failure(e)),
                Poll::Pending => return Ok(wrote),
            }
        }
        self.write.clear();
        self.written = 0;
        if self.flush {
            match Pin::new(&mut self.io).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.flush = false,
                Poll::Ready(Err(e)) => return Err(io_failure(e)),
                Poll::Pending => {}
            }
        }
        Ok(wrote)
    }

    /// Starts the close after an error of ours (`goaway`, what the state queued last):
    /// the frame being written is finished, what is queued behind it dropped (its
    /// requests have failed), and the GOAWAY goes next.
    fn start_close(&mut self, mut goaway: Vec<u8>) {
        // `write` holds whole frames from its start: keep up to the end of the one that
        // `written` is in.
        let mut end = 0;
        while end < self.written {
            let Some(head) = frame::Head::parse(&self.write[end..]) else {
                end = self.write.len();
                break;
            };
            end += frame::HEAD_LEN + head.len as usize;
        }
        self.write.truncate(end);
        self.write.append(&mut goaway);
        self.closing = Some(Box::pin(tokio::time::sleep(CLOSE_LINGER)));
    }

    /// The close after an error of ours (RFC 9113, 5.4.1), as far as the socket allows
    /// now: the GOAWAY written and flushed, our side shut, then the server's bytes read
    /// and dropped until it closes too, as closing with bytes unread would send a TCP
    /// reset, which can discard the GOAWAY before the server reads it. Ready when it is
    /// over: done, failed, or past [`CLOSE_LINGER`].
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self
            .closing
            .as_mut()
            .is_none_or(|linger| linger.as_mut().poll(cx).is_ready())
        {
            return Poll::Ready(());
        }
        if !self.shut {
            if self.write_queued(cx).is_err() {
                return Poll::Ready(());
            }
            if self.written < self.write.len() || self.flush {
                // The socket holds our waker.
                return Poll::Pending;
            }
            match Pin::new(&mut self.io).poll_shutdown(cx) {
                Poll::Ready(Ok(())) => self.shut = true,
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }
        for _ in 0..DRIVER_BUDGET {
            let mut buf = ReadBuf::new(&mut self.read);
            match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
                // The server closed too: the GOAWAY was there for it to read.
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(()),
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Reads once, if anything came, and hands the whole frames to the state; whether
    /// anything came.
    fn read_some(&mut self, cx: &mut Context<'_>) -> Result<bool, Failure> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.end == self.read.len() {
            self.read.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let mut buf = ReadBuf::new(&mut self.read[self.end..]);
        match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len();
                if n == 0 {
                    return Err(Failure::Reset);
                }
                self.end += n;
                let frames = &self.read[self.start..self.end];
                self.start += self.shared.with(|core, woken| core.receive(frames, woken));
                Ok(true)
            }
            Poll::Ready(Err(e)) => Err(io_failure(e)),
            Poll::Pending => Ok(false),
        }
    }
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.closing.is_some() {
            return this.poll_close(cx);
        }
        for _ in 0..DRIVER_BUDGET {
            {
                let mut core = this.shared.core();
                if core.closed().is_some() {
                    // Failed by an error of ours (the driver's own failures return at
                    // once): before the queue is taken, which would mix the GOAWAY in.
                    let goaway = std::mem::take(&mut core.out);
                    drop(core);
                    this.start_close(goaway);
                    return this.poll_close(cx);
                }
                // Before the queue is taken: a request that queues after it wakes us.
                if !core
                    .driver
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    core.driver = Some(cx.waker().clone());
                }
                if this.shared.handles.load(Ordering::Acquire) == 0 && core.is_idle() {
                    return Poll::Ready(());
                }
                if this.write.is_empty() {
                    core.take_out(&mut this.write);
                }
            }
            let wrote = match this.write_queued(cx) {
                Ok(wrote) => wrote,
                Err(failure) => return this.fail(failure),
            };
            let read = match this.read_some(cx) {
                Ok(read) => read,
                Err(failure) => return this.fail(failure),
            };
            if !wrote && !read {
                // Both the socket and the state hold our waker.
                return Poll::Pending;
            }
        }
        // Busy: let the requests it woke run, then go on.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
/// The properties' runner: a fixed seed and a bounded number of cases.
#[cfg(test)]
fn property_runner(cases: u32) -> proptest::test_runner::TestRunner {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[19; 32]),
    )
}

#[cfg(test)]
mod tests;
