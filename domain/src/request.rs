//! Rules every kind that sends HTTP requests shares: the spec names paths, never the
//! target; methods are upper-case words; a credential-named header's value is a
//! `${env:NAME}` reference the agent resolves from its own environment (only names its
//! operator grants: docs/security.md).

use std::collections::BTreeMap;

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

/// The reference a credential header's value must be: `${env:NAME}`.
pub fn env_reference(value: &str) -> Option<&str> {
    let name = value.strip_prefix("${env:")?.strip_suffix('}')?;
    let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some(name)
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
        if is_credential_header(name) && env_reference(value).is_none() {
            return Err(spec_error(
                format!("{field}.headers.{name}"),
                "a credential-named header's value must be \"${env:NAME}\", read by the agent from its environment if its operator grants the name (iohr-agent run --secret-env); secrets are never stored",
            ));
        }
    }
    Ok(())
}
