//! The identity every request of a scenario carries, so that its telemetry can be told
//! apart from other traffic and matched to the record: a User-Agent naming the slug (and
//! the warm-up), and a W3C traceparent whose trace id is the prefix, the slug's run8 and
//! the request's sequence number, and whose span id is the sequence number.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::spec::ScenarioSpec;

/// What the record says the traceparent looks like.
pub const TRACEPARENT_FORMAT: &str = "00-<prefix><run8><seq:016x>-<seq:016x>-01";

/// `iohr-scenario/<slug>`, and `iohr-scenario/<slug>-warmup` on the warm-up.
pub fn user_agent(slug: &str, warmup: bool) -> String {
    let suffix = if warmup { "-warmup" } else { "" };
    format!("iohr-scenario/{slug}{suffix}")
}

/// The first 8 hex digits of sha256(slug).
pub fn run8(slug: &str) -> String {
    let mut digest = hex::encode(Sha256::digest(slug.as_bytes()));
    digest.truncate(8);
    digest
}

/// `00-<prefix><run8><seq:016x>-<seq:016x>-01`: a 32-hex trace id, the sequence number
/// as the 16-hex span id, sampled.
pub fn traceparent(prefix: &str, slug: &str, seq: u64) -> String {
    traceparent_with(prefix, &run8(slug), seq)
}

fn traceparent_with(prefix: &str, run8: &str, seq: u64) -> String {
    format!("00-{prefix}{run8}{seq:016x}-{seq:016x}-01")
}

/// A scenario's identity, with its run8 computed once for the requests it stamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    slug: String,
    prefix: String,
    run8: String,
}

impl Identity {
    pub fn new(spec: &ScenarioSpec) -> Identity {
        Identity {
            slug: spec.slug.clone(),
            prefix: spec.prefix.clone(),
            run8: run8(&spec.slug),
        }
    }

    pub fn user_agent(&self, warmup: bool) -> String {
        user_agent(&self.slug, warmup)
    }

    pub fn traceparent(&self, seq: u64) -> String {
        traceparent_with(&self.prefix, &self.run8, seq)
    }

    pub fn record(&self) -> IdentityRecord {
        IdentityRecord {
            user_agent: self.user_agent(false),
            warmup_user_agent: self.user_agent(true),
            traceparent: TRACEPARENT_FORMAT.to_string(),
            trace_id_prefix: format!("{}{}", self.prefix, self.run8),
            run8: self.run8.clone(),
            prefix: self.prefix.clone(),
        }
    }
}

/// The identity as the record states it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityRecord {
    pub user_agent: String,
    pub warmup_user_agent: String,
    /// [`TRACEPARENT_FORMAT`].
    pub traceparent: String,
    /// Every trace id of the run starts with it: prefix and run8.
    pub trace_id_prefix: String,
    pub run8: String,
    pub prefix: String,
}

impl IdentityRecord {
    /// The record's `Identity:` line.
    pub fn line(&self, slug: &str) -> String {
        format!(
            "Identity: User-Agent \"{}\" (+ \"-warmup\" on the warm-up); traceparent \"{}\", run8 = sha256({slug})[:8] = {}, trace ids start {}; one sequence run-wide from 1",
            self.user_agent,
            TRACEPARENT_FORMAT.replace("<prefix>", &self.prefix),
            self.run8,
            self.trace_id_prefix,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_strings() {
        // sha256("abc") = ba7816bf 8f01cfea ... (FIPS 180-2, appendix B.1).
        assert_eq!(run8("abc"), "ba7816bf");
        assert_eq!(user_agent("abc", false), "iohr-scenario/abc");
        assert_eq!(user_agent("abc", true), "iohr-scenario/abc-warmup");
        assert_eq!(
            traceparent("0ddc0ffe", "abc", 1),
            "00-0ddc0ffeba7816bf0000000000000001-0000000000000001-01"
        );
        let tp = traceparent("0ddc0ffe", "abc", 0x1_0000_00ab);
        assert_eq!(
            tp,
            "00-0ddc0ffeba7816bf00000001000000ab-00000001000000ab-01"
        );
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [2, 32, 16, 2]
        );
    }

    #[test]
    fn the_record_line_states_the_formula_and_the_value() {
        let identity = Identity {
            slug: "abc".into(),
            prefix: "0ddc0ffe".into(),
            run8: run8("abc"),
        };
        assert_eq!(identity.traceparent(7), traceparent("0ddc0ffe", "abc", 7));
        assert_eq!(
            identity.record().line("abc"),
            "Identity: User-Agent \"iohr-scenario/abc\" (+ \"-warmup\" on the warm-up); traceparent \"00-0ddc0ffe<run8><seq:016x>-<seq:016x>-01\", run8 = sha256(abc)[:8] = ba7816bf, trace ids start 0ddc0ffeba7816bf; one sequence run-wide from 1"
        );
    }
}
