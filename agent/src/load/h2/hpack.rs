//! HPACK (RFC 7541) for the load engine's HTTP/2 client.
//!
//! - Requests: [`field`] encodes a request's fields once per operation, as literals no
//!   table keeps (never indexed for credentials), names from the static table where it
//!   has them, no Huffman coding: the same bytes on every connection and every request.
//! - Answers: [`Decoder`] keeps the connection's dynamic table and reads the one field
//!   the engine needs, `:status`. Of the other fields it keeps only the sizes the table
//!   counts (a Huffman string's decoded length is counted, not decoded,
//!   [`super::huffman`]), and a block the same as the last one is not decoded again
//!   ([`Last`]): nothing is allocated per answer.
//!
//! Ours because the crates measured here did not fit a hot path: `loona-hpack` built its
//! Huffman map afresh for every string it decoded (a third of the engine's CPU against
//! nginx), and `httlib-hpack` copies every field and drains its input field by field;
//! both keep every name and value, which nginx's answers (five fields entered in the
//! table per answer) made an allocation and a free per field.

use std::collections::VecDeque;

use super::huffman;

/// HPACK's static table (Appendix A): index 1 first.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// Fields a shared cache or proxy must never put in a table: the never-indexed form.
const SENSITIVE: [&str; 4] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];

/// The table size we leave SETTINGS_HEADER_TABLE_SIZE at: the most the server may use.
pub const TABLE_SIZE: usize = 4096;

/// An HPACK integer with a `prefix`-bit prefix, its first byte or-ed with `first` (5.1).
fn put_integer(out: &mut Vec<u8>, first: u8, prefix: u8, mut value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    put_integer(out, 0, 7, bytes.len());
    out.extend_from_slice(bytes);
}

/// Appends one field to a request's header block, as a literal that no table keeps.
pub fn field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    let first = if SENSITIVE.contains(&name) {
        0x10
    } else {
        0x00
    };
    match STATIC.iter().position(|(n, _)| *n == name) {
        Some(i) => put_integer(out, first, 4, i + 1),
        None => {
            out.push(first);
            put_string(out, name.as_bytes());
        }
    }
    put_string(out, value);
}

/// Why a header block cannot be decoded: a COMPRESSION_ERROR for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    #[error("header block ends inside a field")]
    Truncated,
    #[error("integer too large")]
    Integer,
    #[error("index {0} is in neither table")]
    Index(usize),
    #[error("{0}")]
    Huffman(#[from] huffman::HuffmanError),
    #[error("table size update to {0} past the {TABLE_SIZE} allowed")]
    TableSize(usize),
    #[error("table size update after a field")]
    LateSizeUpdate,
}

/// What a header block says of `:status`, the one field the engine reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Absent,
    Valid(u16),
    /// Not three digits, or more than one `:status` (RFC 9113, 8.3.2).
    Invalid,
}

impl Status {
    fn with(self, value: Option<u16>) -> Status {
        match (self, value) {
            (Status::Absent, Some(v)) => Status::Valid(v),
            _ => Status::Invalid,
        }
    }
}

/// `:status` is three digits (RFC 9113, 8.3.2).
fn parse_status(value: &[u8]) -> Option<u16> {
    match value {
        [a, b, c] if value.iter().all(u8::is_ascii_digit) && *a != b'0' => {
            Some(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
        }
        _ => None,
    }
}

/// A dynamic table entry as far as the engine needs it: its size (which evictions
/// count), its name's length (an entry naming it has the same), and for a `:status`
/// entry its value. No other name or value is ever read, so none is kept: inserting
/// allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    size: usize,
    name_len: usize,
    /// `Some` for a `:status` entry: its value, parsed.
    status: Option<Option<u16>>,
}

/// The last block decoded and what it did, for a block byte for byte the same: a block
/// whose fields are all static references and literals decodes the same whatever the
/// table holds, so its outcome and its insertions can be repeated without decoding it.
/// Servers repeat their blocks (nginx's change only in `date`, once a second).
#[derive(Debug, Default)]
struct Last {
    bytes: Vec<u8>,
    /// `None` when the block cannot be repeated: it failed, read or resized the table.
    status: Option<Status>,
    inserted: Vec<Entry>,
}

/// The decoding side of one connection: its dynamic table (4096 bytes at most: we leave
/// SETTINGS_HEADER_TABLE_SIZE at its default).
#[derive(Debug)]
pub struct Decoder {
    /// Newest first: index 62 is `table[0]`.
    table: VecDeque<Entry>,
    size: usize,
    max_size: usize,
    scratch: Vec<u8>,
    last: Last,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max_size: TABLE_SIZE,
            scratch: Vec::new(),
            last: Last::default(),
        }
    }
}

/// Reads an integer with a `prefix`-bit prefix at `buf[*at..]` (5.1). Values past 2^28
/// are refused: no length or index is that large, and the shifts cannot overflow.
fn integer(buf: &[u8], at: &mut usize, prefix: u8) -> Result<usize, HpackError> {
    let max = (1usize << prefix) - 1;
    let first = usize::from(*buf.get(*at).ok_or(HpackError::Truncated)?) & max;
    *at += 1;
    if first < max {
        return Ok(first);
    }
    let mut value = max;
    let mut shift = 0;
    loop {
        let byte = *buf.get(*at).ok_or(HpackError::Truncated)?;
        *at += 1;
        value += usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 21 {
            return Err(HpackError::Integer);
        }
    }
}

