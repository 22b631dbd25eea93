//! `iohr-agent`: run next to targets, take leased runs from the controller, or execute a
//! spec locally without a controller.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use iohr_agent::dry_run;
use iohr_agent::execute;
use iohr_agent::faults::ledger::Ledger;
use iohr_agent::kinds::faults::{FaultsConfig, recover_left_overs};
use iohr_agent::kinds::{NewFrame, Outcome};
use iohr_agent::leases::Leases;
use iohr_agent::link::{self, AgentConfig};
use iohr_agent::load::TargetOptions;
use iohr_domain::RunKind;
use iohr_domain::faults::Policy;
use iohr_domain::scenario_kind;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(name = "iohr-agent", version, about = "The iohr reliability agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Hold a stream to the controller and execute the runs it leases.
    Run {
        /// The controller's agent link, e.g. https://127.0.0.1:8443.
        #[arg(long, env = "IOHR_CONTROLLER")]
        controller: String,
        /// The dir `iohr-controller agent-cert --out` wrote (agent.key, agent.pem, ca.pem).
        #[arg(long, env = "IOHR_AGENT_IDENTITY")]
        identity: PathBuf,
        /// An environment this agent serves (repeatable).
        #[arg(long = "environment", required = true)]
        environments: Vec<String>,
        /// A label KEY=VALUE (repeatable).
        #[arg(long = "label", value_parser = parse_label)]
        labels: Vec<(String, String)>,
        #[arg(long, default_value_t = 4)]
        max_concurrent_jobs: u32,
        /// The first reconnect wait window; it doubles up to --reconnect-max-ms.
        #[arg(long, default_value_t = 500)]
        reconnect_min_ms: u64,
        #[arg(long, default_value_t = 30_000)]
        reconnect_max_ms: u64,
        /// PEM roots trusted for https targets besides the system's.
        #[arg(long, env = "IOHR_TARGET_CA")]
        target_ca: Option<PathBuf>,
        #[command(flatten)]
        faults: FaultArgs,
    },
    /// Execute a spec against a target on this machine, without a controller.
    Exec {
        #[arg(long)]
        kind: String,
        #[arg(long)]
        target: String,
        /// The spec file (JSON), or the spec inline with --spec-json.
        #[arg(required_unless_present = "spec_json", conflicts_with = "spec_json")]
        spec: Option<PathBuf>,
        /// The spec inline (JSON), instead of the file.
        #[arg(long)]
        spec_json: Option<String>,
        /// Scenario: the ops, one per line (blank lines and `#` comments skipped).
        #[arg(long)]
        ops_file: Option<PathBuf>,
        /// Validate the spec, print the plan and send nothing (scenario: with the replay
        /// command; faults: what would be applied and how it would be undone).
        #[arg(long)]
        dry_run: bool,
        /// Print the outcome as one JSON object.
        #[arg(long)]
        json: bool,
        /// No progress display, and only warnings and errors on stderr (RUST_LOG, when
        /// set, still decides the log).
        #[arg(long, short)]
        quiet: bool,
        /// Also write the JSON object `--json` prints to FILE (whole: FILE.PID.tmp, then
        /// renamed; a device or pipe such as /dev/stdout is written as it is), whatever
        /// stdout shows.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// PEM roots trusted for https targets besides the system's.
        #[arg(long, env = "IOHR_TARGET_CA")]
        target_ca: Option<PathBuf>,
        #[command(flatten)]
        faults: FaultArgs,
    },
    /// A fault's hog child (CPU, memory or disk), started by the agent itself.
    #[command(hide = true, subcommand)]
    Hog(iohr_agent::faults::hog::HogCommand),
    /// A fault's warden, started by the agent itself.
    #[command(hide = true)]
    Warden(iohr_agent::faults::warden::watch::WardenArgs),
    /// The fault ledger of a state directory: its open entries and armed wardens, or
    /// undo them all by hand.
    #[command(subcommand)]
    Faults(iohr_agent::faults::warden::admin::FaultsCommand),
}

