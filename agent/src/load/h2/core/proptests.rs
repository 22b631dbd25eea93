//! Properties of the connection's state under any bytes a server may send.

use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use super::tests::{Server, ready, waker};
use super::*;

fn runner() -> TestRunner {
    crate::load::h2::property_runner(512)
}

/// Bytes that are mostly frame-shaped: a real head of any type, flags and length (some
/// lengths past what follows), on the streams a client opened, then any payload.
fn frames() -> impl Strategy<Value = Vec<u8>> {
    let frame = (
        0u8..11,
        any::<u8>(),
        prop_oneof![Just(0u32), Just(1), Just(3), 0u32..8],
        proptest::collection::vec(any::<u8>(), 0..40),
        0usize..3,
    )
        .prop_map(|(kind, flags, stream, payload, skew)| {
            let mut out = Vec::new();
            Head {
                len: (payload.len() + skew.saturating_sub(1)) as u32,
                kind,
                flags,
                stream,
            }
            .write(&mut out);
            out.extend_from_slice(&payload);
            out
        });
    prop_oneof![
        proptest::collection::vec(frame, 0..12).prop_map(|f| f.concat()),
        proptest::collection::vec(any::<u8>(), 0..300),
    ]
}

#[test]
fn no_bytes_panic_and_what_is_left_is_less_than_a_frame() {
    runner()
        .run(&(frames(), 1usize..64), |(bytes, chunk)| {
            let mut core = ready(&[]);
            let (_, waker) = waker();
            let mut ids = Vec::new();
            for body in [&b""[..], &b"abc"[..]] {
                if let Poll::Ready(Ok(id)) =
                    core.open(b"\x82", &Bytes::copy_from_slice(body), &waker, false)
                {
                    ids.push(id);
                }
            }
            let mut pending = Vec::new();
            let mut woken = Vec::new();
            for piece in bytes.chunks(chunk) {
                pending.extend_from_slice(piece);
                let used = core.receive(&pending, &mut woken);
                prop_assert!(used <= pending.len());
                pending.drain(..used);
            }
            if core.closed().is_none() {
                // What is left waits for the rest of one frame.
                let head = Head::parse(&pending);
                prop_assert!(head.is_none_or(|h| pending.len() < frame::HEAD_LEN + h.len as usize));
            }
            for id in ids {
                // Every stream is still waiting or has one outcome.
                let _ = core.poll_outcome(id, &waker);
            }
            Ok(())
        })
        .expect("property");
}

#[test]
fn answers_cut_anywhere_give_each_stream_its_status() {
    let answers = proptest::collection::vec((200u16..600, 0usize..3000, any::<bool>()), 1..8);
    runner()
        .run(
            &(answers, proptest::collection::vec(1usize..500, 1..20)),
            |(answers, cuts)| {
                let mut core = ready(&[]);
                let ids: Vec<u32> = answers
                    .iter()
                    .map(|_| {
                        let (_, waker) = waker();
                        match core.open(b"\x82", &Bytes::new(), &waker, false) {
                            Poll::Ready(Ok(id)) => id,
                            _ => unreachable!("room for every stream"),
                        }
                    })
                    .collect();
                let mut server = Server::default();
                for (id, (status, len, trailers)) in ids.iter().zip(&answers) {
                    let status = status.to_string();
                    server = server.headers(
                        *id,
                        &[(":status", &status), ("x-n", &len.to_string())],
                        false,
                    );
                    server = server.data(*id, *len, !trailers);
                    if *trailers {
                        server = server.headers(*id, &[("x-trailer", "t")], true);
                    }
                }
                let mut pending = Vec::new();
                let mut at = 0;
                let mut cuts = cuts.into_iter().cycle();
                while at < server.bytes.len() {
                    let end = (at + cuts.next().unwrap_or(1)).min(server.bytes.len());
                    pending.extend_from_slice(&server.bytes[at..end]);
                    at = end;
                    let used = core.receive(&pending, &mut Vec::new());
                    pending.drain(..used);
                }
                prop_assert!(pending.is_empty());
                prop_assert_eq!(core.closed(), None);
                let (_, waker) = waker();
                for (id, (status, _, _)) in ids.iter().zip(&answers) {
                    prop_assert_eq!(
                        core.poll_outcome(*id, &waker),
                        Poll::Ready((Ok(*status), false))
                    );
                }
                Ok(())
            },
        )
        .expect("property");
}
