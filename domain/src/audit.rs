//! An audit line as the API shows it (`GET /v1/reliability/audit`): who did what to which
//! run or schedule, on which targets and faults, and how it ended. Never a request body
//! or a credential.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    pub id: String,
    /// RFC 3339 UTC with milliseconds.
    pub at: String,
    /// `token:ID`, `person:NAME`, `controller`, `schedule:ID`, `enrollment:ID` (an agent's
    /// enrollment) or `agent:NAME` (its renewal).
    pub actor: String,
    /// Such as `run.start`, `run.cancel`, `run.confirm`, `finding.close`, `halt`.
    pub action: String,
    pub run_id: Option<String>,
    pub schedule_id: Option<String>,
    pub targets: Option<String>,
    pub faults: Option<String>,
    pub outcome: String,
}
