//! One HTTP/2 connection's state without its I/O: the streams under way, both
//! directions' flow control, the peer's settings and HPACK's decoding table. The driver
//! ([`super::Driver`]) feeds it the bytes it reads and writes out what it queues;
//! requests open and await streams in it. Kept apart from the socket so that a test or
//! a property can feed it any bytes, cut anywhere.
//!
//! What a load generator needs of a response is its status and the end of its body:
//! bodies are counted against the windows and dropped. Stream errors end one request
//! (RST_STREAM); connection errors (RFC 9113, 5.4.1) end every request on it and send a
//! GOAWAY.

use std::collections::HashMap;
use std::task::{Poll, Waker};

use hyper::body::Bytes;

use super::frame::{self, Head};
use super::hpack::{Decoder, Status};
use crate::load::client::Failure;

mod control;

/// The window we give each stream: a response body up to half of it needs no
/// WINDOW_UPDATE of its own.
pub const STREAM_WINDOW: u32 = 1 << 20;
/// The window we give the whole connection (raised from 65,535 at the start).
pub const CONN_WINDOW: u32 = 1 << 24;
/// A header block (HEADERS and its CONTINUATIONs) larger than this ends the connection:
/// the same bound as the HTTP/1.1 driver's head, so a peer cannot grow memory at will.
pub const MAX_HEADER_BLOCK: usize = 8192 + 4096 * 100;
/// The largest frame we accept: we leave SETTINGS_MAX_FRAME_SIZE at its default.
pub const MAX_FRAME: usize = frame::DEFAULT_MAX_FRAME as usize;
/// Client streams are odd and at most 2^31 - 1; a connection stops being reused well
/// before, so that the streams already sent on it can still be numbered.
const LAST_STREAM_ID: u32 = (1 << 31) - 1;
/// CONTINUATION frames one header block may take: empty ones would otherwise cost CPU
/// without growing the block (the "CONTINUATION flood").
const MAX_CONTINUATIONS: usize = 512;
/// Bytes of PING and SETTINGS answers queued and not yet taken by the driver past which
/// another is not answered but ends the connection.
const MAX_QUEUED: usize = 1 << 20;
const REUSE_BELOW: u32 = LAST_STREAM_ID - 4096;

/// A connection error: the code sent in GOAWAY and what each request counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ConnError {
    code: u32,
    failure: Failure,
}

const PROTOCOL: ConnError = ConnError {
    code: frame::PROTOCOL_ERROR,
    failure: Failure::Protocol,
};
const FRAME_SIZE: ConnError = ConnError {
    code: frame::FRAME_SIZE_ERROR,
    failure: Failure::Protocol,
};
const FLOW_CONTROL: ConnError = ConnError {
    code: frame::FLOW_CONTROL_ERROR,
    failure: Failure::Protocol,
};

/// One request's stream.
struct Slot {
    /// Set when the stream ended; taken by the request.
    outcome: Option<Result<u16, Failure>>,
    /// Ended unprocessed by the server (above a GOAWAY's last stream, or refused with
    /// REFUSED_STREAM): safe to send again (RFC 9113, 8.7).
    unprocessed: bool,
    waker: Option<Waker>,
    /// The final (non-1xx) status, once its HEADERS came.
    status: Option<u16>,
    /// The request body and how much of it is sent: the rest waits for window.
    body: Bytes,
    sent: usize,
    send_window: i64,
    /// Body bytes received and not yet given back with a WINDOW_UPDATE.
    unacked: u32,
}

/// A connection's state; see the module's comment.
pub struct Core {
    /// Bytes to write, in order: the driver takes them.
    pub out: Vec<u8>,
    /// The driver's waker, for when a request queues bytes.
    pub driver: Option<Waker>,
    streams: HashMap<u32, Slot>,
    next_id: u32,
    /// Streams whose answer is not complete: what the peer's
    /// SETTINGS_MAX_CONCURRENT_STREAMS counts.
    active: usize,
    max_concurrent: usize,
    /// Streams kept for requests not yet taken ([`Core::poll_reserve`]): counted with
    /// `active` against the peer's limit, so that the worker that waited for room is the
    /// one that gets it.
    reserved: usize,
    /// Requests (and reservations) waiting for `active` to drop below `max_concurrent`.
    room: Vec<Waker>,
    peer_max_frame: usize,
    peer_initial_window: i64,
    send_window: i64,
    /// Connection-level body bytes received and not yet given back.
    unacked: u32,
    decoder: Decoder,
    /// A header block being gathered, and for which stream (with its END_STREAM flag)
    /// while CONTINUATION frames are due.
    block: Vec<u8>,
    continuing: Option<(u32, bool)>,
    /// CONTINUATION frames of the block being gathered.
    continuations: usize,
    /// A request's header block with its traceparent ([`Core::open_stamped`]), kept for
    /// the next request.
    stamped: Vec<u8>,
    /// Bytes of PING and SETTINGS answers queued since the driver last took `out`.
    control_queued: usize,
    settings_seen: bool,
    going_away: bool,
    closed: Option<Failure>,
}