/// A string literal at `buf[*at..]` (5.2), not yet decoded: its bytes and whether they
/// are Huffman-coded.
fn string<'a>(buf: &'a [u8], at: &mut usize) -> Result<(&'a [u8], bool), HpackError> {
    let huffman = buf.get(*at).ok_or(HpackError::Truncated)? & 0x80 != 0;
    let len = integer(buf, at, 7)?;
    let raw = buf.get(*at..*at + len).ok_or(HpackError::Truncated)?;
    *at += len;
    Ok((raw, huffman))
}

/// A string's decoded bytes: borrowed when raw, decoded into `scratch` when not.
fn bytes<'a>(
    (raw, huffman): (&'a [u8], bool),
    scratch: &'a mut Vec<u8>,
) -> Result<&'a [u8], HpackError> {
    if !huffman {
        return Ok(raw);
    }
    scratch.clear();
    huffman::decode(raw, scratch)?;
    Ok(scratch)
}

/// A string's decoded length, without decoding it.
fn decoded_len((raw, huffman): (&[u8], bool)) -> Result<usize, HpackError> {
    if huffman {
        Ok(huffman::decoded_len(raw)?)
    } else {
        Ok(raw.len())
    }
}

impl Decoder {
    /// The entry at `index` of both tables (2.3.3), as [`Entry`].
    fn entry(&self, index: usize) -> Result<Entry, HpackError> {
        match index {
            1..=61 => {
                let (name, value) = STATIC[index - 1];
                Ok(Entry {
                    size: name.len() + value.len() + 32,
                    name_len: name.len(),
                    status: (name == ":status").then(|| parse_status(value.as_bytes())),
                })
            }
            _ => index
                .checked_sub(62)
                .and_then(|i| self.table.get(i))
                .copied()
                .ok_or(HpackError::Index(index)),
        }
    }

    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            match self.table.pop_back() {
                Some(entry) => self.size -= entry.size,
                None => break,
            }
        }
    }

    /// Adds an entry to the dynamic table (4.4): one larger than the table empties it.
    fn insert(&mut self, entry: Entry) {
        if entry.size > self.max_size {
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - entry.size);
        self.table.push_front(entry);
        self.size += entry.size;
    }

    /// Decodes a whole header block: what it says of `:status`. After an error the
    /// table is not to be used again (the connection ends).
    pub fn decode(&mut self, block: &[u8]) -> Result<Status, HpackError> {
        if let Some(status) = self.last.status
            && self.last.bytes == block
        {
            for i in 0..self.last.inserted.len() {
                self.insert(self.last.inserted[i]);
            }
            return Ok(status);
        }
        let mut inserted = std::mem::take(&mut self.last.inserted);
        inserted.clear();
        let outcome = self.fields(block, &mut inserted);
        self.last.bytes.clear();
        self.last.bytes.extend_from_slice(block);
        self.last.inserted = inserted;
        // Kept for the next block only when this one did not read or resize the table.
        self.last.status = match outcome {
            Ok((status, false)) => Some(status),
            _ => None,
        };
        outcome.map(|(status, _)| status)
    }

    /// The fields of `block`; the entries it inserted go in `inserted`. Returns the
    /// `:status` and whether the block read the dynamic table or resized it (then it is
    /// not repeated from [`Last`]).
    fn fields(
        &mut self,
        block: &[u8],
        inserted: &mut Vec<Entry>,
    ) -> Result<(Status, bool), HpackError> {
        let mut at = 0;
        let mut status = Status::Absent;
        let mut stateful = false;
        let mut any_field = false;
        let mut scratch = std::mem::take(&mut self.scratch);
        while let Some(&first) = block.get(at) {
            if first & 0x80 != 0 {
                // Indexed field (6.1).
                let index = integer(block, &mut at, 7)?;
                stateful |= index > STATIC.len();
                if let Some(value) = self.entry(index)?.status {
                    status = status.with(value);
                }
            } else if first & 0xe0 == 0x20 {
                // Table size update (6.3): only before the block's first field (4.2).
                if any_field {
                    return Err(HpackError::LateSizeUpdate);
                }
                let size = integer(block, &mut at, 5)?;
                if size > TABLE_SIZE {
                    return Err(HpackError::TableSize(size));
                }
                stateful = true;
                self.max_size = size;
                self.evict_to(size);
                continue;
            } else {
                // A literal (6.2): with incremental indexing (01), without (0000) or never
                // indexed (0001).
                let indexing = first & 0xc0 == 0x40;
                let index = integer(block, &mut at, if indexing { 6 } else { 4 })?;
                let (name_len, is_status) = if index == 0 {
                    let name = string(block, &mut at)?;
                    let name = bytes(name, &mut scratch)?;
                    (name.len(), name == b":status")
                } else {
                    stateful |= index > STATIC.len();
                    let named = self.entry(index)?;
                    (named.name_len, named.status.is_some())
                };
                let value = string(block, &mut at)?;
                let (value_len, value_status) = if is_status {
                    let value = bytes(value, &mut scratch)?;
                    (value.len(), Some(parse_status(value)))
                } else {
                    (decoded_len(value)?, None)
                };
                if let Some(value) = value_status {
                    status = status.with(value);
                }
                if indexing {
                    let entry = Entry {
                        size: name_len + value_len + 32,
                        name_len,
                        status: value_status,
                    };
                    self.insert(entry);
                    inserted.push(entry);
                }
            }
            any_field = true;
        }
        self.scratch = scratch;
        Ok((status, stateful))
    }
}

#[cfg(test)]
mod tests;
