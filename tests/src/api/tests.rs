//! The tests' SSE reader, fed chunks cut where the network may cut them.

use std::convert::Infallible;

use http_body_util::StreamBody;
use hyper::body::Frame;
use serde_json::json;

use super::*;

/// A body that arrives in exactly these chunks.
fn chunked(
    chunks: &[&'static [u8]],
) -> Sse<StreamBody<impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> + Unpin>> {
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = chunks
        .iter()
        .map(|c| Ok(Frame::data(Bytes::from_static(c))))
        .collect();
    Sse::from_body(StreamBody::new(futures_util::stream::iter(frames)))
}

#[tokio::test]
async fn a_multibyte_character_split_across_chunks_arrives_whole() {
    // "é" is 0xC3 0xA9: the first chunk ends between its two bytes.
    let mut sse = chunked(&[
        b"id: 7\nevent: log\ndata: {\"line\":\"caf\xC3",
        b"\xA9\"}\n\n",
    ]);
    let event = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(event.id, Some(7));
    assert_eq!(event.event, "log");
    assert_eq!(event.data, json!({"line": "café"}));
    assert!(sse.next(Duration::from_secs(5)).await.is_none());
}

#[tokio::test]
async fn keep_alive_comments_are_skipped_and_ids_resume_the_stream() {
    let mut sse = chunked(&[
        b": keep-alive\n\n",
        b"id: 3\nevent: finished\ndata: {\"n\":3}\n",
        b"\n",
    ]);
    let event = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        (event.id, event.event.as_str(), event.data),
        (Some(3), "finished", json!({"n": 3}))
    );
    assert!(sse.next(Duration::from_secs(5)).await.is_none());
}