impl Default for Core {
    fn default() -> Core {
        Core {
            out: Vec::with_capacity(4096),
            driver: None,
            streams: HashMap::new(),
            next_id: 1,
            active: 0,
            max_concurrent: usize::MAX,
            reserved: 0,
            room: Vec::new(),
            peer_max_frame: MAX_FRAME,
            peer_initial_window: frame::DEFAULT_WINDOW,
            send_window: frame::DEFAULT_WINDOW,
            unacked: 0,
            decoder: Decoder::default(),
            block: Vec::new(),
            continuing: None,
            continuations: 0,
            stamped: Vec::new(),
            control_queued: 0,
            settings_seen: false,
            going_away: false,
            closed: None,
        }
    }
}

type Woken = Vec<Waker>;

impl Core {
    /// Queues the client's preface, its SETTINGS (no push, our stream window) and the
    /// connection window's raise.
    pub fn start(&mut self) {
        self.out.extend_from_slice(frame::PREFACE);
        frame::settings(
            &mut self.out,
            &[
                (frame::SETTINGS_ENABLE_PUSH, 0),
                (frame::SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW),
            ],
        );
        frame::window_update(&mut self.out, 0, CONN_WINDOW - frame::DEFAULT_WINDOW as u32);
    }

    /// Whether the peer's first SETTINGS came (the connection is ready).
    pub fn settings_seen(&self) -> bool {
        self.settings_seen
    }

    pub fn closed(&self) -> Option<Failure> {
        self.closed
    }

    /// Whether a new request may use this connection: not failed, not going away.
    pub fn is_reusable(&self) -> bool {
        self.closed.is_none() && !self.going_away && self.next_id < REUSE_BELOW
    }

    /// No stream is kept for a request any more.
    pub fn is_idle(&self) -> bool {
        self.streams.is_empty()
    }

    /// Keeps a stream for a request not yet taken: ready with `true` once one is free
    /// (pending, with `waker` kept, while the peer's limit is reached), at once with
    /// `false` on a connection that takes no new requests. The open model's worker waits
    /// here before it takes its next request, so that a request due while every stream
    /// is busy is left for a new connection, or counted as held (engine/open.rs).
    pub fn poll_reserve(&mut self, waker: &Waker) -> Poll<bool> {
        if !self.is_reusable() {
            return Poll::Ready(false);
        }
        if self.active + self.reserved >= self.max_concurrent {
            if !self.room.iter().any(|w| w.will_wake(waker)) {
                self.room.push(waker.clone());
            }
            return Poll::Pending;
        }
        self.reserved += 1;
        Poll::Ready(true)
    }

    /// A kept stream given back unused: another waiter may have it.
    pub fn unreserve(&mut self, woken: &mut Woken) {
        self.reserved = self.reserved.saturating_sub(1);
        woken.append(&mut self.room);
    }

    /// [`Core::open_stamped`] with nothing after the block (the core's own tests).
    #[cfg(test)]
    pub fn open(
        &mut self,
        block: &[u8],
        body: &Bytes,
        waker: &Waker,
        reserved: bool,
    ) -> Poll<Result<u32, Failure>> {
        self.open_stamped(block, &[], body, waker, reserved)
    }

