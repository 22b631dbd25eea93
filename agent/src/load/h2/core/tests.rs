//! The connection's state fed frames by hand: what a server may send, cut anywhere.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Wake;

use super::*;

/// A waker that counts its wakes.
#[derive(Default)]
pub(super) struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

pub(super) fn waker() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count::default());
    (count.clone(), Waker::from(count))
}

/// A server's frames, written with the frame helpers and a third-party HPACK encoder
/// (Huffman-coded values, entered in the table, indexed when they are there already:
/// what nginx does).
#[derive(Default)]
pub(super) struct Server {
    pub bytes: Vec<u8>,
    encoder: httlib_hpack::Encoder<'static>,
}

impl Server {
    pub fn settings(mut self, values: &[(u16, u32)]) -> Server {
        frame::settings(&mut self.bytes, values);
        self
    }

    pub fn headers(mut self, stream: u32, fields: &[(&str, &str)], end_stream: bool) -> Server {
        let mut block = Vec::new();
        for (name, value) in fields {
            let flags = httlib_hpack::Encoder::HUFFMAN_VALUE
                | httlib_hpack::Encoder::WITH_INDEXING
                | httlib_hpack::Encoder::BEST_FORMAT;
            let field = (name.as_bytes().to_vec(), value.as_bytes().to_vec(), flags);
            self.encoder.encode(field, &mut block).expect("encodes");
        }
        frame::headers(&mut self.bytes, stream, end_stream, &block, 7);
        self
    }

    pub fn data(mut self, stream: u32, len: usize, end_stream: bool) -> Server {
        frame::data(&mut self.bytes, stream, end_stream, &vec![b'z'; len]);
        self
    }

    pub fn raw(mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Server {
        Head {
            len: payload.len() as u32,
            kind,
            flags,
            stream,
        }
        .write(&mut self.bytes);
        self.bytes.extend_from_slice(payload);
        self
    }
}

/// A started connection that has seen the server's SETTINGS, and its outgoing bytes
/// cleared.
pub(super) fn ready(values: &[(u16, u32)]) -> Core {
    let mut core = Core::default();
    core.start();
    let settings = Server::default().settings(values).bytes;
    let used = core.receive(&settings, &mut Vec::new());
    assert_eq!(used, settings.len());
    assert!(core.settings_seen());
    core.out.clear();
    core
}

/// A [`ready`] connection whose stream and connection windows are the largest there
/// are: a request's body is queued whole at once.
fn wide_open() -> Core {
    let mut core = ready(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 0x7fff_ffff)]);
    let wide = Server::default().raw(
        frame::WINDOW_UPDATE,
        0,
        0,
        &(0x7fff_ffffu32 - 65_535).to_be_bytes(),
    );
    core.receive(&wide.bytes, &mut Vec::new());
    core
}

fn open(core: &mut Core, body: &[u8]) -> u32 {
    let (_, waker) = waker();
    match core.open(b"\x82", &Bytes::copy_from_slice(body), &waker, false) {
        Poll::Ready(Ok(id)) => id,
        other => panic!("not opened: {other:?}"),
    }
}

fn outcome(core: &mut Core, id: u32) -> Poll<Result<u16, Failure>> {
    let (_, waker) = waker();
    core.poll_outcome(id, &waker).map(|(outcome, _)| outcome)
}

/// The outcome and whether the server left the stream unprocessed.
fn ended(core: &mut Core, id: u32) -> Poll<(Result<u16, Failure>, bool)> {
    let (_, waker) = waker();
    core.poll_outcome(id, &waker)
}

/// The frames in `out`, as (type, flags, stream, payload).
pub(super) fn frames(out: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut rest = out.strip_prefix(frame::PREFACE).unwrap_or(out);
    let mut frames = Vec::new();
    while let Some(head) = Head::parse(rest) {
        let end = frame::HEAD_LEN + head.len as usize;
        frames.push((
            head.kind,
            head.flags,
            head.stream,
            rest[frame::HEAD_LEN..end].to_vec(),
        ));
        rest = &rest[end..];
    }
    assert!(rest.is_empty(), "a frame cut short");
    frames
}

#[test]
fn the_start_is_the_preface_our_settings_and_a_wider_window() {
    let mut core = Core::default();
    core.start();
    assert!(core.out.starts_with(frame::PREFACE));
    let sent = frames(&core.out);
    assert_eq!(sent[0].0, frame::SETTINGS);
    assert_eq!(sent[1].0, frame::WINDOW_UPDATE);
    assert_eq!(
        u32::from_be_bytes(sent[1].3[..].try_into().unwrap()),
        CONN_WINDOW - 65_535
    );
}

