use super::*;
use serde_json::json;

fn frames_of(chunks: &[&'static str]) -> Frames {
    let chunks: Vec<Result<bytes::Bytes, crate::RestError>> = chunks
        .iter()
        .map(|c| Ok(bytes::Bytes::from_static(c.as_bytes())))
        .collect();
    Frames::new(Box::pin(futures_util::stream::iter(chunks)))
}

#[tokio::test]
async fn events_split_across_chunks_and_comments_are_read_as_frames() {
    let mut frames = frames_of(&[
        ": keep-alive\n\n",
        "id: 1\nevent: phase\ndata: {\"kind\":\"phase\",",
        "\"data\":{\"phase\":\"checks\"}}\r\n\r\nid: 2\nevent: finished\n",
        "data: {\"kind\":\"finished\",\"data\":{}}\n\n",
    ]);
    let first = frames.next().await.expect("a frame");
    assert_eq!(first["data"]["phase"], "checks");
    assert_eq!(frames.next().await.expect("a frame")["kind"], "finished");
    assert_eq!(frames.next().await, None);
}

#[test]
fn load_seconds_give_the_rate_and_the_measured_p99() {
    let mut histogram = iohr_domain::histogram::latency_histogram().expect("histogram");
    for micros in 1..=100u64 {
        histogram.record(micros * 1000).expect("record");
    }
    let encoded = iohr_domain::histogram::encode(&histogram).expect("encode");
    let mut live = Live::default();
    live.update(&json!({"kind": "load", "data": {"phase": "warmup", "sent": 5}}));
    assert_eq!(live.describe(), ", phase warmup, last second 5 req/s");
    live.update(&json!({"kind": "load",
        "data": {"phase": "measure", "sent": 20, "histogram": encoded}}));
    assert_eq!(
        live.describe(),
        ", phase measure, last second 20 req/s, p99 99.0 ms"
    );
    live.update(&json!({"kind": "finished", "data": {}}));
    assert!(live.finished);
}

#[tokio::test]
async fn a_bom_and_lone_cr_line_ends_are_read_as_the_standard_says() {
    let mut frames = frames_of(&[
        "\u{feff}: keep-alive\r\rid: 1\revent: phase\rdata: {\"kind\":\"phase\",",
        "\"data\":{\"phase\":\"measure\"}}\r",
        "\rdata: not json\n\ndata: {\"kind\":\"finished\",\"data\":{}}\r\n\r\n",
    ]);
    assert_eq!(
        frames.next().await.expect("a frame")["data"]["phase"],
        "measure"
    );
    assert_eq!(frames.next().await.expect("a frame")["kind"], "finished");
    assert_eq!(frames.next().await, None);
}