    /// Starts a stream for a request: its header `block`, then `extra` (the request's own
    /// encoded fields: its traceparent), and `body`. Pending (with `waker` kept) while the
    /// peer's limit of concurrent streams is reached, unless a stream was kept for it
    /// (`reserved`: it goes at once, even should the peer have lowered its limit since,
    /// which a REFUSED_STREAM then answers).
    pub fn open_stamped(
        &mut self,
        block: &[u8],
        extra: &[u8],
        body: &Bytes,
        waker: &Waker,
        reserved: bool,
    ) -> Poll<Result<u32, Failure>> {
        if reserved {
            self.reserved = self.reserved.saturating_sub(1);
        }
        if let Some(failure) = self.closed {
            return Poll::Ready(Err(failure));
        }
        if self.going_away || self.next_id > LAST_STREAM_ID {
            return Poll::Ready(Err(Failure::Reset));
        }
        if !reserved && self.active + self.reserved >= self.max_concurrent {
            if !self.room.iter().any(|w| w.will_wake(waker)) {
                self.room.push(waker.clone());
            }
            return Poll::Pending;
        }
        let id = self.next_id;
        self.next_id += 2;
        let block = if extra.is_empty() {
            block
        } else {
            self.stamped.clear();
            self.stamped.extend_from_slice(block);
            self.stamped.extend_from_slice(extra);
            &self.stamped
        };
        frame::headers(
            &mut self.out,
            id,
            body.is_empty(),
            block,
            self.peer_max_frame,
        );
        self.streams.insert(
            id,
            Slot {
                outcome: None,
                unprocessed: false,
                waker: None,
                status: None,
                body: body.clone(),
                sent: 0,
                send_window: self.peer_initial_window,
                unacked: 0,
            },
        );
        self.active += 1;
        if !body.is_empty() {
            self.send_bodies();
        }
        Poll::Ready(Ok(id))
    }

