//! `iohr reliability schedules create | list | show | pause | resume | delete`.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Subcommand};
use iohr_domain::{Executor, RunKind};
use serde_json::{Map, Value, json};

use crate::Ctx;
use crate::client::segment;
use crate::error::{Failure, Result};
use crate::output::{Table, emit, emit_json};
use crate::run::{RunArgs, request_body};

// One value, parsed once per process: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum SchedulesCommand {
    /// Make a schedule: a run's flags plus --name and --cron (crontab's five fields,
    /// minute first, in UTC; or six with seconds first).
    Create(CreateArgs),
    /// The account's schedules with their next fire times.
    List,
    /// One schedule: its run, cron, skipped fires and next fire times.
    Show {
        /// The schedule's id.
        id: String,
    },
    /// Stop firing until resumed.
    Pause {
        /// The schedule's id.
        id: String,
    },
    /// Fire again from now on (what fell due while paused is not fired).
    Resume {
        /// The schedule's id.
        id: String,
    },
    /// Delete a schedule; the runs it started stay.
    Delete {
        /// The schedule's id.
        id: String,
    },
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("what").required(true).args(["spec", "scenario"])))]
pub struct CreateArgs {
    /// The schedule's name.
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// When it fires, in UTC, such as "0 3 * * *" (03:00 every day).
    #[arg(long, value_name = "CRON")]
    pub cron: String,
    /// Created paused.
    #[arg(long)]
    pub paused: bool,
    // The kinds in the help are the registry's.
    #[arg(long, value_name = "KIND", help = format!("What the run does: {}", RunKind::listed("or")))]
    pub kind: RunKind,
    /// The environment the target lives in, e.g. staging.
    #[arg(long, value_name = "ENV")]
    pub environment: String,
    /// The base URL the run exercises.
    #[arg(long, value_name = "URL")]
    pub target: String,
    /// A JSON file with the run's spec (`-` reads stdin); stored as a scenario version.
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,
    /// A stored scenario's id, instead of --spec; needs --version.
    #[arg(long, value_name = "ID", requires = "version")]
    pub scenario: Option<String>,
    /// The scenario version to run (its `sha256:` hash).
    #[arg(long, value_name = "VERSION", requires = "scenario")]
    pub version: Option<String>,
    /// Where it runs: any, cloud or agent:NAME.
    #[arg(long, value_name = "EXECUTOR")]
    pub executor: Option<Executor>,
    #[arg(long, value_name = "N", help = format!(
        "Each fire's run split over N agents ({})",
        RunKind::listed_where(|t| t.split, "and")
    ))]
    pub agents: Option<u32>,
    /// The change its runs are for, e.g. core#212.
    #[arg(long, value_name = "CHANGE")]
    pub change: Option<String>,
    /// A production faults schedule: how long a person has to confirm each fire's run.
    #[arg(long, value_name = "DURATION")]
    pub confirm_within: Option<String>,
}

impl CreateArgs {
    /// The POST body: a run's, built as `iohr reliability run` builds it, plus name and cron.
    fn body(self) -> Result<Value> {
        let run = RunArgs {
            kind: self.kind,
            environment: self.environment,
            target: self.target,
            spec: self.spec,
            scenario: self.scenario,
            version: self.version,
            executor: self.executor,
            agents: self.agents,
            change: self.change,
            scenario_name: None,
            confirm_within: self.confirm_within,
            wait: false,
            quiet: false,
            timeout: std::time::Duration::from_secs(600),
        };
        let mut body = starter_body(&run, self.name, self.paused)?;
        body.insert("cron".into(), json!(self.cron));
        Ok(Value::Object(body))
    }
}

/// A schedule's or trigger's POST body: its run's, built as `iohr reliability run` builds
/// it, with its name and, when it is made paused, `enabled: false`.
pub fn starter_body(run: &RunArgs, name: String, paused: bool) -> Result<Map<String, Value>> {
    let Value::Object(mut body) = request_body(run)? else {
        return Err(Failure::usage("the run's request is not an object"));
    };
    body.insert("name".into(), json!(name));
    if paused {
        body.insert("enabled".into(), json!(false));
    }
    Ok(body)
}

/// What a schedule's or trigger's own subcommands do to it.
pub enum Act {
    Show,
    Pause,
    Resume,
    Delete,
}

/// `act` on the schedule or trigger `id` under `path` (`what` names it in the lines):
/// the answer as JSON, or as `record` shows it.
pub async fn act_on(
    ctx: &Ctx,
    (path, what): (&str, &str),
    id: &str,
    act: Act,
    record: fn(&Value) -> String,
) -> Result<u8> {
    let one = format!("{path}/{}", segment(&format!("the {what} ID"), id)?);
    let raw = match act {
        Act::Show => ctx.api.get(&one).await?,
        Act::Pause => ctx.api.patch(&one, &json!({"enabled": false})).await?,
        Act::Resume => ctx.api.patch(&one, &json!({"enabled": true})).await?,
        Act::Delete => {
            ctx.api.delete(&one).await?;
            if ctx.json {
                emit_json(&json!({"deleted": id}))?;
            } else {
                emit(&format!("deleted {what} {id}"))?;
            }
            return Ok(0);
        }
    };
    if raw.get("id").and_then(Value::as_str).is_none() {
        return Err(Failure::protocol(format!("the answer is not a {what}")));
    }
    listed(ctx, &raw, record)
}

/// `raw` as JSON, or as `show` writes it.
pub fn listed(ctx: &Ctx, raw: &Value, show: fn(&Value) -> String) -> Result<u8> {
    if ctx.json {
        emit_json(raw)?;
    } else {
        emit(&show(raw))?;
    }
    Ok(0)
}

