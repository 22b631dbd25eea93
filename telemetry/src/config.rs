//! Where spans go, read from the standard OpenTelemetry environment variables, as an
//! operator of any OpenTelemetry-instrumented service sets them:
//!
//! - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the traces URL, used as given) or
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` (a base: `/v1/traces` is appended). Neither: off.
//! - `OTEL_EXPORTER_OTLP_TRACES_HEADERS` or `OTEL_EXPORTER_OTLP_HEADERS`:
//!   `name=value,name2=value2`, values percent-decoded (an API key for a hosted backend).
//! - `OTEL_SERVICE_NAME` (default: the binary's name).
//! - `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL`: only
//!   `http/protobuf` is spoken; another protocol is refused at start, not ignored.
//! - `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`: off whatever else is set.

use hyper::Uri;
use hyper::http::{HeaderName, HeaderValue};

/// Where and how spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The full traces URL (`.../v1/traces`).
    pub endpoint: String,
    /// Sent with every export, names lower-cased.
    pub headers: Vec<(String, String)>,
    pub service_name: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{var}: {value:?} is not an http:// or https:// URL")]
    Endpoint { var: &'static str, value: String },
    #[error("{var}: {why}")]
    Headers { var: &'static str, why: String },
    #[error(
        "{var}: {value:?} is not spoken: spans are exported over OTLP/HTTP (set it to http/protobuf or unset it)"
    )]
    Protocol { var: &'static str, value: String },
}

impl Config {
    /// The configuration the process environment gives, `None` when export is off.
    pub fn from_env(default_service: &str) -> Result<Option<Config>, ConfigError> {
        Config::from_vars(|name| std::env::var(name).ok(), default_service)
    }

    /// [`Config::from_env`] over any source of variables (tests).
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
        default_service: &str,
    ) -> Result<Option<Config>, ConfigError> {
        let set = |name: &str| {
            var(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
        {
            return Ok(None);
        }
        let endpoint = match (
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            set("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(url), _) => checked("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)?,
            (None, Some(base)) => {
                let base = checked("OTEL_EXPORTER_OTLP_ENDPOINT", base)?;
                format!("{}/v1/traces", base.trim_end_matches('/'))
            }
            (None, None) => return Ok(None),
        };
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(value) = set(name) {
                if value != "http/protobuf" {
                    return Err(ConfigError::Protocol { var: name, value });
                }
                break;
            }
        }
        let headers = match set("OTEL_EXPORTER_OTLP_TRACES_HEADERS") {
            Some(list) => parse_headers(&list).map_err(|why| ConfigError::Headers {
                var: "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                why,
            })?,
            None => match set("OTEL_EXPORTER_OTLP_HEADERS") {
                Some(list) => parse_headers(&list).map_err(|why| ConfigError::Headers {
                    var: "OTEL_EXPORTER_OTLP_HEADERS",
                    why,
                })?,
                None => Vec::new(),
            },
        };
        Ok(Some(Config {
            endpoint,
            headers,
            service_name: set("OTEL_SERVICE_NAME").unwrap_or_else(|| default_service.to_string()),
        }))
    }
}

fn checked(var: &'static str, value: String) -> Result<String, ConfigError> {
    let ok = value.parse::<Uri>().is_ok_and(|uri| {
        matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
    });
    if ok {
        Ok(value)
    } else {
        Err(ConfigError::Endpoint { var, value })
    }
}

/// The W3C-baggage-like list the OTLP exporter spec names: `name=value` pairs separated
/// by commas, spaces around each trimmed, values percent-decoded. Every pair must make a
/// valid HTTP header.
pub fn parse_headers(list: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for pair in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(format!("{pair:?} is not name=value"));
        };
        let name = name.trim().to_ascii_lowercase();
        let value = percent_decode(value.trim()).ok_or_else(|| {
            format!("the value of {name:?} has a bad percent escape or is not UTF-8")
        })?;
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(format!("{name:?} is not a header name"));
        }
        if HeaderValue::from_str(&value).is_err() {
            return Err(format!("the value of {name:?} is not a header value"));
        }
        out.push((name, value));
    }
    Ok(out)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<Option<Config>, ConfigError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_vars(|name| vars.get(name).cloned(), "iohr-agent")
    }

    #[test]
    fn off_unless_an_endpoint_is_set() {
        assert_eq!(from(&[]), Ok(None));
        assert_eq!(from(&[("OTEL_SERVICE_NAME", "x")]), Ok(None));
        let on = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://tempo:4318")];
        assert!(from(&on).unwrap().is_some());
        assert_eq!(
            from(&[on[0], ("OTEL_SDK_DISABLED", "true")]),
            Ok(None),
            "the SDK's own off switch"
        );
        assert_eq!(from(&[on[0], ("OTEL_TRACES_EXPORTER", "none")]), Ok(None));
    }

    #[test]
    fn the_base_endpoint_gets_the_traces_path_the_specific_one_does_not() {
        let base = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otlp.example:4318/"),
            ("OTEL_SERVICE_NAME", "edge"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(base.endpoint, "https://otlp.example:4318/v1/traces");
        assert_eq!(base.service_name, "edge");
        let specific = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://tempo:4318/custom",
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(specific.endpoint, "http://tempo:4318/custom");
        assert_eq!(specific.service_name, "iohr-agent");
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        assert!(matches!(
            from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "tempo:4318")]),
            Err(ConfigError::Endpoint { .. })
        ));
        assert!(matches!(
            from(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://tempo:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            ]),
            Err(ConfigError::Protocol { .. })
        ));
        assert!(matches!(
            from(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://tempo:4318"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "novalue")
            ]),
            Err(ConfigError::Headers { .. })
        ));
    }

    #[test]
    fn headers_are_pairs_percent_decoded() {
        assert_eq!(
            parse_headers(" Authorization=Basic%20dXNlcjpwYXNz , x-scope-orgid=tenant-1,").unwrap(),
            vec![
                (
                    "authorization".to_string(),
                    "Basic dXNlcjpwYXNz".to_string()
                ),
                ("x-scope-orgid".to_string(), "tenant-1".to_string()),
            ]
        );
        assert!(parse_headers("a=%zz").is_err());
        assert!(parse_headers("a b=c").is_err());
        assert!(parse_headers("a=%0A").is_err(), "no newline in a header");
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 256,
            rng_seed: proptest::test_runner::RngSeed::Fixed(35),
            ..ProptestConfig::default()
        })]

        #[test]
        fn any_header_list_parses_or_is_refused_without_panic(list in ".{0,80}") {
            let _ = parse_headers(&list);
        }

        #[test]
        fn encoded_pairs_come_back(pairs in proptest::collection::vec(("[a-z][a-z0-9-]{0,15}", "[ -~]{0,20}"), 0..5)) {
            let list: Vec<String> = pairs
                .iter()
                .map(|(name, value)| {
                    let encoded: String = value.bytes().map(|b| format!("%{b:02X}")).collect();
                    format!("{name}={encoded}")
                })
                .collect();
            let parsed = parse_headers(&list.join(",")).unwrap();
            let expected: Vec<(String, String)> = pairs
                .into_iter()
                .map(|(name, value)| (name, value.trim().to_string()))
                .collect();
            // Trimming happens before decoding: an encoded space survives it.
            let parsed: Vec<(String, String)> = parsed
                .into_iter()
                .map(|(name, value)| (name, value.trim().to_string()))
                .collect();
            prop_assert_eq!(parsed, expected);
        }
    }
}
