//! The journal of a `faults` run: what happened, with the Chaos Toolkit's field names
//! (`status`, `deviated`, `steady_states.before/after/during`, `run[]`, `rollbacks[]`, each
//! activity with `activity`, `status`, `start`, `end`, `duration`, `output`, `exception`),
//! plus the targets, the ledger entries and who confirmed the run.
//!
//! The keys and value types are those `chaos run` writes, so the Chaos Toolkit's own tools
//! read it: `chaoslib-version` (ours: `iohr-agent VERSION`), `platform`, `node`,
//! `experiment` (as written: `env` values and secrets unresolved), `start`/`end` as ISO
//! 8601 strings in UTC (`2026-12-01T14:47:07.365000+00:00`, [`iso`]), `duration` seconds.
//! Our extra keys keep epoch milliseconds (the ledger's times), as everywhere in iohr.
//! Outputs never hold a body: an HTTP probe keeps its status and latency.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How the experiment ended. The Chaos Toolkit's four, plus two of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JournalStatus {
    /// Ran to its end; `deviated` says whether the hypothesis held after the method.
    Completed,
    /// The hypothesis failed: before the method (nothing injected, `deviated` false) or
    /// after it (`deviated` true).
    Failed,
    /// An action of the method failed; the rest was skipped and the rollbacks ran.
    Aborted,
    /// Cancelled or halted; the rollbacks ran.
    Interrupted,
    /// A fault's undo still failed after its retries: something may be left applied.
    RollbackFailed,
    /// The agent's policy refused the experiment; nothing was applied.
    Refused,
}

impl JournalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JournalStatus::Completed => "completed",
            JournalStatus::Failed => "failed",
            JournalStatus::Aborted => "aborted",
            JournalStatus::Interrupted => "interrupted",
            JournalStatus::RollbackFailed => "rollback_failed",
            JournalStatus::Refused => "refused",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivityStatus {
    Succeeded,
    Failed,
}

/// One activity that ran (a probe, a fault, an undo, a rollback action).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActivityRun {
    /// The activity as the experiment names it (for an undo: the fault and its undo).
    pub activity: Value,
    pub status: ActivityStatus,
    /// Epoch milliseconds here, an ISO 8601 string in JSON.
    #[serde(with = "iso")]
    pub start: u64,
    #[serde(with = "iso")]
    pub end: u64,
    /// Seconds.
    pub duration: f64,
    #[serde(default)]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception: Option<String>,
    /// Hypothesis probes: whether the output was within the tolerance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance_met: Option<bool>,
    /// Faults and their undos: the ledger entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger_id: Option<String>,
    /// Undos: how many tries it took (retries after failures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteadyState {
    pub steady_state_met: bool,
    pub probes: Vec<ActivityRun>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SteadyStates {
    pub before: Option<SteadyState>,
    pub after: Option<SteadyState>,
    /// The Chaos Toolkit's continuous checks; iohr verifies before and after only.
    pub during: Vec<SteadyState>,
}

/// A ledger entry as the journal shows it: the fault, how it is undone, when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerRecord {
    pub id: String,
    pub activity: String,
    pub fault: Value,
    pub undo: Value,
    pub applied_at: u64,
    pub deadline: u64,
    /// When its undo succeeded; `None` if it is still open.
    pub undone_at: Option<u64>,
    /// `rollback`, `deadline` or `retry` (undone after the method's rollbacks were tried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undone_by: Option<String>,
}

/// A dry run's line: what would be applied and how it would be undone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedFault {
    pub activity: String,
    pub fault: Value,
    /// Seconds the fault would hold at most.
    pub duration: f64,
    pub undo: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    /// Who ran it: `iohr-agent VERSION` where `chaos run` names chaoslib's version.
    #[serde(rename = "chaoslib-version", default)]
    pub chaoslib_version: String,
    /// The agent's OS, release and machine (`Linux-6.1.0-x86_64`), as Python's
    /// `platform.platform()` names them.
    #[serde(default)]
    pub platform: String,
    /// The agent's host name.
    #[serde(default)]
    pub node: String,
    /// The experiment as it was given (`env` values and secrets never resolved).
    #[serde(default)]
    pub experiment: Value,
    pub title: String,
    pub status: JournalStatus,
    pub deviated: bool,
    /// Epoch milliseconds here, an ISO 8601 string in JSON.
    #[serde(with = "iso")]
    pub start: u64,
    #[serde(with = "iso")]
    pub end: u64,
    pub duration: f64,
    pub steady_states: SteadyStates,
    pub run: Vec<ActivityRun>,
    /// The undos of the applied faults (newest first), then the experiment's rollbacks.
    pub rollbacks: Vec<ActivityRun>,
    /// What the run touched: the target and any process, directory or interface.
    pub targets: Vec<String>,
    pub ledger: Vec<LedgerRecord>,
    /// The person who confirmed a production run (set by the controller's side).
    pub confirmed_by: Option<String>,
    pub dry_run: bool,
    /// A dry run's plan; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<PlannedFault>,
    /// Why it ended as it did, in a sentence (refused, failed, aborted, rollback failed).
    pub reason: Option<String>,
}

