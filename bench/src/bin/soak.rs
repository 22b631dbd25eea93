//! `iohr-bench-soak`: many simulated agents over controller replicas for a long while,
//! with one replica SIGKILLed and started again every `--kill-every` seconds.
//!
//! One fresh PostgreSQL database, `--replicas` `iohr-controller serve --replica` on it
//! (each on loopback ports of its own that it keeps across restarts), and `--agents`
//! simulated agents (bench/src/soak_agent.rs: each its own certificate and mTLS link,
//! knowing every replica, dialling the next one when its stream breaks and reporting its
//! leases in the hello, as the real agent). Checks runs are posted at `--rate` per second
//! to the replicas in turn; a POST refused (a replica down) is counted and sent to the
//! next replica. Every `--kill-every` seconds replica a, b, a, ... is SIGKILLed and
//! started again at once on the same ports. Each replica's RSS is sampled every 10 s.
//!
//! At the end every posted run is read back through the API: runs lost (posted, 201, not
//! ended `passed`); runs whose frames over SSE are not exactly 1..n once each in order
//! ending with `finished`; and, from what the agents saw, runs two agents held at once.
//! See docs/benchmarks.md.

#[path = "../agents.rs"]
#[allow(dead_code)]
mod agents;
#[path = "../api.rs"]
#[allow(dead_code)]
mod api;
#[path = "../controller.rs"]
#[allow(dead_code)]
mod controller;
#[path = "../soak_agent.rs"]
mod soak_agent;
#[path = "../soak_readback.rs"]
mod soak_readback;
#[path = "../soak_replica.rs"]
mod soak_replica;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use agents::AgentIdentity;
use api::{Api, PostOutcome};
use controller::{Backend, Controller, Environment};
use soak_agent::{SoakAgentConfig, SoakTracker};
use soak_readback::{read_back, round1, round2};
use soak_replica::{Life, Replica};

#[derive(Parser, Debug)]
#[command(
    name = "iohr-bench-soak",
    about = "Simulated agents over iohr controller replicas, one replica killed and restarted again and again"
)]
struct Opts {
    /// The `iohr-controller` binary under test (build it with --release).
    #[arg(long, default_value = "target/release/iohr-controller")]
    controller_bin: PathBuf,
    /// The PostgreSQL admin database; a fresh database is made beside it and dropped.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/test")]
    postgres_admin_url: String,
    /// Simulated agents.
    #[arg(long, default_value_t = 1000)]
    agents: usize,
    /// `serve --replica` processes on the one store.
    #[arg(long, default_value_t = 2)]
    replicas: usize,
    /// How long runs are posted, in seconds.
    #[arg(long, default_value_t = 1800)]
    duration_secs: u64,
    /// One replica (a, b, a, ...) is SIGKILLed and started again this often, in seconds.
    #[arg(long, default_value_t = 300)]
    kill_every_secs: u64,
    /// Runs posted per second (open loop).
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// Frames each run streams before its completion.
    #[arg(long, default_value_t = 6)]
    frames_per_run: u64,
    /// Time between a run's frames, in milliseconds (a run is held frames × this).
    #[arg(long, default_value_t = 200)]
    frame_ms: u64,
    /// The controllers' `--heartbeat-ms` (their default when not given).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// `max_concurrent_jobs` each agent declares.
    #[arg(long, default_value_t = 100)]
    max_jobs: u32,
    /// Agent i starts dialling i × this many milliseconds after the first.
    #[arg(long, default_value_t = 5)]
    connect_stagger_ms: u64,
    /// An agent's reconnect backoff, from this...
    #[arg(long, default_value_t = 100)]
    backoff_min_ms: u64,
    /// ...doubling to this (jittered down to half).
    #[arg(long, default_value_t = 1000)]
    backoff_max_ms: u64,
    /// Linked elsewhere than its first replica, an agent looks in on that one this often
    /// and moves back to it while it holds no run, as the real agent's
    /// `--return-after-secs`; 0: agents stay where they moved.
    #[arg(long, default_value_t = 30)]
    return_after_secs: u64,
    /// RSS samples this often, in seconds.
    #[arg(long, default_value_t = 10)]
    rss_every_secs: u64,
    /// After the last POST, how long every run may take to end.
    #[arg(long, default_value_t = 120)]
    drain_secs: u64,
    /// POSTs in flight at most; a tick with none free is counted as skipped.
    #[arg(long, default_value_t = 256)]
    max_posts_in_flight: usize,
    /// The account's `--max-running`.
    #[arg(long, default_value_t = 10_000)]
    max_running: u64,
    /// Where the data dir goes (a fresh directory under the system temp dir by default).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the data dir (certificates, the replicas' logs) afterwards.
    #[arg(long)]
    keep: bool,
    /// Print the JSON report on stdout (progress goes to stderr either way).
    #[arg(long)]
    json: bool,
}