const PATH: &str = "/v1/reliability/schedules";

const WHAT: (&str, &str) = (PATH, "schedule");

pub async fn execute(ctx: &Ctx, command: SchedulesCommand) -> Result<u8> {
    match command {
        SchedulesCommand::Create(args) => {
            let raw = ctx.api.post(PATH, &args.body()?).await?;
            if raw.get("id").and_then(Value::as_str).is_none() {
                return Err(Failure::protocol("the answer is not a schedule"));
            }
            listed(ctx, &raw, record)
        }
        SchedulesCommand::List => listed(ctx, &ctx.api.get(PATH).await?, table),
        SchedulesCommand::Show { id } => act_on(ctx, WHAT, &id, Act::Show, record).await,
        SchedulesCommand::Pause { id } => act_on(ctx, WHAT, &id, Act::Pause, record).await,
        SchedulesCommand::Resume { id } => act_on(ctx, WHAT, &id, Act::Resume, record).await,
        SchedulesCommand::Delete { id } => act_on(ctx, WHAT, &id, Act::Delete, record).await,
    }
}

/// A field as a line shows it (`-` for none); triggers' lines too.
pub fn text(value: &Value, key: &str) -> String {
    match &value[key] {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn next_fires(value: &Value) -> Vec<String> {
    value["next_fires"]
        .as_array()
        .map(|fires| {
            fires
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// `enabled` or `paused`; triggers' too.
pub fn state(value: &Value) -> &'static str {
    if value["enabled"].as_bool().unwrap_or(false) {
        "enabled"
    } else {
        "paused"
    }
}

fn record(value: &Value) -> String {
    let mut t = Table::plain();
    t.row(["id".to_string(), text(value, "id")]);
    t.row(["name".to_string(), text(value, "name")]);
    t.row(["cron".to_string(), format!("{} (UTC)", text(value, "cron"))]);
    t.row(["state".to_string(), state(value).to_string()]);
    t.row(["kind".to_string(), text(value, "kind")]);
    t.row([
        "scenario".to_string(),
        format!(
            "{} {}",
            text(&value["scenario"], "id"),
            text(&value["scenario"], "version")
        ),
    ]);
    t.row(["environment".to_string(), text(value, "environment")]);
    t.row(["target".to_string(), text(value, "target")]);
    t.row(["executor".to_string(), text(value, "executor")]);
    if let Some(agents) = value.get("agents").and_then(Value::as_u64) {
        t.row(["agents".to_string(), agents.to_string()]);
    }
    t.row(["created by".to_string(), text(value, "created_by")]);
    t.row(["last run".to_string(), text(value, "last_run")]);
    t.row([
        "skipped".to_string(),
        format!(
            "{} (last {})",
            text(value, "skipped"),
            text(value, "last_skipped_at")
        ),
    ]);
    let fires = next_fires(value);
    t.row([
        "next fires".to_string(),
        if fires.is_empty() {
            "- (paused)".to_string()
        } else {
            fires.join(", ")
        },
    ]);
    t.render()
}

fn table(raw: &Value) -> String {
    let schedules = raw["schedules"].as_array().cloned().unwrap_or_default();
    if schedules.is_empty() {
        return "no schedules\n".into();
    }
    let mut t = Table::new(&[
        "ID",
        "NAME",
        "KIND",
        "CRON",
        "STATE",
        "SKIPPED",
        "LAST RUN",
        "NEXT FIRE",
    ]);
    for s in &schedules {
        t.row([
            text(s, "id"),
            text(s, "name"),
            text(s, "kind"),
            text(s, "cron"),
            state(s).to_string(),
            text(s, "skipped"),
            text(s, "last_run"),
            next_fires(s).first().cloned().unwrap_or_else(|| "-".into()),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(enabled: bool) -> Value {
        json!({
            "id": "s1", "name": "nightly", "cron": "0 3 * * *", "enabled": enabled,
            "kind": "checks", "scenario": {"id": "home", "version": "sha256:ab"},
            "environment": "staging", "target": "http://127.0.0.1:9", "executor": "any",
            "created_by": "person:ada", "created_at": "2026-12-01T10:00:00Z",
            "skipped": 2, "last_skipped_at": "2026-12-01T03:00:00Z", "last_run": "r1",
            "last_fire_at": null,
            "next_fires": if enabled { json!(["2026-12-02T03:00:00Z", "2026-12-03T03:00:00Z"]) } else { json!([]) },
        })
    }

    #[test]
    fn a_list_shows_the_next_fire_and_a_paused_schedule_none() {
        let text = table(&json!({"schedules": [schedule(true), schedule(false)]}));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("ID"), "{text}");
        assert!(
            lines[1].contains("enabled") && lines[1].ends_with("2026-12-02T03:00:00Z"),
            "{text}"
        );
        assert!(
            lines[2].contains("paused") && lines[2].ends_with('-'),
            "{text}"
        );
        assert_eq!(table(&json!({"schedules": []})), "no schedules\n");
    }

    #[test]
    fn show_lists_the_next_fire_times() {
        let text = record(&schedule(true));
        assert!(text.contains("0 3 * * * (UTC)"), "{text}");
        assert!(
            text.contains("2026-12-02T03:00:00Z, 2026-12-03T03:00:00Z"),
            "{text}"
        );
        assert!(text.contains("2 (last 2026-12-01T03:00:00Z)"), "{text}");
        assert!(record(&schedule(false)).contains("- (paused)"));
    }
}