impl Journal {
    pub fn new(title: &str, start: u64) -> Journal {
        Journal {
            chaoslib_version: String::new(),
            platform: String::new(),
            node: String::new(),
            experiment: Value::Null,
            title: title.to_string(),
            status: JournalStatus::Completed,
            deviated: false,
            start,
            end: start,
            duration: 0.0,
            steady_states: SteadyStates::default(),
            run: Vec::new(),
            rollbacks: Vec::new(),
            targets: Vec::new(),
            ledger: Vec::new(),
            confirmed_by: None,
            dry_run: false,
            plan: Vec::new(),
            reason: None,
        }
    }

    /// The journal as a few lines for a person (`iohr-agent exec` without `--json`): the
    /// status, each steady-state probe, each activity of the method, each undo, each fault
    /// still open, or a dry run's plan.
    pub fn summary(&self) -> Vec<String> {
        let name = |a: &Value| a["name"].as_str().unwrap_or("?").to_string();
        let mut out = vec![format!(
            "{}: {}{}",
            self.title,
            self.status.as_str(),
            if self.deviated { " (deviated)" } else { "" }
        )];
        for planned in &self.plan {
            out.push(format!(
                "  would apply {} ({}) for at most {} s, undone by {}",
                planned.activity,
                planned.fault["fault"].as_str().unwrap_or("?"),
                planned.duration,
                planned.undo["undo"].as_str().unwrap_or("?")
            ));
        }
        let probe_line = |when: &str, p: &ActivityRun| {
            let output = p
                .output
                .as_ref()
                .map(|o| {
                    let mut parts = Vec::new();
                    if let Some(status) = o.get("status") {
                        parts.push(format!("status {status}"));
                    }
                    if let Some(ms) = o.get("latency_ms").and_then(Value::as_f64) {
                        parts.push(format!("{ms:.1} ms"));
                    }
                    if let Some(ms) = o.get("p99_ms").and_then(Value::as_f64) {
                        parts.push(format!("p99 {ms:.1} ms"));
                    }
                    parts.join(", ")
                })
                .unwrap_or_default();
            let verdict = match (p.tolerance_met, &p.exception) {
                (Some(true), _) => "met".to_string(),
                (_, Some(e)) => format!("missed: {e}"),
                _ => "missed".to_string(),
            };
            format!("  {when} {}: {verdict} ({output})", name(&p.activity))
        };
        for (when, state) in [
            ("before", &self.steady_states.before),
            ("after", &self.steady_states.after),
        ] {
            for probe in state.iter().flat_map(|s| &s.probes) {
                out.push(probe_line(when, probe));
            }
        }
        for activity in &self.run {
            let outcome = match (&activity.status, &activity.exception) {
                (ActivityStatus::Succeeded, _) => "done".to_string(),
                (ActivityStatus::Failed, Some(e)) => format!("failed: {e}"),
                (ActivityStatus::Failed, None) => "failed".to_string(),
            };
            out.push(format!("  method {}: {outcome}", name(&activity.activity)));
        }
        for record in &self.ledger {
            let state = match (record.undone_at, &record.undone_by) {
                (Some(at), by) => format!(
                    "undone by {} {} ms after it was applied",
                    by.as_deref().unwrap_or("rollback"),
                    at.saturating_sub(record.applied_at)
                ),
                (None, _) => "STILL APPLIED: the agent's ledger keeps it".to_string(),
            };
            out.push(format!(
                "  fault {} ({}): {state}",
                record.activity,
                record.fault["fault"].as_str().unwrap_or("?")
            ));
        }
        if let Some(reason) = &self.reason {
            out.push(format!("  {reason}"));
        }
        out
    }

    /// Faults whose undo never succeeded.
    pub fn open_faults(&self) -> impl Iterator<Item = &LedgerRecord> {
        self.ledger.iter().filter(|r| r.undone_at.is_none())
    }
}

