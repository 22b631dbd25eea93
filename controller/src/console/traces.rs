//! Links from a slow second to its trace: the operator's tracing UI, whose URL template
//! `iohr-controller serve --trace-url-template` sets (`{trace_id}` replaced by the
//! exemplar's id, docs/operations.md). Without one, ids are shown as text.

use std::str::FromStr;

/// The placeholder a template must hold.
pub const PLACEHOLDER: &str = "{trace_id}";
const MAX_LEN: usize = 2048;

/// A tracing UI's URL with [`PLACEHOLDER`] where a trace id goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceUrl(String);

impl FromStr for TraceUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<TraceUrl, String> {
        let scheme = text.starts_with("https://") || text.starts_with("http://");
        if !scheme {
            return Err("must be an http:// or https:// URL".into());
        }
        if !text.contains(PLACEHOLDER) {
            return Err(format!(
                "must contain {PLACEHOLDER}, where the trace id goes"
            ));
        }
        if text.len() > MAX_LEN
            || text
                .bytes()
                .any(|b| !b.is_ascii_graphic() || b"\"'<>\\`".contains(&b))
        {
            return Err(format!(
                "must be at most {MAX_LEN} printable ASCII characters, without quotes, <, >, \\ or `"
            ));
        }
        Ok(TraceUrl(text.to_string()))
    }
}

impl TraceUrl {
    /// The URL of `trace_id` (32 hex digits: frames' exemplars are checked when read).
    pub fn link(&self, trace_id: &str) -> String {
        self.0.replace(PLACEHOLDER, trace_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_needs_a_scheme_and_the_placeholder() {
        let url: TraceUrl = "https://grafana.example/explore?traceId={trace_id}"
            .parse()
            .expect("valid");
        assert_eq!(url.link("ab"), "https://grafana.example/explore?traceId=ab");
        for bad in [
            "grafana.example/{trace_id}",
            "https://grafana.example/",
            "javascript:alert(1)//{trace_id}",
            "https://g.example/{trace_id}\"><script>",
        ] {
            assert!(bad.parse::<TraceUrl>().is_err(), "{bad}");
        }
    }
}