/// Where faults are allowed and recorded.
#[derive(clap::Args)]
struct FaultArgs {
    /// The fault policy (JSON): the ports, processes, directories and hog sizes faults
    /// may touch. Without it an agent applies no fault; `exec` allows the run's own target
    /// port (through the fault proxy) and what the file adds.
    #[arg(long, env = "IOHR_AGENT_POLICY")]
    policy: Option<PathBuf>,
    /// Where the agent keeps its fault ledger (default: $XDG_STATE_HOME/iohr-agent, or
    /// ~/.local/state/iohr-agent).
    #[arg(long, env = "IOHR_AGENT_STATE_DIR")]
    state_dir: Option<PathBuf>,
}

impl FaultArgs {
    /// Reads the policy, opens the ledger and undoes what a previous agent left open.
    async fn config(self, allow_run_target: bool) -> anyhow::Result<Arc<FaultsConfig>> {
        let policy = match &self.policy {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading the policy {}", path.display()))?;
                Policy::parse(&text).with_context(|| format!("policy {}", path.display()))?
            }
            None => Policy::default(),
        };
        let state_dir = match self.state_dir {
            Some(dir) => dir,
            None => default_state_dir()?,
        };
        let ledger_dir = state_dir.join("ledger");
        let hog_program = std::env::current_exe().context("finding the agent's own binary")?;
        let ledger = Ledger::open(&ledger_dir)
            .and_then(|ledger| ledger.with_wardens(&hog_program))
            .with_context(|| format!("opening the fault ledger in {}", ledger_dir.display()))?;
        let mut config = FaultsConfig {
            policy,
            allow_run_target,
            ledger,
            hog_program,
            recovered: Vec::new(),
        };
        config.recovered = recover_left_overs(&config)
            .await
            .context("reading the fault ledger")?;
        for r in &config.recovered {
            match &r.error {
                None => {
                    tracing::warn!(ledger_id = %r.ledger_id, run = %r.run_id, fault = %r.fault, "a fault left by a previous agent was undone")
                }
                Some(error) => {
                    tracing::error!(ledger_id = %r.ledger_id, run = %r.run_id, fault = %r.fault, %error, "ALERT: a fault left by a previous agent could not be undone")
                }
            }
        }
        Ok(Arc::new(config))
    }
}

fn default_state_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("iohr-agent"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("no --state-dir, XDG_STATE_HOME or HOME to keep the fault ledger in")?;
    Ok(PathBuf::from(home).join(".local/state/iohr-agent"))
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// Exit statuses of `iohr-agent` (k6's habit: a broken spec is not a failed run): 0 passed,
/// 1 failed (thresholds, a deviated steady state), 2 a usage or spec error (nothing ran),
/// 3 error, cancelled or refused (or `exec --output` could not be written at the end).
const EXIT_USAGE: i32 = 2;
const EXIT_ERROR: i32 = 3;

fn main() {
    let cli = Cli::parse();
    let one_cpu = std::thread::available_parallelism().is_ok_and(|n| n.get() == 1);
    let runtime = match runtime_for(&cli.command, one_cpu) {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            std::process::exit(EXIT_USAGE);
        }
    };
    if let Err(e) = runtime.block_on(agent_main(cli)) {
        eprintln!("error: {e:#}");
        std::process::exit(EXIT_USAGE);
    }
}

/// Which scheduler a command runs on. `exec` allowed one CPU (`taskset`, a one-CPU
/// cgroup) runs everything on the thread that starts it: the multi-thread scheduler would
/// put one worker beside `block_on`'s thread on that CPU and pay its cross-thread
/// bookkeeping on every wake-up for nothing. The hog child runs no task at all. The `run`
/// daemon keeps the multi-thread scheduler: it serves several leases at once.
fn runtime_for(command: &Command, one_cpu: bool) -> std::io::Result<tokio::runtime::Runtime> {
    let current_thread = match command {
        Command::Exec { .. } => one_cpu,
        Command::Hog(_) | Command::Warden(_) | Command::Faults(_) => true,
        Command::Run { .. } => false,
    };
    if current_thread {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    }
}

