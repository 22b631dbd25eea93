//! Property tests of the fault proxy's request framer: whatever a client sends, split
//! however it arrives, every byte passes on once and in order (the framer never drops,
//! repeats or reorders what it forwards), and keep-alive requests sent whole are each
//! found with their path.

use proptest::prelude::*;
use proptest::test_runner::RngSeed;

use super::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x1012_0bad_5eed),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// `bytes` cut at the given points (each taken modulo the length).
fn split<'b>(bytes: &'b [u8], cuts: &[usize]) -> Vec<&'b [u8]> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| c % (bytes.len() + 1))
        .chain([0, bytes.len()])
        .collect();
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect()
}

/// Everything the framer passes on, in order, and the paths of the heads it found.
fn frame(pieces: &[&[u8]]) -> (Vec<u8>, Vec<String>) {
    let mut framer = Framer::default();
    let (mut bytes, mut paths) = (Vec::new(), Vec::new());
    for piece in pieces {
        for segment in framer.feed(piece) {
            match segment {
                Segment::Pass(b) => bytes.extend_from_slice(&b),
                Segment::Head { bytes: b, path } => {
                    bytes.extend_from_slice(&b);
                    paths.push(path);
                }
            }
        }
    }
    (bytes, paths)
}

/// Request-like text: valid and broken heads, lengths and chunk lines.
fn request_part() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            "GET / HTTP/1.1\r\nhost: x\r\n\r\n",
            "POST /o HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc",
            "POST /o HTTP/1.1\r\ncontent-length: 18446744073709551615\r\n\r\n",
            "POST /o HTTP/1.1\r\ncontent-length: 99999999999999999999\r\n\r\n",
            "POST /o HTTP/1.1\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n",
            "POST /c HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
            "fffffffffffffff\r\n",
            "ffffffffffffffffff\r\n",
            "3;ext=1\r\nabc\r\n",
            "0\r\nx: y\r\n\r\n",
            "GET http://h/p?q HTTP/1.1\r\n\r\n",
            "CONNECT h:1 HTTP/1.1\r\n\r\n",
            "GET /u HTTP/1.1\r\nupgrade: websocket\r\n\r\n",
            "\r\n",
            "ping",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 0..64),
    ]
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn every_byte_passes_once_and_in_order(
        bytes in prop::collection::vec(any::<u8>(), 0..1024),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let (out, _) = frame(&split(&bytes, &cuts));
        prop_assert_eq!(out, bytes);
    }

    #[test]
    fn request_like_streams_pass_whole(
        parts in prop::collection::vec(request_part(), 1..8),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let bytes = parts.concat();
        let (out, _) = frame(&split(&bytes, &cuts));
        prop_assert_eq!(out, bytes);
    }

    #[test]
    fn keep_alive_requests_sent_whole_are_each_found(
        requests in prop::collection::vec(("/[a-z0-9]{0,8}", prop::collection::vec(any::<u8>(), 0..64), 0u8..3), 1..6),
    ) {
        let mut bytes = Vec::new();
        for (path, body, framing) in &requests {
            match framing {
                0 => bytes.extend_from_slice(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes()),
                1 => {
                    bytes.extend_from_slice(format!("POST {path} HTTP/1.1\r\ncontent-length: {}\r\n\r\n", body.len()).as_bytes());
                    bytes.extend_from_slice(body);
                }
                _ => {
                    bytes.extend_from_slice(format!("POST {path} HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n").as_bytes());
                    if !body.is_empty() {
                        bytes.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
                        bytes.extend_from_slice(body);
                        bytes.extend_from_slice(b"\r\n");
                    }
                    bytes.extend_from_slice(b"0\r\n\r\n");
                }
            }
        }
        let (out, paths) = frame(&[&bytes]);
        prop_assert_eq!(out, bytes);
        let wanted: Vec<String> = requests.iter().map(|(p, _, _)| p.clone()).collect();
        prop_assert_eq!(paths, wanted);
    }
}
