//! Small helpers for display: a time shortened for a table and a page's query string. The
//! pages render typed records (the layers' answers), never JSON read back.

/// An RFC 3339 time shortened for a table: `2026-12-01 17:05:34` (an empty or short text
/// as it is).
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

    #[test]
    fn times_shorten_and_queries_skip_empty_values() {
        assert_eq!(
            short_time("2026-12-01T17:05:34.120Z"),
            "2026-12-01 17:05:34"
        );
        assert_eq!(short_time("x"), "x");
        assert_eq!(short_time(""), "");
        assert_eq!(
            query(&[("a", "x y"), ("b", ""), ("c", "&")]),
            "?a=x+y&c=%26"
        );
        assert_eq!(query(&[("b", "")]), "");
    }
}
