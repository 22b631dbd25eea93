//! Findings: the problems a finished run found, each with a signature that stays the same
//! for the same problem in a later run of the same scenario against the same target, so
//! that run *sees it again* instead of creating a duplicate.
//!
//! What is a finding (pure functions of the run's kind, spec and result):
//! - `check_failed`: a check whose verdict is fail (checks runs);
//! - `invariant_broken`: an invariant that broke (checks runs);
//! - `operation_errors`: an operation whose error rate (no response, or a status of 400
//!   or more, as [`Counts::failed`] counts) passes its limit: the spec's `error_rate`
//!   threshold for load and replay runs, else [`DEFAULT_ERROR_RATE`]; scenario runs count
//!   their load requests (the warm-up is discarded, as everywhere);
//! - `capacity_below_floor`: a capacity run whose highest rate meeting the SLO
//!   (`max_rate_meeting_slo`, or none) is below the spec's `floor`;
//! - `steady_state_deviated`: a faults run whose steady-state probe held before the method
//!   and missed its tolerance after it (subject: the probe);
//! - `fault_left_applied`: a faults run whose rollback failed: a fault its agent could not
//!   undo (subject: the activity). This is the alert of a failed rollback; the run ends
//!   `error`, and findings are derived from it all the same.
//!
//! The signature hashes the account, scenario id (its name, not its version: a finding
//! survives edits of the spec), environment, target, finding kind and subject (the check,
//! invariant or operation name), nothing that varies from run to run.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::load::{Comparison, Counts, Metric, Threshold};
use crate::run::{RunKind, UnknownWord};

/// The error-rate limit of an operation when the spec sets none: more than 1% of its
/// requests failed.
pub const DEFAULT_ERROR_RATE: f64 = 0.01;

/// Titles and details are cut to these many characters (a failing invariant lists every
/// check that broke it).
const MAX_TITLE: usize = 300;
const MAX_DETAIL: usize = 2000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    CheckFailed,
    InvariantBroken,
    OperationErrors,
    CapacityBelowFloor,
    SteadyStateDeviated,
    FaultLeftApplied,
}

impl FindingKind {
    pub const ALL: [FindingKind; 6] = [
        FindingKind::CheckFailed,
        FindingKind::InvariantBroken,
        FindingKind::OperationErrors,
        FindingKind::CapacityBelowFloor,
        FindingKind::SteadyStateDeviated,
        FindingKind::FaultLeftApplied,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::CheckFailed => "check_failed",
            FindingKind::InvariantBroken => "invariant_broken",
            FindingKind::OperationErrors => "operation_errors",
            FindingKind::CapacityBelowFloor => "capacity_below_floor",
            FindingKind::SteadyStateDeviated => "steady_state_deviated",
            FindingKind::FaultLeftApplied => "fault_left_applied",
        }
    }
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FindingKind {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FindingKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownWord {
                what: "finding kind",
                value: s.to_string(),
                expected: FindingKind::ALL.map(|k| k.as_str()).join(", "),
            })
    }
}

/// Open until a person or automation closes it; a closed finding seen again reopens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum FindingStatus {
    Open,
    Closed,
}

impl FindingStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            FindingStatus::Open => "open",
            FindingStatus::Closed => "closed",
        }
    }
}

impl fmt::Display for FindingStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FindingStatus {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "open" => Ok(FindingStatus::Open),
            "closed" => Ok(FindingStatus::Closed),
            _ => Err(UnknownWord {
                what: "finding status",
                value: s.to_string(),
                expected: "open, closed".to_string(),
            }),
        }
    }
}

/// What a run's sighting of a finding was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Sighting {
    /// The run created the finding.
    New,
    /// The finding was open and the run saw it again.
    SeenAgain,
    /// The finding was closed and the run saw it again: it is open again (a regression).
    Reopened,
}

