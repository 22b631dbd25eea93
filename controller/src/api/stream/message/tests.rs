//! The client messages: each accepted shape, each refusal's code and the field it names,
//! and, as properties, that no text panics and every refusal is one of the documented
//! codes.

use proptest::prelude::*;
use proptest::test_runner::RngSeed;

use super::*;

fn refused(text: &str) -> Refusal {
    parse(text).expect_err(text)
}

#[test]
fn subscribe_and_unsubscribe_are_read_with_their_defaults() {
    assert_eq!(
        parse(r#"{"op":"subscribe","run":"r1","after":7}"#),
        Ok(Request::Subscribe {
            run: "r1".into(),
            after: 7
        })
    );
    for text in [
        r#"{"op":"subscribe","run":"r1"}"#,
        r#"{"op":"subscribe","run":"r1","after":null,"topic":"frames"}"#,
        r#"{"op":"subscribe","run":"r1","after":0}"#,
    ] {
        assert_eq!(
            parse(text),
            Ok(Request::Subscribe {
                run: "r1".into(),
                after: 0
            }),
            "{text}"
        );
    }
    assert_eq!(
        parse(r#"{"topic":"frames","op":"unsubscribe","run":"r1"}"#),
        Ok(Request::Unsubscribe { run: "r1".into() })
    );
}

#[test]
fn each_refusal_has_its_code_and_names_what_is_wrong() {
    let cases: &[(&str, &str, &str, Option<&str>)] = &[
        ("{not json", "malformed_json", "not JSON", None),
        ("[1,2]", "invalid_message", "JSON object", None),
        ("\"subscribe\"", "invalid_message", "JSON object", None),
        (
            r#"{"run":"r1"}"#,
            "invalid_message",
            "op is missing",
            Some("r1"),
        ),
        (
            r#"{"op":"watch","run":"r1"}"#,
            "invalid_message",
            "op must be",
            Some("r1"),
        ),
        (r#"{"op":7}"#, "invalid_message", "op must be", None),
        (
            r#"{"op":"subscribe"}"#,
            "invalid_message",
            "run must be",
            None,
        ),
        (
            r#"{"op":"subscribe","run":""}"#,
            "invalid_message",
            "run must be",
            None,
        ),
        (
            r#"{"op":"subscribe","run":5}"#,
            "invalid_message",
            "run must be",
            None,
        ),
        (
            r#"{"op":"subscribe","run":"r1","after":-1}"#,
            "invalid_message",
            "after must be",
            Some("r1"),
        ),
        (
            r#"{"op":"subscribe","run":"r1","after":1.5}"#,
            "invalid_message",
            "after must be",
            Some("r1"),
        ),
        (
            r#"{"op":"subscribe","run":"r1","after":"3"}"#,
            "invalid_message",
            "after must be",
            Some("r1"),
        ),
        (
            r#"{"op":"subscribe","run":"r1","since":3}"#,
            "invalid_message",
            "unknown field \"since\"",
            Some("r1"),
        ),
        (
            r#"{"op":"unsubscribe","run":"r1","after":3}"#,
            "invalid_message",
            "unknown field \"after\"",
            Some("r1"),
        ),
        (
            r#"{"op":"subscribe","topic":"events","after":"e1"}"#,
            "invalid_message",
            "after must be an event seq",
            None,
        ),
        (
            r#"{"op":"subscribe","topic":"events","run":"r1"}"#,
            "invalid_message",
            "unknown field \"run\" in subscribe of topic events",
            None,
        ),
        (
            r#"{"op":"subscribe","topic":"logs","run":"r1"}"#,
            "invalid_message",
            "topic must be",
            Some("r1"),
        ),
    ];
    for (text, code, says, run) in cases {
        let refusal = refused(text);
        assert_eq!(refusal.code, *code, "{text}: {refusal:?}");
        assert!(refusal.message.contains(says), "{text}: {refusal:?}");
        assert_eq!(refusal.run.as_deref(), *run, "{text}");
    }
    let long = format!(
        r#"{{"op":"subscribe","run":"{}"}}"#,
        "a".repeat(MAX_RUN_ID_BYTES + 1)
    );
    assert!(refused(&long).message.contains("run must be"));
}

#[test]
fn the_events_topic_subscribes_after_a_seq() {
    assert_eq!(
        parse(r#"{"op":"subscribe","topic":"events","after":7}"#),
        Ok(Request::SubscribeEvents { after: 7 })
    );
    assert_eq!(
        parse(r#"{"op":"subscribe","topic":"events"}"#),
        Ok(Request::SubscribeEvents { after: 0 })
    );
    assert_eq!(
        parse(r#"{"op":"unsubscribe","topic":"events"}"#),
        Ok(Request::UnsubscribeEvents)
    );
    let row = crate::store::EventRow {
        account_id: "a1".into(),
        seq: 4,
        id: "evt_1".into(),
        event_type: "reliability.run.finished".into(),
        at: 0,
        data: json!({"run_id": "r1"}),
    };
    let sent = event(&row);
    assert_eq!(
        (&sent["type"], &sent["topic"], &sent["id"], &sent["event"]),
        (
            &json!("event"),
            &json!("events"),
            &json!(4),
            &json!("reliability.run.finished")
        )
    );
    assert_eq!(sent["data"]["id"], "evt_1");
    assert_eq!(sent["data"]["data"]["run_id"], "r1");
    assert_eq!(
        events_end(4),
        json!({"type": "end", "topic": "events", "last": 4})
    );
}

#[test]
fn server_messages_have_their_documented_shape() {
    let frame = StoredFrame {
        run_id: "r1".into(),
        number: 3,
        kind: "check".into(),
        payload: json!({"name": "home"}),
        at: 0,
    };
    let sent = super::frame(&frame);
    assert_eq!(sent["type"], "frame");
    assert_eq!(sent["topic"], "frames");
    assert_eq!(
        (sent["run"].as_str(), sent["id"].as_u64()),
        (Some("r1"), Some(3))
    );
    assert_eq!(sent["event"], "check");
    assert_eq!(sent["frame"], serde_json::to_value(frame.to_api()).unwrap());
    assert_eq!(
        end("r1", 9),
        json!({"type": "end", "topic": "frames", "run": "r1", "last": 9})
    );
    let error = Refusal::new("not_found", "run r1 not found", Some("r1")).to_message();
    assert_eq!(
        error,
        json!({"type": "error", "code": "not_found", "message": "run r1 not found",
               "topic": "frames", "run": "r1"})
    );
    assert_eq!(refused("x").to_message().get("run"), None);
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x0005_7ea3_5eed),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const CODES: [&str; 2] = ["malformed_json", "invalid_message"];

/// JSON values shaped like messages: the known keys with values of any type, and others.
fn near_messages() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        prop_oneof![
            Just("subscribe".to_string()),
            Just("unsubscribe".to_string()),
            Just("frames".to_string()),
            Just("events".to_string()),
            ".{0,140}",
        ]
        .prop_map(Value::from),
    ];
    let value = leaf.prop_recursive(2, 8, 3, |inner| {
        prop::collection::vec(inner, 0..3).prop_map(Value::from)
    });
    let key = prop_oneof![
        Just("op".to_string()),
        Just("run".to_string()),
        Just("after".to_string()),
        Just("topic".to_string()),
        "[a-z]{1,6}",
    ];
    prop::collection::btree_map(key, value, 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()).to_string())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn arbitrary_text_never_panics_and_is_refused_precisely(text in ".{0,300}") {
        if let Err(refusal) = parse(&text) {
            prop_assert!(CODES.contains(&refusal.code), "{refusal:?}");
            prop_assert!(!refusal.message.is_empty());
        }
    }

    #[test]
    fn messages_of_any_shape_are_accepted_exactly_when_valid(text in near_messages()) {
        let value: Value = serde_json::from_str(&text).unwrap();
        match parse(&text) {
            Ok(Request::Subscribe { run, after }) => {
                prop_assert_eq!(&value["op"], "subscribe");
                prop_assert_eq!(value["run"].as_str(), Some(run.as_str()));
                prop_assert_eq!(value.get("after").and_then(Value::as_u64).unwrap_or(0), after);
            }
            Ok(Request::Unsubscribe { run }) => {
                prop_assert_eq!(&value["op"], "unsubscribe");
                prop_assert_eq!(value["run"].as_str(), Some(run.as_str()));
            }
            Ok(Request::SubscribeEvents { after }) => {
                prop_assert_eq!(&value["op"], "subscribe");
                prop_assert_eq!(&value["topic"], "events");
                prop_assert!(value.get("run").is_none());
                prop_assert_eq!(value.get("after").and_then(Value::as_u64).unwrap_or(0), after);
            }
            Ok(Request::UnsubscribeEvents) => {
                prop_assert_eq!(&value["op"], "unsubscribe");
                prop_assert_eq!(&value["topic"], "events");
            }
            Err(refusal) => {
                prop_assert!(CODES.contains(&refusal.code), "{refusal:?}");
                prop_assert_ne!(refusal.code, "malformed_json");
            }
        }
    }
}
