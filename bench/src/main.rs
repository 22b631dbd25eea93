//! `iohr-bench-dispatch`: how fast the real controller hands runs to agents.
//!
//! Every scenario gets a fresh data dir (and, on PostgreSQL, a fresh database), set up
//! with the real CLI, and the real `iohr-controller serve` as a child process. Simulated
//! agents, each with its own certificate and mTLS connection, speak the real agent link.
//!
//! - latency: runs posted at a steady rate; the time from sending `POST /runs` to the
//!   agent sending its `LeaseAnswer` (accepted), with 1, 100 and 1,000 agents connected.
//! - throughput: many runs in flight, each posted as soon as one finishes; runs per second
//!   from `POST` to the acknowledged completion (the run is `finished`).
//!
//! See docs/benchmarks.md for the figures and how to read them.

mod agents;
mod api;
mod controller;
mod host;
mod report;
mod rig;
mod scenario;
mod stats;

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::{Parser, ValueEnum};
use serde_json::{Value, json};

use controller::{Backend, Environment};

use host::{check_open_files, machine, wait_for_quiet};
use scenario::{latency, throughput};

#[derive(Parser, Debug)]
#[command(
    name = "iohr-bench-dispatch",
    about = "Dispatch latency and run throughput of the real iohr controller"
)]
struct Opts {
    /// The `iohr-controller` binary under test (build it with --release).
    #[arg(long, default_value = "target/release/iohr-controller")]
    controller_bin: PathBuf,
    /// Stores to run every scenario on.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    backends: Vec<BackendName>,
    /// The PostgreSQL admin database; a fresh database is made beside it per scenario.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/test")]
    postgres_admin_url: String,
    /// Which scenarios to run.
    #[arg(long, value_delimiter = ',', default_value = "latency,throughput")]
    scenarios: Vec<ScenarioName>,

    /// Agent counts of the latency scenario.
    #[arg(long, value_delimiter = ',', default_value = "1,100,1000")]
    agents: Vec<usize>,
    /// Runs posted per latency scenario.
    #[arg(long, default_value_t = 1000)]
    latency_runs: usize,
    /// Runs posted per second in the latency scenario (open loop: a slow answer does not
    /// slow the next POST).
    #[arg(long, default_value_t = 50.0)]
    latency_rate: f64,
    /// How long a simulated agent "runs" an accepted run in the latency scenario, so the
    /// runs in flight spread over many agents as real checks runs would.
    #[arg(long, default_value_t = 1000)]
    latency_hold_ms: u64,

    /// Agents connected in the throughput scenario.
    #[arg(long, default_value_t = 20)]
    throughput_agents: usize,
    /// Runs in flight in the throughput scenario (each worker posts its next run when its
    /// last one finishes).
    #[arg(long, default_value_t = 200)]
    throughput_in_flight: usize,
    /// How long the throughput scenario posts runs.
    #[arg(long, default_value_t = 20)]
    throughput_seconds: u64,
    /// How long a simulated agent waits after accepting before it sends the run's frame
    /// and completion in the throughput scenario. 0 is what the real agent does (its
    /// `started` frame follows the answer at once).
    #[arg(long, default_value_t = 0)]
    throughput_hold_ms: u64,
    /// At most this many runs in the throughput scenario.
    #[arg(long, default_value_t = 50_000)]
    throughput_max_runs: usize,

    /// Controllers serving the store at once (`serve --replica`, PostgreSQL only): agent i
    /// connects to replica i mod N, POSTs go to the replicas in turn.
    #[arg(long, default_value_t = 1)]
    replicas: usize,

