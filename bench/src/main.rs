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
mod stats;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use agents::{AgentBehaviour, AgentIdentity, End, RunTimes, Tracker};
use api::Api;
use controller::{Backend, Controller, Environment};
use stats::Phase;

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
    let label = match job {
        Job::Latency(agents) => format!("latency-{}-{agents}", backend.name()),
        Job::Throughput => format!("throughput-{}", backend.name()),
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

/// A started controller with its agents connected.
struct Rig {
    controller: Controller,
    api: Api,
    tracker: Arc<Tracker>,
    sessions: Vec<JoinHandle<()>>,
    setup_s: f64,
    connect_s: f64,
}

impl Rig {
    async fn start(
        opts: &Opts,
        env: &Environment,
        agents: usize,
        max_running: u64,
        behaviour: AgentBehaviour,
    ) -> anyhow::Result<Rig> {
        let started = Instant::now();
        let token = env.set_up(max_running).await?;
        let issued = env.issue_agents(agents).await?;
        let identities = issued
            .iter()
            .map(|(name, dir)| AgentIdentity::load(name, dir))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let setup_s = started.elapsed().as_secs_f64();
        let controller = env.serve().await?;
        let tracker = Arc::new(Tracker::default());
        let connecting = Instant::now();
        let url = controller.agent_url.clone();
        let results: Vec<anyhow::Result<JoinHandle<()>>> =
            futures_util::stream::iter(identities.into_iter().map(|identity| {
                agents::connect(identity, url.clone(), behaviour, tracker.clone())
            }))
            .buffer_unordered(opts.connect_concurrency.max(1))
            .collect()
            .await;
        let mut sessions = Vec::with_capacity(results.len());
        let mut first_error = None;
        for result in results {
            match result {
                Ok(handle) => sessions.push(handle),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        if let Some(error) = first_error {
            for session in &sessions {
                session.abort();
            }
            let _ = controller.stop().await;
            return Err(error.context(format!(
                "only {} of {agents} agents connected",
                sessions.len()
            )));
        }
        let connect_s = connecting.elapsed().as_secs_f64();
        let api = Api::new(&controller.api_url, &token);
        Ok(Rig {
            controller,
            api,
            tracker,
            sessions,
            setup_s,
            connect_s,
        })
    }

    /// Closes the agents' streams, then stops the controller.
    async fn stop(self) -> anyhow::Result<()> {
        for session in &self.sessions {
            session.abort();
        }
        for session in self.sessions {
            let _ = session.await;
        }
        self.controller.stop().await
    }
}

async fn latency(
    opts: &Opts,
    env: &Environment,
    backend: &Backend,
    agents: usize,
    out: &Output,
) -> anyhow::Result<Value> {
    if opts.latency_rate <= 0.0 || !opts.latency_rate.is_finite() {
        bail!("--latency-rate must be a positive number");
    }
    let hold = Duration::from_millis(opts.latency_hold_ms);
    let behaviour = AgentBehaviour {
        max_concurrent_jobs: opts.max_jobs,
        hold,
    };
    // The plan must never be what a run waits for.
    let rig = Rig::start(opts, env, agents, 1_000_000, behaviour).await?;
    let meter = CpuMeter::start(&rig.controller);
    let outcome = latency_load(opts, &rig).await;
    let cpu = meter.stop(&rig.controller);
    let rss = rig.controller.rss_mib();
    let verified = rig.api.count_runs("passed", 100).await;
    let log = rig.controller.log_path.clone();
    let (setup_s, connect_s) = (rig.setup_s, rig.connect_s);
    rig.stop().await?;
    let load = outcome?;

    let times = load.tracker.take();
    let report = Report::from_times(&times, hold);
    let accept_p99 = report.phase(ACCEPTED).map(Phase::p99_ms);
    let goal = accept_p99.map(|p99| p99 < GOAL_ACCEPT_P99_MS);

    out.line("");
    out.line(&format!(
        "== latency: {}, {agents} agent(s), {} runs at {}/s, agents hold each run {} ms ==",
        backend.name(),
        opts.latency_runs,
        opts.latency_rate,
        opts.latency_hold_ms
    ));
    out.line(&format!(
        "  setup {setup_s:.1} s (init, token, plan, {agents} certificates); {agents} agents connected in {connect_s:.1} s"
    ));
    out.line(stats::table(&report.phases).trim_end());
    out.line(&load.summary_line(&times, &verified));
    out.line(&format!(
        "  CPU during the load: {}; controller {} resident{}",
        cpu.describe(),
        fmt_opt(rss, "MiB"),
        if opts.keep {
            format!("; log {}", log.display())
        } else {
            String::new()
        }
    ));
    if let Some(p99) = accept_p99 {
        let verdict = if p99 < GOAL_ACCEPT_P99_MS {
            "below"
        } else {
            "NOT below"
        };
        let scope = if agents == GOAL_ACCEPT_AGENTS {
            "the goal"
        } else {
            "the goal's figure (set for 1,000 agents)"
        };
        out.line(&format!(
            "  POST -> accept p99 {p99:.2} ms: {verdict} {scope} of {GOAL_ACCEPT_P99_MS} ms"
        ));
    }

    Ok(json!({
        "scenario": "latency",
        "backend": backend.name(),
        "agents": agents,
        "runs": opts.latency_runs,
        "rate_per_s": opts.latency_rate,
        "hold_ms": opts.latency_hold_ms,
        "max_concurrent_jobs": opts.max_jobs,
        "setup_s": round2(setup_s),
        "connect_s": round2(connect_s),
        "phases": report.phases.iter().map(Phase::to_json).collect::<Vec<_>>(),
        "accept_p99_ms": accept_p99,
        "accept_p99_below_goal": goal,
        "counts": load.counts_json(&times, &verified),
        "cpu": cpu.to_json(),
        "controller_rss_mib": rss,
    }))
}

/// CPU used by the controller and by the bench itself over a stretch of wall time: on a
/// small machine the bench competes with the controller, and the reader should see it.
struct CpuMeter {
    controller: Option<f64>,
    bench: Option<f64>,
    postgres: f64,
    machine: Option<f64>,
    at: Instant,
}

struct CpuUse {
    controller_s: Option<f64>,
    bench_s: Option<f64>,
    /// The PostgreSQL server's processes (on this machine), part of the system under test.
    postgres_s: f64,
    /// Busy CPU time of every other process: anything large here means the figures were
    /// taken on a busy machine.
    rest_s: Option<f64>,
    wall_s: f64,
}

impl CpuMeter {
    fn start(controller: &Controller) -> CpuMeter {
        CpuMeter {
            controller: controller.cpu_seconds(),
            bench: controller::cpu_seconds("/proc/self/stat"),
            postgres: postgres_cpu_seconds(),
            machine: machine_busy_seconds(),
            at: Instant::now(),
        }
    }

    fn stop(self, controller: &Controller) -> CpuUse {
        let used = |before: Option<f64>, after: Option<f64>| match (before, after) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        let controller_s = used(self.controller, controller.cpu_seconds());
        let bench_s = used(self.bench, controller::cpu_seconds("/proc/self/stat"));
        // Backends that exited during the load are missed: a slight undercount.
        let postgres_s = (postgres_cpu_seconds() - self.postgres).max(0.0);
        let machine_s = used(self.machine, machine_busy_seconds());
        let rest_s = match (machine_s, controller_s, bench_s) {
            (Some(m), Some(c), Some(b)) => Some((m - c - b - postgres_s).max(0.0)),
            _ => None,
        };
        CpuUse {
            controller_s,
            bench_s,
            postgres_s,
            rest_s,
            wall_s: self.at.elapsed().as_secs_f64(),
        }
    }
}

impl CpuUse {
    fn share(&self, seconds: Option<f64>) -> String {
        seconds.map_or("?".to_string(), |s| {
            format!(
                "{s:.1} s ({:.0}% of one core)",
                100.0 * s / self.wall_s.max(f64::EPSILON)
            )
        })
    }

    fn describe(&self) -> String {
        format!(
            "controller {}, bench {}, postgres {}, other processes {}, over {:.1} s",
            self.share(self.controller_s),
            self.share(self.bench_s),
            self.share(Some(self.postgres_s)),
            self.share(self.rest_s),
            self.wall_s
        )
    }

    fn to_json(&self) -> Value {
        json!({
            "wall_s": round2(self.wall_s),
            "controller_s": self.controller_s.map(round2),
            "bench_s": self.bench_s.map(round2),
            "postgres_s": round2(self.postgres_s),
            "other_processes_s": self.rest_s.map(round2),
        })
    }
}

/// What a workload did besides the per-run times.
struct Load {
    tracker: Arc<Tracker>,
    posted: usize,
    post_errors: Vec<String>,
    unfinished: usize,
    elapsed: Duration,
}

impl Load {
    /// Finished runs, runs cancelled and never finished, and re-offers.
    fn counts(&self, times: &HashMap<String, RunTimes>) -> (usize, usize, u32) {
        let finished = times.values().filter(|r| r.finished.is_some()).count();
        let cancelled = times
            .values()
            .filter(|r| r.finished.is_none() && r.cancelled.is_some())
            .count();
        let reoffers = times.values().map(|r| r.reoffers).sum();
        (finished, cancelled, reoffers)
    }

    fn summary_line(
        &self,
        times: &HashMap<String, RunTimes>,
        verified: &anyhow::Result<usize>,
    ) -> String {
        let (finished, cancelled, reoffers) = self.counts(times);
        let c = &self.tracker.counters;
        let mut line = format!(
            "  runs: {} posted, {} POST errors, {finished} finished, {cancelled} cancelled by the controller, \
             {} timed out, {} passed per the API\n  agents saw: offers {}, re-offers {reoffers}, cancels {}, \
             completions refused {}, completions stale {}, streams ended early {}",
            self.posted,
            self.post_errors.len(),
            self.unfinished,
            match verified {
                Ok(n) => n.to_string(),
                Err(e) => format!("? ({e})"),
            },
            c.offers.load(Ordering::Relaxed),
            c.cancels.load(Ordering::Relaxed),
            c.completions_refused.load(Ordering::Relaxed),
            c.completions_stale.load(Ordering::Relaxed),
            c.streams_ended.load(Ordering::Relaxed),
        );
        if let Some(first) = self.post_errors.first() {
            line.push_str(&format!("\n  first POST error: {first}"));
        }
        for reason in self.tracker.refusal_reasons() {
            line.push_str(&format!("\n  completion refused: {reason}"));
        }
        for (reason, n) in self.tracker.cancel_reasons() {
            line.push_str(&format!("\n  lease cancelled ({n}x): {reason}"));
        }
        line
    }

    fn counts_json(
        &self,
        times: &HashMap<String, RunTimes>,
        verified: &anyhow::Result<usize>,
    ) -> Value {
        let (finished, cancelled, reoffers) = self.counts(times);
        let c = &self.tracker.counters;
        json!({
            "posted": self.posted,
            "post_errors": self.post_errors.len(),
            "first_post_error": self.post_errors.first(),
            "finished": finished,
            "cancelled": cancelled,
            "timed_out": self.unfinished,
            "cancel_reasons": self.tracker.cancel_reasons(),
            "passed_per_api": verified.as_ref().ok(),
            "offers": c.offers.load(Ordering::Relaxed),
            "reoffers": reoffers,
            "cancels": c.cancels.load(Ordering::Relaxed),
            "completions_refused": c.completions_refused.load(Ordering::Relaxed),
            "completions_stale": c.completions_stale.load(Ordering::Relaxed),
            "completion_refusal_reasons": self.tracker.refusal_reasons(),
            "streams_ended_early": c.streams_ended.load(Ordering::Relaxed),
            "elapsed_s": round2(self.elapsed.as_secs_f64()),
        })
    }
}

/// Posts `latency_runs` runs at `latency_rate`, then waits for all of them to finish.
async fn latency_load(opts: &Opts, rig: &Rig) -> anyhow::Result<Load> {
    let period = Duration::try_from_secs_f64(1.0 / opts.latency_rate)
        .map_err(|e| anyhow::anyhow!("--latency-rate {}: {e}", opts.latency_rate))?;
    let mut tick = tokio::time::interval(period);
    // If the bench itself falls behind, spread the late POSTs rather than bunch them.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut posts = Vec::with_capacity(opts.latency_runs);
    for _ in 0..opts.latency_runs {
        tick.tick().await;
        let (api, tracker) = (rig.api.clone(), rig.tracker.clone());
        posts.push(tokio::spawn(async move {
            let posted = Instant::now();
            let id = api.create_run().await?;
            tracker.created(&id, posted, Instant::now());
            anyhow::Ok(id)
        }));
    }
    let mut ids = Vec::new();
    let mut post_errors = Vec::new();
    for post in posts {
        match post.await {
            Ok(Ok(id)) => ids.push(id),
            Ok(Err(error)) => post_errors.push(format!("{error:#}")),
            Err(error) => post_errors.push(format!("task: {error}")),
        }
    }
    let drain_until = Instant::now() + Duration::from_millis(opts.latency_hold_ms) + DRAIN_TIMEOUT;
    let mut unfinished = 0;
    for id in &ids {
        let left = drain_until.saturating_duration_since(Instant::now());
        if rig.tracker.wait_end(id, left).await == End::TimedOut {
            unfinished += 1;
        }
    }
    Ok(Load {
        tracker: rig.tracker.clone(),
        posted: ids.len() + post_errors.len(),
        post_errors,
        unfinished,
        elapsed: started.elapsed(),
    })
}

async fn throughput(
    opts: &Opts,
    env: &Environment,
    backend: &Backend,
    out: &Output,
) -> anyhow::Result<Value> {
    let hold = Duration::from_millis(opts.throughput_hold_ms);
    let behaviour = AgentBehaviour {
        max_concurrent_jobs: opts.max_jobs,
        hold,
    };
    let agents = opts.throughput_agents;
    let rig = Rig::start(opts, env, agents, 1_000_000, behaviour).await?;
    let stop_posting = Instant::now() + Duration::from_secs(opts.throughput_seconds);
    let meter = CpuMeter::start(&rig.controller);
    // CPU is read when the posting stops, so the wait for runs that never finish does not
    // dilute it: the figures cover the steady load only.
    let (outcome, cpu) = tokio::join!(throughput_load(opts, &rig, stop_posting), async {
        tokio::time::sleep_until(tokio::time::Instant::from_std(stop_posting)).await;
        meter.stop(&rig.controller)
    });
    let rss = rig.controller.rss_mib();
    let max_pages = opts.throughput_max_runs / 500 + 2;
    let verified = rig.api.count_runs("passed", max_pages).await;
    let log = rig.controller.log_path.clone();
    let (setup_s, connect_s) = (rig.setup_s, rig.connect_s);
    rig.stop().await?;
    let load = outcome?;
    let times = load.tracker.take();
    let report = Report::from_times(&times, hold);
    let (finished, _, _) = load.counts(&times);
    // From the first POST to the last acknowledged completion.
    let first_post = times.values().filter_map(|r| r.posted).min();
    let last_finish = times.values().filter_map(|r| r.finished).max();
    let span = match (first_post, last_finish) {
        (Some(a), Some(b)) if b > a => b - a,
        _ => load.elapsed,
    };
    let per_s = finished as f64 / span.as_secs_f64().max(f64::EPSILON);

    out.line("");
    out.line(&format!(
        "== throughput: {}, {agents} agents, {} runs in flight, {} s of POSTs, agents hold each run {} ms ==",
        backend.name(),
        opts.throughput_in_flight,
        opts.throughput_seconds,
        opts.throughput_hold_ms
    ));
    out.line(&format!(
        "  setup {setup_s:.1} s; {agents} agents connected in {connect_s:.1} s"
    ));
    out.line(&format!(
        "  {finished} runs finished in {:.2} s: {per_s:.1} runs/s",
        span.as_secs_f64()
    ));
    out.line(stats::table(&report.phases).trim_end());
    out.line(&load.summary_line(&times, &verified));
    out.line(&format!(
        "  CPU during the load: {}; controller {} resident{}",
        cpu.describe(),
        fmt_opt(rss, "MiB"),
        if opts.keep {
            format!("; log {}", log.display())
        } else {
            String::new()
        }
    ));
    let goal = matches!(backend, Backend::Sqlite).then_some(per_s >= GOAL_SQLITE_RUNS_PER_S);
    if let Some(met) = goal {
        out.line(&format!(
            "  {per_s:.1} runs/s on SQLite: {} the goal of {GOAL_SQLITE_RUNS_PER_S}",
            if met { "meets" } else { "does NOT meet" }
        ));
    }

    Ok(json!({
        "scenario": "throughput",
        "backend": backend.name(),
        "agents": agents,
        "in_flight": opts.throughput_in_flight,
        "seconds": opts.throughput_seconds,
        "hold_ms": opts.throughput_hold_ms,
        "max_concurrent_jobs": opts.max_jobs,
        "setup_s": round2(setup_s),
        "connect_s": round2(connect_s),
        "finished": finished,
        "span_s": round2(span.as_secs_f64()),
        "runs_per_s": round2(per_s),
        "runs_per_s_meets_sqlite_goal": goal,
        "phases": report.phases.iter().map(Phase::to_json).collect::<Vec<_>>(),
        "counts": load.counts_json(&times, &verified),
        "cpu": cpu.to_json(),
        "controller_rss_mib": rss,
    }))
}

/// `throughput_in_flight` workers, each posting a run and waiting for it to finish, until
/// the time or the run budget is spent.
async fn throughput_load(opts: &Opts, rig: &Rig, stop_posting: Instant) -> anyhow::Result<Load> {
    let started = Instant::now();
    let budget = Arc::new(AtomicUsize::new(opts.throughput_max_runs));
    let unfinished = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::with_capacity(opts.throughput_in_flight);
    for _ in 0..opts.throughput_in_flight.max(1) {
        let (api, tracker) = (rig.api.clone(), rig.tracker.clone());
        let (budget, unfinished) = (budget.clone(), unfinished.clone());
        workers.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut errors = Vec::new();
            while Instant::now() < stop_posting
                && budget
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
            {
                let posted = Instant::now();
                match api.create_run().await {
                    Ok(id) => {
                        tracker.created(&id, posted, Instant::now());
                        // A cancelled run will not finish: move on to the next one.
                        if tracker.wait_end(&id, DRAIN_TIMEOUT).await == End::TimedOut {
                            unfinished.fetch_add(1, Ordering::Relaxed);
                        }
                        ids.push(id);
                    }
                    Err(error) => {
                        errors.push(format!("{error:#}"));
                        // Do not spin on a failing API: the errors are reported.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            (ids.len(), errors)
        }));
    }
    let mut posted = 0;
    let mut post_errors = Vec::new();
    for worker in workers {
        let (ok, errors) = worker.await.context("a throughput worker failed")?;
        posted += ok + errors.len();
        post_errors.extend(errors);
    }
    Ok(Load {
        tracker: rig.tracker.clone(),
        posted,
        post_errors,
        unfinished: usize::try_from(unfinished.load(Ordering::Relaxed)).unwrap_or(usize::MAX),
        elapsed: started.elapsed(),
    })
}

const ACCEPTED: &str = "POST -> agent sends accept";

/// Per-phase latencies of every run of a scenario.
struct Report {
    phases: Vec<Phase>,
}

impl Report {
    fn from_times(times: &HashMap<String, RunTimes>, hold: Duration) -> Report {
        let held = !hold.is_zero();
        let names: [&'static str; 6] = [
            "POST -> 201 received",
            "POST -> offer at agent",
            ACCEPTED,
            if held {
                "accept -> frame 1 acked (minus hold)"
            } else {
                "accept -> frame 1 acked"
            },
            "frame 1 acked -> completion acked",
            if held {
                "POST -> finished (minus hold)"
            } else {
                "POST -> finished"
            },
        ];
        let mut phases: Vec<Phase> = names
            .iter()
            .filter_map(|name| Phase::new(name).ok())
            .collect();
        if phases.len() != names.len() {
            // Only fails for invalid bounds, which are constants: report nothing rather
            // than mislabel phases.
            phases.clear();
            return Report { phases };
        }
        let between = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) if b >= a => Some(b - a),
            _ => None,
        };
        for run in times.values() {
            let samples = [
                between(run.posted, run.created),
                between(run.posted, run.offered),
                between(run.posted, run.accepted),
                between(run.accepted, run.frames_acked).map(|d| d.saturating_sub(hold)),
                between(run.frames_acked, run.finished),
                between(run.posted, run.finished).map(|d| d.saturating_sub(hold)),
            ];
            for (phase, sample) in phases.iter_mut().zip(samples) {
                if let Some(d) = sample {
                    phase.record(d);
                }
            }
        }
        Report { phases }
    }

    fn phase(&self, name: &str) -> Option<&Phase> {
        self.phases.iter().find(|p| p.name == name && p.count() > 0)
    }
}

fn fmt_opt(value: Option<f64>, unit: &str) -> String {
    value.map_or("?".to_string(), |v| format!("{v:.1} {unit}"))
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn machine() -> Value {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_total_kb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "mem_total_gib": mem_total_kb.map(|kb| round2(kb as f64 / 1024.0 / 1024.0)),
        "open_files_soft_limit": open_files_limit(),
    })
}

