//! `iohr reliability findings [--status ...]`, `findings show ID`, `findings close ID`.

use clap::{Args, Subcommand};
use iohr_domain::finding::{Finding, FindingStatus};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Ctx;
use crate::client::segment;
use crate::error::{Failure, Result};
use crate::output::{Table, emit, emit_json, or_dash};
use crate::page;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct FindingsArgs {
    #[command(subcommand)]
    pub command: Option<FindingsCommand>,
    #[command(flatten)]
    pub list: ListArgs,
}

#[derive(Subcommand, Debug)]
pub enum FindingsCommand {
    /// Show one finding and the runs that saw it.
    Show {
        /// The finding's id.
        id: String,
    },
    /// Close a finding (a later run that sees it again reopens it).
    Close {
        /// The finding's id.
        id: String,
    },
}

#[derive(Args, Debug, Default)]
pub struct ListArgs {
    /// Only open or only closed findings.
    #[arg(long, value_name = "S")]
    pub status: Option<FindingStatus>,
    /// Only findings of this scenario (its id, the name it is stored under).
    #[arg(long, value_name = "ID")]
    pub scenario: Option<String>,
    /// Only findings in this environment.
    #[arg(long, value_name = "E")]
    pub environment: Option<String>,
    /// At most this many findings on the page.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[arg(long, value_name = "C")]
    pub cursor: Option<String>,
}

pub async fn execute(ctx: &Ctx, args: FindingsArgs) -> Result<u8> {
    match args.command {
        None => list(ctx, args.list).await,
        Some(FindingsCommand::Show { id }) => {
            let raw = ctx.api.get(&finding_path(&id)?).await?;
            print_finding(ctx, &raw)?;
            Ok(0)
        }
        Some(FindingsCommand::Close { id }) => {
            let path = format!("{}/close", finding_path(&id)?);
            let raw = ctx.api.post(&path, &json!({})).await?;
            print_finding(ctx, &raw)?;
            Ok(0)
        }
    }
}

fn finding_path(id: &str) -> Result<String> {
    Ok(format!(
        "/v1/reliability/findings/{}",
        segment("the finding ID", id)?
    ))
}

fn print_finding(ctx: &Ctx, raw: &Value) -> Result<()> {
    let finding = Finding::deserialize(raw)
        .map_err(|e| Failure::protocol(format!("the answer is not a finding: {e}")))?;
    if ctx.json {
        emit_json(raw)
    } else {
        emit(&render_finding(&finding))
    }
}

fn render_finding(f: &Finding) -> String {
    let mut t = Table::plain();
    let closed = match (&f.closed_at, &f.closed_by) {
        (Some(at), Some(by)) => format!("{at} by {by}"),
        (Some(at), None) => at.clone(),
        _ => "-".to_string(),
    };
    let pairs = [
        ("id", f.id.clone()),
        ("status", f.status.to_string()),
        ("kind", f.kind.to_string()),
        ("title", f.title.clone()),
        ("detail", or_dash(Some(&f.detail))),
        ("scenario", f.scenario.clone()),
        ("environment", f.environment.clone()),
        ("target", f.target.clone()),
        ("times seen", f.times_seen.to_string()),
        (
            "first seen",
            format!("{} (run {})", f.first_seen_at, f.first_run),
        ),
        (
            "last seen",
            format!("{} (run {})", f.last_seen_at, f.last_run),
        ),
        ("closed", closed),
        ("signature", f.signature.clone()),
    ];
    for (key, value) in pairs {
        t.row([key.to_string(), value]);
    }
    let mut out = t.render();
    if let Some(runs) = f.runs.as_ref().filter(|r| !r.is_empty()) {
        out.push_str("runs\n");
        let mut t = Table::plain().indent(2);
        for run in runs {
            t.row([run.run.clone(), run.seen.as_str().replace('_', " ")]);
        }
        out.push_str(&t.render());
    }
    out
}

const LISTING: page::Listing = page::Listing {
    path: "/v1/reliability/findings",
    field: "findings",
    none: "no findings\n",
    command: "iohr reliability findings",
};

async fn list(ctx: &Ctx, args: ListArgs) -> Result<u8> {
    let filters = [
        ("status", args.status.map(|s| s.to_string())),
        ("scenario", args.scenario.clone()),
        ("environment", args.environment.clone()),
        ("limit", args.limit.map(|n| n.to_string())),
    ];
    page::list(ctx, &LISTING, &filters, args.cursor, render_page).await
}

fn render_page(
    findings: &[Finding],
    next: Option<&str>,
    filters: &[(&str, Option<String>)],
) -> String {
    page::render(&LISTING, findings, table, next, filters)
}

fn table(findings: &[Finding]) -> String {
    let mut t = Table::new(&[
        "ID",
        "STATUS",
        "SEEN",
        "LAST SEEN",
        "ENVIRONMENT",
        "SCENARIO",
        "TITLE",
    ]);
    for f in findings {
        t.row([
            f.id.clone(),
            f.status.to_string(),
            f.times_seen.to_string(),
            f.last_seen_at.clone(),
            f.environment.clone(),
            f.scenario.clone(),
            f.title.clone(),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(id: &str, closed: bool) -> Finding {
        serde_json::from_value(json!({
            "id": id, "signature": "ab12", "kind": "check_failed", "subject": "home",
            "title": "check home failed", "detail": "status 500, expected 200",
            "scenario": "smoke", "environment": "staging", "target": "http://127.0.0.1:9",
            "status": if closed { "closed" } else { "open" }, "first_run": "r1",
            "last_run": "r2", "times_seen": 2, "first_seen_at": "2026-10-07T10:00:00Z",
            "last_seen_at": "2026-10-07T11:00:00Z",
            "closed_at": if closed { json!("2026-10-07T12:00:00Z") } else { Value::Null },
            "closed_by": if closed { json!("person:ada") } else { Value::Null },
            "runs": [{"run": "r2", "seen": "seen_again"}, {"run": "r1", "seen": "new"}]
        }))
        .expect("finding")
    }

    #[test]
    fn page_table_and_next_command() {
        let text = render_page(
            &[finding("f1", false)],
            Some("f1"),
            &[("status", Some("open".into())), ("scenario", None)],
        );
        assert_eq!(
            text,
            "ID  STATUS  SEEN  LAST SEEN             ENVIRONMENT  SCENARIO  TITLE\n\
             f1  open    2     2026-10-07T11:00:00Z  staging      smoke     check home failed\n\
             next: iohr reliability findings --cursor f1 --status open\n"
        );
        assert_eq!(render_page(&[], None, &[]), "no findings\n");
    }

    #[test]
    fn one_finding_with_its_close_and_runs() {
        let text = render_finding(&finding("f1", true));
        assert!(text.contains("status       closed\n"), "{text}");
        assert!(
            text.contains("closed       2026-10-07T12:00:00Z by person:ada\n"),
            "{text}"
        );
        assert!(
            text.contains("first seen   2026-10-07T10:00:00Z (run r1)\n"),
            "{text}"
        );
        assert!(
            text.ends_with("runs\n  r2  seen again\n  r1  new\n"),
            "{text}"
        );
    }
}