#[test]
fn an_answer_cut_at_every_byte_gives_its_status() {
    let server = Server::default()
        .headers(1, &[(":status", "103"), ("link", "</a>")], false)
        .headers(
            1,
            &[(":status", "200"), ("server", "t"), ("date", "now")],
            false,
        )
        .data(1, 100, false)
        .data(1, 0, true);
    for cut in 0..server.bytes.len() {
        let mut core = ready(&[]);
        let id = open(&mut core, b"");
        let first = core.receive(&server.bytes[..cut], &mut Vec::new());
        let mut rest = server.bytes[first..].to_vec();
        let used = core.receive(&rest, &mut Vec::new());
        rest.drain(..used);
        assert!(rest.is_empty(), "cut at {cut}: {} bytes left", rest.len());
        assert_eq!(outcome(&mut core, id), Poll::Ready(Ok(200)), "cut at {cut}");
    }
}

#[test]
fn the_first_frame_must_be_settings() {
    let mut core = Core::default();
    core.start();
    core.out.clear();
    let ping = Server::default().raw(frame::PING, 0, 0, &[0; 8]).bytes;
    core.receive(&ping, &mut Vec::new());
    assert_eq!(core.closed(), Some(Failure::Protocol));
    let sent = frames(&core.out);
    assert_eq!(sent.last().map(|f| f.0), Some(frame::GOAWAY));
}

#[test]
fn data_before_headers_resets_that_stream_only() {
    let mut core = ready(&[]);
    let first = open(&mut core, b"");
    let second = open(&mut core, b"");
    core.out.clear();
    let server =
        Server::default()
            .data(first, 10, true)
            .headers(second, &[(":status", "200")], true);
    core.receive(&server.bytes, &mut Vec::new());
    assert_eq!(
        outcome(&mut core, first),
        Poll::Ready(Err(Failure::Protocol))
    );
    assert_eq!(outcome(&mut core, second), Poll::Ready(Ok(200)));
    let sent = frames(&core.out);
    assert_eq!(
        sent,
        vec![(
            frame::RST_STREAM,
            0,
            first,
            frame::PROTOCOL_ERROR.to_be_bytes().to_vec()
        )]
    );
    assert!(core.is_reusable());
}

#[test]
fn a_goaway_fails_the_streams_it_did_not_take_and_ends_reuse() {
    let mut core = ready(&[]);
    let taken = open(&mut core, b"");
    let not_taken = open(&mut core, b"");
    let mut payload = taken.to_be_bytes().to_vec();
    payload.extend_from_slice(&frame::NO_ERROR.to_be_bytes());
    let server = Server::default().raw(frame::GOAWAY, 0, 0, &payload);
    core.receive(&server.bytes, &mut Vec::new());
    // Not processed: the engine may send it again.
    assert_eq!(
        ended(&mut core, not_taken),
        Poll::Ready((Err(Failure::Reset), true))
    );
    assert_eq!(outcome(&mut core, taken), Poll::Pending);
    assert!(!core.is_reusable());
    let answer = Server::default().headers(taken, &[(":status", "200")], true);
    core.receive(&answer.bytes, &mut Vec::new());
    assert_eq!(outcome(&mut core, taken), Poll::Ready(Ok(200)));
}

#[test]
fn requests_past_the_servers_stream_limit_wait_and_are_woken() {
    let mut core = ready(&[(frame::SETTINGS_MAX_CONCURRENT_STREAMS, 1)]);
    let first = open(&mut core, b"");
    let (count, waker) = waker();
    assert!(
        core.open(b"\x82", &Bytes::new(), &waker, false)
            .is_pending()
    );
    let mut woken = Vec::new();
    let answer = Server::default().headers(first, &[(":status", "204")], true);
    core.receive(&answer.bytes, &mut woken);
    woken.into_iter().for_each(Waker::wake);
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    assert!(matches!(
        core.open(b"\x82", &Bytes::new(), &waker, false),
        Poll::Ready(Ok(3))
    ));
}

