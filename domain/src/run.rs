//! The run record, its kind, status and executor, as the API serves them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use crate::kind::RunKind;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}; expected one of: {expected}")]
pub struct UnknownWord {
    pub what: &'static str,
    pub value: String,
    pub expected: String,
}

/// `queued -> running -> passed | failed | error | cancelled`, or `refused` before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Queued,
    Running,
    Passed,
    Failed,
    Error,
    Cancelled,
    Refused,
}

impl RunStatus {
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Passed,
        RunStatus::Failed,
        RunStatus::Error,
        RunStatus::Cancelled,
        RunStatus::Refused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Passed => "passed",
            RunStatus::Failed => "failed",
            RunStatus::Error => "error",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Refused => "refused",
        }
    }

    pub fn is_finished(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }

    /// The statuses an agent may end a run with (`refused`: its policy does not allow
    /// what the run asks, and nothing was done).
    pub fn is_agent_outcome(self) -> bool {
        matches!(
            self,
            RunStatus::Passed
                | RunStatus::Failed
                | RunStatus::Error
                | RunStatus::Cancelled
                | RunStatus::Refused
        )
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownWord {
                what: "status",
                value: s.to_string(),
                expected: RunStatus::ALL.map(|k| k.as_str()).join(", "),
            })
    }
}

/// Where a run may execute: written `any` (any agent of the account serving the run's
/// environment), `agent:NAME` (that agent) or `cloud` (the platform's shared agents).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Executor {
    Any,
    Agent(String),
    Cloud,
}

impl fmt::Display for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Executor::Any => f.write_str("any"),
            Executor::Agent(name) => write!(f, "agent:{name}"),
            Executor::Cloud => f.write_str("cloud"),
        }
    }
}

impl FromStr for Executor {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "any" => Ok(Executor::Any),
            "cloud" => Ok(Executor::Cloud),
            _ => match s.strip_prefix("agent:") {
                Some(name) if !name.is_empty() => Ok(Executor::Agent(name.to_string())),
                _ => Err(UnknownWord {
                    what: "executor",
                    value: s.to_string(),
                    expected: "any, cloud, agent:NAME".to_string(),
                }),
            },
        }
    }
}

impl Serialize for Executor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Executor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Who started a run, and the change it was started for (`core#212`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StartedBy {
    /// `person`, `token`, `schedule` or `trigger`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The person's name, the token's id, the schedule's id, the trigger's id.
    pub id: String,
    /// What the run measures: `owner/repo#N` for a pull request, `owner/repo@BRANCH` for
    /// a branch, or any label the starter gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
    /// The head commit the run measures (40 hex), when a trigger's delivery named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The change a baseline is looked for on (`owner/repo@main`): a pull request's base
    /// branch, when a trigger's delivery named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// The forge the change lives on, when a trigger of that forge started the run: where
    /// its comparison is written back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forge: Option<Forge>,
}

/// A forge whose pull requests (merge requests) a run can be started for and answered on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Forge {
    Github,
    Gitlab,
}

impl Forge {
    /// Every forge, for lists and the contract test.
    pub const ALL: [Forge; 2] = [Forge::Github, Forge::Gitlab];

    pub fn as_str(self) -> &'static str {
        match self {
            Forge::Github => "github",
            Forge::Gitlab => "gitlab",
        }
    }
}

impl std::str::FromStr for Forge {
    type Err = UnknownWord;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "github" => Ok(Forge::Github),
            "gitlab" => Ok(Forge::Gitlab),
            _ => Err(UnknownWord {
                what: "forge",
                value: s.to_string(),
                expected: "github, gitlab".to_string(),
            }),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Units {
    pub reserved: u64,
    pub spent: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScenarioRef {
    pub id: String,
    pub version: String,
}

/// A run as `GET /v1/reliability/runs/{id}` serves it: every field of the RFC's table
/// plus its times. Times are RFC 3339 UTC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunRecord {
    pub id: String,
    pub kind: RunKind,
    pub scenario: ScenarioRef,
    pub environment: String,
    pub target: String,
    /// `any`, `cloud` or `agent:NAME`.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^(any|cloud|agent:.+)$"))]
    pub executor: Executor,
    /// The agent that took the run, once one has.
    pub agent: Option<String>,
    pub started_by: StartedBy,
    pub status: RunStatus,
    /// Why the run has its status (`agent lost`, a refusal's reason), or, while queued,
    /// why it is still waiting.
    pub reason: Option<String>,
    /// The kind's result once the run has ended (its shape is the kind's, see the kind's doc).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub result: Option<serde_json::Value>,
    /// The findings this run created or saw again, once it has ended.
    pub findings: Vec<crate::finding::RunFinding>,
    pub units: Units,
    /// A production faults run's confirmation: what a person must confirm, and who did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<crate::faults::confirmation::Confirmation>,
    /// A run split over agents (`"agents": N` at POST): N. Its result is its shares'
    /// merged; its frames relay theirs, each with its `share`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<u32>,
    /// A split run's shares, each a run of its own (`GET /v1/reliability/runs/{id}`
    /// lists them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<ShareRun>,
    /// One share of a split run: the run it is part of, which share, of how many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_of: Option<ShareOf>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
}

/// A share of a split run, as the split run lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShareRun {
    /// From 0.
    pub index: u32,
    /// The share's own run id.
    pub run: String,
    pub status: RunStatus,
    /// The agent running it, once one has taken it.
    pub agent: Option<String>,
}

/// What a share is part of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShareOf {
    /// The split run's id.
    pub run: String,
    /// From 0.
    pub index: u32,
    /// The agents the run is split over.
    pub count: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executor_round_trips_and_rejects_nonsense() {
        for text in ["any", "cloud", "agent:edge-1"] {
            let parsed: Executor = text.parse().expect("valid executor");
            assert_eq!(parsed.to_string(), text);
        }
        assert!("agent:".parse::<Executor>().is_err());
        assert!("somewhere".parse::<Executor>().is_err());
    }

    #[test]
    fn only_load_like_kinds_are_exclusive() {
        let exclusive: Vec<_> = RunKind::ALL
            .into_iter()
            .filter(|k| k.is_exclusive())
            .collect();
        assert_eq!(
            exclusive,
            [
                RunKind::Load,
                RunKind::Faults,
                RunKind::Capacity,
                RunKind::Replay
            ]
        );
    }

    #[test]
    fn unknown_kind_names_the_choices() {
        let err = "soak".parse::<RunKind>().expect_err("not a kind");
        assert!(err.to_string().contains("checks, load, scenario"));
    }
}