/// Busy CPU seconds of the whole machine (all CPUs, everything but idle and iowait),
/// from /proc/stat.
fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<f64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
    let total: f64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4)?;
    Some((total - idle) / 100.0)
}

/// CPU seconds of every process named `postgres` on this machine (the server and its
/// backends), so the database's share is not mistaken for a busy machine.
fn postgres_cpu_seconds() -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "postgres")
        })
        .filter_map(|e| controller::cpu_seconds(&e.path().join("stat").to_string_lossy()))
        .sum()
}

/// Waits (at most `limit`) until the rest of the machine is nearly idle, so a scenario
/// does not start while something else (a build, a test run) holds the CPUs; says so
/// when it never gets quiet.
async fn wait_for_quiet(limit: Duration, out: &Output) {
    const SAMPLE: Duration = Duration::from_secs(2);
    // A quarter of one core busy on average counts as quiet.
    const QUIET_SHARE: f64 = 0.25;
    let deadline = Instant::now() + limit;
    let mut share = None;
    while Instant::now() < deadline {
        let before = machine_busy_seconds();
        tokio::time::sleep(SAMPLE).await;
        let (Some(a), Some(b)) = (before, machine_busy_seconds()) else {
            return;
        };
        let busy = (b - a) / SAMPLE.as_secs_f64();
        if busy < QUIET_SHARE {
            return;
        }
        share = Some(busy);
    }
    if let Some(busy) = share {
        out.line(&format!(
            "  warning: the machine stayed busy ({:.0}% of one core used by other processes) for {} s; measuring anyway",
            busy * 100.0,
            limit.as_secs()
        ));
    }
}

/// The soft limit on open files, from /proc (this bench runs on Linux).
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// The bench holds a socket per agent and per run in flight, and so does the controller
/// (which inherits this limit): refuse to start rather than fail half way.
fn check_open_files(opts: &Opts) -> anyhow::Result<()> {
    let agents = opts
        .agents
        .iter()
        .copied()
        .chain([opts.throughput_agents])
        .max()
        .unwrap_or(0);
    let need = agents + opts.throughput_in_flight + 256;
    match open_files_limit() {
        Some(limit) if (limit as usize) < need => bail!(
            "the open-files limit is {limit}, and this bench needs about {need} (one socket per agent and per run in flight, plus files); raise it first, e.g. `ulimit -n {}`",
            need.next_power_of_two()
        ),
        _ => Ok(()),
    }
}
