//! `iohr reliability audit [--since T --until T --actor A --action X --run ID --schedule ID]`:
//! who did what, newest first, a page at a time (needs a token with `reliability:audit`).

use clap::Args;
use iohr_domain::audit::AuditEntry;

use crate::Ctx;
use crate::error::Result;
use crate::output::{Table, or_dash};
use crate::page;

#[derive(Args, Debug, Default)]
pub struct AuditArgs {
    /// Only lines at or after this time (RFC 3339, such as 2026-12-01T00:00:00Z).
    #[arg(long, value_name = "T")]
    pub since: Option<String>,
    /// Only lines before this time (RFC 3339).
    #[arg(long, value_name = "T")]
    pub until: Option<String>,
    /// Only lines of this actor (`token:ID`, `person:NAME`, `controller`).
    #[arg(long, value_name = "A")]
    pub actor: Option<String>,
    /// Only lines of this action (`run.start`, `run.cancel`, `run.confirm`, `halt`, ...).
    #[arg(long, value_name = "X")]
    pub action: Option<String>,
    /// Only lines about this run.
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Only lines about this schedule.
    #[arg(long, value_name = "ID")]
    pub schedule: Option<String>,
    /// At most this many lines on the page.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[arg(long, value_name = "C")]
    pub cursor: Option<String>,
}

const LISTING: page::Listing = page::Listing {
    path: "/v1/reliability/audit",
    field: "audit",
    none: "no audit lines\n",
    command: "iohr reliability audit",
};

pub async fn execute(ctx: &Ctx, args: AuditArgs) -> Result<u8> {
    let filters = [
        ("since", args.since.clone()),
        ("until", args.until.clone()),
        ("actor", args.actor.clone()),
        ("action", args.action.clone()),
        ("run", args.run.clone()),
        ("schedule", args.schedule.clone()),
        ("limit", args.limit.map(|n| n.to_string())),
    ];
    page::list(ctx, &LISTING, &filters, args.cursor, render_page).await
}

fn render_page(
    lines: &[AuditEntry],
    next: Option<&str>,
    filters: &[(&str, Option<String>)],
) -> String {
    page::render(&LISTING, lines, table, next, filters)
}

fn table(lines: &[AuditEntry]) -> String {
    let mut t = Table::new(&["AT", "ACTOR", "ACTION", "SUBJECT", "TARGETS", "OUTCOME"]);
    for line in lines {
        let subject = match (&line.run_id, &line.schedule_id) {
            (Some(run), Some(schedule)) => format!("run {run} (schedule {schedule})"),
            (Some(run), None) => format!("run {run}"),
            (None, Some(schedule)) => format!("schedule {schedule}"),
            (None, None) => "-".to_string(),
        };
        let targets = match &line.faults {
            Some(faults) => format!("{} [{faults}]", or_dash(line.targets.as_deref())),
            None => or_dash(line.targets.as_deref()),
        };
        t.row([
            line.at.clone(),
            line.actor.clone(),
            line.action.clone(),
            subject,
            targets,
            line.outcome.clone(),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(run: Option<&str>, faults: Option<&str>) -> AuditEntry {
        AuditEntry {
            id: "a1".into(),
            at: "2026-12-01T10:00:00.000Z".into(),
            actor: "token:t1".into(),
            action: "run.start".into(),
            run_id: run.map(str::to_string),
            schedule_id: None,
            targets: Some("http://127.0.0.1:9".into()),
            faults: faults.map(str::to_string),
            outcome: "queued".into(),
        }
    }

    #[test]
    fn a_page_shows_each_line_and_the_next_command() {
        let filters = [("action", Some("run.start".to_string()))];
        let text = render_page(
            &[line(Some("r1"), None), line(None, Some("latency"))],
            Some("c9"),
            &filters,
        );
        assert!(text.contains("run r1"), "{text}");
        assert!(text.contains("http://127.0.0.1:9 [latency]"), "{text}");
        assert!(
            text.ends_with("next: iohr reliability audit --cursor c9 --action run.start\n"),
            "{text}"
        );
        assert_eq!(render_page(&[], None, &filters), "no audit lines\n");
    }
}
