//! A spec's headers made ready to send: `${env:NAME}` references read from the agent's
//! environment (only the names its operator grants, [`crate::secrets`]), credential values marked sensitive, and every value that must never be
//! echoed collected so that messages can be scrubbed of it.

use std::collections::BTreeMap;

use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use iohr_domain::redact::{REDACTED, is_credential_header};
use iohr_domain::request::env_reference;

use crate::secrets::EnvRefusal;

/// Why a header cannot be sent. Messages name headers and variables, never values.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("header {header}: {why}")]
    Env { header: String, why: EnvRefusal },
    #[error("header {header}: not a valid header name")]
    Name { header: String },
    #[error("header {header}: value is not a valid header value")]
    Value { header: String },
}

#[derive(Debug, Default)]
pub struct ResolvedHeaders {
    pub headers: HeaderMap,
    /// Values read from the environment or of credential-named headers.
    pub secrets: Vec<String>,
}

pub fn resolve_headers(
    spec: &BTreeMap<String, String>,
    env: &impl Fn(&str) -> Result<String, EnvRefusal>,
) -> Result<ResolvedHeaders, HeaderError> {
    let mut resolved = ResolvedHeaders::default();
    for (name, raw) in spec {
        let credential = is_credential_header(name);
        let value = match env_reference(raw) {
            Some(var) => {
                let value = env(var).map_err(|why| HeaderError::Env {
                    header: name.clone(),
                    why,
                })?;
                // Whatever came from the environment is treated as secret.
                resolved.secrets.push(value.clone());
                value
            }
            None => {
                if credential {
                    resolved.secrets.push(raw.clone());
                }
                raw.clone()
            }
        };
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| HeaderError::Name {
            header: name.clone(),
        })?;
        let mut value = HeaderValue::from_str(&value).map_err(|_| HeaderError::Value {
            header: name.clone(),
        })?;
        // Keeps hyper from indexing it in HPACK tables and marks it for any debug output.
        value.set_sensitive(credential);
        resolved.headers.append(header, value);
    }
    resolved.secrets.retain(|s| !s.is_empty());
    Ok(resolved)
}

/// `text` with every secret replaced by [`REDACTED`].
pub fn scrub(mut text: String, secrets: &[String]) -> String {
    for secret in secrets {
        if text.contains(secret.as_str()) {
            text = text.replace(secret.as_str(), REDACTED);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_and_credentials_are_secrets_and_sensitive() {
        let spec = BTreeMap::from([
            ("Authorization".to_string(), "${env:T}".to_string()),
            ("X-Trace".to_string(), "plain".to_string()),
        ]);
        let env = |name: &str| {
            (name == "T")
                .then(|| "Bearer s3cret".to_string())
                .ok_or_else(|| EnvRefusal::NotSet(name.to_string()))
        };
        let resolved = resolve_headers(&spec, &env).expect("resolves");
        assert_eq!(resolved.secrets, ["Bearer s3cret"]);
        let auth = resolved.headers.get("authorization").expect("sent");
        assert_eq!(auth, "Bearer s3cret");
        assert!(auth.is_sensitive());
        assert!(!resolved.headers["x-trace"].is_sensitive());
        assert_eq!(
            scrub("got Bearer s3cret back".into(), &resolved.secrets),
            "got [redacted] back"
        );
        let missing = resolve_headers(&spec, &|name: &str| Err(EnvRefusal::NotSet(name.into())))
            .expect_err("unset");
        assert_eq!(
            missing.to_string(),
            "header Authorization: environment variable T is not set on the agent"
        );
    }
}
