//! `iohr-agent exec`: a spec run (or described) on this machine without a controller,
//! its outcome printed for people or as one JSON object, and written to `--output`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use iohr_agent::execute::{self, RunOf};
use iohr_agent::kinds::faults::FaultsConfig;
use iohr_agent::kinds::registry;
use iohr_agent::kinds::{FrameSender, NewFrame, Outcome, RunContext};
use iohr_agent::load::TargetOptions;
use iohr_domain::RunKind;
use iohr_domain::kind::decisions::listed;
use iohr_domain::load::Share;
use iohr_domain::scenario_kind;
use tokio_util::sync::CancellationToken;

use super::EXIT_ERROR;
use super::output::OutputFile;
use crate::cli::ExecArgs;

/// `iohr-agent exec`: reads the spec, then describes it (`--dry-run`) or runs it, and
/// reports the outcome; exits with the outcome's status.
pub async fn exec(args: ExecArgs) -> anyhow::Result<()> {
    let ExecArgs {
        kind,
        target,
        spec,
        spec_json,
        ops_file,
        dry_run,
        json,
        quiet,
        output,
        target_ca,
        share,
        faults,
    } = args;
    // Before anything runs: an output that cannot be written would waste the run.
    let output = output.map(OutputFile::create).transpose()?;
    // Only a kind that needs it opens the ledger (and holds its lock): other kinds run
    // side by side freely.
    let faults = if kind.parse::<RunKind>().is_ok_and(registry::needs_faults) {
        Some(faults.config(true).await?)
    } else {
        None
    };
    // The operator's own spec on the operator's own machine: every target its host can
    // reach, and the whole environment for `${env:NAME}`.
    let options = TargetOptions {
        extra_ca: target_ca,
        ..TargetOptions::default()
    };
    let source = SpecSource {
        file: spec,
        inline: spec_json,
        ops_file,
    };
    let report = Report {
        dry_run,
        json,
        quiet,
        output,
    };
    let share = share.unwrap_or_default();
    run(&kind, &target, source, report, options, share, faults).await
}

async fn run(
    kind: &str,
    target: &str,
    source: SpecSource,
    report: Report,
    options: TargetOptions,
    share: Share,
    faults: Option<Arc<FaultsConfig>>,
) -> anyhow::Result<()> {
    let Report {
        dry_run,
        json,
        quiet,
        output,
    } = report;
    let kind: RunKind = kind.parse()?;
    if source.ops_file.is_some() && !registry::takes_ops_file(kind) {
        let takers = registry::SUPPORTED_KINDS
            .iter()
            .filter(|k| registry::takes_ops_file(**k))
            .map(|k| k.as_str());
        bail!(
            "--ops-file applies to --kind {} only",
            listed(takers, "and")
        );
    }
    registry::exec_target(kind, target)?;
    let text = source.read()?;
    let plan = execute::plan(kind, &text).map_err(anyhow::Error::msg)?;
    let run_id = format!("exec-{}", std::process::id());
    let plan = plan
        .bind(&RunOf {
            run_id: &run_id,
            confirmed_by: None,
            dry_run,
            check_target: Some(target),
            share,
        })
        .map_err(anyhow::Error::msg)?;
    let (tx, mut rx) = FrameSender::channel();
    let cancel = CancellationToken::new();
    let ctx = RunContext::new(target, tx)
        .with_run_id(run_id.clone())
        .with_options(options)
        .with_cancel(cancel.clone())
        .with_faults(faults);
    if dry_run {
        // A faults dry run goes through its lifecycle (it checks the policy); every other
        // kind is described by its own, from the plan a run would execute.
        if let Some(described) = plan.dry_run(&ctx).map_err(anyhow::Error::msg)? {
            let (object, lines) = described.into_parts();
            finish(&object, lines, json, output, 0);
        }
    }
    let progress = std::io::stderr().is_terminal() && !json && !quiet;
    let printer = tokio::spawn(async move {
        let mut count = 0u64;
        while let Some(frame) = rx.recv().await {
            count += 1;
            // The progress line is the load seconds'; the agent's own seconds would
            // replace it every other second.
            if progress && frame.kind != iohr_domain::FrameKind::Stress {
                eprint!("\r{:<100}", progress_line(count, &frame));
            }
        }
        if progress {
            eprintln!();
        }
    });
    let on_signal = cancel;
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        on_signal.cancel();
    });
    let outcome = execute::run_plan(plan, &ctx).await;
    // The context holds the frames' sender: the printer ends once it is gone.
    drop(ctx);
    let _ = printer.await;
    let mut object = serde_json::json!({
        "kind": kind,
        "target": target,
        "status": outcome.status,
        "reason": outcome.reason,
        "result": outcome.result,
        "units_spent": outcome.units_spent,
    });
    if dry_run {
        // Only a faults dry run gets here (its lifecycle checks the policy); it says so at
        // the top as every other kind's dry run does.
        object["dry_run"] = serde_json::Value::Bool(true);
    }
    let object = object.to_string();
    let lines = if json {
        Vec::new()
    } else {
        outcome_lines(kind, &outcome)
    };
    let code = match outcome.status {
        iohr_domain::RunStatus::Passed => 0,
        iohr_domain::RunStatus::Failed => 1,
        _ => 3,
    };
    finish(&object, lines, json, output, code)
}