/// The agents linked to replica `i` now.
fn live_on(counters: &soak_agent::SoakCounters, i: usize) -> i64 {
    counters
        .live_on
        .get(i)
        .map_or(0, |on| on.load(Ordering::Relaxed))
}

/// How long all agents may take to be connected at the start.
const CONNECT_LIMIT: Duration = Duration::from_secs(180);
/// How long agents may take to be all connected again after a kill.
const RECONNECT_LIMIT: Duration = Duration::from_secs(120);

fn main() -> anyhow::Result<()> {
    let opts = Opts::parse();
    if opts.agents == 0 || opts.replicas == 0 || opts.frames_per_run == 0 || opts.frame_ms == 0 {
        bail!("--agents, --replicas, --frames-per-run and --frame-ms must be above 0");
    }
    if opts.replicas > soak_agent::MAX_REPLICAS {
        bail!("--replicas: at most {}", soak_agent::MAX_REPLICAS);
    }
    if !(opts.rate.is_finite() && opts.rate > 0.0 && opts.rate <= 1000.0) {
        bail!("--rate must be above 0 and at most 1000");
    }
    if opts.kill_every_secs == 0 || opts.rss_every_secs == 0 {
        bail!("--kill-every-secs and --rss-every-secs must be above 0");
    }
    {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
        if soft < hard {
            setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
        }
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async_main(opts))
}

async fn async_main(opts: Opts) -> anyhow::Result<()> {
    let bin = std::fs::canonicalize(&opts.controller_bin).with_context(|| {
        format!(
            "controller binary {} (build it: cargo build --release -p iohr-controller)",
            opts.controller_bin.display()
        )
    })?;
    let work_dir = match &opts.work_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!(
            "iohr-bench-soak-{}-{}",
            std::process::id(),
            unix_s()
        )),
    };
    std::fs::create_dir_all(&work_dir)
        .with_context(|| format!("creating {}", work_dir.display()))?;
    eprintln!(
        "iohr-bench-soak: controller {}, work dir {}",
        bin.display(),
        work_dir.display()
    );
    let backend = Backend::Postgres {
        admin_url: opts.postgres_admin_url.clone(),
    };
    let env = Environment::create(&bin, &backend, work_dir.join("soak"), "soak").await?;
    // On Ctrl-C or SIGTERM the soak's future is dropped, and with it the controllers
    // (started with kill_on_drop) and the agents' tasks.
    let result = tokio::select! {
        result = soak(&opts, &env) => result,
        signal = interrupted() => Err(anyhow::anyhow!("interrupted by {signal}")),
    };
    let dropped = env.drop_database().await;
    if opts.keep {
        eprintln!("kept {}", work_dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&work_dir);
    }
    let mut report = result?;
    dropped?;
    report["controller_bin"] = json!(bin.display().to_string());
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        eprintln!("{}", serde_json::to_string_pretty(&report)?);
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

