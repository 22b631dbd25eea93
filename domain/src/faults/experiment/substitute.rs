//! `${name}` substitution as the Chaos Toolkit does it (`chaoslib.substitute`, which is
//! Python's `string.Template.safe_substitute` with one twist):
//!
//! - `${name}` and `$name` (a name is `[_A-Za-z][_A-Za-z0-9]*`) take the value of `name`;
//!   `$$` is one `$`; a name nobody defines, and any other `$` (`${` unterminated,
//!   `${a-b}`, `${${x}}`), is left as it is;
//! - a string that is exactly `${name}` becomes the value itself, keeping its type (a
//!   number stays a number); inside a longer string a value is written as text (Python's
//!   `str()`: `True`, `None`, `8080`).
//!
//! Only values are substituted, never keys, recursively through objects and lists.

use std::collections::BTreeSet;

use serde_json::Value;

/// Where names are looked up.
pub trait Lookup {
    fn get(&self, name: &str) -> Option<&Value>;
}

impl Lookup for std::collections::BTreeMap<String, Value> {
    fn get(&self, name: &str) -> Option<&Value> {
        std::collections::BTreeMap::get(self, name)
    }
}

/// One piece of a template string.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece<'s> {
    Text(&'s str),
    /// `$$`: one `$`.
    Dollar,
    /// `${name}` (braced) or `$name`, with the text it was written as.
    Name {
        name: &'s str,
        braced: bool,
        written: &'s str,
    },
}

fn is_start(b: u8) -> bool {
    b == b'_' || b.is_ascii_alphabetic()
}

fn is_rest(b: u8) -> bool {
    b == b'_' || b.is_ascii_alphanumeric()
}

/// The length of the name at the start of `bytes` (0 if none).
fn name_len(bytes: &[u8]) -> usize {
    match bytes.first() {
        Some(&b) if is_start(b) => 1 + bytes[1..].iter().take_while(|&&b| is_rest(b)).count(),
        _ => 0,
    }
}

/// Splits a template into its pieces; never fails (what is not a reference is text).
fn pieces(s: &str) -> Vec<Piece<'_>> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut text_from = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'$' {
            i += 1;
            continue;
        }
        // Every index below is at an ASCII byte, so every slice is on a char boundary.
        let piece = match bytes.get(i + 1) {
            Some(b'$') => Some((Piece::Dollar, 2)),
            Some(b'{') => {
                let n = name_len(&bytes[i + 2..]);
                if n > 0 && bytes.get(i + 2 + n) == Some(&b'}') {
                    Some((
                        Piece::Name {
                            name: &s[i + 2..i + 2 + n],
                            braced: true,
                            written: &s[i..i + 3 + n],
                        },
                        3 + n,
                    ))
                } else {
                    None
                }
            }
            Some(_) => {
                let n = name_len(&bytes[i + 1..]);
                (n > 0).then(|| {
                    (
                        Piece::Name {
                            name: &s[i + 1..i + 1 + n],
                            braced: false,
                            written: &s[i..i + 1 + n],
                        },
                        1 + n,
                    )
                })
            }
            None => None,
        };
        match piece {
            Some((piece, len)) => {
                if text_from < i {
                    out.push(Piece::Text(&s[text_from..i]));
                }
                out.push(piece);
                i += len;
                text_from = i;
            }
            // A `$` that starts nothing stays as it is.
            None => i += 1,
        }
    }
    if text_from < bytes.len() {
        out.push(Piece::Text(&s[text_from..]));
    }
    out
}

/// A value written inside a longer string, as Python's `str()` writes it.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Null => "None".into(),
        other => other.to_string(),
    }
}

/// Substitutes one string.
pub fn substitute_str(s: &str, names: &dyn Lookup) -> Value {
    let parts = pieces(s);
    if let [
        Piece::Name {
            name, braced: true, ..
        },
    ] = parts.as_slice()
        && let Some(value) = names.get(name)
    {
        return value.clone();
    }
    let mut out = String::with_capacity(s.len());
    for piece in parts {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Dollar => out.push('$'),
            Piece::Name { name, written, .. } => match names.get(name) {
                Some(v) => out.push_str(&as_text(v)),
                None => out.push_str(written),
            },
        }
    }
    Value::String(out)
}

/// Substitutes every string value in `value` (not the keys of objects).
pub fn substitute(value: &Value, names: &dyn Lookup) -> Value {
    match value {
        Value::String(s) => substitute_str(s, names),
        Value::Array(items) => Value::Array(items.iter().map(|v| substitute(v, names)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, names)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Every name `value`'s strings refer to (`${name}` or `$name`).
pub fn references(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::String(s) => {
            for piece in pieces(s) {
                if let Piece::Name { name, .. } = piece {
                    out.insert(name.to_string());
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, out)),
        Value::Object(map) => map.values().for_each(|v| references(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn names() -> BTreeMap<String, Value> {
        [
            ("base_url", json!("http://127.0.0.1:8080")),
            ("port", json!(8080)),
            ("on", json!(true)),
            ("_x1", json!("X")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    #[test]
    fn substitutes_as_python_templates_do() {
        let n = names();
        let cases = [
            ("${base_url}/health", json!("http://127.0.0.1:8080/health")),
            ("$base_url/health", json!("http://127.0.0.1:8080/health")),
            ("${port}", json!(8080)),
            ("$port", json!("8080")),
            ("port ${port}", json!("port 8080")),
            ("${on}!", json!("True!")),
            ("$$port", json!("$port")),
            ("$${port}", json!("${port}")),
            ("${unknown}", json!("${unknown}")),
            ("a ${unknown} $unknown", json!("a ${unknown} $unknown")),
            ("${", json!("${")),
            ("${base_url", json!("${base_url")),
            ("${a-b}", json!("${a-b}")),
            ("${${port}}", json!("${8080}")),
            ("$", json!("$")),
            ("$1", json!("$1")),
            ("${_x1}${_x1}", json!("XX")),
            ("é${_x1}é", json!("éXé")),
        ];
        for (template, want) in cases {
            assert_eq!(substitute_str(template, &n), want, "{template}");
        }
    }

    #[test]
    fn substitutes_values_not_keys() {
        let v = json!({"${port}": ["${port}", {"h": "Bearer ${_x1}"}], "n": 3});
        assert_eq!(
            substitute(&v, &names()),
            json!({"${port}": [8080, {"h": "Bearer X"}], "n": 3})
        );
        let mut refs = BTreeSet::new();
        references(&v, &mut refs);
        assert_eq!(
            refs,
            BTreeSet::from(["_x1".to_string(), "port".to_string()])
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            rng_seed: proptest::test_runner::RngSeed::Fixed(15),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Any text, braces and dollars in any order: never a panic, and text without
        /// a known name comes back unchanged but for `$$`.
        #[test]
        fn never_panics_and_keeps_what_it_does_not_know(
            s in "([$]|[{]|[}]|[a-z_0-9]|é|-| ){0,40}"
        ) {
            let empty = BTreeMap::new();
            let out = substitute_str(&s, &empty);
            prop_assert_eq!(out, Value::String(s.replace("$$", "\u{0}").replace('\u{0}', "$")));
            let _ = substitute_str(&s, &names());
        }

        #[test]
        fn a_known_name_is_replaced_wherever_it_stands(
            before in "[a-z /.:]{0,10}",
            after in "[ /.:][a-z /.:]{0,10}",
        ) {
            let s = format!("{before}${{_x1}}{after}");
            let want = format!("{before}X{after}");
            prop_assert_eq!(substitute_str(&s, &names()), Value::String(want));
        }
    }
}