/// A stream kept for a request not yet taken is counted against the server's limit: a
/// request without one waits behind it, the one with it goes at once, and one given back
/// wakes the waiters.
#[test]
fn a_kept_stream_is_the_keepers_and_one_given_back_wakes_the_waiters() {
    let mut core = ready(&[(frame::SETTINGS_MAX_CONCURRENT_STREAMS, 2)]);
    let first = open(&mut core, b"");
    let (count, waker) = waker();
    assert_eq!(core.poll_reserve(&waker), Poll::Ready(true));
    // The second stream is kept: neither another reservation nor a plain request has it.
    assert_eq!(core.poll_reserve(&waker), Poll::Pending);
    assert!(
        core.open(b"\x82", &Bytes::new(), &waker, false)
            .is_pending()
    );
    assert!(matches!(
        core.open(b"\x82", &Bytes::new(), &waker, true),
        Poll::Ready(Ok(3))
    ));
    // Both streams busy now; the first's end makes room for one more.
    let mut woken = Vec::new();
    let answer = Server::default().headers(first, &[(":status", "204")], true);
    core.receive(&answer.bytes, &mut woken);
    woken.into_iter().for_each(Waker::wake);
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    assert_eq!(core.poll_reserve(&waker), Poll::Ready(true));
    assert_eq!(core.poll_reserve(&waker), Poll::Pending);
    let mut woken = Vec::new();
    core.unreserve(&mut woken);
    assert_eq!(woken.len(), 1, "the waiter is woken");
    assert_eq!(core.poll_reserve(&waker), Poll::Ready(true));
    // A connection going away keeps no stream.
    let mut core = ready(&[]);
    core.fail(Failure::Reset, None, &mut Vec::new());
    assert_eq!(core.poll_reserve(&waker), Poll::Ready(false));
}

#[test]
fn a_body_waits_for_the_servers_window() {
    let mut core = ready(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 10)]);
    let id = open(&mut core, &[b'b'; 25]);
    let sizes = |core: &mut Core| -> Vec<(u8, u8, usize)> {
        let sent = frames(&core.out);
        core.out.clear();
        sent.iter()
            .filter(|f| f.0 == frame::DATA)
            .map(|f| (f.0, f.1, f.3.len()))
            .collect()
    };
    assert_eq!(sizes(&mut core), vec![(frame::DATA, 0, 10)]);
    let update = Server::default().raw(frame::WINDOW_UPDATE, 0, id, &20u32.to_be_bytes());
    core.receive(&update.bytes, &mut Vec::new());
    assert_eq!(sizes(&mut core), vec![(frame::DATA, frame::END_STREAM, 15)]);
}

#[test]
fn bodies_past_half_a_window_are_given_back() {
    let mut core = ready(&[]);
    let id = open(&mut core, b"");
    core.out.clear();
    let mut server = Server::default().headers(id, &[(":status", "200")], false);
    for _ in 0..40 {
        server = server.data(id, 16_384, false);
    }
    core.receive(&server.bytes, &mut Vec::new());
    let updates: Vec<u32> = frames(&core.out)
        .iter()
        .filter(|f| f.0 == frame::WINDOW_UPDATE && f.2 == id)
        .map(|f| u32::from_be_bytes(f.3[..].try_into().unwrap()))
        .collect();
    assert_eq!(updates.iter().sum::<u32>(), 16_384 * 32, "{updates:?}");
    assert_eq!(outcome(&mut core, id), Poll::Pending);
}

#[test]
fn a_cancelled_stream_is_reset_and_its_answer_still_decoded() {
    let mut core = ready(&[]);
    let cancelled = open(&mut core, b"");
    let next = open(&mut core, b"");
    core.out.clear();
    core.cancel(cancelled, &mut Vec::new());
    assert_eq!(
        frames(&core.out),
        vec![(
            frame::RST_STREAM,
            0,
            cancelled,
            frame::CANCEL.to_be_bytes().to_vec()
        )]
    );
    // The first block enters "x-table" in the table; the second refers to it.
    let server = Server::default()
        .headers(cancelled, &[(":status", "200"), ("x-table", "1")], false)
        .data(cancelled, 5, true)
        .headers(next, &[(":status", "200"), ("x-table", "1")], true);
    core.receive(&server.bytes, &mut Vec::new());
    assert_eq!(core.closed(), None);
    assert_eq!(outcome(&mut core, next), Poll::Ready(Ok(200)));
}

