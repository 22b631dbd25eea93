//! Property tests of the HTTP/1.1 response reader: whatever bytes a target sends, split
//! however the network splits them, `send` answers a status or a failure, never a panic
//! or a hang; a well-formed answer is read to its end however it is split.

use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
fn split(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| c % (bytes.len() + 1))
        .chain([0, bytes.len()])
        .collect();
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect()
}

/// One request on an in-memory stream whose far end answers `chunks`, then closes.
fn exchange(chunks: Vec<Vec<u8>>, method: Method) -> (Result<u16, Failure>, bool) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let (near, mut far) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let mut request = [0u8; 64];
            let _ = far.read(&mut request).await;
            for chunk in chunks {
                if far.write_all(&chunk).await.is_err() {
                    return;
                }
                tokio::task::yield_now().await;
            }
        });
        let mut conn = H1Conn::new(near);
        let outcome = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            conn.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n", &method),
        )
        .await
        .expect("the reader ends when the stream does");
        let reusable = conn.is_reusable();
        drop(conn);
        let _ = server.await;
        (outcome, reusable)
    })
}

/// Heads that are almost right: odd lengths, codings, versions and statuses.
fn head_line() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "HTTP/1.1 200 OK\r\n",
        "HTTP/1.0 200 OK\r\n",
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n",
        "HTTP/1.1 101 Switching\r\n",
        "HTTP/1.1 304 Not Modified\r\n",
        "HTTP/1.1 999 Odd\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: 18446744073709551615\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: 3, 4\r\n",
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n",
        "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n",
        "HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n",
        "HTTP/1.1 200 OK\r\nconnection: close\r\n",
    ])
    .prop_map(str::to_string)
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_bytes_end_in_a_status_or_a_failure(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
        head in any::<bool>(),
    ) {
        let method = if head { Method::HEAD } else { Method::GET };
        let _ = exchange(split(&bytes, &cuts), method);
    }

    #[test]
    fn odd_heads_and_bodies_end_in_a_status_or_a_failure(
        line in head_line(),
        body in prop::collection::vec(any::<u8>(), 0..256),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let mut bytes = format!("{line}\r\n").into_bytes();
        bytes.extend_from_slice(&body);
        let _ = exchange(split(&bytes, &cuts), Method::GET);
    }

    #[test]
    fn a_well_formed_answer_is_read_whole_however_it_is_split(
        status in 200u16..600,
        body in prop::collection::vec(any::<u8>(), 0..2048),
        chunked in any::<bool>(),
        sizes in prop::collection::vec(1usize..300, 1..8),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        prop_assume!(status != 204 && status != 304);
        let mut bytes = format!("HTTP/1.1 {status} X\r\n").into_bytes();
        if chunked {
            bytes.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
            let mut rest = &body[..];
            for size in sizes.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let take = (*size).min(rest.len());
                bytes.extend_from_slice(format!("{take:x}\r\n").as_bytes());
                bytes.extend_from_slice(&rest[..take]);
                bytes.extend_from_slice(b"\r\n");
                rest = &rest[take..];
            }
            bytes.extend_from_slice(b"0\r\nx-trailer: y\r\n\r\n");
        } else {
            bytes.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
            bytes.extend_from_slice(&body);
        }
        let (outcome, reusable) = exchange(split(&bytes, &cuts), Method::GET);
        prop_assert_eq!(outcome, Ok(status));
        prop_assert!(reusable, "a whole answer leaves the connection in step");
    }
}

proptest! {
    #![proptest_config(config(512))]

    /// The pure parsers, on their own: any bytes, no panic.
    #[test]
    fn head_and_chunk_lines_parse_or_fail(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_head(&bytes, &Method::GET);
        let _ = parse_head(&bytes, &Method::HEAD);
        let _ = parse_head(&bytes, &Method::CONNECT);
        let _ = line(&bytes);
        let _ = chunk_size(&bytes);
        let _ = parse_length(&bytes);
    }
}
