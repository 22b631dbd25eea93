//! The document against the code: every enum a schema lists is what serde reads and
//! writes, and every error `code` the controller's source can answer is the one list
//! ([`ERROR_CODES`]) that the document's `ApiError` and the operations' answers name.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use iohr_domain::compare::Verdict;
use iohr_domain::finding::{FindingKind, FindingStatus, Sighting};
use iohr_domain::{Forge, RunKind, RunStatus};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{ERROR_CODES, WEBHOOK_FORMATS, document};
use crate::store::EVENT_TYPES;

fn served() -> Value {
    serde_json::from_str(&document()).unwrap()
}

/// Every `enum` in `value`, with where it is as a JSON pointer (`#/components/...`).
fn enums(value: &Value, at: &str, found: &mut Vec<(String, Vec<Value>)>) {
    match value {
        Value::Object(fields) => {
            for (key, inner) in fields {
                let here = format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
                match (key.as_str(), inner) {
                    ("enum", Value::Array(values)) => found.push((at.to_string(), values.clone())),
                    _ => enums(inner, &here, found),
                }
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                enums(inner, &format!("{at}/{i}"), found);
            }
        }
        _ => {}
    }
}

/// Each listed value deserializes into `T` and serializes back to itself, and every
/// variant of `T` (`every`) serializes to a listed value.
fn serde_words<T: Serialize + DeserializeOwned>(listed: &[Value], every: &[T]) -> Vec<String> {
    let mut wrong = Vec::new();
    for value in listed {
        match serde_json::from_value::<T>(value.clone()) {
            Ok(read) => {
                let written = serde_json::to_value(&read).unwrap();
                if written != *value {
                    wrong.push(format!("{value} is read, then sent as {written}"));
                }
            }
            Err(error) => wrong.push(format!("{value} is refused: {error}")),
        }
    }
    for variant in every {
        let sent = serde_json::to_value(variant).unwrap();
        if !listed.contains(&sent) {
            wrong.push(format!("{sent} is sent but not listed"));
        }
    }
    wrong
}

/// The listed values are exactly `words`, the list the server checks against.
fn same_words(listed: &[Value], words: &[&str]) -> Vec<String> {
    let listed: BTreeSet<String> = listed.iter().map(|v| v.to_string()).collect();
    let words: BTreeSet<String> = words.iter().map(|w| Value::from(*w).to_string()).collect();
    let mut wrong: Vec<String> = listed
        .difference(&words)
        .map(|w| format!("{w} is listed but not the server's"))
        .collect();
    wrong.extend(
        words
            .difference(&listed)
            .map(|w| format!("{w} is the server's but not listed")),
    );
    wrong
}

