//! `iohr reliability run`: start a run, and with `--wait` follow it to its end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{ArgGroup, Args};
use iohr_domain::{Executor, RunKind, RunRecord, RunStatus};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::Ctx;
use crate::error::{Failure, Result};
use crate::follow::follow;
use crate::output::{emit, emit_json, note, record};
use crate::report::{Progress, total_seconds};
use crate::runs::{parse_record, print_record, run_path};

/// Exit statuses of `run --wait`.
pub const EXIT_PASSED: u8 = 0;
pub const EXIT_FAILED: u8 = 1;
pub const EXIT_NO_VERDICT: u8 = 3;

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("what").required(true).args(["spec", "scenario"])))]
pub struct RunArgs {
    // The kinds in the help are the registry's.
    #[arg(long, value_name = "KIND", help = format!("What the run does: {}", RunKind::listed("or")))]
    pub kind: RunKind,
    /// The environment the target lives in, e.g. staging.
    #[arg(long, value_name = "ENV")]
    pub environment: String,
    /// The base URL the run exercises.
    #[arg(long, value_name = "URL")]
    pub target: String,
    /// A JSON file with the run's spec (`-` reads stdin).
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
        "A {} run split over N agents, each sending its share (1 to 64)",
        RunKind::listed_where(|t| t.split, "or")
    ))]
    pub agents: Option<u32>,
    /// The change the run is for, e.g. core#212.
    #[arg(long, value_name = "CHANGE")]
    pub change: Option<String>,
    /// A name for the scenario stored from --spec.
    #[arg(long, value_name = "NAME", conflicts_with = "scenario")]
    pub scenario_name: Option<String>,
    /// A production faults run: how long a person has to confirm it before it lapses
    /// (default 1h, at most 24h), e.g. 30m.
    #[arg(long, value_name = "DURATION")]
    pub confirm_within: Option<String>,
    /// Follow the run until it ends; the exit status is its verdict.
    #[arg(long)]
    pub wait: bool,
    /// Print only the created run's id (for scripts: `AFTER=$(iohr reliability run -q ...)`).
    #[arg(short, long, conflicts_with = "wait")]
    pub quiet: bool,
    /// With --wait: give up waiting after this long (exit 3), such as 10m or 90s; a bare
    /// number, the older form, is seconds.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10m",
        requires = "wait",
        value_parser = wait_timeout
    )]
    pub timeout: Duration,
}

pub async fn execute(ctx: &Ctx, args: RunArgs) -> Result<u8> {
    let body = request_body(&args)?;
    let created = ctx.api.post("/v1/reliability/runs", &body).await?;
    if args.quiet {
        emit(&parse_record(&created)?.id)?;
        return Ok(0);
    }
    if !args.wait {
        print_record(ctx, &created)?;
        return Ok(0);
    }
    let run = parse_record(&created)?;
    if run.status.is_finished() {
        // Refused at the door: there is nothing to follow.
        return finish(ctx, &created, &run);
    }
    if !ctx.json {
        note(&format!(
            "run {} {}; waiting up to {}",
            run.id,
            run.status,
            humantime::format_duration(args.timeout)
        ));
    }
    let deadline = Instant::now() + args.timeout;
    let json = ctx.json;
    let progress =
        (!json).then(|| Progress::new(total_seconds(run.kind.as_str(), body.get("spec"))));
    let followed = tokio::time::timeout_at(
        deadline,
        follow(&ctx.api, &run.id, None, !json, |_, frame| {
            if let Some(progress) = &progress {
                progress.frame(frame);
            }
            Ok(())
        }),
    )
    .await;
    drop(progress);
    let path = run_path(&run.id)?;
    match followed {
        Ok(result) => result?,
        Err(_elapsed) => {
            let raw = ctx.api.get(&path).await?;
            let now = print_record(ctx, &raw)?;
            note(&format!(
                "timeout: run {} is still {} after {}",
                now.id,
                now.status,
                humantime::format_duration(args.timeout)
            ));
            return Ok(EXIT_NO_VERDICT);
        }
    }
    let (raw, now) = fetch_finished(ctx, &path, deadline).await?;
    if !now.status.is_finished() {
        emit_record(ctx, &raw, &now)?;
        note(&format!(
            "the event stream of run {} finished but the run is still {}",
            now.id, now.status
        ));
        return Ok(EXIT_NO_VERDICT);
    }
    finish(ctx, &raw, &now)
}

