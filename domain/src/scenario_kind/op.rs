//! One operation of a scenario, written on one line as `METHOD PATH [COUNT] [BODY]`:
//! COUNT overrides the spec's `count` for this operation, BODY is the rest of the line,
//! sent verbatim as `application/json`.

use std::collections::BTreeMap;
use std::fmt;

use crate::request::{SpecError, spec_error, validate_request};

use super::spec::MAX_COUNT;

const SHAPE: &str = "expected METHOD PATH [COUNT] [BODY]";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub method: String,
    pub path: String,
    /// Overrides the spec's `count` for this operation.
    pub count: Option<u32>,
    /// The JSON body exactly as written: a replay sends the same bytes.
    pub body: Option<String>,
}

impl Op {
    /// Parses one op; errors name `field` (`spec.ops[1]`, `ops file line 3`).
    ///
    /// A first word after the path made only of digits is the count, so a body that is a
    /// bare number needs an explicit count before it.
    pub fn parse(field: &str, text: &str) -> Result<Op, SpecError> {
        if text.contains(['\n', '\r']) {
            return Err(spec_error(field, "must be one line"));
        }
        let line = text.trim();
        let (method, rest) = split_word(line);
        if method.is_empty() {
            return Err(spec_error(field, format!("is empty; {SHAPE}")));
        }
        let (path, rest) = split_word(rest);
        if path.is_empty() {
            return Err(spec_error(
                field,
                format!("{line:?} names no path; {SHAPE}"),
            ));
        }
        validate_request(field, method, path, &BTreeMap::new())?;
        // A URI path is visible ASCII; a fragment is never sent.
        if !path.bytes().all(|b| b.is_ascii_graphic()) || path.contains('#') {
            return Err(spec_error(
                format!("{field}.path"),
                format!("{path:?} must be visible ASCII without '#'"),
            ));
        }
        let (word, after) = split_word(rest);
        let (count, rest) = if !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit()) {
            let count = word
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_COUNT).contains(n))
                .ok_or_else(|| {
                    spec_error(
                        format!("{field}.count"),
                        format!("{word} must be between 1 and {MAX_COUNT}"),
                    )
                })?;
            (Some(count), after)
        } else {
            (None, rest)
        };
        let body = if rest.is_empty() {
            None
        } else {
            if let Err(e) = serde_json::from_str::<serde_json::Value>(rest) {
                return Err(spec_error(
                    format!("{field}.body"),
                    format!("{rest:?} is not JSON ({e}); the body is sent as application/json"),
                ));
            }
            Some(rest.to_string())
        };
        Ok(Op {
            method: method.to_string(),
            path: path.to_string(),
            count,
            body,
        })
    }

    /// The canonical line: single spaces between the parts, the body as written.
    pub fn line(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)?;
        if let Some(count) = self.count {
            write!(f, " {count}")?;
        }
        if let Some(body) = &self.body {
            write!(f, " {body}")?;
        }
        Ok(())
    }
}

/// The first whitespace-separated word and the rest, trimmed.
fn split_word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    match text.find(char::is_whitespace) {
        Some(i) => (&text[..i], text[i..].trim()),
        None => (text, ""),
    }
}

/// Reads an ops file: one op per line; blank lines and lines starting with `#` are
/// skipped (a `#` later in a line belongs to the op, as a body may hold one).
pub fn parse_ops_file(text: &str) -> Result<Vec<Op>, SpecError> {
    let mut ops = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        ops.push(Op::parse(&format!("ops file line {}", i + 1), line)?);
    }
    if ops.is_empty() {
        return Err(spec_error("ops file", "holds no operations"));
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(text: &str) -> Op {
        Op::parse("spec.ops[0]", text).expect("valid op")
    }

    fn error(text: &str) -> String {
        Op::parse("spec.ops[1]", text)
            .expect_err("invalid op")
            .to_string()
    }

    #[test]
    fn the_parts_of_an_op() {
        assert_eq!(
            op("GET /api/users"),
            Op {
                method: "GET".into(),
                path: "/api/users".into(),
                count: None,
                body: None
            }
        );
        let post = op(r#"  POST   /api/orders 10 {"sku": "A1"}  "#);
        assert_eq!(post.count, Some(10));
        assert_eq!(post.body.as_deref(), Some(r#"{"sku": "A1"}"#));
        assert_eq!(post.line(), r#"POST /api/orders 10 {"sku": "A1"}"#);
        let no_count = op(r#"POST /api/orders {"sku": "A1"}"#);
        assert_eq!(no_count.count, None);
        assert_eq!(no_count.body.as_deref(), Some(r#"{"sku": "A1"}"#));
        // The count comes first, so a numeric body needs one.
        assert_eq!(op("PUT /n 3 42").body.as_deref(), Some("42"));
        assert_eq!(op("PUT /n 42").body, None);
        assert_eq!(op(&post.line()), post, "a line parses back to its op");
    }

    #[test]
    fn what_is_wrong_is_said_exactly() {
        assert_eq!(
            error(""),
            "spec.ops[1]: is empty; expected METHOD PATH [COUNT] [BODY]"
        );
        assert_eq!(
            error("GET"),
            "spec.ops[1]: \"GET\" names no path; expected METHOD PATH [COUNT] [BODY]"
        );
        assert_eq!(
            error("get /x"),
            "spec.ops[1].method: must be an upper-case HTTP method such as GET"
        );
        assert_eq!(
            error("GET api/x"),
            "spec.ops[1].path: must start with '/' (the spec never names the target)"
        );
        assert_eq!(
            error("GET /x 0"),
            "spec.ops[1].count: 0 must be between 1 and 10000"
        );
        assert_eq!(
            error("GET /x 10001"),
            "spec.ops[1].count: 10001 must be between 1 and 10000"
        );
        assert!(
            error("POST /x {sku}").starts_with("spec.ops[1].body: \"{sku}\" is not JSON ("),
            "{}",
            error("POST /x {sku}")
        );
        assert_eq!(error("GET /x\nGET /y"), "spec.ops[1]: must be one line");
        assert_eq!(
            error("GET /x#top"),
            "spec.ops[1].path: \"/x#top\" must be visible ASCII without '#'"
        );
    }

    #[test]
    fn an_ops_file_skips_blanks_and_comments() {
        let text = "# the hot paths\n\nGET /\n  # indented comment\nPOST /api/orders 5 {\"note\": \"#1\"}\n";
        let ops = parse_ops_file(text).expect("valid file");
        let lines: Vec<String> = ops.iter().map(Op::line).collect();
        assert_eq!(lines, ["GET /", r##"POST /api/orders 5 {"note": "#1"}"##]);
        assert_eq!(
            parse_ops_file("GET /\nDELETE\n")
                .expect_err("bad line")
                .to_string(),
            "ops file line 2: \"DELETE\" names no path; expected METHOD PATH [COUNT] [BODY]"
        );
        assert_eq!(
            parse_ops_file("# nothing\n\n")
                .expect_err("empty")
                .to_string(),
            "ops file: holds no operations"
        );
    }
}
