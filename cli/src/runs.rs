//! `iohr reliability runs show | list | cancel | events`.

use clap::{Args, Subcommand};
use iohr_domain::{RunKind, RunRecord, RunStatus};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Ctx;
use crate::client::segment;
use crate::error::{Failure, Result};
use crate::follow::follow;
use crate::output::{Table, emit, emit_json, or_dash, record};
use crate::page;
use crate::report;

#[derive(Subcommand, Debug)]
pub enum RunsCommand {
    /// Show one run: status, reason and result.
    Show {
        /// The run's id.
        id: String,
    },
    /// List runs, one page at a time.
    List(ListArgs),
    /// Cancel a queued or running run.
    Cancel {
        /// The run's id.
        id: String,
    },
    /// Confirm a production faults run, as a person: `--hash` is the run's
    /// `confirmation.hash`, the exact experiment, target and environment you read.
    Confirm {
        /// The run's id.
        id: String,
        /// The run's `confirmation.hash` (`runs show` prints it): what you read and agree to.
        #[arg(long, value_name = "SHA256")]
        hash: String,
    },
    /// Print a run's frames as they happen, until it finishes.
    Events {
        /// The run's id.
        id: String,
        /// Start after this frame number instead of at the first frame.
        #[arg(long, value_name = "N")]
        after: Option<u64>,
        /// Each frame's JSON exactly as the stream sent it, one per line (as --json),
        /// instead of a line a person reads.
        #[arg(long)]
        raw: bool,
    },
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only runs with this status (queued, running, passed, failed, error, cancelled, refused).
    #[arg(long, value_name = "S")]
    pub status: Option<RunStatus>,
    /// Only runs of this kind.
    #[arg(long, value_name = "K")]
    pub kind: Option<RunKind>,
    /// Only runs in this environment.
    #[arg(long, value_name = "E")]
    pub environment: Option<String>,
    /// Runs taken by this agent (its name).
    #[arg(long, value_name = "A")]
    pub agent: Option<String>,
    /// At most this many runs on the page.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[arg(long, value_name = "C")]
    pub cursor: Option<String>,
}

pub async fn execute(ctx: &Ctx, command: RunsCommand) -> Result<u8> {
    match command {
        RunsCommand::Show { id } => {
            let raw = ctx.api.get(&run_path(&id)?).await?;
            print_record(ctx, &raw)?;
            Ok(0)
        }
        RunsCommand::List(args) => list(ctx, args).await,
        RunsCommand::Cancel { id } => {
            let path = format!("{}/cancel", run_path(&id)?);
            let raw = ctx.api.post(&path, &json!({})).await?;
            print_record(ctx, &raw)?;
            Ok(0)
        }
        RunsCommand::Confirm { id, hash } => {
            let path = format!("{}/confirm", run_path(&id)?);
            let raw = ctx.api.post(&path, &json!({ "hash": hash })).await?;
            print_record(ctx, &raw)?;
            Ok(0)
        }
        RunsCommand::Events { id, after, raw } => {
            let json = ctx.json || raw;
            follow(&ctx.api, &id, after, !json, |raw, frame| {
                if json {
                    emit_json(raw)
                } else {
                    emit(&report::line(frame, None))
                }
            })
            .await?;
            Ok(0)
        }
    }
}

/// `iohr reliability halt`: cancels every faults run of the account.
pub async fn halt(ctx: &Ctx, reason: Option<String>) -> Result<u8> {
    let body = match reason {
        Some(reason) => json!({ "reason": reason }),
        None => json!({}),
    };
    let raw = ctx.api.post("/v1/reliability/halt", &body).await?;
    if ctx.json {
        emit_json(&raw)?;
        return Ok(0);
    }
    let halted: Vec<&str> = raw["halted"]
        .as_array()
        .map(|ids| ids.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if halted.is_empty() {
        emit("no faults run was queued or running")?;
    } else {
        emit(&format!(
            "halted {} faults runs: {}",
            halted.len(),
            halted.join(", ")
        ))?;
    }
    Ok(0)
}

pub fn run_path(id: &str) -> Result<String> {
    Ok(format!(
        "/v1/reliability/runs/{}",
        segment("the run ID", id)?
    ))
}

/// Checks that an answer is a run record; the raw JSON is what `--json` prints, so
/// fields newer than this CLI still reach scripts.
pub fn parse_record(raw: &Value) -> Result<RunRecord> {
    RunRecord::deserialize(raw)
        .map_err(|e| Failure::protocol(format!("the answer is not a run record: {e}")))
}

pub fn print_record(ctx: &Ctx, raw: &Value) -> Result<RunRecord> {
    let run = parse_record(raw)?;
    if ctx.json {
        emit_json(raw)?;
    } else {
        emit(&record(&run))?;
    }
    Ok(run)
}

const LISTING: page::Listing = page::Listing {
    path: "/v1/reliability/runs",
    field: "runs",
    none: "no runs\n",
    command: "iohr reliability runs list",
};

async fn list(ctx: &Ctx, args: ListArgs) -> Result<u8> {
    let filters = [
        ("status", args.status.map(|s| s.to_string())),
        ("kind", args.kind.map(|k| k.to_string())),
        ("environment", args.environment.clone()),
        ("agent", args.agent.clone()),
        ("limit", args.limit.map(|n| n.to_string())),
    ];
    page::list(ctx, &LISTING, &filters, args.cursor, render_page).await
}

fn render_page(
    runs: &[RunRecord],
    next: Option<&str>,
    filters: &[(&str, Option<String>)],
) -> String {
    page::render(&LISTING, runs, table, next, filters)
}

fn table(runs: &[RunRecord]) -> String {
    let mut t = Table::new(&[
        "ID",
        "KIND",
        "STATUS",
        "ENVIRONMENT",
        "TARGET",
        "AGENT",
        "CREATED",
    ]);
    for run in runs {
        t.row([
            run.id.clone(),
            run.kind.to_string(),
            run.status.to_string(),
            run.environment.clone(),
            run.target.clone(),
            or_dash(run.agent.as_deref()),
            run.created_at.clone(),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, agent: Option<&str>) -> RunRecord {
        serde_json::from_value(json!({
            "id": id, "kind": "checks", "scenario": {"id": "s1", "version": "sha256:ab"},
            "environment": "staging", "target": "http://127.0.0.1:9", "executor": "any",
            "agent": agent, "started_by": {"type": "token", "id": "t1"},
            "status": "queued", "reason": null, "result": null, "findings": [],
            "units": {"reserved": 0, "spent": 0}, "created_at": "2026-10-07T10:00:00Z",
            "started_at": null, "ended_at": null
        }))
        .expect("record")
    }

    #[test]
    fn page_table_and_next_command() {
        let runs = [record("r1", Some("edge-1")), record("r22", None)];
        let text = render_page(
            &runs,
            Some("c2"),
            &[("status", Some("queued".into())), ("kind", None)],
        );
        assert_eq!(
            text,
            "ID   KIND    STATUS  ENVIRONMENT  TARGET              AGENT   CREATED\n\
             r1   checks  queued  staging      http://127.0.0.1:9  edge-1  2026-10-07T10:00:00Z\n\
             r22  checks  queued  staging      http://127.0.0.1:9  -       2026-10-07T10:00:00Z\n\
             next: iohr reliability runs list --cursor c2 --status queued\n"
        );
        assert_eq!(render_page(&[], None, &[]), "no runs\n");
    }
}
