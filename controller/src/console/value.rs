//! Reading API answers (JSON) for display: a missing field reads as empty, never a panic.

use serde_json::Value;

/// The field at `path` (keys separated by `.`) as text: strings as they are, numbers and
/// booleans printed, null and missing as "".
pub fn text(value: &Value, path: &str) -> String {
    let mut at = value;
    for key in path.split('.') {
        match at.get(key) {
            Some(next) => at = next,
            None => return String::new(),
        }
    }
    match at {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The array at `key`, or none.
pub fn list<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// A list of strings at `key`, joined with ", ".
pub fn joined(value: &Value, key: &str) -> String {
    list(value, key)
        .iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// An RFC 3339 time shortened for a table: `2026-12-01 17:05:34`.
pub fn when(value: &Value, key: &str) -> String {
    short_time(&text(value, key))
}

/// An RFC 3339 time of a typed record shortened for a table, as [`when`] does.
pub fn short_time(t: &str) -> String {
    t.get(..19)
        .map(|s| s.replace('T', " "))
        .unwrap_or_else(|| t.to_string())
}

/// `?k=v&...` of the pairs whose value is not empty, encoded; "" when none is.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    let mut any = false;
    for (key, value) in pairs.iter().filter(|(_, v)| !v.is_empty()) {
        out.append_pair(key, value);
        any = true;
    }
    if any {
        format!("?{}", out.finish())
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_read_as_text_and_missing_ones_as_empty() {
        let v = json!({"a": {"b": 3}, "s": "x", "n": null, "l": ["p", 2],
                       "t": "2026-12-01T17:05:34.120Z"});
        assert_eq!(text(&v, "a.b"), "3");
        assert_eq!(text(&v, "s"), "x");
        assert_eq!(text(&v, "n"), "");
        assert_eq!(text(&v, "a.c.d"), "");
        assert_eq!(joined(&v, "l"), "p, 2");
        assert!(list(&v, "s").is_empty());
        assert_eq!(when(&v, "t"), "2026-12-01 17:05:34");
        assert_eq!(when(&v, "s"), "x");
        assert_eq!(
            query(&[("a", "x y"), ("b", ""), ("c", "&")]),
            "?a=x+y&c=%26"
        );
        assert_eq!(query(&[("b", "")]), "");
    }
}
