//! `iohr reliability triggers create | list | show | pause | resume | delete | deliveries`:
//! runs started by a forge's deliveries (a pull request opened or pushed to).

use std::path::PathBuf;

use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use iohr_domain::{Executor, RunKind};
use serde_json::{Value, json};

use crate::Ctx;
use crate::client::segment;
use crate::error::Result;
use crate::output::{Table, emit, emit_json, note};
use crate::run::RunArgs;
use crate::schedules::{Act, act_on, listed, starter_body, state, text};

// One value, parsed once per process: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum TriggersCommand {
    /// Make a trigger: a run's flags plus --name and --source; prints the URL to give the
    /// forge and the secret, shown this once.
    Create(CreateArgs),
    /// The account's triggers.
    List,
    /// One trigger: its run, source and baseline rule (never its secret).
    Show {
        /// The trigger's id.
        id: String,
    },
    /// Answer its deliveries as an unknown trigger's (404) until resumed.
    Pause {
        /// The trigger's id.
        id: String,
    },
    /// Take its deliveries again.
    Resume {
        /// The trigger's id.
        id: String,
    },
    /// Delete a trigger and its delivery log; the runs it started stay.
    Delete {
        /// The trigger's id.
        id: String,
    },
    /// Its delivery log, newest first: each delivery's outcome and why.
    Deliveries {
        /// The trigger's id.
        id: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Source {
    Github,
    Gitlab,
    Generic,
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("what").required(true).args(["spec", "scenario"])))]
pub struct CreateArgs {
    /// The trigger's name.
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Whose deliveries it takes (generic: signed per Standard Webhooks).
    #[arg(long, value_enum)]
    pub source: Source,
    /// Created paused.
    #[arg(long)]
    pub paused: bool,
    #[arg(long, value_name = "KIND", help = format!("What the run does: {}", RunKind::listed("or")))]
    pub kind: RunKind,
    /// The environment the target lives in, e.g. staging.
    #[arg(long, value_name = "ENV")]
    pub environment: String,
    /// The base URL the run exercises; may hold {pr}, {sha} and {branch}.
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
        "Each {} run split over N agents (1 to 64)",
        RunKind::listed_where(|t| t.split, "or")
    ))]
    pub agents: Option<u32>,
    /// A production faults trigger: how long a person has to confirm each run.
    #[arg(long, value_name = "DURATION")]
    pub confirm_within: Option<String>,
    /// How far back a passed run on the base branch is a baseline (1m to 90d, default 7d).
    #[arg(long, value_name = "DURATION")]
    pub window: Option<String>,
    /// Where a baseline may have run besides the target (and where a fresh one runs).
    #[arg(long, value_name = "URL")]
    pub base_target: Option<String>,
    /// Start a before-run on the base branch beside each pull request's after-run.
    #[arg(long)]
    pub fresh_baseline: bool,
}

impl CreateArgs {
    /// The POST body: a run's, built as `iohr reliability run` builds it, plus the rest.
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
            change: None,
            scenario_name: None,
            confirm_within: self.confirm_within,
            wait: false,
            quiet: false,
            timeout: std::time::Duration::from_secs(600),
        };
        let mut body = starter_body(&run, self.name, self.paused)?;
        let source = match self.source {
            Source::Github => "github",
            Source::Gitlab => "gitlab",
            Source::Generic => "generic",
        };
        body.insert("source".into(), json!(source));
        if let Some(window) = self.window {
            body.insert("window".into(), json!(window));
        }
        if let Some(base) = self.base_target {
            body.insert("base_target".into(), json!(base));
        }
        if self.fresh_baseline {
            body.insert("fresh_baseline".into(), json!(true));
        }
        Ok(Value::Object(body))
    }
}

const PATH: &str = "/v1/reliability/triggers";

const WHAT: (&str, &str) = (PATH, "trigger");

