//! Scenario versions: the version of a spec is the hash of its canonical JSON, so "the
//! same scenario version" can be checked by anyone holding the spec.

use sha2::{Digest, Sha256};

/// Canonical JSON as RFC 8785 (JCS) writes it: object keys sorted, no insignificant
/// whitespace, every number as ECMAScript writes a double, so `1`, `1.0` and `1e0` are one
/// text (`1`) and one spec has one version. A tool in any language with a JCS library
/// reproduces it.
pub fn canonical_json(value: &serde_json::Value) -> String {
    // A `Value` holds finite numbers and string keys only, the two things JCS can refuse.
    serde_jcs::to_string(value).unwrap_or_default()
}

/// A spec as it is stored and offered to agents: keys sorted (serde_json's map is ordered
/// by key without `preserve_order`), no whitespace, numbers exactly as parsed. Not
/// [`canonical_json`]: JCS writes integers as doubles, which an integer past 2^53 would not
/// survive.
pub fn compact_json(value: &serde_json::Value) -> String {
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

    #[test]
    fn a_number_written_as_1_or_1_0_is_one_version() {
        let whole: serde_json::Value =
            serde_json::from_str(r#"{"rate":1,"duration":"1s"}"#).expect("json");
        let point: serde_json::Value =
            serde_json::from_str(r#"{"duration":"1s","rate":1.0}"#).expect("json");
        let exponent: serde_json::Value =
            serde_json::from_str(r#"{"duration":"1s","rate":1e0}"#).expect("json");
        assert_eq!(version_of("load", &whole), version_of("load", &point));
        assert_eq!(version_of("load", &whole), version_of("load", &exponent));
        assert_eq!(canonical_json(&point), r#"{"duration":"1s","rate":1}"#);
        let other: serde_json::Value =
            serde_json::from_str(r#"{"duration":"1s","rate":1.5}"#).expect("json");
        assert_ne!(version_of("load", &whole), version_of("load", &other));
    }

    #[test]
    fn the_stored_text_keeps_an_integer_past_2_to_the_53_exactly() {
        let big: serde_json::Value =
            serde_json::from_str(r#"{"n":18446744073709551615}"#).expect("json");
        assert_eq!(compact_json(&big), r#"{"n":18446744073709551615}"#);
    }
}
