//! HTTP/2 frames (RFC 9113, sections 4 and 6) as the load engine writes and reads them:
//! the 9-byte frame head and the few frames a client sends.

/// What every client connection starts with (RFC 9113, 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const HEAD_LEN: usize = 9;
/// The frame size both sides may use without asking (SETTINGS_MAX_FRAME_SIZE's start).
pub const DEFAULT_MAX_FRAME: u32 = 16_384;
/// Flow-control windows start here and may not pass `MAX_WINDOW`.
pub const DEFAULT_WINDOW: i64 = 65_535;
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;

/// Error codes (RFC 9113, section 7).
pub const NO_ERROR: u32 = 0x0;
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const FLOW_CONTROL_ERROR: u32 = 0x3;
pub const FRAME_SIZE_ERROR: u32 = 0x6;
pub const REFUSED_STREAM: u32 = 0x7;
pub const CANCEL: u32 = 0x8;
pub const COMPRESSION_ERROR: u32 = 0x9;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// A frame's head: payload length, type, flags and stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Head {
    /// The head at the start of `buf`, when it holds nine bytes.
    pub fn parse(buf: &[u8]) -> Option<Head> {
        let b: &[u8; HEAD_LEN] = buf.get(..HEAD_LEN)?.try_into().ok()?;
        Some(Head {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            // The reserved bit is ignored on receipt (4.1).
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        })
    }

    pub fn write(self, out: &mut Vec<u8>) {
        let len = self.len.to_be_bytes();
        out.extend_from_slice(&[len[1], len[2], len[3], self.kind, self.flags]);
        out.extend_from_slice(&self.stream.to_be_bytes());
    }
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    Head {
        len: payload.len() as u32,
        kind,
        flags,
        stream,
    }
    .write(out);
    out.extend_from_slice(payload);
}

pub fn settings(out: &mut Vec<u8>, values: &[(u16, u32)]) {
    let mut payload = Vec::with_capacity(values.len() * 6);
    for (id, value) in values {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    frame(out, SETTINGS, 0, 0, &payload);
}

pub fn settings_ack(out: &mut Vec<u8>) {
    frame(out, SETTINGS, ACK, 0, &[]);
}

pub fn ping_ack(out: &mut Vec<u8>, payload: &[u8]) {
    frame(out, PING, ACK, 0, payload);
}

pub fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    frame(out, WINDOW_UPDATE, 0, stream, &increment.to_be_bytes());
}

pub fn rst_stream(out: &mut Vec<u8>, stream: u32, code: u32) {
    frame(out, RST_STREAM, 0, stream, &code.to_be_bytes());
}

pub fn goaway(out: &mut Vec<u8>, last_stream: u32, code: u32) {
    let mut payload = [0u8; 8];
    payload[..4].copy_from_slice(&last_stream.to_be_bytes());
    payload[4..].copy_from_slice(&code.to_be_bytes());
    frame(out, GOAWAY, 0, 0, &payload);
}

pub fn data(out: &mut Vec<u8>, stream: u32, end_stream: bool, payload: &[u8]) {
    frame(
        out,
        DATA,
        if end_stream { END_STREAM } else { 0 },
        stream,
        payload,
    );
}

/// A header block as HEADERS and, past `max_frame` bytes, CONTINUATION frames.
pub fn headers(out: &mut Vec<u8>, stream: u32, end_stream: bool, block: &[u8], max_frame: usize) {
    let mut chunks = block.chunks(max_frame.max(1));
    let first = chunks.next().unwrap_or(&[]);
    let mut rest = chunks.peekable();
    let mut flags = if end_stream { END_STREAM } else { 0 };
    if rest.peek().is_none() {
        flags |= END_HEADERS;
    }
    frame(out, HEADERS, flags, stream, first);
    while let Some(chunk) = rest.next() {
        let flags = if rest.peek().is_none() {
            END_HEADERS
        } else {
            0
        };
        frame(out, CONTINUATION, flags, stream, chunk);
    }
}

/// The payload of a padded frame without its padding; `None` when the padding does not
/// fit (a PROTOCOL_ERROR, 6.1).
pub fn unpad(flags: u8, payload: &[u8]) -> Option<&[u8]> {
    if flags & PADDED == 0 {
        return Some(payload);
    }
    let (&pad, rest) = payload.split_first()?;
    rest.len()
        .checked_sub(usize::from(pad))
        .map(|end| &rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_survives_writing_and_parsing() {
        let head = Head {
            len: 0x01_02_03,
            kind: HEADERS,
            flags: END_HEADERS | END_STREAM,
            stream: 0x7fff_ffff,
        };
        let mut out = Vec::new();
        head.write(&mut out);
        assert_eq!(out.len(), HEAD_LEN);
        assert_eq!(Head::parse(&out), Some(head));
        assert_eq!(Head::parse(&out[..8]), None);
    }

    #[test]
    fn a_long_block_goes_on_in_continuation_frames() {
        let mut out = Vec::new();
        headers(&mut out, 3, true, &[7u8; 25], 10);
        let first = Head::parse(&out).expect("head");
        assert_eq!(
            (first.kind, first.flags, first.len),
            (HEADERS, END_STREAM, 10)
        );
        let second = Head::parse(&out[19..]).expect("head");
        assert_eq!((second.kind, second.flags), (CONTINUATION, 0));
        let third = Head::parse(&out[38..]).expect("head");
        assert_eq!(
            (third.kind, third.flags, third.len),
            (CONTINUATION, END_HEADERS, 5)
        );
        assert_eq!(out.len(), 3 * HEAD_LEN + 25);
    }

    #[test]
    fn padding_is_removed_and_too_much_is_refused() {
        assert_eq!(unpad(PADDED, &[2, b'a', 0, 0]), Some(&b"a"[..]));
        assert_eq!(unpad(0, b"ab"), Some(&b"ab"[..]));
        assert_eq!(unpad(PADDED, &[3, b'a']), None);
        assert_eq!(unpad(PADDED, &[]), None);
    }
}
