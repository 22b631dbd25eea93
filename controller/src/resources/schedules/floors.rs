//! How often a schedule may fire, per kind, per plan: defaults in code, overridden per
//! account by the operator (`iohr-controller set-plan --schedule-floor KIND=DURATION`,
//! stored as JSON in `accounts.schedule_floors`).

use std::collections::BTreeMap;
use std::time::Duration;

use iohr_domain::RunKind;

/// The default floor of a kind: its contract's ([`iohr_domain::kind::Kind::SCHEDULE_FLOOR`]).
pub fn default_floor(kind: RunKind) -> Duration {
    kind.schedule_floor()
}

/// Every kind's default floor as `set-plan --schedule-floor`'s help says it:
/// `checks=1m, load=1h, ...`.
pub fn defaults_text() -> String {
    RunKind::ALL
        .iter()
        .map(|k| format!("{k}={}", humantime::format_duration(k.schedule_floor())))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The floor of `kind` under an account's stored overrides (overrides that do not parse
/// count as none, with a warning: the defaults apply).
pub fn floor(kind: RunKind, stored: Option<&str>) -> Duration {
    let overrides = stored.map(parse_stored).unwrap_or_default();
    overrides
        .get(kind.as_str())
        .map(|secs| Duration::from_secs(*secs))
        .unwrap_or_else(|| default_floor(kind))
}

fn parse_stored(text: &str) -> BTreeMap<String, u64> {
    serde_json::from_str(text).unwrap_or_else(|error| {
        tracing::warn!(%error, "an account's schedule floors are unreadable; using the defaults");
        BTreeMap::new()
    })
}

/// `KIND=DURATION` as the operator writes it (`checks=1s`).
pub fn parse_override(text: &str) -> Result<(RunKind, Duration), String> {
    let (kind, duration) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: write KIND=DURATION, such as checks=30s"))?;
    let kind: RunKind = kind.parse().map_err(|e| format!("{e}"))?;
    let duration = humantime::parse_duration(duration).map_err(|e| format!("{duration:?}: {e}"))?;
    if duration < Duration::from_secs(1) {
        return Err("a floor is at least 1s".into());
    }
    Ok((kind, duration))
}

/// The stored overrides with `changes` applied, as stored.
pub fn merged(stored: Option<&str>, changes: &[(RunKind, Duration)]) -> String {
    let mut overrides = stored.map(parse_stored).unwrap_or_default();
    for (kind, duration) in changes {
        overrides.insert(kind.as_str().to_string(), duration.as_secs());
    }
    serde_json::to_string(&overrides).unwrap_or_default()
}
