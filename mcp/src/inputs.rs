//! The tools' inputs: JSON Schemas (schemars) for the client, strict like REST's bodies.
//! Optional fields left out are left out of the REST call, so REST's defaults apply.

use iohr_domain::RunKind;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `POST /v1/reliability/runs` body.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRun {
    // The kinds in the description are the registry's.
    #[schemars(description = format!("{}.", RunKind::listed("or")))]
    pub kind: String,
    /// An environment of the account, e.g. `staging`.
    pub environment: String,
    // The kinds whose engine speaks TLS, as their contracts say.
    #[schemars(description = format!(
        "`http://HOST[:PORT][/PATH]` (https:// for {}).",
        iohr_domain::kind::decisions::listed(
            RunKind::ALL.iter().filter(|k| k.traits().https).map(|k| k.as_str()),
            "and"
        )
    ))]
    pub target: String,
    /// The kind's spec inline, e.g. `{"checks": [{"path": "/"}]}` (or give `scenario`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<Value>,
    /// A stored scenario version instead of `spec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<ScenarioRef>,
    /// The name an inline spec is stored under (default `inline-KIND`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario_name: Option<String>,
    /// `any` (default), `cloud` or `agent:NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<String>,
    /// What the run is for, e.g. `core#212`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
    /// A production faults run: how long it waits for a person's confirmation (`30m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_within: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScenarioRef {
    /// The scenario's name.
    pub id: String,
    /// `sha256:...`.
    pub version: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunId {
    /// The run's id.
    pub id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitRun {
    /// The run's id.
    pub id: String,
    /// How long to wait for the run to end, in seconds: 1 to 600 (default 120).
    #[serde(default)]
    pub timeout_s: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompareRuns {
    /// The run before the change.
    pub before: String,
    /// The run after it.
    pub after: String,
    /// The smallest relative latency change that counts (default 0.02).
    #[serde(default)]
    pub noise_floor: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListRuns {
    /// queued, running, passed, failed, error, cancelled or refused.
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub environment: Option<String>,
    /// An agent's name.
    #[serde(default)]
    pub agent: Option<String>,
    /// 1 to 500 (default 50).
    #[serde(default)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFindings {
    /// open or closed.
    #[serde(default)]
    pub status: Option<String>,
    /// A scenario's name.
    #[serde(default)]
    pub scenario: Option<String>,
    #[serde(default)]
    pub environment: Option<String>,
    /// 1 to 500 (default 50).
    #[serde(default)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListScenarios {
    /// 1 to 500 (default 50).
    #[serde(default)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListAudit {
    /// Lines at or after this time (RFC 3339).
    #[serde(default)]
    pub since: Option<String>,
    /// Lines before this time (RFC 3339).
    #[serde(default)]
    pub until: Option<String>,
    /// `token:ID`, `person:NAME` or `controller`.
    #[serde(default)]
    pub actor: Option<String>,
    /// `run.start`, `run.cancel`, `run.confirm`, `finding.close`, `halt`, `schedule.fire`, ...
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub run: Option<String>,
    #[serde(default)]
    pub schedule: Option<String>,
    /// 1 to 500 (default 50).
    #[serde(default)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
}