impl Sighting {
    pub fn as_str(self) -> &'static str {
        match self {
            Sighting::New => "new",
            Sighting::SeenAgain => "seen_again",
            Sighting::Reopened => "reopened",
        }
    }

    pub fn parse(s: &str) -> Option<Sighting> {
        [Sighting::New, Sighting::SeenAgain, Sighting::Reopened]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

impl fmt::Display for Sighting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A finding as one run derived it, before the store knows whether it is new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    pub kind: FindingKind,
    pub subject: String,
    pub title: String,
    /// What this run observed (statuses, rates); it changes from run to run.
    pub detail: String,
    pub signature: String,
}

/// A finding as a run's record lists it (and its `finding` frame carries it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunFinding {
    pub id: String,
    pub signature: String,
    pub kind: FindingKind,
    pub subject: String,
    pub title: String,
    /// What this run observed.
    pub detail: String,
    pub seen: Sighting,
}

/// A finding as `GET /v1/reliability/findings/{id}` serves it. Times are RFC 3339 UTC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Finding {
    pub id: String,
    pub signature: String,
    pub kind: FindingKind,
    pub subject: String,
    pub title: String,
    /// What the last run that saw it observed.
    pub detail: String,
    pub scenario: String,
    pub environment: String,
    pub target: String,
    pub status: FindingStatus,
    pub first_run: String,
    pub last_run: String,
    pub times_seen: u64,
    pub first_seen_at: String,
    pub last_seen_at: String,
    pub closed_at: Option<String>,
    /// Who closed it (`person:NAME` or `token:ID`).
    pub closed_by: Option<String>,
    /// The runs that saw it, newest first (only on the single finding's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<Vec<FindingRun>>,
}

/// One run that saw a finding, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FindingRun {
    pub run: String,
    pub seen: Sighting,
}

/// What identifies the problems of a run, and what it observed.
#[derive(Debug, Clone, Copy)]
pub struct RunFacts<'a> {
    pub account_id: &'a str,
    pub kind: RunKind,
    pub scenario_id: &'a str,
    pub environment: &'a str,
    pub target: &'a str,
    /// The run's stored spec (a scenario version).
    pub spec: Option<&'a Value>,
    pub result: &'a Value,
}

/// The stable signature: hex SHA-256 over the fields as a JSON array (no separator can be
/// forged by a name that contains it).
pub fn signature(facts: &RunFacts, kind: FindingKind, subject: &str) -> String {
    let fields = [
        "iohr-finding-v1",
        facts.account_id,
        facts.scenario_id,
        facts.environment,
        facts.target,
        kind.as_str(),
        subject,
    ];
    let text = serde_json::to_string(&fields).unwrap_or_default();
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// A finding as its kind derives it from a result, before it has a signature.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub kind: FindingKind,
    pub subject: String,
    pub title: String,
    pub detail: String,
}

impl Found {
    pub fn new(kind: FindingKind, subject: String, title: String, detail: String) -> Found {
        Found {
            kind,
            subject,
            title,
            detail,
        }
    }
}

/// The findings of a finished run, one per signature, ordered by signature (the order
/// the store locks them in, so two runs never wait on each other in a cycle).
pub fn derive(facts: &RunFacts) -> Vec<Derived> {
    let mut found: Vec<Found> = Vec::new();
    crate::kind::findings(facts, &mut found);
    let mut by_signature: BTreeMap<String, Derived> = BTreeMap::new();
    for Found {
        kind,
        subject,
        title,
        detail,
    } in found
    {
        let signature = signature(facts, kind, &subject);
        // Two checks of one name are one problem: their details are kept side by side.
        match by_signature.get_mut(&signature) {
            Some(earlier) => {
                earlier.detail = cut(&format!("{}; {detail}", earlier.detail), MAX_DETAIL);
            }
            None => {
                by_signature.insert(
                    signature.clone(),
                    Derived {
                        kind,
                        subject,
                        title: cut(&title, MAX_TITLE),
                        detail: cut(&detail, MAX_DETAIL),
                        signature,
                    },
                );
            }
        }
    }
    by_signature.into_values().collect()
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut short: String = text.chars().take(max - 1).collect();
        short.push('…');
        short
    }
}

