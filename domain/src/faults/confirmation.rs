//! A person's confirmation of a production fault run, bound to exactly what it will do.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The default time a production fault run waits for its confirmation.
pub const DEFAULT_CONFIRM_WITHIN: std::time::Duration = std::time::Duration::from_secs(3600);
/// The longest it may wait.
pub const MAX_CONFIRM_WITHIN: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// What a confirmation is bound to: the hash of the experiment's scenario version (itself the
/// hash of the canonical experiment), the target and the environment. A person confirms this
/// hash; a run whose experiment or target differs has another.
pub fn confirmation_hash(scenario_version: &str, target: &str, environment: &str) -> String {
    let mut hasher = Sha256::new();
    for part in [scenario_version, target, environment] {
        hasher.update(part.as_bytes());
        hasher.update(b"\n");
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// A run's confirmation as its record shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Confirmation {
    /// The hash the confirming person must send back.
    pub hash: String,
    /// Unconfirmed past this (RFC 3339 UTC), the run ends `refused` ("confirmation lapsed").
    pub deadline: String,
    pub confirmed_by: Option<String>,
    pub confirmed_at: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_binds_experiment_target_and_environment() {
        let h = confirmation_hash("sha256:aa", "http://10.0.0.1:80", "production");
        assert!(h.starts_with("sha256:"));
        assert_eq!(
            h,
            confirmation_hash("sha256:aa", "http://10.0.0.1:80", "production")
        );
        assert_ne!(
            h,
            confirmation_hash("sha256:ab", "http://10.0.0.1:80", "production")
        );
        assert_ne!(
            h,
            confirmation_hash("sha256:aa", "http://10.0.0.2:80", "production")
        );
        assert_ne!(
            h,
            confirmation_hash("sha256:aa", "http://10.0.0.1:80", "staging")
        );
    }
}
