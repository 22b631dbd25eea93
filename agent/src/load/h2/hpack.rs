//! HPACK (RFC 7541) for the load engine's HTTP/2 client.
//!
//! - Requests: [`field`] encodes a request's fields once per operation, as literals no
//!   table keeps (never indexed for credentials), names from the static table where it
//!   has them, no Huffman coding: the same bytes on every connection and every request.
//! - Answers: [`Decoder`] keeps the connection's dynamic table and hands each field to
//!   a callback, borrowed: raw strings straight from the block, Huffman strings
//!   ([`super::huffman`]) decoded into two buffers reused from field to field. Nothing is
//!   allocated per answer but the table's new entries.
//!
//! Ours because the crates measured here did not fit a hot path: `loona-hpack` built its
//! Huffman map afresh for every string it decoded (a third of the engine's CPU against
//! nginx), and `httlib-hpack` copies every field and drains its input field by field.

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

/// A dynamic table's entry: name and value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// The decoding side of one connection: its dynamic table and reused buffers.
#[derive(Debug)]
pub struct Decoder {
    /// Newest first: index 62 is `table[0]`.
    table: VecDeque<Entry>,
    size: usize,
    max_size: usize,
    name: Vec<u8>,
    value: Vec<u8>,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max_size: TABLE_SIZE,
            name: Vec::new(),
            value: Vec::new(),
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

/// Reads a string literal at `buf[*at..]` (5.2): borrowed when raw, decoded into
/// `scratch` when Huffman-coded.
fn string<'a>(
    buf: &'a [u8],
    at: &mut usize,
    scratch: &'a mut Vec<u8>,
) -> Result<&'a [u8], HpackError> {
    let huffman = buf.get(*at).ok_or(HpackError::Truncated)? & 0x80 != 0;
    let len = integer(buf, at, 7)?;
    let raw = buf.get(*at..*at + len).ok_or(HpackError::Truncated)?;
    *at += len;
    if !huffman {
        return Ok(raw);
    }
    scratch.clear();
    huffman::decode(raw, scratch)?;
    Ok(scratch)
}

impl Decoder {
    /// The field at `index` of both tables (2.3.3).
    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            1..=61 => {
                let (name, value) = STATIC[index - 1];
                Ok((name.as_bytes(), value.as_bytes()))
            }
            _ => index
                .checked_sub(62)
                .and_then(|i| self.table.get(i))
                .map(|(n, v)| (&n[..], &v[..]))
                .ok_or(HpackError::Index(index)),
        }
    }

    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            match self.table.pop_back() {
                Some((n, v)) => self.size -= n.len() + v.len() + 32,
                None => break,
            }
        }
    }

    /// Adds a field to the dynamic table (4.4): an entry larger than the table empties it.
    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + 32;
        if size > self.max_size {
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - size);
        self.table.push_front((name.into(), value.into()));
        self.size += size;
    }

    /// Decodes a whole header block, calling `on_field` with each field's name and
    /// value in order. After an error the table is not to be used again (the
    /// connection ends).
    pub fn decode(
        &mut self,
        block: &[u8],
        mut on_field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut name_buf = std::mem::take(&mut self.name);
        let mut value_buf = std::mem::take(&mut self.value);
        let outcome = self.fields(block, &mut name_buf, &mut value_buf, &mut on_field);
        self.name = name_buf;
        self.value = value_buf;
        outcome
    }

    fn fields(
        &mut self,
        block: &[u8],
        name_buf: &mut Vec<u8>,
        value_buf: &mut Vec<u8>,
        on_field: &mut impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut at = 0;
        let mut any_field = false;
        while let Some(&first) = block.get(at) {
            if first & 0x80 != 0 {
                // Indexed field (6.1).
                let index = integer(block, &mut at, 7)?;
                let (name, value) = self.entry(index)?;
                on_field(name, value);
            } else if first & 0xe0 == 0x20 {
                // Table size update (6.3): only before the block's first field (4.2).
                if any_field {
                    return Err(HpackError::LateSizeUpdate);
                }
                let size = integer(block, &mut at, 5)?;
                if size > TABLE_SIZE {
                    return Err(HpackError::TableSize(size));
                }
                self.max_size = size;
                self.evict_to(size);
                continue;
            } else {
                // A literal (6.2): with incremental indexing (01), without (0000) or never
                // indexed (0001).
                let indexing = first & 0xc0 == 0x40;
                let index = integer(block, &mut at, if indexing { 6 } else { 4 })?;
                let name: &[u8] = if index == 0 {
                    string(block, &mut at, name_buf)?
                } else {
                    let (name, _) = self.entry(index)?;
                    name_buf.clear();
                    name_buf.extend_from_slice(name);
                    name_buf
                };
                let value = string(block, &mut at, value_buf)?;
                on_field(name, value);
                if indexing {
                    self.insert(name, value);
                }
            }
            any_field = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
