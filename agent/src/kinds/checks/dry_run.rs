//! The dry run of a `checks` spec.

use iohr_domain::RunKind;
use iohr_domain::checks::ChecksSpec;
use serde::Serialize;

use crate::dry_run::{Described, DryRun, PlanLines, ms_text};
use crate::kinds::RunContext;
use crate::request::resolve_headers;
use crate::secrets::EnvRefusal;

#[derive(Debug, Clone, Serialize)]
pub struct CheckDry {
    pub name: String,
    pub method: String,
    pub path: String,
    pub expect_status: u16,
    pub max_latency_ms: Option<u64>,
    pub expect_text: Option<String>,
    /// Why the run would not send this check (an unset `${env:NAME}` header): the check
    /// would fail unsent, as the run records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_sent: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChecksDry {
    pub checks: Vec<CheckDry>,
    pub invariants: Vec<String>,
    pub timeout_ms: u64,
}

impl ChecksDry {
    /// `env` reads `${env:NAME}` header values as the run will.
    pub fn new(
        spec: &ChecksSpec,
        env: &impl Fn(iohr_domain::request::Reference<'_>) -> Result<String, EnvRefusal>,
    ) -> ChecksDry {
        ChecksDry {
            checks: spec
                .checks
                .iter()
                .map(|check| CheckDry {
                    name: check.display_name(),
                    method: check.method.clone(),
                    path: check.path.clone(),
                    expect_status: check.expect_status,
                    max_latency_ms: check.max_latency_ms,
                    expect_text: check.expect_text.clone(),
                    not_sent: resolve_headers(&check.headers, env)
                        .err()
                        .map(|e| e.to_string()),
                })
                .collect(),
            invariants: spec.invariants.iter().map(|i| i.name()).collect(),
            timeout_ms: spec.timeout_ms,
        }
    }
}

impl PlanLines for ChecksDry {
    fn lines(&self) -> Vec<String> {
        let mut lines = vec!["checks:".to_string()];
        for check in &self.checks {
            let route = format!("{} {}", check.method, check.path);
            let mut line = if check.name == route {
                format!("  {route}: expect {}", check.expect_status)
            } else {
                format!("  {}: {route}: expect {}", check.name, check.expect_status)
            };
            if let Some(ms) = check.max_latency_ms {
                line.push_str(&format!(" within {ms} ms"));
            }
            if let Some(text) = &check.expect_text {
                line.push_str(&format!(", the body containing {text:?}"));
            }
            if let Some(reason) = &check.not_sent {
                line.push_str(&format!("; would fail unsent: {reason}"));
            }
            lines.push(line);
        }
        lines.push(if self.invariants.is_empty() {
            "invariants: none".to_string()
        } else {
            format!("invariants: {}", self.invariants.join(", "))
        });
        lines.push(format!("timeout {} per request", ms_text(self.timeout_ms)));
        lines
    }
}

pub fn dry_run(spec: &ChecksSpec, ctx: &RunContext) -> Result<Option<Described>, String> {
    DryRun::new(
        RunKind::Checks,
        &ctx.target,
        ChecksDry::new(spec, &ctx.env_fn()),
    )
    .described()
    .map(Some)
}
