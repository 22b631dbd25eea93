//! Credential-named headers: their values are never recorded anywhere (record, frame, log).

/// Fragments that make a header name credential-named (compared lowercase).
const CREDENTIAL_FRAGMENTS: [&str; 8] = [
    "authorization",
    "cookie",
    "token",
    "secret",
    "password",
    "api-key",
    "apikey",
    "session",
];

/// Whether a header's value is a credential and must never be recorded.
pub fn is_credential_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    CREDENTIAL_FRAGMENTS.iter().any(|f| lower.contains(f)) || lower.ends_with("-key")
}

/// The text recorded in place of a credential's value.
pub const REDACTED: &str = "[redacted]";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_names_are_recognised_in_any_case() {
        for name in [
            "Authorization",
            "proxy-authorization",
            "Cookie",
            "X-Auth-Token",
            "X-API-Key",
            "x-client-secret",
            "X-Session-Id",
        ] {
            assert!(is_credential_header(name), "{name} is a credential header");
        }
        for name in ["Accept", "Content-Type", "User-Agent", "X-Request-Id"] {
            assert!(
                !is_credential_header(name),
                "{name} is not a credential header"
            );
        }
    }
}