    /// The request's outcome once its stream ended (the stream is then forgotten), and
    /// whether the server left it unprocessed.
    pub fn poll_outcome(&mut self, id: u32, waker: &Waker) -> Poll<(Result<u16, Failure>, bool)> {
        let Some(slot) = self.streams.get_mut(&id) else {
            return Poll::Ready((Err(self.closed.unwrap_or(Failure::Reset)), false));
        };
        if let Some(outcome) = slot.outcome.take() {
            let unprocessed = slot.unprocessed;
            self.streams.remove(&id);
            return Poll::Ready((outcome, unprocessed));
        }
        if !slot.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            slot.waker = Some(waker.clone());
        }
        Poll::Pending
    }

    /// A request given up before its answer (its timeout): RST_STREAM(CANCEL), and
    /// what still comes for it is dropped.
    pub fn cancel(&mut self, id: u32, woken: &mut Woken) {
        let Some(slot) = self.streams.remove(&id) else {
            return;
        };
        if slot.outcome.is_none() {
            self.active -= 1;
            woken.append(&mut self.room);
            if self.closed.is_none() {
                frame::rst_stream(&mut self.out, id, frame::CANCEL);
            }
        }
    }

    /// Ends every request: the connection failed (I/O, the peer's close, or an error of
    /// ours, for which `code` goes out in a GOAWAY first).
    pub fn fail(&mut self, failure: Failure, code: Option<u32>, woken: &mut Woken) {
        if self.closed.is_some() {
            return;
        }
        self.closed = Some(failure);
        if let Some(code) = code {
            // What is queued is for requests failed here: dropped, so the GOAWAY goes
            // out next.
            self.out.clear();
            frame::goaway(&mut self.out, 0, code);
        }
        for slot in self.streams.values_mut() {
            if slot.outcome.is_none() {
                slot.outcome = Some(Err(failure));
                woken.extend(slot.waker.take());
            }
        }
        self.active = 0;
        woken.append(&mut self.room);
    }

    /// Takes the whole frames at the start of `buf`; returns how many bytes they took
    /// (the rest is a frame not yet whole). Wakers of requests that can go on are put in
    /// `woken`. A connection error fails the connection and takes everything.
    pub fn receive(&mut self, buf: &[u8], woken: &mut Woken) -> usize {
        let mut used = 0;
        while self.closed.is_none() {
            let Some(head) = Head::parse(&buf[used..]) else {
                break;
            };
            let len = head.len as usize;
            if len > MAX_FRAME {
                self.fail(FRAME_SIZE.failure, Some(FRAME_SIZE.code), woken);
                return buf.len();
            }
            let Some(payload) = buf.get(used + frame::HEAD_LEN..used + frame::HEAD_LEN + len)
            else {
                break;
            };
            used += frame::HEAD_LEN + len;
            if let Err(e) = self.frame(head, payload, woken) {
                self.fail(e.failure, Some(e.code), woken);
                return buf.len();
            }
        }
        if self.closed.is_some() {
            buf.len()
        } else {
            used
        }
    }

    fn frame(&mut self, head: Head, payload: &[u8], woken: &mut Woken) -> Result<(), ConnError> {
        if !self.settings_seen && head.kind != frame::SETTINGS {
            // The server's preface is a SETTINGS frame (3.4): anything else is not HTTP/2.
            return Err(PROTOCOL);
        }
        if let Some((stream, _)) = self.continuing
            && (head.kind != frame::CONTINUATION || head.stream != stream)
        {
            return Err(PROTOCOL);
        }
        match head.kind {
            frame::DATA => self.data(head, payload, woken),
            frame::HEADERS => self.headers(head, payload, woken),
            frame::CONTINUATION => self.continuation(head, payload, woken),
            frame::RST_STREAM => {
                if head.stream == 0 || head.stream >= self.next_id {
                    return Err(PROTOCOL);
                }
                let code: [u8; 4] = payload.try_into().map_err(|_| FRAME_SIZE)?;
                if u32::from_be_bytes(code) == frame::REFUSED_STREAM {
                    self.end_unprocessed(head.stream, woken);
                } else {
                    self.end_stream(head.stream, Err(Failure::Reset), woken);
                }
                Ok(())
            }
            frame::SETTINGS => self.settings(head, payload, woken),
            frame::PUSH_PROMISE => Err(PROTOCOL), // we said SETTINGS_ENABLE_PUSH 0
            frame::PING => {
                if head.stream != 0 {
                    return Err(PROTOCOL);
                }
                if payload.len() != 8 {
                    return Err(FRAME_SIZE);
                }
                if head.flags & frame::ACK == 0 {
                    self.room_for_control()?;
                    frame::ping_ack(&mut self.out, payload);
                }
                Ok(())
            }
            frame::GOAWAY => {
                if head.stream != 0 {
                    return Err(PROTOCOL);
                }
                if payload.len() < 8 {
                    return Err(FRAME_SIZE);
                }
                let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                    & 0x7fff_ffff;
                // Streams above `last` were never processed; the rest may still finish.
                self.going_away = true;
                let unprocessed: Vec<u32> = self
                    .streams
                    .keys()
                    .copied()
                    .filter(|id| *id > last)
                    .collect();
                for id in unprocessed {
                    self.end_unprocessed(id, woken);
                }
                woken.append(&mut self.room);
                Ok(())
            }
            frame::WINDOW_UPDATE => self.window_update(head, payload, woken),
            frame::PRIORITY => self.priority(head, payload, woken),
            // Unknown types are ignored (5.5).
            _ => Ok(()),
        }
    }

    fn data(&mut self, head: Head, payload: &[u8], woken: &mut Woken) -> Result<(), ConnError> {
        if head.stream == 0 || head.stream.is_multiple_of(2) {
            return Err(PROTOCOL);
        }
        if head.stream >= self.next_id {
            return Err(PROTOCOL); // an idle stream (5.1)
        }
        frame::unpad(head.flags, payload).ok_or(PROTOCOL)?;
        // The whole payload, padding too, counts against the windows (6.9.1).
        let len = payload.len() as u32;
        self.unacked += len;
        if self.unacked >= CONN_WINDOW / 2 {
            frame::window_update(&mut self.out, 0, self.unacked);
            self.unacked = 0;
        }
        let Some(slot) = self.streams.get_mut(&head.stream) else {
            return Ok(()); // a stream we cancelled
        };
        if slot.outcome.is_some() {
            return Ok(());
        }
        let Some(status) = slot.status else {
            self.stream_error(head.stream, frame::PROTOCOL_ERROR, woken);
            return Ok(());
        };
        if head.flags & frame::END_STREAM != 0 {
            self.end_stream(head.stream, Ok(status), woken);
        } else {
            slot.unacked += len;
            if slot.unacked >= STREAM_WINDOW / 2 {
                frame::window_update(&mut self.out, head.stream, slot.unacked);
                slot.unacked = 0;
            }
        }
        Ok(())
    }

    fn headers(&mut self, head: Head, payload: &[u8], woken: &mut Woken) -> Result<(), ConnError> {
        if head.stream == 0 || head.stream.is_multiple_of(2) || head.stream >= self.next_id {
            return Err(PROTOCOL);
        }
        let mut fragment = frame::unpad(head.flags, payload).ok_or(PROTOCOL)?;
        if head.flags & frame::PRIORITY_FLAG != 0 {
            fragment = fragment.get(5..).ok_or(PROTOCOL)?;
        }
        self.block.clear();
        self.block.extend_from_slice(fragment);
        self.continuations = 0;
        let end_stream = head.flags & frame::END_STREAM != 0;
        if head.flags & frame::END_HEADERS == 0 {
            self.continuing = Some((head.stream, end_stream));
            return Ok(());
        }
        self.header_block(head.stream, end_stream, woken)
    }

    fn continuation(
        &mut self,
        head: Head,
        payload: &[u8],
        woken: &mut Woken,
    ) -> Result<(), ConnError> {
        let Some((stream, end_stream)) = self.continuing else {
            return Err(PROTOCOL);
        };
        self.continuations += 1;
        if self.block.len() + payload.len() > MAX_HEADER_BLOCK
            || self.continuations > MAX_CONTINUATIONS
        {
            return Err(PROTOCOL);
        }
        self.block.extend_from_slice(payload);
        if head.flags & frame::END_HEADERS == 0 {
            return Ok(());
        }
        self.continuing = None;
        self.header_block(stream, end_stream, woken)
    }

    /// A whole header block: decoded (the table must follow every block, even a
    /// cancelled stream's), then its `:status` read.
    fn header_block(
        &mut self,
        id: u32,
        end_stream: bool,
        woken: &mut Woken,
    ) -> Result<(), ConnError> {
        let decoded = self.decoder.decode(&self.block).map_err(|_| ConnError {
            code: frame::COMPRESSION_ERROR,
            failure: Failure::Protocol,
        })?;
        let (status, bad_status) = match decoded {
            Status::Absent => (None, false),
            Status::Valid(status) => (Some(status), false),
            Status::Invalid => (None, true),
        };
        let Some(slot) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        if slot.outcome.is_some() {
            return Ok(());
        }
        let outcome = match (slot.status, status) {
            _ if bad_status => None,
            // Trailers: they end the stream.
            (Some(final_status), None) if end_stream => Some(Ok(final_status)),
            (Some(_), _) => None,
            // An informational answer (other than 101, which HTTP/2 has not): the final
            // one follows.
            (None, Some(s)) if (100..200).contains(&s) && s != 101 && !end_stream => return Ok(()),
            (None, Some(s)) if !(100..200).contains(&s) => {
                slot.status = Some(s);
                if !end_stream {
                    return Ok(());
                }
                Some(Ok(s))
            }
            (None, _) => None,
        };
        match outcome {
            Some(outcome) => self.end_stream(id, outcome, woken),
            None => self.stream_error(id, frame::PROTOCOL_ERROR, woken),
        }
        Ok(())
    }

    /// Queues as much of the waiting request bodies as both windows allow.
    fn send_bodies(&mut self) {
        for (id, slot) in &mut self.streams {
            while slot.outcome.is_none() && slot.sent < slot.body.len() {
                let room = slot
                    .send_window
                    .min(self.send_window)
                    .min(self.peer_max_frame as i64);
                if room <= 0 {
                    break;
                }
                let n = (slot.body.len() - slot.sent).min(room as usize);
                let end = slot.sent + n;
                frame::data(
                    &mut self.out,
                    *id,
                    end == slot.body.len(),
                    &slot.body[slot.sent..end],
                );
                slot.sent = end;
                slot.send_window -= n as i64;
                self.send_window -= n as i64;
            }
        }
    }

    /// Hands the bytes queued to write to the driver (swapped with its empty buffer).
    pub fn take_out(&mut self, into: &mut Vec<u8>) {
        std::mem::swap(&mut self.out, into);
        self.control_queued = 0;
    }

    /// A stream the server did not process: it fails as a reset, marked safe to send
    /// again.
    fn end_unprocessed(&mut self, id: u32, woken: &mut Woken) {
        if let Some(slot) = self.streams.get_mut(&id)
            && slot.outcome.is_none()
        {
            // Not if an answer had begun: then the server did process it.
            slot.unprocessed = slot.status.is_none();
        }
        self.end_stream(id, Err(Failure::Reset), woken);
    }

    /// A stream error of ours (5.4.2): RST_STREAM with `code`; the request fails.
    fn stream_error(&mut self, id: u32, code: u32, woken: &mut Woken) {
        frame::rst_stream(&mut self.out, id, code);
        self.end_stream(id, Err(Failure::Protocol), woken);
    }

    fn end_stream(&mut self, id: u32, outcome: Result<u16, Failure>, woken: &mut Woken) {
        let Some(slot) = self.streams.get_mut(&id) else {
            return;
        };
        if slot.outcome.is_some() {
            return;
        }
        if outcome.is_ok() && slot.sent < slot.body.len() {
            // Answered before the body was all sent (8.1): the rest is not wanted.
            frame::rst_stream(&mut self.out, id, frame::NO_ERROR);
        }
        slot.body = Bytes::new();
        slot.outcome = Some(outcome);
        woken.extend(slot.waker.take());
        self.active -= 1;
        woken.append(&mut self.room);
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