#[test]
fn frames_too_large_or_malformed_fail_the_connection() {
    let cases: Vec<(&str, Server)> = vec![
        (
            "too large",
            Server::default().raw(frame::DATA, 0, 1, &vec![0; MAX_FRAME + 1]),
        ),
        (
            "push",
            Server::default().raw(frame::PUSH_PROMISE, frame::END_HEADERS, 1, &[0, 0, 0, 2]),
        ),
        (
            "short ping",
            Server::default().raw(frame::PING, 0, 0, &[0; 7]),
        ),
        (
            "idle stream",
            Server::default().headers(99, &[(":status", "200")], true),
        ),
        (
            "bad hpack",
            Server::default().raw(
                frame::HEADERS,
                frame::END_HEADERS,
                1,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            ),
        ),
        (
            "huge window",
            Server::default().raw(frame::WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes()),
        ),
        (
            "interleaved continuation",
            Server::default()
                .raw(frame::HEADERS, 0, 1, &[0x88])
                .raw(frame::PING, 0, 0, &[0; 8]),
        ),
    ];
    for (name, server) in cases {
        let mut core = ready(&[]);
        let id = open(&mut core, b"");
        core.receive(&server.bytes, &mut Vec::new());
        assert_eq!(core.closed(), Some(Failure::Protocol), "{name}");
        assert_eq!(
            outcome(&mut core, id),
            Poll::Ready(Err(Failure::Protocol)),
            "{name}"
        );
        assert!(!core.is_reusable(), "{name}");
    }
}

#[test]
fn pings_are_answered_and_settings_acknowledged() {
    let mut core = ready(&[]);
    let server = Server::default()
        .raw(frame::PING, 0, 0, b"12345678")
        .settings(&[(frame::SETTINGS_MAX_FRAME_SIZE, 20_000)]);
    core.receive(&server.bytes, &mut Vec::new());
    assert_eq!(
        frames(&core.out),
        vec![
            (frame::PING, frame::ACK, 0, b"12345678".to_vec()),
            (frame::SETTINGS, frame::ACK, 0, Vec::new()),
        ]
    );
}

#[test]
fn a_refused_stream_is_unprocessed_and_other_resets_are_not() {
    let mut core = ready(&[]);
    let refused = open(&mut core, b"");
    let reset = open(&mut core, b"");
    let server = Server::default()
        .raw(
            frame::RST_STREAM,
            0,
            refused,
            &frame::REFUSED_STREAM.to_be_bytes(),
        )
        .raw(frame::RST_STREAM, 0, reset, &frame::CANCEL.to_be_bytes());
    core.receive(&server.bytes, &mut Vec::new());
    assert_eq!(
        ended(&mut core, refused),
        Poll::Ready((Err(Failure::Reset), true))
    );
    assert_eq!(
        ended(&mut core, reset),
        Poll::Ready((Err(Failure::Reset), false))
    );
}

#[test]
fn floods_end_the_connection_instead_of_growing_it() {
    // PINGs that a server sends while it reads nothing of ours: the answers would queue
    // without end.
    let mut core = ready(&[]);
    let mut pings = Server::default();
    for _ in 0..70_000 {
        pings = pings.raw(frame::PING, 0, 0, &[1; 8]);
    }
    let mut used = 0;
    while used < pings.bytes.len() && core.closed().is_none() {
        let end = (used + 65_536).min(pings.bytes.len());
        used += core.receive(&pings.bytes[used..end], &mut Vec::new());
    }
    assert_eq!(core.closed(), Some(Failure::Protocol));
    assert!(
        core.out.len() < MAX_QUEUED + 65_536,
        "{} bytes queued",
        core.out.len()
    );
    let sent = frames(&core.out);
    assert_eq!(
        sent.last().map(|f| (f.0, f.3[4..].to_vec())),
        Some((
            frame::GOAWAY,
            frame::ENHANCE_YOUR_CALM.to_be_bytes().to_vec()
        ))
    );
    // Empty CONTINUATION frames that never end the block.
    let mut core = ready(&[]);
    let id = open(&mut core, b"");
    let mut flood = Server::default().raw(frame::HEADERS, 0, id, &[0x88]);
    for _ in 0..MAX_CONTINUATIONS + 1 {
        flood = flood.raw(frame::CONTINUATION, 0, id, &[]);
    }
    core.receive(&flood.bytes, &mut Vec::new());
    assert_eq!(core.closed(), Some(Failure::Protocol));
}

