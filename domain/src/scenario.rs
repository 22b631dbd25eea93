//! Scenario versions: the version of a spec is the hash of its canonical JSON, so "the
//! same scenario version" can be checked by anyone holding the spec.

use sha2::{Digest, Sha256};

/// Canonical JSON: object keys sorted (serde_json's map is ordered by key without the
/// `preserve_order` feature), no insignificant whitespace.
pub fn canonical_json(value: &serde_json::Value) -> String {
    // Serialising a `Value` cannot fail: its keys are strings.
    serde_json::to_string(value).unwrap_or_default()
}

/// The version of a scenario: `sha256:` and the hex digest of its kind and canonical spec.
pub fn version_of(kind: &str, spec: &serde_json::Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(kind.as_bytes());
    hasher.update(b"\n");
    hasher.update(canonical_json(spec).as_bytes());
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_and_whitespace_do_not_change_the_version() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"checks":[{"path":"/","method":"GET"}]}"#).expect("json");
        let b: serde_json::Value =
            serde_json::from_str("{ \"checks\" : [ { \"method\":\"GET\", \"path\":\"/\" } ] }")
                .expect("json");
        assert_eq!(version_of("checks", &a), version_of("checks", &b));
        assert_ne!(version_of("checks", &a), version_of("load", &a));
    }
}
