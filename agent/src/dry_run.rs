//! What `iohr-agent exec --dry-run` says of a plan: the plan a run would execute
//! ([`execute::plan`](crate::execute::plan) reads the spec into it exactly as for a run),
//! in words and as one JSON object, with nothing sent. Each kind describes its own plan
//! (`kinds::NAME::dry_run` with the pieces here, scenario with the domain's
//! `scenario_kind::DryRun`); a faults dry run goes through its lifecycle.

use std::time::Duration;

use iohr_domain::RunKind;
use iohr_domain::load::{HttpVersion, Operation, Share};
use iohr_domain::text::decimal;
use serde::Serialize;

/// A dry run ready to show: the JSON object `--json` prints (and `--output` writes), and
/// the lines for people.
#[derive(Debug, Clone)]
pub struct Described {
    object: String,
    lines: Vec<String>,
}

impl Described {
    pub fn new(dry: &impl Serialize, lines: Vec<String>) -> Result<Described, String> {
        Ok(Described {
            object: serde_json::to_string(dry).map_err(|e| e.to_string())?,
            lines,
        })
    }

    /// The JSON object, written once.
    pub fn object(&self) -> &str {
        &self.object
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.clone()
    }

    pub fn into_parts(self) -> (String, Vec<String>) {
        (self.object, self.lines)
    }
}

/// A plan's description in the terms of its spec.
pub trait PlanLines {
    /// The plan for people, a few lines.
    fn lines(&self) -> Vec<String>;
}

/// A plan described, not run.
#[derive(Debug, Clone, Serialize)]
pub struct DryRun<P> {
    /// Always true: tells this object from a run's outcome.
    pub dry_run: bool,
    pub kind: RunKind,
    pub target: String,
    pub plan: P,
}

impl<P: Serialize + PlanLines> DryRun<P> {
    pub fn new(kind: RunKind, target: &str, plan: P) -> DryRun<P> {
        DryRun {
            dry_run: true,
            kind,
            target: target.to_string(),
            plan,
        }
    }

    /// The plan for people, a few lines.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![
            "Dry run: nothing sent".to_string(),
            format!("{} against {}", self.kind.as_str(), self.target),
        ];
        lines.extend(self.plan.lines());
        lines
    }

    pub fn described(&self) -> Result<Described, String> {
        Described::new(self, self.lines())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct OperationDry {
    pub name: String,
    pub method: String,
    pub path: String,
    /// Load and capacity: its share of the requests, relative to the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Replay: how many requests of the log it sends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
}

impl OperationDry {
    pub fn new(op: &Operation) -> OperationDry {
        OperationDry {
            name: op.display_name(),
            method: op.method.clone(),
            path: op.path.clone(),
            weight: Some(op.weight),
            requests: None,
        }
    }

    /// `GET / (weight 3)`, `home: GET / (2 requests)`.
    pub fn line(&self) -> String {
        let route = format!("{} {}", self.method, self.path);
        let what = match (self.weight, self.requests) {
            (_, Some(1)) => "1 request".to_string(),
            (_, Some(n)) => format!("{n} requests"),
            (Some(w), None) => format!("weight {w}"),
            (None, None) => String::new(),
        };
        let named = if self.name == route {
            route
        } else {
            format!("{}: {route}", self.name)
        };
        if what.is_empty() {
            format!("  {named}")
        } else {
            format!("  {named} ({what})")
        }
    }
}

pub fn operation_lines(operations: &[OperationDry]) -> Vec<String> {
    std::iter::once("operations:".to_string())
        .chain(operations.iter().map(OperationDry::line))
        .collect()
}

pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `500ms`, `10s`, `1.5s`.
pub fn duration_text(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{}ms", decimal(ms, 3))
    } else {
        format!("{}s", decimal(ms / 1000.0, 3))
    }
}

pub fn ms_text(ms: u64) -> String {
    duration_text(ms as f64)
}

/// `timeout 10s per request; HTTP/1.1`, `...; HTTP/2, 4 streams per connection`.
pub fn transport_line(timeout_ms: u64, http: HttpVersion, streams: u32) -> String {
    let http = match (http, streams) {
        (HttpVersion::Http1, _) => "HTTP/1.1".to_string(),
        (HttpVersion::Http2, 1) => "HTTP/2".to_string(),
        (HttpVersion::Http2, n) => format!("HTTP/2, {n} streams per connection"),
    };
    format!("timeout {} per request; {http}", ms_text(timeout_ms))
}

/// A share as a dry run's object names it (`"1/3"`), absent for the whole run.
pub fn share_field(share: Share) -> Option<Share> {
    (!share.is_whole()).then_some(share)
}

/// What a share of a split run sends, in words.
pub fn share_line(share: Share) -> String {
    let (i, n) = (u64::from(share.index()), u64::from(share.count()));
    format!(
        "share {share} of the run: the whole run's arrivals numbered {i}, {}, {}, ... (rates are the whole run's); connections and requests are this share's",
        i + n,
        i + 2 * n
    )
}

pub fn thresholds_line(thresholds: &[String], abort_on_fail: bool) -> String {
    if thresholds.is_empty() {
        return "thresholds: none".to_string();
    }
    let abort = if abort_on_fail {
        " (the run stops at the first one crossed)"
    } else {
        ""
    };
    format!("thresholds: {}{abort}", thresholds.join(", "))
}

#[cfg(test)]
mod tests;