/// Every enum of the served document, each mapped to the Rust type (or the server's own
/// list) it stands for; an enum mapped to nothing fails, by where it is.
#[test]
fn every_schema_enum_round_trips_through_the_real_types() {
    // A variant added to one of these fails to compile here until it is listed.
    let findings_status = |s: FindingStatus| match s {
        FindingStatus::Open | FindingStatus::Closed => s,
    };
    let sighting = |s: Sighting| match s {
        Sighting::New | Sighting::SeenAgain | Sighting::Reopened => s,
    };
    let verdict = |v: Verdict| match v {
        Verdict::Regressed | Verdict::Improved | Verdict::Unchanged => v,
    };
    let mut found = Vec::new();
    enums(&served(), "#", &mut found);
    assert!(found.len() >= 9, "{found:?}");
    let mut wrong = Vec::new();
    for (at, listed) in &found {
        let problems = match at.as_str() {
            "#/components/schemas/RunKind" => serde_words(listed, &RunKind::ALL),
            "#/components/schemas/RunStatus" => serde_words(listed, &RunStatus::ALL),
            "#/components/schemas/Forge" => serde_words(listed, &Forge::ALL),
            "#/components/schemas/FindingKind" => serde_words(listed, &FindingKind::ALL),
            "#/components/schemas/FindingStatus" => serde_words(
                listed,
                &[FindingStatus::Open, FindingStatus::Closed].map(findings_status),
            ),
            "#/components/schemas/Sighting" => serde_words(
                listed,
                &[Sighting::New, Sighting::SeenAgain, Sighting::Reopened].map(sighting),
            ),
            "#/components/schemas/Verdict" => serde_words(
                listed,
                &[Verdict::Regressed, Verdict::Improved, Verdict::Unchanged].map(verdict),
            ),
            "#/components/schemas/ApiErrorDetail/properties/code" => {
                same_words(listed, ERROR_CODES)
            }
            "#/components/schemas/WebhookEvent" => same_words(listed, &EVENT_TYPES),
            "#/components/schemas/WebhookFormat" => same_words(listed, WEBHOOK_FORMATS),
            _ => vec!["no Rust type is mapped to this enum (add it to this test)".into()],
        };
        wrong.extend(problems.into_iter().map(|p| format!("{at}: {p}")));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The `.rs` files under `dir`, recursively.
fn sources(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        // The console's pages answer people, not the API (docs/console.md).
        if path.is_dir() && !path.ends_with("console") {
            sources(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The text of the call whose arguments start at `text`, up to its closing parenthesis
/// (string literals skipped, so a parenthesis in a message does not count).
fn call_arguments(text: &str) -> &str {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' => depth += 1,
            ')' if depth == 0 => return &text[..i],
            ')' => depth -= 1,
            _ => {}
        }
    }
    text
}

/// Every code the controller's source (but the console's) gives an `ApiError`: the first string literal of
/// each `ApiError::new(..)`, `bad_request(..)` and `too_many(..)` call, when it is a word
/// of lower case and underscores (a code passed through a variable is its caller's).
///
/// Also every such word in a string literal anywhere in that source but this list's own
/// file (`openapi.rs`, `openapi/`): a code chosen by a `match` before the call is there.
fn codes_in_source() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut files = Vec::new();
    sources(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut codes = BTreeSet::new();
    let mut words = BTreeSet::new();
    let is_word = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c == '_');
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let own = file.ends_with("api/openapi.rs")
            || file
                .parent()
                .is_some_and(|dir| dir.ends_with("api/openapi"));
        if !own {
            words.extend(
                text.split('"')
                    .skip(1)
                    .step_by(2)
                    .filter(|s| is_word(s))
                    .map(str::to_string),
            );
        }
        for call in ["ApiError::new(", "bad_request(", "too_many("] {
            for (at, _) in text.match_indices(call) {
                let arguments = call_arguments(&text[at + call.len()..]);
                let Some(literal) = arguments.split('"').nth(1) else {
                    continue;
                };
                if is_word(literal) {
                    codes.insert(literal.to_string());
                }
            }
        }
    }
    (codes, words)
}

/// The codes an operation's answers name: the words in backquotes of lower case and
/// underscores, in each answer's description.
fn codes_documented() -> BTreeSet<String> {
    let doc = served();
    let mut codes = BTreeSet::new();
    for item in doc["paths"].as_object().unwrap().values() {
        for operation in item.as_object().unwrap().values() {
            for (status, answer) in operation["responses"].as_object().unwrap() {
                if !status.starts_with('4') && !status.starts_with('5') {
                    continue;
                }
                let description = answer["description"].as_str().unwrap_or_default();
                for (i, quoted) in description.split('`').enumerate() {
                    if i % 2 == 1
                        && !quoted.is_empty()
                        && quoted.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                    {
                        codes.insert(quoted.to_string());
                    }
                }
            }
        }
    }
    codes
}

/// The codes of routes the document does not describe: `/mcp` (docs/mcp.md) and a
/// method a path does not have.
const UNDOCUMENTED_ROUTES_CODES: &[&str] = &[
    "origin_not_allowed",
    "method_not_allowed",
    // A trigger's inbound route (docs/api.md, "Triggers").
    "bad_signature",
    "invalid_delivery",
];

/// A store conflict's code ([`super::super::error::ApiError`]'s `From<StoreError>`): kept
/// in the list for the day a route meets one, answered by none today.
const NO_ROUTE_ANSWERS: &[&str] = &["conflict"];

#[test]
fn every_error_code_the_source_can_answer_is_listed_and_documented() {
    let listed: BTreeSet<String> = ERROR_CODES.iter().map(|c| c.to_string()).collect();
    assert_eq!(
        listed.len(),
        ERROR_CODES.len(),
        "a code twice in ERROR_CODES"
    );
    let (in_source, words) = codes_in_source();
    let unlisted: Vec<_> = in_source.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "codes the source answers, missing from ERROR_CODES: {unlisted:?}"
    );
    let stale: Vec<_> = listed.difference(&words).collect();
    assert!(
        stale.is_empty(),
        "codes in ERROR_CODES that no source answers: {stale:?}"
    );
    let documented = codes_documented();
    let unknown: Vec<_> = documented.difference(&listed).collect();
    assert!(
        unknown.is_empty(),
        "codes named by operations' answers, missing from ERROR_CODES: {unknown:?}"
    );
    let undocumented: Vec<_> = listed
        .iter()
        .filter(|c| !documented.contains(*c))
        .filter(|c| !UNDOCUMENTED_ROUTES_CODES.contains(&c.as_str()))
        .filter(|c| !NO_ROUTE_ANSWERS.contains(&c.as_str()))
        .collect();
    assert!(
        undocumented.is_empty(),
        "codes no operation's answer names: {undocumented:?}"
    );
}

/// Every listing documents its `cursor` as the server takes it (`query::Cursor`): the
/// same pattern and lengths.
#[test]
fn cursors_are_documented_as_the_server_takes_them() {
    use crate::query::Cursor;
    let document = served();
    for (path, shape) in [
        ("runs", Cursor::Id),
        ("findings", Cursor::Id),
        ("audit", Cursor::Id),
        ("webhooks", Cursor::Webhook),
        ("webhooks/{id}/deliveries", Cursor::Seq),
        ("scenarios", Cursor::Name),
    ] {
        let parameters = &document["paths"][format!("/v1/reliability/{path}")]["get"]["parameters"];
        let cursor = parameters
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == "cursor"))
            .unwrap_or_else(|| panic!("{path}: no cursor parameter"));
        let schema = &cursor["schema"];
        assert_eq!(schema["pattern"], shape.pattern(), "{path}: {schema}");
        let (shortest, longest) = shape.lengths();
        assert_eq!(
            (&schema["minLength"], &schema["maxLength"]),
            (&shortest.into(), &longest.into()),
            "{path}"
        );
    }
}
