//! Human output: aligned tables, key/value blocks, one-line frame summaries and the run
//! record; and the single place that writes to stdout.

use std::io::Write;

use iohr_domain::RunRecord;
use iohr_domain::checks::ChecksResult;
use iohr_domain::finding::Sighting;
use iohr_domain::stress::GeneratorSaturated;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{Failure, Result};

/// Writes `text` (a newline is added when missing) to stdout.
pub fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let mut result = out.write_all(text.as_bytes());
    if result.is_ok() && !text.ends_with('\n') {
        result = out.write_all(b"\n");
    }
    result
        .and_then(|()| out.flush())
        .map_err(|e| Failure::output(format!("writing to stdout: {e}")))
}

/// Writes one JSON value on one line: `--json` output.
pub fn emit_json(value: &Value) -> Result<()> {
    emit(&value.to_string())
}

/// A progress line on stderr; losing one is not worth failing the command for.
pub fn note(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// Server text goes to a terminal: control characters (escape sequences, newlines)
/// must not move the cursor or break the columns.
pub fn clean(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Columns separated by two spaces, each as wide as its widest cell; no trailing
/// spaces.
#[derive(Debug, Default)]
pub struct Table {
    header: Option<Vec<String>>,
    rows: Vec<Vec<String>>,
    indent: usize,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: Some(header.iter().map(|h| h.to_string()).collect()),
            ..Table::default()
        }
    }

    /// A table without a header line, e.g. key/value pairs.
    pub fn plain() -> Table {
        Table::default()
    }

    pub fn indent(mut self, spaces: usize) -> Table {
        self.indent = spaces;
        self
    }

    pub fn row<S: AsRef<str>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows
            .push(cells.into_iter().map(|c| clean(c.as_ref())).collect());
    }

    pub fn render(&self) -> String {
        let lines: Vec<&Vec<String>> = self.header.iter().chain(self.rows.iter()).collect();
        let columns = lines.iter().map(|l| l.len()).max().unwrap_or(0);
        let mut widths = vec![0; columns];
        for line in &lines {
            for (i, cell) in line.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for line in lines {
            let mut text = " ".repeat(self.indent);
            for (i, cell) in line.iter().enumerate() {
                if i > 0 {
                    text.push_str("  ");
                }
                text.push_str(cell);
                text.push_str(&" ".repeat(widths[i] - cell.chars().count()));
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out
    }
}

pub fn or_dash(value: Option<&str>) -> String {
    match value {
        Some(v) if !v.is_empty() => v.to_string(),
        _ => "-".to_string(),
    }
}

fn latency(ms: f64) -> String {
    format!("{ms:.1} ms")
}

/// A run record as key/value lines, then its result.
pub fn record(run: &RunRecord) -> String {
    let mut t = Table::plain();
    let started_by = match &run.started_by.change {
        Some(change) => format!(
            "{} {} (change {change})",
            run.started_by.kind, run.started_by.id
        ),
        None => format!("{} {}", run.started_by.kind, run.started_by.id),
    };
    let findings = if run.findings.is_empty() {
        "none".to_string()
    } else {
        let count = |seen: Sighting| run.findings.iter().filter(|f| f.seen == seen).count();
        [Sighting::New, Sighting::SeenAgain, Sighting::Reopened]
            .into_iter()
            .filter(|s| count(*s) > 0)
            .map(|s| format!("{} {}", count(s), s.as_str().replace('_', " ")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let pairs = [
        ("id", run.id.clone()),
        ("kind", run.kind.to_string()),
        ("status", run.status.to_string()),
        ("reason", or_dash(run.reason.as_deref())),
        (
            "scenario",
            format!("{} {}", run.scenario.id, run.scenario.version),
        ),
        ("environment", run.environment.clone()),
        ("target", run.target.clone()),
        ("executor", run.executor.to_string()),
        ("agent", or_dash(run.agent.as_deref())),
        ("started by", started_by),
        ("created", run.created_at.clone()),
        ("started", or_dash(run.started_at.as_deref())),
        ("ended", or_dash(run.ended_at.as_deref())),
        ("findings", findings),
        (
            "units",
            format!("reserved {}, spent {}", run.units.reserved, run.units.spent),
        ),
    ];
    for (key, value) in pairs {
        t.row([key.to_string(), value]);
    }
    if let Some(c) = &run.confirmation {
        let state = match (&c.confirmed_by, &c.confirmed_at) {
            (Some(who), Some(at)) => format!("{} confirmed by {who} at {at}", c.hash),
            _ => format!(
                "{} waits for a person until {} (iohr reliability runs confirm {} --hash {})",
                c.hash, c.deadline, run.id, c.hash
            ),
        };
        t.row(["confirmation".to_string(), state]);
    }
    if let Some(agents) = run.agents {
        t.row(["agents".to_string(), agents.to_string()]);
    }
    if let Some(of) = &run.share_of {
        t.row([
            "share of".to_string(),
            format!("{} (share {} of {})", of.run, of.index, of.count),
        ]);
    }
    let mut out = t.render();
    if !run.shares.is_empty() {
        // One line per share: where it ran and how it ended.
        let mut t = Table::plain().indent(2);
        for share in &run.shares {
            t.row([
                format!("share {}", share.index),
                share.agent.clone().unwrap_or_else(|| "-".to_string()),
                share.status.to_string(),
                share.run.clone(),
            ]);
        }
        out.push_str("shares\n");
        out.push_str(&t.render());
    }
    if !run.findings.is_empty() {
        let mut t = Table::plain().indent(2);
        for f in &run.findings {
            t.row([
                f.seen.as_str().replace('_', " "),
                f.title.clone(),
                f.id.clone(),
            ]);
        }
        out.push_str(&t.render());
    }
    if let Some(saturated) = run.result.as_ref().and_then(GeneratorSaturated::of_result) {
        out.push_str(&format!(
            "{}: its figures may be the agent's own, not the target's\n",
            saturated.line()
        ));
    }
    out.push_str(&result(run.result.as_ref()));
    out
}

/// The result block: checks get one line per verdict, other kinds their JSON.
fn result(result: Option<&Value>) -> String {
    let Some(value) = result.filter(|v| !v.is_null()) else {
        return "result       -\n".to_string();
    };
    // A summary per kind, not the JSON: `--json` keeps that.
    if let Some(summary) = iohr_domain::summary::result_lines(value) {
        let mut out = "result\n".to_string();
        for line in summary {
            out.push_str("  ");
            out.push_str(&clean(&line));
            out.push('\n');
        }
        return out;
    }
    let Ok(checks) = ChecksResult::deserialize(value) else {
        let pretty = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
        let mut out = "result\n".to_string();
        for line in pretty.lines() {
            out.push_str("  ");
            out.push_str(&clean(line));
            out.push('\n');
        }
        return out;
    };
    let verdict = if checks.passed { "passed" } else { "failed" };
    let mut out = format!("result       {verdict}: {}\n", checks.count_line());
    let mut t = Table::plain().indent(2);
    for row in checks.rows() {
        t.row(row);
    }
    out.push_str(&t.render());
    out
}

fn pass(passed: bool) -> String {
    if passed { "pass" } else { "FAIL" }.to_string()
}

fn text<'a>(data: &'a Value, key: &str) -> Option<&'a str> {
    data.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// One line per frame, e.g. `check  GET /  pass  200  3.1 ms`. Fields that a frame
/// lacks are left out; an unknown shape shows its JSON, shortened.
pub fn frame_line(kind: &str, data: &Value) -> String {
    let mut parts: Vec<String> = vec![kind.to_string()];
    match kind {
        "check" => {
            let name = text(data, "name")
                .map(str::to_string)
                .or_else(|| Some(format!("{} {}", text(data, "method")?, text(data, "path")?)));
            parts.extend(name);
            if let Some(passed) = data.get("passed").and_then(Value::as_bool) {
                parts.push(pass(passed));
            }
            if let Some(status) = data.get("status").and_then(Value::as_u64) {
                parts.push(status.to_string());
            } else if data.get("latency_ms").is_some() {
                parts.push("-".to_string());
            }
            if let Some(ms) = data.get("latency_ms").and_then(Value::as_f64) {
                parts.push(latency(ms));
            }
            let mut why: Vec<String> = data
                .get("failures")
                .and_then(Value::as_array)
                .map(|f| {
                    f.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            if why.is_empty() {
                why.extend(text(data, "error").map(str::to_string));
            }
            if !why.is_empty() {
                parts.push(why.join("; "));
            }
        }
        "finished" => {
            parts.extend(text(data, "status").map(str::to_string));
            parts.extend(text(data, "reason").map(str::to_string));
        }
        "phase" => parts.extend(
            text(data, "phase")
                .or_else(|| text(data, "name"))
                .map(str::to_string),
        ),
        "started" => parts.extend(text(data, "agent").map(|a| format!("on {a}"))),
        "finding" => {
            for key in ["seen", "title", "id"] {
                parts.extend(text(data, key).map(str::to_string));
            }
        }
        _ => {}
    }
    if parts.len() == 1 && !data.is_null() && data.as_object().is_none_or(|o| !o.is_empty()) {
        let json = data.to_string();
        let short: String = json.chars().take(160).collect();
        parts.push(if short.len() < json.len() {
            format!("{short}…")
        } else {
            short
        });
    }
    clean(&parts.join("  "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table_aligns_columns_by_characters_without_trailing_spaces() {
        let mut t = Table::new(&["ID", "STATUS", "AGENT"]);
        t.row(["r1", "passed", "edge-1"]);
        t.row(["r-long-id", "é", ""]);
        assert_eq!(
            t.render(),
            "ID         STATUS  AGENT\n\
             r1         passed  edge-1\n\
             r-long-id  é\n"
        );
    }

    #[test]
    fn table_cells_cannot_inject_control_characters() {
        let mut t = Table::plain().indent(2);
        t.row(["a\nb", "\u{1b}[31mred"]);
        assert_eq!(t.render(), "  a b   [31mred\n");
        assert!(Table::new(&["X"]).render() == "X\n");
    }

    #[test]
    fn frame_lines_for_known_and_unknown_frames() {
        let check = json!({"name": "GET /", "method": "GET", "path": "/", "passed": true,
            "status": 200, "latency_ms": 3.12, "failures": []});
        assert_eq!(
            frame_line("check", &check),
            "check  GET /  pass  200  3.1 ms"
        );
        let failed = json!({"method": "POST", "path": "/x", "passed": false, "status": null,
            "latency_ms": 0.2, "error": "connection refused", "failures": []});
        assert_eq!(
            frame_line("check", &failed),
            "check  POST /x  FAIL  -  0.2 ms  connection refused"
        );
        assert_eq!(
            frame_line(
                "finished",
                &json!({"status": "failed", "reason": "1 check failed"})
            ),
            "finished  failed  1 check failed"
        );
        assert_eq!(
            frame_line("load", &json!({"rps": 10})),
            "load  {\"rps\":10}"
        );
        assert_eq!(frame_line("started", &json!({})), "started");
    }

    fn run(result: Option<Value>) -> RunRecord {
        serde_json::from_value(json!({
            "id": "r1", "kind": "checks", "scenario": {"id": "s1", "version": "sha256:ab"},
            "environment": "staging", "target": "http://127.0.0.1:9", "executor": "any",
            "agent": null, "started_by": {"type": "token", "id": "t1", "change": "core#212"},
            "status": "failed", "reason": "1 check failed", "result": result, "findings": [],
            "units": {"reserved": 3, "spent": 2}, "created_at": "2026-10-07T10:00:00Z",
            "started_at": null, "ended_at": null
        }))
        .expect("record")
    }

    /// A split run names its agent count and one line per share; a share names its run.
    #[test]
    fn a_split_run_lists_its_shares() {
        let mut split = run(None);
        split.agents = Some(2);
        split.shares = serde_json::from_value(json!([
            {"index": 0, "run": "r1-0", "status": "passed", "agent": "edge-1"},
            {"index": 1, "run": "r1-1", "status": "queued", "agent": null}
        ]))
        .expect("shares");
        let text = record(&split);
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().eq(["agents", "2"])),
            "{text}"
        );
        let shares: Vec<Vec<&str>> = text
            .lines()
            .skip_while(|l| *l != "shares")
            .skip(1)
            .take(2)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            shares,
            [
                ["share", "0", "edge-1", "passed", "r1-0"],
                ["share", "1", "-", "queued", "r1-1"]
            ],
            "{text}"
        );
        let mut share = run(None);
        share.share_of =
            serde_json::from_value(json!({"run": "r1", "index": 1, "count": 2})).expect("share of");
        assert!(
            record(&share).contains("r1 (share 1 of 2)"),
            "{}",
            record(&share)
        );
        assert!(
            !record(&run(None)).contains("shares"),
            "a whole run has none"
        );
    }

    #[test]
    fn a_faults_journal_reads_as_lines() {
        let text = record(&run(Some(json!({
            "title": "slow home", "status": "failed", "deviated": true,
            "start": 1, "end": 2, "duration": 1.0,
            "steady_states": {"before": null, "after": {"steady_state_met": false, "probes": [
                {"activity": {"name": "fast"}, "status": "succeeded", "start": 1, "end": 2,
                 "duration": 0.1, "output": {"status": 200, "latency_ms": 101.2},
                 "exception": "latency_ms 101.2 outside [0, 50]", "tolerance_met": false}
            ]}, "during": []},
            "run": [], "rollbacks": [], "targets": [], "confirmed_by": null, "dry_run": false,
            "ledger": [{"id": "e1", "activity": "slow", "fault": {"fault": "network"},
                "undo": {}, "applied_at": 10, "deadline": 99, "undone_at": 25, "undone_by": "rollback"}],
            "reason": "the steady state deviated under the faults"
        }))));
        assert!(text.contains("slow home: failed (deviated)"), "{text}");
        assert!(
            text.contains(
                "after fast: missed: latency_ms 101.2 outside [0, 50] (status 200, 101.2 ms)"
            ),
            "{text}"
        );
        assert!(
            text.contains("fault slow (network): undone by rollback 15 ms after it was applied"),
            "{text}"
        );
    }

    #[test]
    fn record_shows_status_reason_and_one_line_per_check() {
        let text = record(&run(Some(json!({
            "passed": false, "total": 2, "failed": 1,
            "checks": [
                {"name": "GET /", "method": "GET", "path": "/", "passed": true, "status": 200, "latency_ms": 3.1, "failures": []},
                {"name": "health", "method": "GET", "path": "/health", "passed": false, "status": 503, "latency_ms": 12.0, "failures": ["status 503, expected 200"]}
            ],
            "invariants": [{"name": "no 5xx", "passed": false, "failures": ["health: status 503, 12.0 ms"]}]
        }))));
        assert!(text.contains("status       failed\n"), "{text}");
        assert!(text.contains("reason       1 check failed\n"), "{text}");
        assert!(
            text.contains("started by   token t1 (change core#212)\n"),
            "{text}"
        );
        assert!(
            text.contains("result       failed: 1 of 2 checks failed\n"),
            "{text}"
        );
        assert!(
            text.contains("  check      GET /   pass  200  3.1 ms\n"),
            "{text}"
        );
        assert!(
            text.contains("  check      health  FAIL  503  12.0 ms  status 503, expected 200\n"),
            "{text}"
        );
        assert!(
            text.contains("  invariant  no 5xx  FAIL                health: status 503, 12.0 ms\n"),
            "{text}"
        );
    }

    #[test]
    fn record_counts_its_findings_and_lists_each() {
        let mut with = run(None);
        with.findings = serde_json::from_value(json!([
            {"id": "f1", "signature": "ab", "kind": "check_failed", "subject": "health",
             "title": "check health failed", "detail": "status 503, expected 200", "seen": "new"},
            {"id": "f2", "signature": "cd", "kind": "invariant_broken", "subject": "no 5xx",
             "title": "invariant no 5xx broken", "detail": "", "seen": "reopened"}
        ]))
        .expect("findings");
        let text = record(&with);
        assert!(text.contains("findings     1 new, 1 reopened\n"), "{text}");
        assert!(
            text.contains(
                "  new       check health failed      f1\n  reopened  invariant no 5xx broken  f2\n"
            ),
            "{text}"
        );
        assert!(record(&run(None)).contains("findings     none\n"));
        assert_eq!(
            frame_line(
                "finding",
                &json!({"id": "f1", "signature": "ab", "title": "check health failed", "seen": "new"})
            ),
            "finding  new  check health failed  f1"
        );
    }

    #[test]
    fn record_without_result_or_with_another_kind_of_result() {
        assert!(record(&run(None)).ends_with("result       -\n"));
        let other = record(&run(Some(json!({"p99_ms": 12}))));
        assert!(
            other.ends_with("result\n  {\n    \"p99_ms\": 12\n  }\n"),
            "{other}"
        );
    }

    #[test]
    fn a_saturated_generator_is_said_above_the_result() {
        let text = record(&run(Some(json!({"p99_ms": 12, "generator_saturated": {
            "seconds": [3, 4], "count": 2, "basis": "measure", "reasons": [{"cause": "cpu",
            "seconds": 2, "worst": 0.97, "bound": 0.8,
            "text": "agent CPU up to 97% of the 0.2 CPUs it may use in 2 s, bound 80%"}]}}))));
        assert!(
            text.contains("\ngenerator saturated for 2 s (agent CPU up to 97% of the 0.2 CPUs it may use in 2 s, bound 80%): its figures may be the agent's own, not the target's\nresult\n"),
            "{text}"
        );
        assert!(!record(&run(Some(json!({"p99_ms": 12})))).contains("saturated"));
    }
}