    /// `max_concurrent_jobs` each simulated agent declares.
    #[arg(long, default_value_t = 100)]
    max_jobs: u32,
    /// Agents dialling at once while a scenario connects its agents.
    #[arg(long, default_value_t = 32)]
    connect_concurrency: usize,
    /// Where data dirs go (a fresh directory under the system temp dir by default).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the data dirs (certificates, SQLite files, controller logs) afterwards.
    #[arg(long)]
    keep: bool,
    /// Before each scenario, wait at most this long for other processes to leave the CPUs
    /// (0: do not wait).
    #[arg(long, default_value_t = 300)]
    quiet_wait_secs: u64,
    /// Print a JSON summary on stdout (the tables then go to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendName {
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ScenarioName {
    Latency,
    Throughput,
}

/// The goals the issue sets.
const GOAL_ACCEPT_P99_MS: f64 = 50.0;
const GOAL_ACCEPT_AGENTS: usize = 1000;
const GOAL_SQLITE_RUNS_PER_S: f64 = 500.0;

/// A run not finished this long after the last POST counts as lost.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = Opts::parse();
    let bin = std::fs::canonicalize(&opts.controller_bin).with_context(|| {
        format!(
            "controller binary {} (build it: cargo build --release -p iohr-controller)",
            opts.controller_bin.display()
        )
    })?;
    check_open_files(&opts)?;
    if opts.replicas > 1 && opts.backends.contains(&BackendName::Sqlite) {
        anyhow::bail!("--replicas above 1 needs PostgreSQL: add --backends postgres");
    }
    let work_dir = match &opts.work_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!(
            "iohr-bench-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        )),
    };
    std::fs::create_dir_all(&work_dir)
        .with_context(|| format!("creating {}", work_dir.display()))?;
    let out = Output { json: opts.json };
    out.line(&format!(
        "iohr-bench-dispatch: controller {}, work dir {}",
        bin.display(),
        work_dir.display()
    ));

    // On Ctrl-C or SIGTERM the scenario future is dropped, and with it the controller
    // child (started with kill_on_drop).
    let result = tokio::select! {
        result = run_all(&opts, &bin, &work_dir, &out) => result,
        signal = interrupted() => Err(anyhow::anyhow!("interrupted by {signal}")),
    };
    if !opts.keep {
        let _ = std::fs::remove_dir_all(&work_dir);
    }
    let scenarios = result?;
    if opts.json {
        let summary = json!({
            "machine": machine(),
            "controller_bin": bin.display().to_string(),
            "goals": {
                "accept_p99_ms_below": GOAL_ACCEPT_P99_MS,
                "accept_goal_agents": GOAL_ACCEPT_AGENTS,
                "sqlite_runs_per_s_at_least": GOAL_SQLITE_RUNS_PER_S,
            },
            "scenarios": scenarios,
        });
        println!("{}", serde_json::to_string_pretty(&summary)?);
    }
    Ok(())
}

async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}

/// Tables go to stdout, or to stderr when stdout carries the JSON summary.
struct Output {
    json: bool,
}

impl Output {
    fn line(&self, text: &str) {
        if self.json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }
}

async fn run_all(
    opts: &Opts,
    bin: &std::path::Path,
    work_dir: &std::path::Path,
    out: &Output,
) -> anyhow::Result<Vec<Value>> {
    let mut jobs = Vec::new();
    for backend_name in &opts.backends {
        let backend = match backend_name {
            BackendName::Sqlite => Backend::Sqlite,
            BackendName::Postgres => Backend::Postgres {
                admin_url: opts.postgres_admin_url.clone(),
            },
        };
        if opts.scenarios.contains(&ScenarioName::Latency) {
            for &agents in &opts.agents {
                jobs.push((backend.clone(), Job::Latency(agents)));
            }
        }
        if opts.scenarios.contains(&ScenarioName::Throughput) {
            jobs.push((backend, Job::Throughput));
        }
    }
    let mut results = Vec::with_capacity(jobs.len());
    for (backend, job) in jobs {
        results.push(in_environment(opts, bin, &backend, work_dir, job, out).await?);
    }
    Ok(results)
}

#[derive(Debug, Clone, Copy)]
enum Job {
    Latency(usize),
    Throughput,
}

/// Makes a scenario's environment, runs it, and drops its database whatever happened.
async fn in_environment(
    opts: &Opts,
    bin: &std::path::Path,
    backend: &Backend,
    work_dir: &std::path::Path,
    job: Job,
    out: &Output,
) -> anyhow::Result<Value> {
    let replicas = if opts.replicas > 1 {
        format!("-r{}", opts.replicas)
    } else {
        String::new()
    };
    let label = match job {
        Job::Latency(agents) => format!("latency-{}{replicas}-{agents}", backend.name()),
        Job::Throughput => format!("throughput-{}{replicas}", backend.name()),
    };
    if opts.quiet_wait_secs > 0 {
        wait_for_quiet(Duration::from_secs(opts.quiet_wait_secs), out).await;
    }
    let env = Environment::create(bin, backend, work_dir.join(&label), &label).await?;
    let result = match job {
        Job::Latency(agents) => latency(opts, &env, backend, agents, out).await,
        Job::Throughput => throughput(opts, &env, backend, out).await,
    };
    let dropped = env.drop_database().await;
    let value = result.with_context(|| format!("scenario {label}"))?;
    dropped?;
    Ok(value)
}
