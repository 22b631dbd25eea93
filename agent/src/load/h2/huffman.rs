//! HPACK's Huffman code (RFC 7541, 5.2 and Appendix B), decoding only: our requests send
//! literal strings, answers may Huffman-code any string.
//!
//! The code is canonical (Appendix B lists codes that are consecutive within each
//! length, in symbol order), so the code lengths alone define it: [`LENGTHS`] is the
//! appendix's "len in bits" column. From them a state machine over half-bytes is built
//! once; decoding is then two table steps a byte. (A crate's decoder that built a map of
//! all codes for every string it decoded took a third of the engine's CPU against
//! nginx, and reading a bit at a time still took 6%: docs/benchmarks.md.)

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

const EOS: u16 = 256;

/// The decoder: a state machine over half-bytes, built once from [`LENGTHS`]. A state is
/// an inner node of the code's tree (0 is the root; a tree of 257 leaves has 256 inner
/// nodes, so a state fits a byte); reading four bits from a state walks at most one
/// whole code (the shortest is five bits long), so a step emits at most one symbol.
struct Machine {
    /// For state `s` and half-byte `n`, at `16 * s + n`: the next state, the symbol
    /// emitted (or [`NONE`]), and [`FAIL`] when the bits spell EOS.
    steps: Vec<u32>,
    /// The states that may end a string: the root, or 1 to 7 one-bits into a code
    /// (padding is the start of EOS, shorter than a byte).
    accepting: [bool; 256],
}

const NONE: u32 = 0x1ff;
const FAIL: u32 = 1 << 17;

static MACHINE: LazyLock<Machine> = LazyLock::new(|| {
    // The canonical codes: by length, then symbol, each one more than the last, shifted
    // left as the length grows (RFC 7541 lists exactly these).
    let mut order: Vec<u16> = (0..=EOS).collect();
    order.sort_by_key(|s| (LENGTHS[usize::from(*s)], *s));
    let mut codes = [0u32; 257];
    let (mut code, mut len) = (0u32, LENGTHS[usize::from(order[0])]);
    for (i, symbol) in order.iter().enumerate() {
        let this_len = LENGTHS[usize::from(*symbol)];
        if i > 0 {
            code = (code + 1) << (this_len - len);
        }
        len = this_len;
        codes[usize::from(*symbol)] = code;
    }
    // The tree: inner nodes' children, a leaf as 0x8000 | symbol.
    let mut tree: Vec<[u16; 2]> = vec![[0, 0]];
    for symbol in 0..=EOS {
        let (code, len) = (codes[usize::from(symbol)], LENGTHS[usize::from(symbol)]);
        let mut node = 0usize;
        for bit in (0..len).rev() {
            let side = ((code >> bit) & 1) as usize;
            if bit == 0 {
                tree[node][side] = 0x8000 | symbol;
            } else {
                if tree[node][side] == 0 {
                    tree.push([0, 0]);
                    tree[node][side] = (tree.len() - 1) as u16;
                }
                node = usize::from(tree[node][side]);
            }
        }
    }
    let mut accepting = [false; 256];
    let mut node = 0usize;
    accepting[0] = true;
    for _ in 0..7 {
        node = usize::from(tree[node][1]);
        accepting[node] = true;
    }
    let mut steps = vec![0u32; tree.len() * 16];
    for state in 0..tree.len() {
        for nibble in 0..16u32 {
            let (mut node, mut emitted, mut fail) = (state, NONE, 0);
            for bit in (0..4).rev() {
                let child = tree[node][((nibble >> bit) & 1) as usize];
                if child & 0x8000 == 0 {
                    node = usize::from(child);
                    continue;
                }
                let symbol = child & 0x7fff;
                if symbol == EOS {
                    fail = FAIL;
                }
                emitted = u32::from(symbol);
                node = 0;
            }
            steps[state * 16 + nibble as usize] = node as u32 | (emitted << 8) | fail;
        }
    }
    Machine { steps, accepting }
});

/// Why a Huffman string cannot be decoded (5.2): EOS inside the string, or padding
/// longer than 7 bits or not of 1s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid Huffman-coded string")]
pub struct HuffmanError;

/// Walks `src`, handing each symbol to `emit`.
fn walk(src: &[u8], mut emit: impl FnMut(u8)) -> Result<(), HuffmanError> {
    let machine = &*MACHINE;
    let mut state = 0usize;
    for byte in src {
        for nibble in [byte >> 4, byte & 0xf] {
            let step = machine.steps[state * 16 + usize::from(nibble)];
            if step & FAIL != 0 {
                return Err(HuffmanError);
            }
            let emitted = (step >> 8) & 0x1ff;
            if emitted != NONE {
                emit(emitted as u8);
            }
            state = (step & 0xff) as usize;
        }
    }
    if machine.accepting[state] {
        Ok(())
    } else {
        Err(HuffmanError)
    }
}

/// Appends the decoding of `src` to `dst`.
pub fn decode(src: &[u8], dst: &mut Vec<u8>) -> Result<(), HuffmanError> {
    walk(src, |symbol| dst.push(symbol))
}

/// How long the decoding of `src` is, without writing it.
pub fn decoded_len(src: &[u8]) -> Result<usize, HuffmanError> {
    let mut len = 0;
    walk(src, |_| len += 1)?;
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        let mut runner = super::super::property_runner(512);
        runner
            .run(&proptest::collection::vec(any::<u8>(), 0..200), |src| {
                let mut out = Vec::new();
                decode(&encode(&src), &mut out).expect("decodes");
                prop_assert_eq!(decoded_len(&encode(&src)), Ok(src.len()));
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
