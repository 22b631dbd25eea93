//! Property tests of the SSE parser: any bytes, split anywhere (inside a line, between
//! `\r` and `\n`, inside a UTF-8 character), give the events the same bytes give in one
//! piece, never a panic; events written as a server writes them (with or without a BOM,
//! any of the three line ends, comments and `retry:`) read back exactly.

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

fn parse(pieces: &[&[u8]]) -> (Vec<SseEvent>, Option<Duration>) {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    for piece in pieces {
        events.extend(
            parser
                .push(piece)
                .expect("small input, lines within the limit"),
        );
    }
    events.extend(parser.finish());
    (events, parser.retry())
}

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

/// Stream-like bytes: field lines, comments, blank lines and every line ending.
fn stream_part() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            "data: x",
            "data:",
            "data",
            "event: e",
            "id: 7",
            "id",
            "id: a\0b",
            "retry: 18446744073709551615",
            "retry: 99999999999999999999",
            "retry: -1",
            "retry: 10",
            ": keep-alive",
            "\u{feff}data: é",
            "\r",
            "\n",
            "\r\n",
            "\n\n",
            "\r\r",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 0..32),
    ]
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn any_split_gives_the_events_of_the_whole(
        parts in prop::collection::vec(stream_part(), 0..16),
        cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        let bytes = parts.concat();
        let whole = parse(&[&bytes]);
        let pieces = parse(&split(&bytes, &cuts));
        prop_assert_eq!(pieces, whole);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        let whole = parse(&[&bytes]);
        prop_assert_eq!(parse(&split(&bytes, &cuts)), whole);
    }

    #[test]
    fn events_as_a_server_writes_them_read_back(
        events in prop::collection::vec(("[a-z]{1,8}", "[0-9]{1,6}", prop::collection::vec("[^\r\n]{0,12}", 1..4)), 1..6),
        ending in prop::sample::select(vec!["\n", "\r\n", "\r"]),
        bom in any::<bool>(),
        retry in prop::option::of(0u32..100_000),
        cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        let mut text = String::new();
        if bom {
            text.push('\u{feff}');
        }
        if let Some(ms) = retry {
            text.push_str(&format!(": keep-alive{ending}retry: {ms}{ending}{ending}"));
        }
        for (event, id, lines) in &events {
            text.push_str(&format!("event: {event}{ending}id: {id}{ending}"));
            for line in lines {
                text.push_str(&format!("data: {line}{ending}"));
            }
            text.push_str(ending);
        }
        let (parsed, parsed_retry) = parse(&split(text.as_bytes(), &cuts));
        let wanted: Vec<SseEvent> = events
            .iter()
            .map(|(event, id, lines)| SseEvent {
                id: Some(id.clone()),
                event: event.clone(),
                data: lines.join("\n"),
            })
            .collect();
        prop_assert_eq!(parsed, wanted);
        prop_assert_eq!(parsed_retry, retry.map(|ms| Duration::from_millis(u64::from(ms))));
    }
}