#[test]
fn request_bytes_queued_do_not_count_against_the_flood_bound() {
    let mut core = wide_open();
    open(&mut core, &vec![b'b'; 2 * MAX_QUEUED]);
    assert!(core.out.len() > 2 * MAX_QUEUED);
    let ping = Server::default().raw(frame::PING, 0, 0, &[2; 8]);
    core.receive(&ping.bytes, &mut Vec::new());
    assert_eq!(core.closed(), None);
    assert_eq!(
        frames(&core.out).last().map(|f| (f.0, f.1)),
        Some((frame::PING, frame::ACK))
    );
}

#[test]
fn a_refusal_after_the_answer_began_is_not_sent_again() {
    let mut core = ready(&[]);
    let id = open(&mut core, b"");
    let server = Server::default()
        .headers(id, &[(":status", "200")], false)
        .raw(
            frame::RST_STREAM,
            0,
            id,
            &frame::REFUSED_STREAM.to_be_bytes(),
        );
    core.receive(&server.bytes, &mut Vec::new());
    assert_eq!(
        ended(&mut core, id),
        Poll::Ready((Err(Failure::Reset), false))
    );
}

#[test]
fn a_priority_frame_of_the_wrong_size_resets_its_stream_only() {
    let mut core = ready(&[]);
    let bad = open(&mut core, b"");
    let good = open(&mut core, b"");
    core.out.clear();
    let server = Server::default()
        .raw(frame::PRIORITY, 0, bad, &[0; 4])
        .raw(frame::PRIORITY, 0, good, &[0, 0, 0, 0, 16])
        .headers(good, &[(":status", "200")], true);
    core.receive(&server.bytes, &mut Vec::new());
    assert_eq!(outcome(&mut core, bad), Poll::Ready(Err(Failure::Protocol)));
    assert_eq!(outcome(&mut core, good), Poll::Ready(Ok(200)));
    assert_eq!(
        frames(&core.out),
        vec![(
            frame::RST_STREAM,
            0,
            bad,
            frame::FRAME_SIZE_ERROR.to_be_bytes().to_vec()
        )]
    );
    assert!(core.is_reusable());
    // On a stream already closed it is dropped: nothing but PRIORITY may go there (5.1).
    let late = Server::default().raw(frame::PRIORITY, 0, bad, &[0; 6]);
    core.out.clear();
    core.receive(&late.bytes, &mut Vec::new());
    assert_eq!(core.closed(), None);
    assert!(core.out.is_empty());
}

#[test]
fn a_priority_frame_on_stream_0_or_the_wrong_size_on_an_idle_stream_ends_the_connection() {
    let cases = [
        ("stream 0", 0, 5, frame::PROTOCOL_ERROR),
        ("idle stream", 99, 4, frame::FRAME_SIZE_ERROR),
        ("server's stream", 2, 6, frame::FRAME_SIZE_ERROR),
    ];
    for (name, stream, len, code) in cases {
        let mut core = ready(&[]);
        let id = open(&mut core, b"");
        core.out.clear();
        let server = Server::default().raw(frame::PRIORITY, 0, stream, &vec![0; len]);
        core.receive(&server.bytes, &mut Vec::new());
        assert_eq!(core.closed(), Some(Failure::Protocol), "{name}");
        assert_eq!(
            outcome(&mut core, id),
            Poll::Ready(Err(Failure::Protocol)),
            "{name}"
        );
        assert_eq!(
            frames(&core.out),
            vec![(frame::GOAWAY, 0, 0, goaway_payload(code))],
            "{name}"
        );
    }
}

#[test]
fn a_connection_error_drops_what_was_queued_so_the_goaway_goes_next() {
    let mut core = wide_open();
    // A body queued and not yet taken by the driver: its request fails with the rest.
    open(&mut core, &vec![b'b'; 1 << 20]);
    let short_ping = Server::default().raw(frame::PING, 0, 0, &[0; 7]);
    core.receive(&short_ping.bytes, &mut Vec::new());
    assert_eq!(
        frames(&core.out),
        vec![(frame::GOAWAY, 0, 0, goaway_payload(frame::FRAME_SIZE_ERROR))]
    );
}

/// A GOAWAY's payload from us: no server stream taken (last stream 0), then `code`.
fn goaway_payload(code: u32) -> Vec<u8> {
    let mut payload = 0u32.to_be_bytes().to_vec();
    payload.extend_from_slice(&code.to_be_bytes());
    payload
}