/// When an operation's error rate is a finding: when it does not hold `rate OP limit`.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorLimit {
    pub op: Comparison,
    /// A share, 0..1.
    pub limit: f64,
    /// How the limit reads, e.g. `error_rate < 1%`.
    pub expression: String,
}

impl Default for ErrorLimit {
    fn default() -> ErrorLimit {
        ErrorLimit {
            op: Comparison::LessOrEqual,
            limit: DEFAULT_ERROR_RATE,
            expression: format!("error_rate <= {}%", DEFAULT_ERROR_RATE * 100.0),
        }
    }
}

/// The strictest `error_rate <` or `<=` threshold of a load or replay spec, else the
/// default. (A `>` threshold on the error rate asks for errors: it is no limit.)
pub fn spec_error_limit(spec: Option<&Value>) -> ErrorLimit {
    let thresholds: Vec<String> = spec
        .and_then(|s| s.get("thresholds"))
        .and_then(|t| serde_json::from_value(t.clone()).ok())
        .unwrap_or_default();
    thresholds
        .iter()
        .filter_map(|text| text.parse::<Threshold>().ok())
        .filter(|t| {
            t.metric == Metric::ErrorRate
                && matches!(t.op, Comparison::Less | Comparison::LessOrEqual)
        })
        .map(|t| ErrorLimit {
            op: t.op,
            limit: t.limit,
            expression: t.expression,
        })
        .min_by(|a, b| a.limit.total_cmp(&b.limit))
        .unwrap_or_default()
}

#[derive(Deserialize)]
pub(crate) struct NamedCounts {
    pub(crate) name: String,
    #[serde(flatten)]
    pub(crate) counts: Counts,
}

pub(crate) fn operation_findings(
    ops: impl Iterator<Item = (String, Counts)>,
    limit: &ErrorLimit,
    found: &mut Vec<Found>,
) {
    // Operations of one name (a scenario may send one METHOD PATH twice) count together.
    let mut merged: BTreeMap<String, Counts> = BTreeMap::new();
    for (name, counts) in ops {
        merged.entry(name).or_default().add(&counts);
    }
    for (name, counts) in merged {
        let rate = counts.error_rate();
        if counts.requests == 0 || limit.op.holds(rate, limit.limit) {
            continue;
        }
        let mut kinds: Vec<String> = ["4xx", "5xx"]
            .iter()
            .filter_map(|c| counts.responses.get(*c).map(|n| format!("{c} {n}")))
            .collect();
        kinds.extend(counts.errors.iter().map(|(k, n)| format!("{k} {n}")));
        found.push(Found::new(
            FindingKind::OperationErrors,
            name.clone(),
            format!("operation {name}: error rate over its limit"),
            format!(
                "{} of {} requests failed ({:.2}%: {}); limit {}",
                counts.failed(),
                counts.requests,
                rate * 100.0,
                kinds.join(", "),
                limit.expression
            ),
        ));
    }
}