/// One `timeline` frame's data: a step of the lifecycle as it happens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineStep {
    /// `hypothesis_before`, `method`, `hypothesis_after`, `deadline`, `rollback`, `dry_run`,
    /// `end`.
    pub phase: String,
    pub activity: Option<String>,
    /// `started`, `succeeded`, `failed`, `met`, `missed`, `applied`, `undone`, `retrying`, or
    /// the journal's status at the end.
    pub status: String,
    pub at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl TimelineStep {
    /// The step as a person reads it: `method  slow-home  applied  120 ms of latency`.
    pub fn line(&self) -> String {
        let mut parts = vec![self.phase.replace('_', " ")];
        parts.extend(self.activity.clone());
        parts.push(self.status.clone());
        parts.extend(self.detail.clone());
        parts.join("  ")
    }
}

/// Epoch milliseconds as the Chaos Toolkit's ISO 8601 times (Python's `isoformat()` of
/// an aware UTC datetime); read back from that, from `...Z`, or from a number (journals
/// stored before the times were strings).
pub mod iso {
    use std::time::{Duration, UNIX_EPOCH};

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn format(ms: u64) -> String {
        let at = UNIX_EPOCH + Duration::from_millis(ms);
        let text = humantime::format_rfc3339_micros(at).to_string();
        match text.strip_suffix('Z') {
            Some(rest) => format!("{rest}+00:00"),
            None => text,
        }
    }

    pub fn parse(text: &str) -> Option<u64> {
        let utc = text
            .strip_suffix("+00:00")
            .map(|rest| format!("{rest}Z"))
            .unwrap_or_else(|| text.to_string());
        let at = humantime::parse_rfc3339_weak(&utc).ok()?;
        at.duration_since(UNIX_EPOCH)
            .ok()
            .map(|d| d.as_millis() as u64)
    }

    pub fn serialize<S: Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*ms))
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Ms(u64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        match Either::deserialize(d)? {
            Either::Ms(ms) => Ok(ms),
            Either::Text(t) => parse(&t).ok_or_else(|| {
                serde::de::Error::custom(format!("not an ISO 8601 UTC time: {t:?}"))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_journal_keeps_the_chaos_toolkit_field_names() {
        let mut j = Journal::new("t", 1000);
        j.steady_states.before = Some(SteadyState {
            steady_state_met: true,
            probes: vec![ActivityRun {
                activity: json!({"name": "p"}),
                status: ActivityStatus::Succeeded,
                start: 1000,
                end: 1005,
                duration: 0.005,
                output: Some(json!({"status": 200, "latency_ms": 5.0})),
                exception: None,
                tolerance_met: Some(true),
                ledger_id: None,
                attempts: None,
            }],
        });
        j.status = JournalStatus::RollbackFailed;
        let v = serde_json::to_value(&j).unwrap();
        for key in [
            "status",
            "deviated",
            "steady_states",
            "run",
            "rollbacks",
            "start",
            "end",
            "duration",
            "targets",
            "ledger",
            "confirmed_by",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        assert_eq!(v["status"], "rollback_failed");
        let probe = &v["steady_states"]["before"]["probes"][0];
        for key in ["activity", "status", "start", "end", "duration", "output"] {
            assert!(probe.get(key).is_some(), "{key}");
        }
        assert_eq!(probe["status"], "succeeded");
        assert_eq!(v["steady_states"]["during"], json!([]));
        assert_eq!(v["start"], "1970-01-01T00:00:01.000000+00:00");
        assert_eq!(probe["end"], "1970-01-01T00:00:01.005000+00:00");
        for key in ["chaoslib-version", "platform", "node", "experiment"] {
            assert!(v.get(key).is_some(), "{key}");
        }
        let back: Journal = serde_json::from_value(v).unwrap();
        assert_eq!(back, j);
    }

    #[test]
    fn times_read_back_from_iso_8601_or_old_numbers() {
        let ms = 1_796_136_427_365;
        assert_eq!(iso::format(ms), "2026-12-01T14:47:07.365000+00:00");
        assert_eq!(iso::parse(&iso::format(ms)), Some(ms));
        assert_eq!(iso::parse("2026-12-01T14:47:07.365041Z"), Some(ms));
        assert_eq!(iso::parse("yesterday"), None);
        let mut v = serde_json::to_value(Journal::new("t", ms)).unwrap();
        v["start"] = json!(5);
        let old: Journal = serde_json::from_value(v).unwrap();
        assert_eq!(old.start, 5);
    }
}
