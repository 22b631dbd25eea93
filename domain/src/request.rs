//! Rules every kind that sends HTTP requests shares: the spec names paths, never the
//! target; methods are upper-case words; a credential-named header's value is a
//! reference: `${env:NAME}`, which the agent resolves from its own environment (only names
//! its operator grants, never on a platform agent), or `${secret:NAME}`, one of the
//! account's secrets, which the controller gives the agent with the run's lease
//! (docs/security.md).

use std::collections::{BTreeMap, BTreeSet};

use crate::redact::is_credential_header;

/// What is wrong with a spec, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    pub field: String,
    pub message: String,
}

pub fn spec_error(field: impl Into<String>, message: impl Into<String>) -> SpecError {
    SpecError {
        field: field.into(),
        message: message.into(),
    }
}

/// A spec's JSON as `T`. The error names the field it failed at under `root`
/// (`spec.slo.p99`, `spec.operations[0].weight`), not only the spec.
pub fn parse_spec<T: serde::de::DeserializeOwned>(
    root: &str,
    value: &serde_json::Value,
) -> Result<T, SpecError> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        let field = match path.as_str() {
            "" | "." => root.to_string(),
            path if path.starts_with('[') => format!("{root}{path}"),
            path => format!("{root}.{path}"),
        };
        spec_error(field, error.into_inner().to_string())
    })
}

/// The longest account secret name.
pub const MAX_SECRET_NAME: usize = 64;

/// A header value that is a reference, resolved on the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference<'a> {
    /// `${env:NAME}`: the agent's environment, as its operator grants.
    Env(&'a str),
    /// `${secret:NAME}`: the account's secret, given with the run's lease.
    Secret(&'a str),
}

impl Reference<'_> {
    /// The reference as it is written.
    pub fn written(&self) -> String {
        match self {
            Reference::Env(name) => format!("${{env:{name}}}"),
            Reference::Secret(name) => format!("${{secret:{name}}}"),
        }
    }
}

/// The reference a header's value is, if it is one (the whole value).
pub fn reference(value: &str) -> Option<Reference<'_>> {
    env_reference(value)
        .map(Reference::Env)
        .or_else(|| secret_reference(value).map(Reference::Secret))
}

/// `${env:NAME}`: the name, letters, digits and `_`.
pub fn env_reference(value: &str) -> Option<&str> {
    let name = value.strip_prefix("${env:")?.strip_suffix('}')?;
    let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some(name)
}

/// Whether `name` may name an account secret: 1 to [`MAX_SECRET_NAME`] of `A-Z`, `0-9`
/// and `_`.
pub fn is_secret_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SECRET_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// `${secret:NAME}`: the name of an account secret.
pub fn secret_reference(value: &str) -> Option<&str> {
    let name = value.strip_prefix("${secret:")?.strip_suffix('}')?;
    is_secret_name(name).then_some(name)
}