/// Where `exec` reads its spec from.
struct SpecSource {
    file: Option<PathBuf>,
    inline: Option<String>,
    ops_file: Option<PathBuf>,
}

impl SpecSource {
    fn read(self) -> anyhow::Result<String> {
        let read = |path: &PathBuf| {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
        };
        let text = match (&self.file, self.inline) {
            (Some(path), None) => read(path)?,
            (None, Some(text)) => text,
            _ => bail!("give the spec as a file or with --spec-json, exactly one of the two"),
        };
        let Some(path) = &self.ops_file else {
            return Ok(text);
        };
        let ops = scenario_kind::parse_ops_file(&read(path)?)
            .with_context(|| format!("reading ops from {}", path.display()))?;
        Ok(scenario_kind::spec_with_ops(&text, &ops)?)
    }
}

/// How `exec` reports what it did.
struct Report {
    dry_run: bool,
    json: bool,
    quiet: bool,
    output: Option<OutputFile>,
}

/// Prints the JSON object (`--json`) or the lines, writes the object to `--output`, and
/// exits with `code`, or 3 when the output could not be written.
fn finish(
    object: &str,
    lines: Vec<String>,
    json: bool,
    output: Option<OutputFile>,
    code: i32,
) -> ! {
    // A closed pipe (`| head`) is the reader's choice, not an error worth a panic.
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(out, "{object}");
    } else {
        for line in lines {
            let _: std::io::Result<()> = writeln!(out, "{line}");
        }
    }
    let _ = out.flush();
    drop(out);
    let code = match output.map(|output| output.write(object)) {
        Some(Err(e)) => {
            eprintln!("error: {e:#}");
            EXIT_ERROR
        }
        _ => code,
    };
    std::process::exit(code);
}

/// An outcome for people: its status (and reason), then its kind's summary of the result
/// (a load result as indented lines, a scenario record as the record to paste as it is);
/// the full object is --json's.
fn outcome_lines(kind: RunKind, outcome: &Outcome) -> Vec<String> {
    let mut lines = vec![match outcome.reason.as_deref() {
        Some(reason) if !reason.is_empty() => format!("{}: {reason}", outcome.status),
        _ => outcome.status.to_string(),
    }];
    let result = &outcome.result;
    if let Some(saturated) = iohr_domain::stress::GeneratorSaturated::of_result(result) {
        lines.push(format!(
            "  {}: its figures may be this agent's own, not the target's",
            saturated.line()
        ));
    }
    match registry::summary(kind, result) {
        Some(described) => lines.extend(described),
        // An outcome without a result (an error before anything ran) is its status line.
        None if result.is_null() => {}
        None => {
            lines.push(serde_json::to_string_pretty(result).unwrap_or_else(|_| result.to_string()))
        }
    }
    lines
}

/// The one-line progress display of `exec` on a terminal.
fn progress_line(count: u64, frame: &NewFrame) -> String {
    use iohr_domain::load::LoadSecond;
    let Ok(second) = serde_json::from_value::<LoadSecond>(frame.data.clone()) else {
        return format!("{count} frames, last: {}", frame.kind.as_str());
    };
    let p99 = second
        .histogram
        .as_deref()
        .and_then(|h| iohr_domain::histogram::decode(h).ok())
        .filter(|h| !h.is_empty())
        .map(|h| format!("{:.2} ms", h.value_at_quantile(0.99) as f64 / 1000.0))
        .unwrap_or_else(|| "-".to_string());
    format!(
        "{} {:>4}s  {:>7} req/s  p99 {p99:>10}  failed {}  late {}  dropped {}",
        second.phase,
        second.second,
        second.counts.requests,
        second.counts.failed(),
        second.late,
        second.dropped
    )
}