pub async fn execute(ctx: &Ctx, command: TriggersCommand) -> Result<u8> {
    match command {
        TriggersCommand::Create(args) => {
            let made = ctx.api.post(PATH, &args.body()?).await?;
            if ctx.json {
                emit_json(&made)?;
            } else {
                emit(&record(&made["trigger"]))?;
                emit(&format!(
                    "url      {}\nsecret   {}",
                    text(&made, "url"),
                    text(&made, "secret")
                ))?;
                note("the secret is shown this once: give it and the url to the forge's webhook");
            }
            Ok(0)
        }
        TriggersCommand::List => listed(ctx, &ctx.api.get(PATH).await?, table),
        TriggersCommand::Deliveries { id } => {
            let one = format!("{PATH}/{}/log", segment("the trigger ID", &id)?);
            listed(ctx, &ctx.api.get(&one).await?, deliveries)
        }
        TriggersCommand::Show { id } => act_on(ctx, WHAT, &id, Act::Show, record).await,
        TriggersCommand::Pause { id } => act_on(ctx, WHAT, &id, Act::Pause, record).await,
        TriggersCommand::Resume { id } => act_on(ctx, WHAT, &id, Act::Resume, record).await,
        TriggersCommand::Delete { id } => act_on(ctx, WHAT, &id, Act::Delete, record).await,
    }
}

fn record(value: &Value) -> String {
    let baseline = &value["baseline"];
    let mut t = Table::plain();
    t.row(["id".to_string(), text(value, "id")]);
    t.row(["name".to_string(), text(value, "name")]);
    t.row(["source".to_string(), text(value, "source")]);
    t.row(["state".to_string(), state(value).to_string()]);
    t.row(["deliveries".to_string(), text(value, "delivery_path")]);
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
    t.row([
        "baseline".to_string(),
        format!(
            "window {}, base target {}, fresh {}",
            text(baseline, "window"),
            text(baseline, "base_target"),
            text(baseline, "fresh_baseline")
        ),
    ]);
    t.row(["created by".to_string(), text(value, "created_by")]);
    t.row(["last delivery".to_string(), text(value, "last_delivery_at")]);
    t.row(["last run".to_string(), text(value, "last_run")]);
    t.render()
}

fn table(raw: &Value) -> String {
    let triggers = raw["triggers"].as_array().cloned().unwrap_or_default();
    if triggers.is_empty() {
        return "no triggers\n".into();
    }
    let mut t = Table::new(&[
        "ID", "NAME", "SOURCE", "KIND", "STATE", "TARGET", "LAST RUN",
    ]);
    for s in &triggers {
        t.row([
            text(s, "id"),
            text(s, "name"),
            text(s, "source"),
            text(s, "kind"),
            state(s).to_string(),
            text(s, "target"),
            text(s, "last_run"),
        ]);
    }
    t.render()
}

fn deliveries(raw: &Value) -> String {
    let list = raw["deliveries"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        return "no deliveries\n".into();
    }
    let mut t = Table::new(&["AT", "DELIVERY", "EVENT", "OUTCOME", "RUN", "REASON"]);
    for d in &list {
        t.row([
            text(d, "at"),
            text(d, "delivery_id"),
            text(d, "event"),
            text(d, "outcome"),
            text(d, "run"),
            text(d, "reason"),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_and_a_log_show_what_people_look_for() {
        let trigger = json!({"id": "t1", "name": "pr", "source": "github", "kind": "checks",
            "enabled": false, "target": "http://127.0.0.1:9", "last_run": null});
        let text = table(&json!({"triggers": [trigger]}));
        assert!(text.lines().nth(1).unwrap().contains("paused"), "{text}");
        assert_eq!(table(&json!({"triggers": []})), "no triggers\n");
        let log = deliveries(&json!({"deliveries": [{"at": "2026-12-05T11:00:00Z",
            "delivery_id": "d1", "event": "issues", "outcome": "ignored", "run": null,
            "reason": "event \"issues\" is not acted on"}]}));
        assert!(
            log.contains("ignored") && log.contains("not acted on"),
            "{log}"
        );
    }
}
