//! HPACK's Huffman code (RFC 7541, 5.2 and Appendix B), decoding only: our requests send
//! literal strings, answers may Huffman-code any string.
//!
//! The code is canonical (Appendix B lists codes that are consecutive within each
//! length, in symbol order), so the code lengths alone define it: [`LENGTHS`] is the
//! appendix's "len in bits" column. Decoding reads a bit at a time and looks up whether
//! the bits so far are a code of that length: no tree and no table of codes to build at
//! run time. (A crate's decoder that built a map of all codes for every string it
//! decoded took a third of the engine's CPU under h2load's load: docs/benchmarks.md.)

use std::sync::LazyLock;

/// Code length in bits of each symbol, 0 to 255 and then 256, EOS (Appendix B).
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

/// The longest code (EOS and a few control bytes).
const MAX_LEN: usize = 30;

/// For each code length, the first code of that length, how many there are, and where
/// their symbols start in `symbols` (sorted by length, then symbol).
struct Canonical {
    first: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    start: [u16; MAX_LEN + 1],
    symbols: [u16; 257],
}

static CANONICAL: LazyLock<Canonical> = LazyLock::new(|| {
    let mut count = [0u32; MAX_LEN + 1];
    for len in LENGTHS {
        count[usize::from(len)] += 1;
    }
    let mut first = [0u32; MAX_LEN + 1];
    let mut start = [0u16; MAX_LEN + 1];
    let (mut code, mut index) = (0u32, 0u16);
    for len in 1..=MAX_LEN {
        first[len] = code;
        start[len] = index;
        code = (code + count[len]) << 1;
        index += count[len] as u16;
    }
    let mut symbols = [0u16; 257];
    let mut next = start;
    for (symbol, len) in LENGTHS.iter().enumerate() {
        let len = usize::from(*len);
        symbols[usize::from(next[len])] = symbol as u16;
        next[len] += 1;
    }
    Canonical {
        first,
        count,
        start,
        symbols,
    }
});

/// Why a Huffman string cannot be decoded (5.2): a code longer than any, EOS inside the
/// string, or padding longer than 7 bits or not of 1s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid Huffman-coded string")]
pub struct HuffmanError;

/// Appends the decoding of `src` to `dst`.
pub fn decode(src: &[u8], dst: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let table = &*CANONICAL;
    let (mut code, mut len) = (0u32, 0usize);
    for byte in src {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            if code >= table.first[len] && code - table.first[len] < table.count[len] {
                let at = usize::from(table.start[len]) + (code - table.first[len]) as usize;
                let symbol = table.symbols[at];
                if symbol == 256 {
                    return Err(HuffmanError);
                }
                dst.push(symbol as u8);
                (code, len) = (0, 0);
            } else if len == MAX_LEN {
                return Err(HuffmanError);
            }
        }
    }
    // What is left is padding: the high bits of EOS, all 1s, shorter than a byte.
    if len > 7 || code != (1 << len) - 1 {
        return Err(HuffmanError);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    fn encode(src: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        httlib_huffman::encode(src, &mut out).expect("encodes");
        out
    }

    #[test]
    fn the_rfcs_examples_decode() {
        // RFC 7541, C.4.1 and C.6.1.
        let mut out = Vec::new();
        let www = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        decode(&www, &mut out).expect("decodes");
        assert_eq!(out, b"www.example.com");
        out.clear();
        decode(&[0x64, 0x02], &mut out).expect("decodes");
        assert_eq!(out, b"302");
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        let mut out = Vec::new();
        // '0' is 00000 (5 bits): padding of 0s is not EOS's prefix.
        assert_eq!(decode(&[0x00], &mut out), Err(HuffmanError));
        // A whole byte of padding.
        assert_eq!(decode(&[0x07, 0xff], &mut out), Err(HuffmanError));
        // EOS itself (30 ones) inside the string.
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xfc], &mut out),
            Err(HuffmanError)
        );
    }

    #[test]
    fn any_bytes_decode_to_what_a_third_party_encoder_encoded() {
        let mut runner = TestRunner::new_with_rng(
            Config {
                cases: 512,
                failure_persistence: None,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &[19; 32]),
        );
        runner
            .run(&proptest::collection::vec(any::<u8>(), 0..200), |src| {
                let mut out = Vec::new();
                decode(&encode(&src), &mut out).expect("decodes");
                prop_assert_eq!(out, src);
                Ok(())
            })
            .expect("property");
        runner
            .run(&proptest::collection::vec(any::<u8>(), 0..64), |junk| {
                // Any bytes: an answer or an error, never a panic.
                let _ = decode(&junk, &mut Vec::new());
                Ok(())
            })
            .expect("property");
    }
}