fn unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// What the POSTs came to.
#[derive(Default)]
struct Posts {
    ticks: AtomicU64,
    skipped: AtomicU64,
    refused: AtomicU64,
    unknown: AtomicU64,
    retried: AtomicU64,
    never_created: AtomicU64,
    created: Mutex<Vec<String>>,
    /// (seconds since the start, replica, what happened), the first few hundred.
    troubles: Mutex<Vec<(f64, String, String)>>,
}

const MAX_TROUBLES: usize = 300;

impl Posts {
    fn trouble(&self, at_s: f64, replica: &str, what: String) {
        let mut troubles = self
            .troubles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if troubles.len() < MAX_TROUBLES {
            troubles.push((round1(at_s), replica.to_string(), what));
        }
    }
}

/// One POST, sent to replica `n mod N`, then to the next ones while refused.
async fn post_one(apis: &[(String, Api)], n: usize, posts: &Posts, start: Instant) {
    let tries = apis.len().max(2) * 2;
    for attempt in 0..tries {
        let (name, api) = &apis[(n + attempt) % apis.len()];
        if attempt > 0 {
            posts.retried.fetch_add(1, Ordering::Relaxed);
        }
        match api.post_run().await {
            PostOutcome::Created(id) => {
                posts
                    .created
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(id);
                return;
            }
            PostOutcome::Refused(why) => {
                posts.refused.fetch_add(1, Ordering::Relaxed);
                posts.trouble(
                    start.elapsed().as_secs_f64(),
                    name,
                    format!("refused: {why}"),
                );
            }
            PostOutcome::Unknown(why) => {
                posts.unknown.fetch_add(1, Ordering::Relaxed);
                posts.trouble(
                    start.elapsed().as_secs_f64(),
                    name,
                    format!("unknown: {why}"),
                );
            }
        }
        // The next replica at once; a round later, after a pause.
        if attempt + 1 >= apis.len() {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    posts.never_created.fetch_add(1, Ordering::Relaxed);
}

/// Posts at `rate` until `until` (open loop, at most `max` POSTs in all).
async fn post_loop(
    apis: Arc<Vec<(String, Api)>>,
    rate: f64,
    until: Instant,
    in_flight: usize,
    posts: Arc<Posts>,
    start: Instant,
) {
    let period = Duration::from_nanos((1e9 / rate) as u64);
    let max = (rate
        * until
            .saturating_duration_since(Instant::now())
            .as_secs_f64()) as usize
        + 1;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let permits = Arc::new(Semaphore::new(in_flight.max(1)));
    for n in 0..max {
        tick.tick().await;
        if Instant::now() >= until {
            break;
        }
        posts.ticks.fetch_add(1, Ordering::Relaxed);
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            posts.skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let (apis, posts) = (apis.clone(), posts.clone());
        tokio::spawn(async move {
            let _permit = permit;
            post_one(&apis, n, &posts, start).await;
        });
    }
    // The last POSTs finish (each is bounded by its request timeouts).
    let _ = tokio::time::timeout(
        Duration::from_secs(120),
        permits.acquire_many(in_flight.max(1) as u32),
    )
    .await;
}

/// One free loopback port (released at once; the replica binds it a moment later).
fn free_ports(count: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// CPU seconds of every `postgres` process, with the children each has reaped (the
/// backends of connections that closed), from /proc.
fn postgres_cpu_seconds() -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let mut total = 0.0;
    for entry in entries.flatten() {
        let path = entry.path();
        if std::fs::read_to_string(path.join("comm")).is_ok_and(|c| c.trim() == "postgres")
            && let Ok(stat) = std::fs::read_to_string(path.join("stat"))
            && let Some((_, rest)) = stat.rsplit_once(')')
        {
            let fields: Vec<f64> = rest
                .split_whitespace()
                .skip(11)
                .take(4)
                .filter_map(|f| f.parse().ok())
                .collect();
            total += fields.iter().sum::<f64>() / 100.0;
        }
    }
    total
}

async fn soak(opts: &Opts, env: &Environment) -> anyhow::Result<Value> {
    let began_unix = unix_s();
    let token = env.set_up(opts.max_running).await?;
    eprintln!("issuing {} agent certificates", opts.agents);
    let issued = env.issue_agents(opts.agents).await?;
    let identities = issued
        .iter()
        .map(|(name, dir)| AgentIdentity::load(name, dir))
        .collect::<anyhow::Result<Vec<_>>>()?;

    let mut extra = vec!["--replica".to_string()];
    if let Some(ms) = opts.heartbeat_ms {
        extra.push("--heartbeat-ms".to_string());
        extra.push(ms.to_string());
    }
    let ports = free_ports(opts.replicas * 2)?;
    let mut replicas: Vec<Replica> = (0..opts.replicas)
        .map(|i| Replica {
            name: ((b'a' + (i % 26) as u8) as char).to_string(),
            api_addr: format!("127.0.0.1:{}", ports[2 * i]),
            agent_addr: format!("127.0.0.1:{}", ports[2 * i + 1]),
            current: None,
            lives: Vec::new(),
        })
        .collect();
    let start = Instant::now();
    for replica in &mut replicas {
        replica.start(env, &extra, 0.0).await?;
    }
    let mut apis = Vec::new();
    let mut urls = Vec::new();
    for replica in &replicas {
        let controller = replica.current.as_ref().context("a replica not started")?;
        apis.push((replica.name.clone(), Api::new(&controller.api_url, &token)));
        urls.push(controller.agent_url.clone());
    }
    let apis = Arc::new(apis);

    let deadline = start
        + Duration::from_secs(opts.duration_secs + opts.drain_secs)
        + CONNECT_LIMIT
        + Duration::from_secs(60);
    let config = Arc::new(SoakAgentConfig {
        urls,
        max_concurrent_jobs: opts.max_jobs,
        frames_per_run: opts.frames_per_run,
        frame_every: Duration::from_millis(opts.frame_ms),
        backoff_min: Duration::from_millis(opts.backoff_min_ms),
        backoff_max: Duration::from_millis(opts.backoff_max_ms.max(opts.backoff_min_ms)),
        return_after: (opts.return_after_secs > 0)
            .then(|| Duration::from_secs(opts.return_after_secs)),
        deadline,
    });
    let tracker = Arc::new(SoakTracker::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut agents: Vec<JoinHandle<()>> = Vec::with_capacity(identities.len());
    for (i, identity) in identities.into_iter().enumerate() {
        let (config, tracker, stop) = (config.clone(), tracker.clone(), stop_rx.clone());
        let stagger = Duration::from_millis(opts.connect_stagger_ms * i as u64);
        agents.push(tokio::spawn(async move {
            tokio::time::sleep(stagger).await;
            soak_agent::run_agent(identity, i % config.urls.len(), config, tracker, stop).await;
        }));
    }
    let counters = &tracker.counters;
    let connecting = Instant::now();
    while (counters.live_sessions.load(Ordering::Relaxed) as usize) < opts.agents {
        if connecting.elapsed() > CONNECT_LIMIT {
            let _ = stop_tx.send(true);
            bail!(
                "only {} of {} agents connected within {CONNECT_LIMIT:?}",
                counters.live_sessions.load(Ordering::Relaxed),
                opts.agents
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let connect_s = connecting.elapsed().as_secs_f64();
    eprintln!(
        "{} agents connected in {connect_s:.1} s; posting for {} s",
        opts.agents, opts.duration_secs
    );

    // The soak proper: POSTs in their own task; kills and samples here.
    let soak_start = Instant::now();
    let offset = soak_start.duration_since(start).as_secs_f64();
    let until = soak_start + Duration::from_secs(opts.duration_secs);
    let posts = Arc::new(Posts::default());
    let poster = tokio::spawn(post_loop(
        apis.clone(),
        opts.rate,
        until,
        opts.max_posts_in_flight,
        posts.clone(),
        soak_start,
    ));
    let pg_cpu_start = postgres_cpu_seconds();
    let bench_cpu_start = controller::cpu_seconds("/proc/self/stat");
    let at = |i: Instant| i.duration_since(soak_start).as_secs_f64();
    let mut kills: Vec<Value> = Vec::new();
    let mut reconnects: Vec<JoinHandle<Value>> = Vec::new();
    let mut next_kill = soak_start + Duration::from_secs(opts.kill_every_secs);
    let mut next_rss = soak_start;
    let rss_every = Duration::from_secs(opts.rss_every_secs);
    loop {
        let now = Instant::now();
        if now >= until {
            break;
        }
        if now >= next_rss {
            for (i, replica) in replicas.iter_mut().enumerate() {
                replica.sample(at(now), live_on(counters, i));
            }
            next_rss += rss_every;
        }
        if now >= next_kill {
            let which = kills.len() % replicas.len();
            let replica = &mut replicas[which];
            let killed_at = Instant::now();
            let sessions_before = counters.sessions.load(Ordering::Relaxed);
            replica.end(at(killed_at), true).await?;
            let mut restarted = Err(anyhow::anyhow!("not tried"));
            for _ in 0..5 {
                restarted = replica.start(env, &extra, at(Instant::now())).await;
                if restarted.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            restarted?;
            let restart_s = killed_at.elapsed().as_secs_f64();
            eprintln!(
                "{:.0} s: replica {} killed and started again in {restart_s:.2} s",
                at(killed_at),
                replica.name
            );
            kills.push(json!({
                "at_s": round1(at(killed_at)),
                "replica": replica.name,
                "restarted_in_s": (restart_s * 1000.0).round() / 1000.0,
            }));
            // How long until every agent is connected again (watched on the side).
            let (tracker, agents_n) = (tracker.clone(), opts.agents);
            reconnects.push(tokio::spawn(async move {
                let c = &tracker.counters;
                let watching = Instant::now();
                while watching.elapsed() < RECONNECT_LIMIT {
                    let live = c.live_sessions.load(Ordering::Relaxed) as usize;
                    let new = c.sessions.load(Ordering::Relaxed) - sessions_before;
                    if live >= agents_n && new > 0 {
                        return json!({
                            "all_connected_after_s": round2(killed_at.elapsed().as_secs_f64()),
                            "sessions_opened": new,
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                json!({"all_connected_after_s": null, "live": c.live_sessions.load(Ordering::Relaxed)})
            }));
            next_kill += Duration::from_secs(opts.kill_every_secs);
        }
        let wake = next_rss.min(next_kill).min(until);
        tokio::time::sleep_until(wake.into()).await;
    }
    eprintln!("posting over; waiting for the last POSTs and every run's end");
    let _ = poster.await;
    let created: Vec<String> = posts
        .created
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    // Every run ends (bounded), sampling RSS meanwhile.
    let draining = Instant::now();
    let drain_limit = Duration::from_secs(opts.drain_secs);
    let mut last_sample = Instant::now();
    loop {
        let open = created.iter().filter(|id| !tracker.is_stored(id)).count();
        if open == 0 || draining.elapsed() > drain_limit {
            break;
        }
        if last_sample.elapsed() >= rss_every {
            for (i, replica) in replicas.iter_mut().enumerate() {
                replica.sample(at(Instant::now()), live_on(counters, i));
            }
            last_sample = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let drain_s = draining.elapsed().as_secs_f64();
    let soak_s = soak_start.elapsed().as_secs_f64();
    for (i, replica) in replicas.iter_mut().enumerate() {
        replica.sample(at(Instant::now()), live_on(&tracker.counters, i));
    }
    let pg_cpu_s = postgres_cpu_seconds() - pg_cpu_start;
    let bench_cpu_s = controller::cpu_seconds("/proc/self/stat")
        .zip(bench_cpu_start)
        .map(|(b, a)| b - a);
    let controllers_cpu_s: f64 = replicas
        .iter()
        .flat_map(|r| {
            r.lives.iter().map(|l| {
                l.cpu_s.or_else(|| {
                    r.current
                        .as_ref()
                        .filter(|_| l.ended_s.is_none())
                        .and_then(Controller::cpu_seconds)
                })
            })
        })
        .map(|c| c.unwrap_or(0.0))
        .sum();
    let mut after_kills = Vec::new();
    for handle in reconnects {
        after_kills.push(handle.await.unwrap_or(Value::Null));
    }
    for (kill, after) in kills.iter_mut().zip(after_kills) {
        if let (Some(k), Some(a)) = (kill.as_object_mut(), after.as_object()) {
            k.extend(a.clone());
        }
    }

    eprintln!("reading back {} runs", created.len());
    let read = read_back(&apis, &created, opts.frames_per_run, &tracker).await;
    let _ = stop_tx.send(true);
    for agent in &agents {
        agent.abort();
    }
    for agent in agents {
        let _ = agent.await;
    }
    let end_s = at(Instant::now());
    let mut stopped = Ok(());
    for replica in &mut replicas {
        if let Err(error) = replica.end(end_s, false).await {
            stopped = Err(error);
        }
    }
    let read = read?;
    stopped?;

    let c = &tracker.counters;
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    Ok(json!({
        "began_unix_s": began_unix,
        "ended_unix_s": unix_s(),
        "options": {
            "agents": opts.agents,
            "replicas": opts.replicas,
            "duration_s": opts.duration_secs,
            "kill_every_s": opts.kill_every_secs,
            "rate_per_s": opts.rate,
            "frames_per_run": opts.frames_per_run,
            "frame_ms": opts.frame_ms,
            "heartbeat_ms": opts.heartbeat_ms,
            "max_jobs": opts.max_jobs,
            "backoff_ms": [opts.backoff_min_ms, opts.backoff_max_ms],
            "return_after_s": opts.return_after_secs,
        },
        "connect_s": round2(connect_s),
        "soak_started_at_s": round2(offset),
        "soak_s": round1(soak_s),
        "drain_s": round1(drain_s),
        "posts": {
            "ticks": n(&posts.ticks),
            "created": created.len(),
            "refused": n(&posts.refused),
            "unknown_outcome": n(&posts.unknown),
            "retries": n(&posts.retried),
            "never_created": n(&posts.never_created),
            "skipped_too_many_in_flight": n(&posts.skipped),
            "troubles": posts.troubles.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone(),
        },
        "kills": kills,
        "results": read,
        "agents_saw": {
            "offers": n(&c.offers),
            "offers_refused": n(&c.offers_refused),
            "dials": n(&c.dials),
            "dial_failures": n(&c.dial_failures),
            "sessions": n(&c.sessions),
            "leases_reported": n(&c.leases_reported),
            "leases_revoked": n(&c.leases_revoked),
            "frames_sent": n(&c.frames_sent),
            "frames_resent": n(&c.frames_resent),
            "gap_acks": n(&c.gap_acks),
            "completions_sent": n(&c.completions_sent),
            "completions_refused": n(&c.completions_refused),
            "completions_stale": n(&c.completions_stale),
            "completions_stored": n(&c.completions_stored),
            "completions_given_up": n(&c.completions_given_up),
            "cancels": n(&c.cancels),
            "silent_streams": n(&c.silent_streams),
            "moves_home": n(&c.moves_home),
            "reasons": tracker.reasons(),
        },
        "cpu_s": {
            "controllers": round1(controllers_cpu_s),
            "postgres": round1(pg_cpu_s),
            "bench": bench_cpu_s.map(round1),
            "over_s": round1(soak_s),
        },
        "replicas": replicas.iter().map(|r| json!({
            "name": r.name,
            "api": r.api_addr,
            "agent_link": r.agent_addr,
            "lives": r.lives.iter().map(Life::to_json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    }))
}
