//! A spec's headers made ready to send, the one place every kind resolves them (checks,
//! scenario and its probes, and the load engine that load, replay and capacity send
//! through): `${env:NAME}` references read from the agent's environment (only the names
//! its operator grants, [`crate::secrets`]) and `${secret:NAME}` from the account
//! secrets the lease carried, credential values marked sensitive, and every value that
//! must never be echoed collected so that messages can be scrubbed of it. [`build`] is
//! the one builder of the requests themselves, trace context included.

mod build;

pub use build::{BAGGAGE, BuildError, Built, Parts, Stamper, TRACEPARENT, Trace, build};

use std::collections::BTreeMap;

use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use iohr_domain::redact::is_credential_header;
use iohr_domain::request::{Reference, reference};

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
    env: &impl Fn(Reference<'_>) -> Result<String, EnvRefusal>,
) -> Result<ResolvedHeaders, HeaderError> {
    let mut resolved = ResolvedHeaders::default();
    for (name, raw) in spec {
        let credential = is_credential_header(name);
        let value = match reference(raw) {
            Some(var) => {
                let value = env(var).map_err(|why| HeaderError::Env {
                    header: name.clone(),
                    why,
                })?;
                // Whatever came from the environment or the account is treated as secret.
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

pub use crate::secrets::scrub;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_and_credentials_are_secrets_and_sensitive() {
        let spec = BTreeMap::from([
            ("Authorization".to_string(), "${env:T}".to_string()),
            ("X-Trace".to_string(), "plain".to_string()),
        ]);
        let env = |r: Reference<'_>| {
            (r == Reference::Env("T"))
                .then(|| "Bearer s3cret".to_string())
                .ok_or_else(|| EnvRefusal::NotSet(r.written()))
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
        let missing = resolve_headers(&spec, &|r: Reference<'_>| {
            let Reference::Env(name) = r else {
                panic!("{r:?}")
            };
            Err(EnvRefusal::NotSet(name.into()))
        })
        .expect_err("unset");
        assert_eq!(
            missing.to_string(),
            "header Authorization: environment variable T is not set on the agent"
        );
    }

    #[test]
    fn account_secrets_resolve_from_the_lease_on_any_agent_and_are_scrubbed() {
        use crate::run_context::EnvVars;
        use crate::secrets::SecretGrant;
        let spec = BTreeMap::from([
            ("X-Key".to_string(), "${secret:API_KEY}".to_string()),
            ("X-Env".to_string(), "plain".to_string()),
        ]);
        // A platform agent reads no environment, but the lease's secrets all the same.
        let env = EnvVars::from_fn(|_| Some("from-env".into()))
            .granting(SecretGrant::Platform)
            .with_account_secrets(BTreeMap::from([("API_KEY".into(), "k-123".into())]));
        let resolved = resolve_headers(&spec, &|r| env.resolve(r)).expect("resolves");
        assert_eq!(resolved.headers["x-key"], "k-123");
        assert_eq!(resolved.secrets, ["k-123"]);
        assert!(matches!(
            env.resolve(Reference::Env("HOME")),
            Err(EnvRefusal::Platform(_))
        ));
        let missing = EnvVars::from_fn(|_| None);
        let refused = resolve_headers(&spec, &|r| missing.resolve(r)).expect_err("not leased");
        assert_eq!(
            refused.to_string(),
            "header X-Key: account secret API_KEY was not given with this run's lease"
        );
    }
}
