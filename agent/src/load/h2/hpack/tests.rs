//! The decoder against a third-party encoder (`httlib-hpack`: every representation,
//! Huffman or not, the dynamic table and its evictions), and the request fields against
//! its decoder.

use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use super::*;

fn runner() -> TestRunner {
    crate::load::h2::property_runner(256)
}

fn decoded(decoder: &mut Decoder, block: &[u8]) -> Result<Status, HpackError> {
    decoder.decode(block)
}

#[test]
fn request_fields_decode_with_a_third_party_decoder() {
    let long = "v".repeat(300);
    let mut block = Vec::new();
    field(&mut block, ":method", b"GET");
    field(&mut block, ":path", b"/a?b=1");
    field(&mut block, "authorization", b"secret");
    field(&mut block, "x-custom-header-name", long.as_bytes());
    let mut theirs = httlib_hpack::Decoder::default();
    let mut fields = Vec::new();
    theirs
        .decode(&mut block.clone(), &mut fields)
        .expect("decodes");
    let got: Vec<(&[u8], &[u8], u8)> = fields
        .iter()
        .map(|(n, v, f)| (&n[..], &v[..], *f))
        .collect();
    assert_eq!(
        got,
        vec![
            (&b":method"[..], &b"GET"[..], 0),
            (b":path", b"/a?b=1", 0),
            (
                b"authorization",
                b"secret",
                httlib_hpack::Decoder::NEVER_INDEXED
            ),
            (b"x-custom-header-name", long.as_bytes(), 0),
        ]
    );
    // Ours reads it back too, and nothing entered its table.
    let mut ours = Decoder::default();
    assert_eq!(decoded(&mut ours, &block), Ok(Status::Absent));
    assert!(ours.table.is_empty());
}

#[test]
fn a_late_or_too_large_size_update_is_refused() {
    let mut decoder = Decoder::default();
    assert_eq!(
        decoded(&mut decoder, &[0x88, 0x20]),
        Err(HpackError::LateSizeUpdate)
    );
    let mut decoder = Decoder::default();
    // 0x3f 0xe1 0x1f: a size update to 31 + 0xe1 - 0x80 + (0x1f << 7) = 4096 is allowed,
    // one more is not.
    assert_eq!(
        decoded(&mut decoder, &[0x3f, 0xe1, 0x1f, 0x88]),
        Ok(Status::Valid(200))
    );
    assert_eq!(
        decoded(&mut decoder, &[0x3f, 0xe2, 0x1f]),
        Err(HpackError::TableSize(4097))
    );
    assert_eq!(decoded(&mut decoder, &[0xbe]), Err(HpackError::Index(62)));
    assert_eq!(decoded(&mut decoder, &[0x80]), Err(HpackError::Index(0)));
    assert_eq!(
        decoded(&mut decoder, &[0x40, 0x05, b'a']),
        Err(HpackError::Truncated)
    );
    assert_eq!(
        decoded(&mut decoder, &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
        Err(HpackError::Integer)
    );
}

/// One header block as the encoder is told to write it.
#[derive(Debug, Clone)]
struct Field {
    name: Vec<u8>,
    value: Vec<u8>,
    flags: u8,
}

fn field_strategy() -> impl Strategy<Value = Field> {
    let name = prop_oneof![
        Just(b":status".to_vec()),
        Just(b"content-type".to_vec()),
        Just(b"date".to_vec()),
        proptest::collection::vec(b'a'..=b'z', 1..12),
    ];
    let value = prop_oneof![
        Just(b"200".to_vec()),
        Just(b"404".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..90),
    ];
    // Huffman name/value, with indexing or never indexed, best format.
    let flags = prop_oneof![
        Just(0u8),
        Just(0x1),
        Just(0x2),
        Just(0x3),
        Just(0x4),
        Just(0x6),
        Just(0x8),
        Just(0x16),
        Just(0x17)
    ];
    (name, value, flags).prop_map(|(name, value, flags)| Field { name, value, flags })
}

/// What a block of `fields` says of `:status`.
fn expected(fields: &[Field]) -> Status {
    let statuses: Vec<&Field> = fields.iter().filter(|f| f.name == b":status").collect();
    match statuses[..] {
        [] => Status::Absent,
        [one] => parse_status(&one.value).map_or(Status::Invalid, Status::Valid),
        _ => Status::Invalid,
    }
}

#[test]
fn blocks_from_a_third_party_encoder_give_their_status_and_keep_the_table_in_step() {
    // Each block sent 1 to 3 times in a row: a repeated block is taken from `Last`, and
    // later blocks' references into the table must still find the right entries.
    let blocks = proptest::collection::vec(
        (
            // Small tables too, where every byte of an entry's size decides an eviction.
            proptest::option::of(prop_oneof![40u32..200, 0u32..4096]),
            proptest::collection::vec(field_strategy(), 0..12),
            1usize..4,
        ),
        1..8,
    );
    runner()
        .run(&blocks, |blocks| {
            let mut encoder = httlib_hpack::Encoder::default();
            let mut decoder = Decoder::default();
            for (resize, fields, times) in blocks {
                for time in 0..times {
                    let mut block = Vec::new();
                    if let Some(size) = resize.filter(|_| time == 0) {
                        encoder
                            .update_max_dynamic_size(size, &mut block)
                            .expect("size update");
                    }
                    for f in &fields {
                        encoder
                            .encode((f.name.clone(), f.value.clone(), f.flags), &mut block)
                            .expect("encodes");
                    }
                    prop_assert_eq!(decoded(&mut decoder, &block), Ok(expected(&fields)));
                    prop_assert!(decoder.size <= decoder.max_size);
                    let counted: usize = decoder.table.iter().map(|e| e.size).sum();
                    prop_assert_eq!(counted, decoder.size);
                }
            }
            Ok(())
        })
        .expect("property");
}

#[test]
fn any_bytes_decode_or_fail_without_a_panic() {
    runner()
        .run(
            &proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..6),
            |blocks| {
                let mut decoder = Decoder::default();
                for block in blocks {
                    let _ = decoder.decode(&block);
                    prop_assert!(decoder.size <= TABLE_SIZE);
                }
                Ok(())
            },
        )
        .expect("property");
}