async fn agent_main(cli: Cli) -> anyhow::Result<()> {
    let level = match &cli.command {
        Command::Exec { quiet: true, .. } => "warn",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Run {
            controller,
            identity,
            environments,
            labels,
            max_concurrent_jobs,
            reconnect_min_ms,
            reconnect_max_ms,
            target_ca,
            faults,
        } => {
            // Before any work: what a crashed agent left applied is undone first.
            let faults = faults.config(false).await?;
            if max_concurrent_jobs == 0 {
                bail!("--max-concurrent-jobs must be at least 1");
            }
            let name =
                std::fs::read_to_string(iohr_certs::AgentIdentityFiles::in_dir(&identity).name())
                    .map(|n| n.trim().to_string())
                    .unwrap_or_default();
            let config = AgentConfig {
                controller,
                identity_dir: identity,
                name,
                environments,
                labels: labels.into_iter().collect::<BTreeMap<_, _>>(),
                max_concurrent_jobs,
                reconnect_min: Duration::from_millis(reconnect_min_ms),
                reconnect_max: Duration::from_millis(reconnect_max_ms),
                target_options: TargetOptions {
                    extra_ca: target_ca,
                    faults: Some(faults),
                },
            };
            let shutdown = CancellationToken::new();
            let agent = tokio::spawn(link::run(config, Leases::default(), shutdown.clone()));
            wait_for_signal().await;
            tracing::info!("shutting down");
            shutdown.cancel();
            agent.await.context("agent task")??;
            Ok(())
        }
        Command::Exec {
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
            faults,
        } => {
            // Before anything runs: an output that cannot be written would waste the run.
            let output = output.map(OutputFile::create).transpose()?;
            // Only a faults run opens the ledger (and holds its lock): other kinds run
            // side by side freely.
            let faults = if kind == RunKind::Faults.as_str() {
                Some(faults.config(true).await?)
            } else {
                None
            };
            let options = TargetOptions {
                extra_ca: target_ca,
                faults,
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
            exec(&kind, &target, source, report, &options).await
        }
        Command::Hog(hog) => Ok(iohr_agent::faults::hog::run_child(hog)?),
        Command::Warden(args) => Ok(iohr_agent::faults::warden::watch::run(args)?),
        Command::Faults(command) => {
            let code = iohr_agent::faults::warden::admin::run(command, default_state_dir().ok())?;
            std::process::exit(code)
        }
    }
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

/// `--output FILE`: the object `--json` prints, written to FILE.tmp in FILE's directory and
/// renamed over FILE, so that a reader never sees half of it (k6's `--summary-export`).
struct OutputFile {
    /// FILE as given, for messages.
    path: PathBuf,
    /// Where the object ends up: FILE, or the file a symlink FILE points to (the link
    /// stays a link).
    dest: PathBuf,
    /// The temporary file renamed over `dest`; none when FILE is a device or a pipe, or
    /// once it has been renamed.
    tmp: Option<PathBuf>,
    file: std::fs::File,
}

impl OutputFile {
    /// Opens the temporary file (or the device) now: a path that cannot be written is
    /// found before any request is sent.
    fn create(path: PathBuf) -> anyhow::Result<OutputFile> {
        if path.is_dir() {
            bail!("--output {}: is a directory", path.display());
        }
        // /dev/stdout, a FIFO: nothing to rename over, written as they are.
        if std::fs::metadata(&path).is_ok_and(|meta| !meta.is_file()) {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .with_context(|| format!("--output {}: cannot write it", path.display()))?;
            return Ok(OutputFile {
                dest: path.clone(),
                path,
                tmp: None,
                file,
            });
        }
        // An existing FILE may be a symlink: the result replaces the file it points to.
        let dest = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        let Some(name) = dest.file_name() else {
            bail!("--output {}: names no file", path.display());
        };
        // The pid keeps two runs writing the same FILE out of each other's temporary file.
        let mut tmp_name = name.to_os_string();
        tmp_name.push(format!(".{}.tmp", std::process::id()));
        let tmp = dest.with_file_name(tmp_name);
        let file = std::fs::File::create(&tmp).with_context(|| {
            format!(
                "--output {}: cannot write {} in its directory",
                path.display(),
                tmp.display()
            )
        })?;
        Ok(OutputFile {
            path,
            dest,
            tmp: Some(tmp),
            file,
        })
    }

    fn write(mut self, object: &str) -> anyhow::Result<()> {
        self.write_and_rename(object)
            .with_context(|| format!("writing --output {}", self.path.display()))
    }

    fn write_and_rename(&mut self, object: &str) -> std::io::Result<()> {
        self.file.write_all(object.as_bytes())?;
        self.file.write_all(b"\n")?;
        self.file.flush()?;
        if let Some(tmp) = &self.tmp {
            self.file.sync_all()?;
            std::fs::rename(tmp, &self.dest)?;
            self.tmp = None;
        }
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        // Given up before the end: no temporary file is left behind.
        if let Some(tmp) = &self.tmp {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

async fn exec(
    kind: &str,
    target: &str,
    source: SpecSource,
    report: Report,
    options: &TargetOptions,
) -> anyhow::Result<()> {
    let Report {
        dry_run,
        json,
        quiet,
        output,
    } = report;
    let kind: RunKind = kind.parse()?;
    let scenario = kind == RunKind::Scenario;
    if !scenario && source.ops_file.is_some() {
        bail!("--ops-file applies to --kind scenario only");
    }
    if scenario {
        // Before the general rule, so that a localhost target is refused with the reason.
        scenario_kind::check_base_url(target)?;
    }
    iohr_domain::target::validate_target(target)?;
    let text = source.read()?;
    let mut plan = execute::plan(kind, &text).map_err(anyhow::Error::msg)?;
    if let execute::Plan::Faults(faults) = &mut plan {
        // The API's rule: a probe's url must name the run's own target.
        faults.experiment.check_target(target)?;
        faults.run_id = format!("exec-{}", std::process::id());
        faults.dry_run = dry_run;
    }
    if dry_run {
        // A faults dry run goes through its lifecycle (it checks the policy); every other
        // kind is described here, from the plan a run would execute.
        let described = match &plan {
            execute::Plan::Scenario(spec) => {
                let dry = scenario_kind::DryRun::new(spec, target);
                Some((serde_json::to_string(&dry)?, dry.lines()))
            }
            plan => match dry_run::DryRun::of(plan, target, options).map_err(anyhow::Error::msg)? {
                Some(dry) => Some((serde_json::to_string(&dry)?, dry.lines())),
                None => None,
            },
        };
        if let Some((object, lines)) = described {
            finish(&object, lines, json, output, 0);
        }
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<NewFrame>();
    let progress = std::io::stderr().is_terminal() && !json && !quiet;
    let printer = tokio::spawn(async move {
        let mut count = 0u64;
        while let Some(frame) = rx.recv().await {
            count += 1;
            if progress {
                eprint!("\r{:<100}", progress_line(count, &frame));
            }
        }
        if progress {
            eprintln!();
        }
    });
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        on_signal.cancel();
    });
    let outcome = execute::run_plan(plan, target, options, &tx, cancel).await;
    drop(tx);
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

/// An outcome for people: its status (and reason), then a load result as indented lines, a
/// scenario record as the record to paste as it is; the full object is --json's.
fn outcome_lines(kind: RunKind, outcome: &Outcome) -> Vec<String> {
    let mut lines = vec![match outcome.reason.as_deref() {
        Some(reason) if !reason.is_empty() => format!("{}: {reason}", outcome.status),
        _ => outcome.status.to_string(),
    }];
    let result = &outcome.result;
    // Read the result as its kind's, from the value in place (no copy of a long log).
    fn read<'a, T: serde::Deserialize<'a>>(result: &'a serde_json::Value) -> Option<T> {
        T::deserialize(result).ok()
    }
    let indented = |lines: Vec<String>| lines.iter().map(|l| format!("  {l}")).collect();
    let described: Option<Vec<String>> = match kind {
        RunKind::Capacity => {
            read::<iohr_domain::capacity::CapacityResult>(result).map(|r| indented(r.summary()))
        }
        RunKind::Faults => read::<iohr_domain::faults::Journal>(result).map(|j| j.summary()),
        RunKind::Scenario => read::<scenario_kind::ScenarioRecord>(result).map(|r| r.lines()),
        _ => read::<iohr_domain::load::LoadResult>(result).map(|r| indented(r.summary())),
    };
    match described {
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

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::runtime::RuntimeFlavor;

    use super::*;

    fn flavor(args: &[&str], one_cpu: bool) -> RuntimeFlavor {
        let cli = Cli::try_parse_from(args).expect("arguments parse");
        runtime_for(&cli.command, one_cpu)
            .expect("runtime")
            .handle()
            .runtime_flavor()
    }

    #[test]
    fn an_output_file_appears_whole_or_not_at_all() {
        use std::os::unix::fs::FileTypeExt;

        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("summary.json");
        let tmp = dir
            .path()
            .join(format!("summary.json.{}.tmp", std::process::id()));
        let output = OutputFile::create(path.clone()).expect("a writable directory");
        assert!(
            tmp.exists() && !path.exists(),
            "only FILE.PID.tmp while it runs"
        );
        output.write(r#"{"status":"passed"}"#).expect("written");
        assert!(!tmp.exists());
        assert_eq!(
            std::fs::read_to_string(&path).expect("FILE"),
            "{\"status\":\"passed\"}\n"
        );

        // Given up (an error before the end): nothing is left behind.
        drop(OutputFile::create(dir.path().join("other.json")).expect("created"));
        assert!(
            !dir.path()
                .join(format!("other.json.{}.tmp", std::process::id()))
                .exists()
        );

        // A symlink stays a link: the file it points to gets the object.
        let real = dir.path().join("real.json");
        std::fs::write(&real, "old").expect("real");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let output = OutputFile::create(link.clone()).expect("through the link");
        output.write("{}").expect("written");
        assert!(
            std::fs::symlink_metadata(&link)
                .expect("link")
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&real).expect("real"), "{}\n");

        // A device is written as it is, never replaced.
        OutputFile::create(PathBuf::from("/dev/null"))
            .expect("a device")
            .write("{}")
            .expect("written");
        assert!(
            std::fs::metadata("/dev/null")
                .expect("/dev/null")
                .file_type()
                .is_char_device()
        );

        // A directory gone by the end: the error names FILE.
        let gone = dir.path().join("gone");
        std::fs::create_dir(&gone).expect("dir");
        let output = OutputFile::create(gone.join("x.json")).expect("created");
        std::fs::remove_dir_all(&gone).expect("removed");
        let error = output.write("{}").expect_err("nowhere to rename to");
        assert!(
            format!("{error:#}").contains(&gone.join("x.json").display().to_string()),
            "{error:#}"
        );
        for bad in [dir.path().to_path_buf(), gone.join("x.json")] {
            let error = OutputFile::create(bad.clone()).err().expect("refused");
            assert!(
                format!("{error:#}").contains(&bad.display().to_string()),
                "{error:#}"
            );
        }
    }

    #[test]
    fn exec_runs_on_its_own_thread_only_when_allowed_one_cpu() {
        let exec = [
            "iohr-agent",
            "exec",
            "--kind",
            "load",
            "--target",
            "http://127.0.0.1:9",
            "--spec-json",
            "{}",
        ];
        assert_eq!(flavor(&exec, true), RuntimeFlavor::CurrentThread);
        assert_eq!(flavor(&exec, false), RuntimeFlavor::MultiThread);
        let run = [
            "iohr-agent",
            "run",
            "--controller",
            "https://127.0.0.1:9",
            "--identity",
            "/nonexistent",
            "--environment",
            "staging",
        ];
        assert_eq!(flavor(&run, true), RuntimeFlavor::MultiThread);
        let hog = [
            "iohr-agent",
            "hog",
            "cpu",
            "--workers",
            "1",
            "--load-percent",
            "10",
            "--until-unix-ms",
            "1",
        ];
        assert_eq!(flavor(&hog, false), RuntimeFlavor::CurrentThread);
    }
}