/// Every account secret a spec's headers name: the values of every `headers` object,
/// wherever it is in the spec (checks, operations, steps, probes), that are
/// `${secret:NAME}`. The controller gives a run's agent these, and only these.
pub fn secret_names(spec: &serde_json::Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut stack = vec![spec];
    while let Some(value) = stack.pop() {
        match value {
            serde_json::Value::Object(map) => {
                for (key, inner) in map {
                    if key == "headers"
                        && let serde_json::Value::Object(headers) = inner
                    {
                        names.extend(
                            headers
                                .values()
                                .filter_map(|v| v.as_str().and_then(secret_reference))
                                .map(str::to_string),
                        );
                    }
                    stack.push(inner);
                }
            }
            serde_json::Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    names
}

/// Checks the method, path and headers of one request a spec describes at `field`.
pub fn validate_request(
    field: &str,
    method: &str,
    path: &str,
    headers: &BTreeMap<String, String>,
) -> Result<(), SpecError> {
    if !path.starts_with('/') {
        return Err(spec_error(
            format!("{field}.path"),
            "must start with '/' (the spec never names the target)",
        ));
    }
    let method_ok = !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase());
    if !method_ok {
        return Err(spec_error(
            format!("{field}.method"),
            "must be an upper-case HTTP method such as GET",
        ));
    }
    for (name, value) in headers {
        if is_credential_header(name) && reference(value).is_none() {
            return Err(spec_error(
                format!("{field}.headers.{name}"),
                "a credential-named header's value must be \"${secret:NAME}\", one of the account's secrets (PUT /v1/reliability/secrets/NAME), or \"${env:NAME}\", read by the agent from its environment if its operator grants the name (iohr-agent run --secret-env; never on a platform agent); secret values are never stored in a spec",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn references_are_whole_values_of_a_known_form() {
        assert_eq!(reference("${env:A_1}"), Some(Reference::Env("A_1")));
        assert_eq!(
            reference("${secret:API_TOKEN}"),
            Some(Reference::Secret("API_TOKEN"))
        );
        for not in [
            "${secret:}",
            "${secret:lower}",
            "${secret:A-B}",
            "Bearer ${secret:A}",
            "${secret:A} ",
            "${SECRET:A}",
            "${secret:A",
            "$secret:A}",
        ] {
            assert_eq!(secret_reference(not), None, "{not}");
        }
        let long = "A".repeat(MAX_SECRET_NAME);
        assert!(secret_reference(&format!("${{secret:{long}}}")).is_some());
        assert!(secret_reference(&format!("${{secret:{long}A}}")).is_none());
        assert_eq!(Reference::Secret("X").written(), "${secret:X}");
    }

    #[test]
    fn a_credential_header_takes_a_secret_reference() {
        let headers = BTreeMap::from([(
            "Authorization".to_string(),
            "${secret:API_TOKEN}".to_string(),
        )]);
        assert!(validate_request("spec.checks[0]", "GET", "/", &headers).is_ok());
        let headers = BTreeMap::from([("Authorization".to_string(), "Bearer x".to_string())]);
        let refused = validate_request("spec.checks[0]", "GET", "/", &headers).expect_err("clear");
        assert!(refused.message.contains("${secret:NAME}"), "{refused}");
    }

    #[test]
    fn secret_names_are_read_from_every_headers_object() {
        let spec = json!({
            "checks": [
                {"path": "/", "headers": {"Authorization": "${secret:A}", "X": "${env:E}"}},
                {"path": "/b", "headers": {"X-Two": "${secret:B}"}, "body": "${secret:NOT_A_HEADER}"}
            ],
            "deep": {"steps": [{"headers": {"Y": "${secret:C}", "Z": 3}}]},
            "headers": "${secret:NOT_AN_OBJECT}"
        });
        let names: Vec<String> = secret_names(&spec).into_iter().collect();
        assert_eq!(names, ["A", "B", "C"]);
    }

    proptest! {
        #![proptest_config(crate::proptests::config(256))]

        /// Any text: parsing never panics, and a reference found names a valid secret
        /// that writes back as the very text.
        #[test]
        fn any_text_parses_to_a_valid_reference_or_none(text in ".{0,80}") {
            if let Some(name) = secret_reference(&text) {
                prop_assert!(is_secret_name(name));
                prop_assert_eq!(Reference::Secret(name).written(), text.clone());
            }
            if let Some(r) = reference(&text) {
                prop_assert_eq!(r.written(), text);
            }
        }

        /// A valid name round-trips through its written form; a name with any other
        /// character does not parse.
        #[test]
        fn names_round_trip(name in "[A-Z0-9_]{1,64}", bad in "[A-Z0-9_]{0,10}[a-z\\-.:{}$ ][A-Z0-9_]{0,10}") {
            let written = Reference::Secret(&name).written();
            prop_assert_eq!(secret_reference(&written), Some(name.as_str()));
            let spec = json!({"checks": [{"headers": {"H": written}}]});
            prop_assert!(secret_names(&spec).contains(&name));
            let bad = format!("${{secret:{bad}}}");
            prop_assert_eq!(secret_reference(&bad), None);
        }
    }
}