/// The subject of the one capacity finding a scenario can have.
pub const CAPACITY_SUBJECT: &str = "max rate meeting the SLO";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_faults_journal_gives_deviations_and_faults_left_applied() {
        let journal = json!({
            "status": "rollback_failed", "deviated": true, "reason": "undo failed: EPERM",
            "steady_states": {"after": {"probes": [
                {"activity": {"name": "home-fast"}, "tolerance_met": false,
                 "exception": "latency_ms 101 outside [0, 50]"},
                {"activity": {"name": "home-ok"}, "tolerance_met": true}
            ]}},
            "ledger": [
                {"id": "e1", "activity": "pause", "fault": {"fault": "process"}, "undone_at": null},
                {"id": "e2", "activity": "slow", "fault": {"fault": "network"}, "undone_at": 5}
            ]
        });
        let found = derive(&facts(RunKind::Faults, None, &journal));
        let mut kinds: Vec<_> = found.iter().map(|f| (f.kind, f.subject.as_str())).collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [
                (FindingKind::SteadyStateDeviated, "home-fast"),
                (FindingKind::FaultLeftApplied, "pause")
            ]
        );
        let calm = json!({"status": "completed", "deviated": false, "ledger": []});
        assert!(derive(&facts(RunKind::Faults, None, &calm)).is_empty());
    }

    fn facts<'a>(kind: RunKind, spec: Option<&'a Value>, result: &'a Value) -> RunFacts<'a> {
        RunFacts {
            account_id: "acc-1",
            kind,
            scenario_id: "smoke",
            environment: "staging",
            target: "http://127.0.0.1:9",
            spec,
            result,
        }
    }

    fn checks_result(home_passes: bool) -> Value {
        json!({
            "passed": false, "total": 2, "failed": 1,
            "checks": [
                {"name": "home", "method": "GET", "path": "/", "passed": home_passes,
                 "status": 500, "latency_ms": 1.0, "failures": ["status 500, expected 200"]},
                {"name": "health", "method": "GET", "path": "/health", "passed": true,
                 "status": 200, "latency_ms": 1.0, "failures": []}
            ],
            "invariants": [
                {"name": "no 5xx", "passed": false, "failures": ["home: status 500, 1.0 ms"]},
                {"name": "no errors", "passed": true, "failures": []}
            ]
        })
    }

    #[test]
    fn failing_checks_and_broken_invariants_are_findings() {
        let result = checks_result(false);
        let found = derive(&facts(RunKind::Checks, None, &result));
        let mut seen: Vec<_> = found
            .iter()
            .map(|f| {
                (
                    f.kind,
                    f.subject.as_str(),
                    f.title.as_str(),
                    f.detail.as_str(),
                )
            })
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            [
                (
                    FindingKind::CheckFailed,
                    "home",
                    "check home failed",
                    "status 500, expected 200"
                ),
                (
                    FindingKind::InvariantBroken,
                    "no 5xx",
                    "invariant no 5xx broken",
                    "home: status 500, 1.0 ms"
                ),
            ]
        );
        let sorted: Vec<_> = found.iter().map(|f| f.signature.clone()).collect();
        let mut again = sorted.clone();
        again.sort();
        assert_eq!(sorted, again, "ordered by signature");
    }

    #[test]
    fn the_signature_is_stable_and_names_scenario_environment_target_kind_and_subject() {
        let result = checks_result(false);
        let spec_a = json!({"checks": [{"name": "home", "path": "/"}]});
        let spec_b = json!({"checks": [{"name": "home", "path": "/", "timeout_ms": 10}]});
        let a = derive(&facts(RunKind::Checks, Some(&spec_a), &result));
        let b = derive(&facts(RunKind::Checks, Some(&spec_b), &result));
        assert_eq!(a, b, "another version of the scenario: the same findings");
        let base = facts(RunKind::Checks, None, &result);
        let one = signature(&base, FindingKind::CheckFailed, "home");
        assert_eq!(one.len(), 64);
        assert!(one.chars().all(|c| c.is_ascii_hexdigit()));
        let others = [
            signature(
                &RunFacts {
                    account_id: "acc-2",
                    ..base
                },
                FindingKind::CheckFailed,
                "home",
            ),
            signature(
                &RunFacts {
                    scenario_id: "other",
                    ..base
                },
                FindingKind::CheckFailed,
                "home",
            ),
            signature(
                &RunFacts {
                    environment: "production",
                    ..base
                },
                FindingKind::CheckFailed,
                "home",
            ),
            signature(
                &RunFacts {
                    target: "http://127.0.0.1:10",
                    ..base
                },
                FindingKind::CheckFailed,
                "home",
            ),
            signature(&base, FindingKind::InvariantBroken, "home"),
            signature(&base, FindingKind::CheckFailed, "health"),
        ];
        for other in others {
            assert_ne!(one, other);
        }
        // The fields cannot run into each other.
        let joined = RunFacts {
            scenario_id: "smoke\",\"staging",
            environment: "",
            ..base
        };
        assert_ne!(signature(&joined, FindingKind::CheckFailed, "home"), one);
    }

    #[test]
    fn a_passing_run_has_no_findings_and_nonsense_results_are_ignored() {
        let result = json!({"passed": true, "total": 1, "failed": 0,
            "checks": [{"name": "home", "method": "GET", "path": "/", "passed": true,
                        "status": 200, "latency_ms": 1.0}],
            "invariants": []});
        assert!(derive(&facts(RunKind::Checks, None, &result)).is_empty());
        for kind in RunKind::ALL {
            assert!(derive(&facts(kind, None, &json!({"what": 1}))).is_empty());
        }
    }

    fn load_result(ops: Value) -> Value {
        json!({"operations": ops})
    }

    fn op(name: &str, requests: u64, five: u64, timeouts: u64) -> Value {
        json!({"name": name, "method": "GET", "path": "/", "requests": requests,
               "responses": {"2xx": requests - five - timeouts, "5xx": five},
               "errors": if timeouts > 0 { json!({"timeout": timeouts}) } else { json!({}) },
               "error_rate": 0.0})
    }

    #[test]
    fn operations_over_the_spec_error_rate_threshold_are_findings() {
        let result = load_result(json!([
            op("GET /", 1000, 20, 5),
            op("GET /health", 1000, 4, 0),
            op("GET /idle", 0, 0, 0)
        ]));
        let spec = json!({"operations": [], "thresholds": ["p99 < 300ms", "error_rate < 1%"]});
        let found = derive(&facts(RunKind::Load, Some(&spec), &result));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, FindingKind::OperationErrors);
        assert_eq!(found[0].subject, "GET /");
        assert_eq!(
            found[0].detail,
            "25 of 1000 requests failed (2.50%: 5xx 20, timeout 5); limit error_rate < 1%"
        );

        let strict = json!({"thresholds": ["error_rate < 1%", "errors <= 0.1%"]});
        let found = derive(&facts(RunKind::Replay, Some(&strict), &result));
        let mut subjects: Vec<&str> = found.iter().map(|f| f.subject.as_str()).collect();
        subjects.sort();
        assert_eq!(subjects, ["GET /", "GET /health"]);
        assert_eq!(found.len(), 2, "the strictest threshold applies");
        assert!(found.iter().all(|f| f.detail.ends_with("errors <= 0.1%")));
    }

    #[test]
    fn without_a_threshold_more_than_one_percent_of_failures_is_a_finding() {
        assert_eq!(spec_error_limit(None), ErrorLimit::default());
        let greater = json!({"thresholds": ["error_rate > 50%", "nonsense"]});
        assert_eq!(spec_error_limit(Some(&greater)), ErrorLimit::default());
        let result = load_result(json!([op("a", 100, 1, 0), op("b", 100, 2, 0)]));
        let found = derive(&facts(RunKind::Load, Some(&greater), &result));
        assert_eq!(
            found.iter().map(|f| f.subject.as_str()).collect::<Vec<_>>(),
            ["b"],
            "exactly 1% is within the default limit"
        );
        assert!(found[0].detail.ends_with("limit error_rate <= 1%"));
    }

    #[test]
    fn scenario_ops_count_their_load_requests_by_method_and_path() {
        let result = json!({"ops": [
            {"op": 0, "method": "GET", "path": "/a", "by_status": {"200": 97, "503": 2},
             "errors": {"timeout": 1}, "warmup_by_status": {"500": 5}},
            {"op": 1, "method": "GET", "path": "/b", "by_status": {"200": 100}, "errors": {},
             "warmup_errors": {"connect": 5}},
            {"op": 2, "method": "GET", "path": "/a", "by_status": {"200": 100}, "errors": {}}
        ]});
        let found = derive(&facts(RunKind::Scenario, None, &result));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].subject, "GET /a");
        assert_eq!(
            found[0].detail,
            "3 of 200 requests failed (1.50%: 5xx 2, timeout 1); limit error_rate <= 1%",
            "both ops of GET /a count, the warm-up does not"
        );
    }

    #[test]
    fn capacity_below_its_floor_is_a_finding() {
        let spec = json!({"floor": 1000});
        let cases = [
            (json!({"max_rate_meeting_slo": 850.0}), Some("850.0/s")),
            (json!({"max_rate_meeting_slo": null}), Some("no rate met")),
            (json!({"max_rate_meeting_slo": 1000}), None),
            (json!({}), None),
        ];
        for (result, expected) in cases {
            let found = derive(&facts(RunKind::Capacity, Some(&spec), &result));
            match expected {
                Some(text) => {
                    assert_eq!(found.len(), 1, "{result}");
                    assert_eq!(found[0].kind, FindingKind::CapacityBelowFloor);
                    assert_eq!(found[0].subject, CAPACITY_SUBJECT);
                    assert!(found[0].detail.contains(text), "{}", found[0].detail);
                }
                None => assert!(found.is_empty(), "{result}"),
            }
        }
        let no_floor = json!({"max_rate_meeting_slo": 1.0});
        assert!(derive(&facts(RunKind::Capacity, Some(&json!({})), &no_floor)).is_empty());
    }

    #[test]
    fn checks_of_one_name_are_one_finding() {
        let result = json!({"passed": false, "total": 2, "failed": 2, "invariants": [],
        "checks": [
            {"name": "GET /", "method": "GET", "path": "/", "passed": false, "status": 500,
             "latency_ms": 1.0, "failures": ["status 500, expected 200"]},
            {"name": "GET /", "method": "GET", "path": "/", "passed": false, "status": null,
             "latency_ms": 1.0, "error": "timeout", "failures": []}
        ]});
        let found = derive(&facts(RunKind::Checks, None, &result));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].detail, "status 500, expected 200; timeout");
    }

    #[test]
    fn long_texts_are_cut_and_words_round_trip() {
        let name = "x".repeat(1000);
        let result = json!({"passed": false, "total": 1, "failed": 1, "invariants": [],
            "checks": [{"name": name, "method": "GET", "path": "/", "passed": false,
                        "status": 500, "latency_ms": 1.0, "failures": ["y".repeat(5000)]}]});
        let found = derive(&facts(RunKind::Checks, None, &result));
        assert_eq!(found[0].title.chars().count(), MAX_TITLE);
        assert_eq!(found[0].detail.chars().count(), MAX_DETAIL);
        assert_eq!(
            found[0].subject, name,
            "the subject is whole: it is the identity"
        );
        for kind in FindingKind::ALL {
            assert_eq!(kind.as_str().parse::<FindingKind>(), Ok(kind));
        }
        assert!("open".parse::<FindingStatus>().is_ok());
        assert!("resolved".parse::<FindingStatus>().is_err());
        for s in [Sighting::New, Sighting::SeenAgain, Sighting::Reopened] {
            assert_eq!(Sighting::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).expect("json"), json!(s.as_str()));
        }
    }
    #[test]
    fn compare_names_the_findings_new_to_the_after_run() {
        use crate::compare::{Comparison, Verdict, add_new_findings};
        let seen = |id: &str, signature: &str| RunFinding {
            id: id.into(),
            signature: signature.into(),
            kind: FindingKind::CheckFailed,
            subject: id.into(),
            title: format!("check {id} failed"),
            detail: "status 500, expected 200".into(),
            seen: Sighting::SeenAgain,
        };
        let mut out = Comparison {
            before: "b".into(),
            after: "a".into(),
            verdict: Verdict::Improved,
            differences: Vec::new(),
            unchanged: Vec::new(),
            notes: Vec::new(),
            level: 0.95,
            noise_floor: 0.02,
            samples: None,
        };
        add_new_findings(&mut out, &[seen("f1", "s1")], &[seen("f1", "s1")]);
        assert_eq!(
            out.verdict,
            Verdict::Improved,
            "a finding both runs saw is not new"
        );
        add_new_findings(
            &mut out,
            &[seen("f1", "s1")],
            &[seen("f1", "s1"), seen("f2", "s2")],
        );
        assert_eq!(out.verdict, Verdict::Regressed);
        assert_eq!(
            out.lines()[1],
            "new finding: check f2 failed (status 500, expected 200)"
        );
    }
}