fn finish(ctx: &Ctx, raw: &Value, run: &RunRecord) -> Result<u8> {
    emit_record(ctx, raw, run)?;
    Ok(exit_status(run.status))
}

fn emit_record(ctx: &Ctx, raw: &Value, run: &RunRecord) -> Result<()> {
    if ctx.json {
        emit_json(raw)
    } else {
        emit(&record(run))
    }
}

pub fn exit_status(status: RunStatus) -> u8 {
    match status {
        RunStatus::Passed => EXIT_PASSED,
        RunStatus::Failed => EXIT_FAILED,
        _ => EXIT_NO_VERDICT,
    }
}

/// The record after `finished`. The frame and the stored status are written by the
/// controller in some order we do not control, so a record still `running` is read
/// again a few times (bounded, and never past the deadline) before we believe it.
async fn fetch_finished(ctx: &Ctx, path: &str, deadline: Instant) -> Result<(Value, RunRecord)> {
    let mut pause = Duration::from_millis(100);
    for _ in 0..5 {
        let raw = ctx.api.get(path).await?;
        let run = parse_record(&raw)?;
        if run.status.is_finished() || Instant::now() + pause >= deadline {
            return Ok((raw, run));
        }
        tokio::time::sleep(pause).await;
        pause *= 2;
    }
    let raw = ctx.api.get(path).await?;
    let run = parse_record(&raw)?;
    Ok((raw, run))
}

pub fn request_body(args: &RunArgs) -> Result<Value> {
    let mut body = Map::new();
    body.insert("kind".into(), json!(args.kind));
    body.insert("environment".into(), json!(args.environment));
    body.insert("target".into(), json!(args.target));
    match (&args.spec, &args.scenario, &args.version) {
        (Some(file), None, None) => {
            body.insert("spec".into(), read_json_file("--spec", file)?);
        }
        (None, Some(id), Some(version)) => {
            body.insert("scenario".into(), json!({"id": id, "version": version}));
        }
        // clap's group and `requires` rule these out; kept as an error, not a panic.
        _ => {
            return Err(Failure::usage(
                "give either --spec FILE or --scenario ID --version VERSION",
            ));
        }
    }
    if let Some(executor) = &args.executor {
        body.insert("executor".into(), json!(executor));
    }
    if let Some(agents) = args.agents {
        body.insert("agents".into(), json!(agents));
    }
    if let Some(change) = &args.change {
        body.insert("change".into(), json!(change));
    }
    if let Some(name) = &args.scenario_name {
        body.insert("scenario_name".into(), json!(name));
    }
    if let Some(within) = &args.confirm_within {
        body.insert("confirm_within".into(), json!(within));
    }
    Ok(Value::Object(body))
}

/// Reads and parses a JSON file named by `flag`; `-` is stdin.
pub fn read_json_file(flag: &str, path: &Path) -> Result<Value> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| Failure::usage(format!("{flag} {}: cannot read it: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| Failure::usage(format!("{flag} {}: not JSON: {e}", path.display())))
}

/// `--timeout`: humantime, at least a second; a bare number of seconds, as the flag took
/// before it read durations, is still read.
fn wait_timeout(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.trim().parse::<u64>() {
        return match seconds {
            0 => Err("must be at least 1s".to_string()),
            s => Ok(Duration::from_secs(s)),
        };
    }
    iohr_domain::duration::between(Duration::from_secs(1), iohr_domain::duration::MAX)(text)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod timeout_tests {
    use super::*;

    #[test]
    fn the_wait_timeout_is_humantime_or_the_older_bare_seconds() {
        assert_eq!(wait_timeout("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(wait_timeout("300"), Ok(Duration::from_secs(300)));
        assert_eq!(wait_timeout("1500ms"), Ok(Duration::from_millis(1500)));
        for refused in ["0", "0s", "500ms", "soon", "-5"] {
            assert!(wait_timeout(refused).is_err(), "{refused}");
        }
    }
}
