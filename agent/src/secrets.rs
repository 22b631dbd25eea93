//! Which environment variables a run may read through `${env:NAME}` (headers, faults
//! configuration and secrets): only the names the agent's operator grants with
//! `iohr-agent run --secret-env NAME|PREFIX_*`, none by default, and none at all on a
//! platform agent, whose runs come from every account. `exec` (the operator's own spec
//! on the operator's own machine) reads the whole environment.
//!
//! Account secrets (`${secret:NAME}`) come with a lease, on any agent; the values of a run's
//! secrets are scrubbed from what it reports ([`scrub`]).
//!
//! A leaf of the crate (std, thiserror and the domain's redaction marker), like
//! [`crate::run_context`].

use std::fmt;

/// One `--secret-env` pattern: a whole name, or a prefix ending in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretPattern {
    Name(String),
    Prefix(String),
}

/// Why a `--secret-env` value is not a pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not NAME or PREFIX_* (letters, digits and '_', an optional single '*' at the end)"
)]
pub struct PatternError(pub String);

impl SecretPattern {
    pub fn parse(text: &str) -> Result<SecretPattern, PatternError> {
        let bad = || PatternError(text.to_string());
        let (stem, prefix) = match text.strip_suffix('*') {
            Some(stem) => (stem, true),
            None => (text, false),
        };
        // A lone `*` would grant the whole environment: name it with a prefix instead.
        let valid = !stem.is_empty() && stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(bad());
        }
        Ok(if prefix {
            SecretPattern::Prefix(stem.to_string())
        } else {
            SecretPattern::Name(stem.to_string())
        })
    }

    pub fn matches(&self, name: &str) -> bool {
        match self {
            SecretPattern::Name(n) => n == name,
            SecretPattern::Prefix(p) => name.starts_with(p.as_str()),
        }
    }
}

impl fmt::Display for SecretPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretPattern::Name(n) => f.write_str(n),
            SecretPattern::Prefix(p) => write!(f, "{p}*"),
        }
    }
}

impl std::str::FromStr for SecretPattern {
    type Err = PatternError;
    fn from_str(text: &str) -> Result<SecretPattern, PatternError> {
        SecretPattern::parse(text)
    }
}

/// What a run may read from the agent's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretGrant {
    /// Every name (`exec`, tests).
    All,
    /// Only names matching one of these (`run --secret-env`; empty: none).
    Only(Vec<SecretPattern>),
    /// None: a platform agent, whose runs any account may send.
    Platform,
}

impl Default for SecretGrant {
    fn default() -> SecretGrant {
        SecretGrant::Only(Vec::new())
    }
}

/// Why `${env:NAME}` has no value. Messages name the variable and the flag, never a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvRefusal {
    #[error("environment variable {0} is not set on the agent")]
    NotSet(String),
    #[error(
        "environment variable {var} is not granted to runs by this agent's operator (granted: {granted}); an operator grants names with `iohr-agent run --secret-env NAME|PREFIX_*`"
    )]
    NotGranted { var: String, granted: String },
    #[error(
        "environment variable {0} is not read: a platform (cloud) agent never resolves ${{env:NAME}}, its runs come from every account; name an account secret as ${{secret:NAME}} instead"
    )]
    Platform(String),
    /// `${secret:NAME}` the run's lease did not carry.
    #[error("account secret {0} was not given with this run's lease")]
    UnknownSecret(String),
}

impl EnvRefusal {
    /// Whether the variable was refused by the grant, not merely unset.
    pub fn is_refused(&self) -> bool {
        !matches!(self, EnvRefusal::NotSet(_))
    }
}

impl SecretGrant {
    /// `Ok` when a run may read `name`, else why not.
    pub fn check(&self, name: &str) -> Result<(), EnvRefusal> {
        match self {
            SecretGrant::All => Ok(()),
            SecretGrant::Platform => Err(EnvRefusal::Platform(name.to_string())),
            SecretGrant::Only(patterns) if patterns.iter().any(|p| p.matches(name)) => Ok(()),
            SecretGrant::Only(patterns) => Err(EnvRefusal::NotGranted {
                var: name.to_string(),
                granted: if patterns.is_empty() {
                    "none".to_string()
                } else {
                    patterns
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            }),
        }
    }
}

/// `text` with every secret replaced by [`iohr_domain::redact::REDACTED`] (empty ones are
/// never secrets: replacing "" would redact between every character).
pub fn scrub(mut text: String, secrets: &[String]) -> String {
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        if text.contains(secret.as_str()) {
            text = text.replace(secret.as_str(), iohr_domain::redact::REDACTED);
        }
    }
    text
}

/// The forms a value takes in what a run reports: as it is, and escaped inside a JSON
/// string (a frame's or a result's text), when that differs.
pub fn reported_forms(values: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut forms = Vec::new();
    for value in values.into_iter().filter(|v| !v.is_empty()) {
        let quoted = serde_json::to_string(&value).unwrap_or_default();
        let escaped = quoted
            .strip_prefix('"')
            .and_then(|q| q.strip_suffix('"'))
            .unwrap_or_default()
            .to_string();
        if !escaped.is_empty() && escaped != value {
            forms.push(escaped);
        }
        forms.push(value);
    }
    // Longest first: a value inside another is not left half redacted.
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms
}

#[cfg(test)]
mod tests;
